"""Attention predicted inside its data, extrapolation counted (issue 14 item 3).

(a) with aiconfigurator's measured H100 tables (skipped without the package):
every shipped model's encoder attention and chunked prefill attention is either
inside the fitted domain or counted as extrapolated -- never silently answered;
(b) the extrapolated share is 0 for calls inside the data, > 0 outside; (c) the
fallback roofline's efficiencies are physical on every fit that exists; (d) a
run's summary.json carries ``cost_model.extrapolated_share``.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lmmsim import catalog
from lmmsim.costmodel import opdata
from lmmsim.costmodel.composed import ComposedStepCostModel
from lmmsim.costmodel.domain import DomainCheck, fit_domain
from lmmsim.costmodel.features import CLASSES, class_features
from lmmsim.costmodel.fitted import FittedPredictor
from lmmsim.costmodel.fitting import fit_profile

GPU = "h100-sxm-80gb"
ATTENTION = ("attention_prefill", "attention_decode")


# ----------------------------------------------------------------- helpers
def _aiconfigurator_profile(out: Path) -> Path:
    """aiconfigurator's H100 vLLM 0.24 FA3 attention tables as an lmmsim profile (bf16 KV,
    no sliding window), with the mapping the importer uses: batch folded into heads."""
    aic = pytest.importorskip("aiconfigurator_core")
    root = Path(os.path.dirname(aic.__file__)) / "systems/data/h100_sxm"
    ctx_path = root / "attention/vllm/0.24.0/context_attention_perf.parquet"
    if not ctx_path.exists():
        pytest.skip("aiconfigurator_core has no H100 vLLM 0.24 attention tables")
    ctx = pd.read_parquet(ctx_path)
    gen = pd.read_parquet(root / "attention/vllm/0.24.0/generation_attention_perf.parquet")
    enc = pd.read_parquet(root / "encoder_attention/vllm/0.24.0/encoder_attention_perf.parquet")

    def sel(d):
        return d[(d.kernel_source == "vllm_flash_attn_fa3") & (d.kv_cache_dtype == "bfloat16") & (d.window_size == 0)]

    ctx, gen = sel(ctx), sel(gen)
    prefill = pd.concat([
        pd.DataFrame({"new_tokens": ctx.isl, "context": ctx.isl, "num_heads": ctx.batch_size * ctx.num_heads,
                      "num_kv_heads": ctx.batch_size * ctx.num_key_value_heads, "head_dim": ctx.head_dim,
                      "causal": True, "time_ms": ctx.latency}),
        pd.DataFrame({"new_tokens": enc.isl, "context": enc.isl, "num_heads": enc.batch_size * enc.num_heads,
                      "num_kv_heads": enc.batch_size * enc.num_heads, "head_dim": enc.head_dim,
                      "causal": False, "time_ms": enc.latency}),
    ])
    decode = pd.DataFrame({"batch": gen.batch_size, "context_sum": gen.batch_size * (gen.step + 1),
                           "num_heads": gen.num_heads, "num_kv_heads": gen.num_key_value_heads,
                           "head_dim": gen.head_dim, "time_ms": gen.latency})
    out.mkdir(parents=True, exist_ok=True)
    prefill.to_csv(out / "attention_prefill.csv", index=False)
    decode.to_csv(out / "attention_decode.csv", index=False)
    (out / "meta.json").write_text(json.dumps({"hardware": GPU}))
    return out


def _synthetic_profile(out: Path) -> Path:
    """A small attention profile from a made-up roofline (8 us + work at 400 TFLOP/s / 2 TB/s):
    causal fresh prefills with head_dim 128, 8 query heads per KV head, 256-4096 tokens."""
    rng = np.random.default_rng(0)
    rows = []
    for n in (256, 512, 1024, 2048, 4096):
        for h in (8, 16, 32, 64):
            flops = 4 * h * 128 * n * (n + 1) / 2
            nbytes = 2 * 128 * (2 * n * h + 2 * n * h // 8)
            t = 8e-6 + max(flops / 4e14, nbytes / 2e12)
            rows.append((n, n, h, h // 8, 128, True, 1e3 * t * rng.uniform(0.97, 1.03)))
    df = pd.DataFrame(rows, columns=[*opdata.SHAPE_COLUMNS["attention_prefill"], "time_ms"])
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / "attention_prefill.csv", index=False)
    (out / "meta.json").write_text(json.dumps({"hardware": GPU}))
    return out


class _Recorder:
    """Delegates to a predictor and records every attention_prefill_s call."""

    def __init__(self, inner):
        self._inner = inner
        self.calls: set[tuple] = set()

    def attention_prefill_s(self, *args):
        args = tuple(args) + (True,) * (6 - len(args))
        self.calls.add(args[:5] + (bool(args[5]),))
        return self._inner.attention_prefill_s(*args)

    def __getattr__(self, name):
        return getattr(self._inner, name)


@pytest.fixture(scope="module")
def aic_fit(tmp_path_factory) -> Path:
    profile = _aiconfigurator_profile(tmp_path_factory.mktemp("aic-h100"))
    fit_profile(profile, catalog.get_gpu(GPU), out=profile / "fit", classes=ATTENTION)
    return profile / "fit"


@pytest.fixture(scope="module")
def synthetic_fit(tmp_path_factory) -> Path:
    profile = _synthetic_profile(tmp_path_factory.mktemp("synthetic"))
    fit_profile(profile, catalog.get_gpu(GPU), out=profile / "fit", classes=("attention_prefill",))
    return profile / "fit"


def _media_items(model):
    """A typical request's media, as far as the model takes them."""
    items = []
    if model.media.image is not None:
        items += [model.image_item(448, 448), model.image_item(1024, 1024)]
    if model.media.video is not None:
        items.append(model.video_item(8, 448, 448))
    if model.media.audio is not None:
        items.append(model.audio_item(30.0))
    return items


# ---------------------------------------------------------------------- (a)
def test_every_models_attention_is_in_domain_or_counted(aic_fit):
    gpu = catalog.get_gpu(GPU)
    models = [m for m in catalog.models().values() if m.encoder is not None]
    assert models, "the catalog ships multimodal models"
    for model in models:
        predictor = FittedPredictor(aic_fit, gpu)
        rec = _Recorder(predictor)
        cost = ComposedStepCostModel(model, gpu, 1, rec)
        for item in _media_items(model):
            cost.encode_s([item.encoder])
        for start in range(0, 2048, 512):  # a 2048-token prompt in 512-token chunks
            cost.llm_step_s([(512, start + 512)], 0, 0, 1)
        assert rec.calls, model.name
        check = predictor.fit.classes["attention_prefill"].domain_check()
        features = CLASSES["attention_prefill"].features
        outside = [c for c in rec.calls if not check.inside(features(*c))]
        # Every call outside the data is counted, with the time it was answered with; none inside is.
        assert predictor.extrapolated["attention_prefill"] == len(outside), model.name
        expected = sum(predictor.attention_prefill_s(*c) for c in outside)
        assert predictor.extrapolated_s["attention_prefill"] == pytest.approx(expected, rel=1e-12), model.name
        total = sum(predictor.attention_prefill_s(*c) for c in rec.calls)
        assert predictor.predicted_s["attention_prefill"] == pytest.approx(total, rel=1e-12), model.name
        # The data hold no chunk with a cached prefix, so chunks 2-4 are extrapolations.
        assert any(c[:2] == (512, 1024) and c[5] for c in outside), model.name
        assert not any(c[:2] == (512, 512) and c[5] for c in outside), model.name  # the first chunk is measured
        assert predictor.extrapolated_share()["attention_prefill"] > 0, model.name


SHIPPED_FITS = sorted(name for name, g in catalog.gpus().items()
                      if g.fitted_profile and (catalog.profiles_dir() / g.fitted_profile / "model.json").exists())


@pytest.mark.parametrize("gpu_name", SHIPPED_FITS)
def test_shipped_fits_flag_every_attention_call_outside_their_data(gpu_name):
    """On every GPU with a shipped fit, every multimodal model's encoder attention (a
    typical request's media) and prefill attention (a 2048-token prompt in 512-token
    chunks) is answered inside the fit's data or counted as extrapolated, with its time;
    a class without data on this GPU is wholly extrapolated (share 1.0)."""
    gpu = catalog.get_gpu(gpu_name)
    folder = catalog.profiles_dir() / gpu.fitted_profile
    for model in (m for m in catalog.models().values() if m.encoder is not None):
        predictor = FittedPredictor(folder, gpu, next(iter(gpu.links.values())))
        rec = _Recorder(predictor)
        cost = ComposedStepCostModel(model, gpu, 1, rec)
        for item in _media_items(model):
            cost.encode_s([item.encoder])
        for start in range(0, 2048, 512):
            cost.llm_step_s([(512, start + 512)], 0, 0, 1)
        assert rec.calls, model.name
        share = predictor.extrapolated_share()["attention_prefill"]
        lc = predictor.fit.classes.get("attention_prefill")
        if lc is None or lc.derived_from:
            assert share == 1.0, (gpu_name, model.name)
            continue
        features = CLASSES["attention_prefill"].features
        outside = [c for c in rec.calls if not lc.domain_check().inside(features(*c))]
        assert predictor.extrapolated["attention_prefill"] == len(outside), (gpu_name, model.name)
        expected = sum(predictor.attention_prefill_s(*c) for c in outside)
        assert predictor.extrapolated_s["attention_prefill"] == pytest.approx(expected, rel=1e-12)
        assert (share > 0) == bool(outside), (gpu_name, model.name)


def test_measured_shapes_are_inside_and_predicted_close(aic_fit):
    """Rows of the profile itself are in the domain (a domain that rejects its own data
    would count everything), and the prediction there is near the measurement."""
    predictor = FittedPredictor(aic_fit, catalog.get_gpu(GPU))
    df = pd.read_csv(aic_fit.parent / "attention_prefill.csv").sample(200, random_state=0)
    cols = opdata.SHAPE_COLUMNS["attention_prefill"]
    errors = []
    for row in df.itertuples(index=False):
        args = tuple(int(getattr(row, c)) for c in cols[:-1]) + (bool(row.causal),)
        errors.append(abs(predictor.attention_prefill_s(*args) / (row.time_ms / 1e3) - 1))
    assert predictor.extrapolated_share()["attention_prefill"] == 0.0
    assert np.median(errors) < 0.1


# ---------------------------------------------------------------------- (b)
def test_share_is_zero_inside_and_positive_outside(synthetic_fit):
    gpu = catalog.get_gpu(GPU)
    inside = FittedPredictor(synthetic_fit, gpu)
    for n in (256, 700, 2048):
        for h in (8, 24, 64):
            inside.attention_prefill_s(n, n, h, h // 8, 128, True)
    share = inside.extrapolated_share()
    assert share["attention_prefill"] == 0.0
    # Classes the fit has no data for (v0 roofline) are wholly extrapolated.
    assert set(inside.fallback_classes) == set(share) - {"attention_prefill"}
    assert all(share[c] == 1.0 for c in inside.fallback_classes)

    outside = FittedPredictor(synthetic_fit, gpu)
    t_in = outside.attention_prefill_s(1024, 1024, 32, 4, 128, True)
    t_out = outside.attention_prefill_s(64, 64, 16 * 100, 16 * 100, 80, False)  # an encoder window: no such kernel
    share = outside.extrapolated_share()["attention_prefill"]
    assert share == pytest.approx(t_out / (t_in + t_out))
    assert 0 < share < 1


@pytest.mark.parametrize("call", [
    (8192, 8192, 32, 4, 128, True),  # longer than any measured prompt
    (512, 1024, 32, 4, 128, True),  # a chunk over a cached prefix: no such rows
    (1024, 1024, 32, 4, 96, True),  # a head_dim never measured
    (1024, 1024, 32, 32, 128, True),  # MHA, the data are GQA 8:1
    (256, 256, 4096, 512, 128, True),  # folded heads far beyond what 256-token rows had
])
def test_each_unmeasured_shape_is_outside(synthetic_fit, call):
    predictor = FittedPredictor(synthetic_fit, catalog.get_gpu(GPU))
    predictor.attention_prefill_s(*call)
    assert predictor.extrapolated["attention_prefill"] == 1
    assert predictor.extrapolated_share()["attention_prefill"] == 1.0


def test_octave_boxes_interpolate_between_measured_lengths():
    """A length between measured ones in adjacent octaves is inside; a folded-head count
    only measured at other lengths is not."""
    args = [(n, n, h, h, 72, False) for n in (576, 1024) for h in (16, 64)] + [(64, 64, 4096, 4096, 72, False)]
    df = pd.DataFrame(args, columns=opdata.SHAPE_COLUMNS["attention_prefill"])
    check = DomainCheck(fit_domain("attention_prefill", class_features("attention_prefill", df)))
    f = CLASSES["attention_prefill"].features
    assert check.inside(f(729, 729, 32, 32, 72, False))
    assert not check.inside(f(729, 729, 4096, 4096, 72, False))  # 4096 heads were only timed at 64 tokens
    assert not check.inside(f(729, 729, 32, 32, 80, False))
    assert check.inside_frame(class_features("attention_prefill", df)).all()


# ---------------------------------------------------------------------- (c)
def _attention_rooflines(fit_folder: Path):
    doc = json.loads((fit_folder / "model.json").read_text())
    for op_class in ATTENTION:
        entry = doc["classes"].get(op_class)
        if entry is not None:
            yield op_class, entry["params"] if entry["kind"] == "roofline" else entry["roofline"]


def _assert_physical(fit_folder: Path) -> int:
    seen = 0
    for op_class, p in _attention_rooflines(fit_folder):
        assert 0 < p["memory_max"] <= 1, (fit_folder, op_class, p)
        if p.get("uses_compute"):
            assert 0 < p["compute_max"] <= 1, (fit_folder, op_class, p)
        seen += 1
    return seen


def test_roofline_fallback_efficiencies_are_physical(synthetic_fit):
    assert _assert_physical(synthetic_fit) == 1
    shipped = [f for f in (catalog.profiles_dir() / "ops").glob("*/fit") if (f / "model.json").exists()]
    assert sum(_assert_physical(f) for f in shipped) > 0


def test_roofline_fallback_efficiencies_are_physical_on_measured_h100(aic_fit):
    assert _assert_physical(aic_fit) == 2
    prefill = dict(_attention_rooflines(aic_fit))["attention_prefill"]
    assert prefill["num_sms"] == catalog.get_gpu(GPU).num_sms  # the occupancy-aware fallback
    # A physical fallback: well above the 5 % of bandwidth a joint fit without occupancy can reach.
    assert prefill["memory_max"] > 0.1


def test_synthetic_roofline_recovers_its_rates(synthetic_fit):
    """The fallback fitted on data made by a known roofline finds its compute rate."""
    (_, p), = _attention_rooflines(synthetic_fit)
    rate = p["peak_flops"] * p["compute_max"]
    assert rate == pytest.approx(4e14, rel=0.1)
    assert math.isfinite(p["launch_s"]) and p["launch_s"] >= 0


# ---------------------------------------------------------------------- (d)
def test_summary_json_has_the_extrapolated_share(tmp_path):
    from lmmsim.results import run_scenario, write_results
    from lmmsim.scenario import load_scenario

    scenario = Path(__file__).resolve().parent.parent / "scenarios" / "quickstart.yaml"
    scn, base = load_scenario(scenario, ["workload.num_requests=20"])
    run = run_scenario(scn, base)
    write_results(run, scn, tmp_path / "out")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    share = summary["cost_model"]["extrapolated_share"]
    if summary["cost_model"]["kind"] == "roofline-v0":
        assert share is None
        return
    assert {"gemm", "attention_prefill", "attention_decode"} <= set(share)
    assert all(0.0 <= v <= 1.0 for v in share.values())


def test_forest_decode_is_interpolated_between_memoised_grid_points():
    gpu = catalog.get_gpu(GPU)
    predictor = FittedPredictor(catalog.profiles_dir() / gpu.fitted_profile, gpu, gpu.links["nvlink"])
    if predictor.fit.classes["attention_decode"].kind != "forest":
        pytest.skip("the shipped H100 decode model is not a forest")
    exact = predictor._fn["attention_decode"]
    steps = predictor.DECODE_GRID
    assert predictor.attention_decode_s(8, 1024, 28, 4, 128) == exact(8, 1024.0, 28, 4, 128)  # a grid point
    i = math.floor(math.log2(3000) * steps)
    lo, hi = exact(8, 2 ** (i / steps), 28, 4, 128), exact(8, 2 ** ((i + 1) / steps), 28, 4, 128)
    assert min(lo, hi) <= predictor.attention_decode_s(8, 3000, 28, 4, 128) <= max(lo, hi)


def _prefill_calls(n: int, seed: int) -> list[tuple]:
    """Prefill attention calls of every argument type a predictor sees (ints, floats, bools, numpy scalars)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        new = int(rng.integers(1, 40000))
        context = new + int(rng.choice([0, rng.integers(0, 60000)]))
        heads = int(rng.choice([8, 16, 28, 40, 64, 1360, 5120]))
        kv = heads // int(rng.choice([1, 2, 4, 8]))
        call = [new, context, heads, max(kv, 1), int(rng.choice([64, 72, 80, 96, 128, 256])), bool(rng.integers(2))]
        kind = rng.integers(4)
        if kind == 1:
            call[:2] = [float(call[0]), float(call[1])]
        elif kind == 2:
            call[0], call[1] = np.int64(call[0]), np.float64(call[1])
        elif kind == 3:
            call[5] = int(call[5])
        out.append(tuple(call))
    return out


def test_prefill_features_of_one_call_are_those_of_the_general_function():
    spec = CLASSES["attention_prefill"]
    assert spec.call_features() is spec.scalar_features is not spec.features
    for call in _prefill_calls(3000, 11):
        fast, general = spec.scalar_features(*call), spec.features(*call)
        assert list(fast) == list(general), call
        assert [(type(v), repr(v)) for v in fast.values()] == [(type(v), repr(v)) for v in general.values()], call


@pytest.mark.parametrize("gpu_name", ["h100-sxm-80gb", "a100-sxm-80gb"])
def test_a_domain_check_of_one_call_agrees_with_the_frame_check(gpu_name):
    gpu = catalog.get_gpu(gpu_name)
    fit = FittedPredictor(catalog.profiles_dir() / gpu.fitted_profile, gpu).fit
    calls = _prefill_calls(3000, 12)
    frame = pd.DataFrame([c[:5] + (bool(c[5]),) for c in calls], columns=opdata.SHAPE_COLUMNS["attention_prefill"])
    check = fit.classes["attention_prefill"].domain_check()
    one = [check.inside(CLASSES["attention_prefill"].call_features()(*c)) for c in calls]
    assert one == check.inside_frame(class_features("attention_prefill", frame)).tolist()
    assert 20 < sum(one) < len(one) - 20  # both sides of the boundary


def test_a_one_box_domain_check_of_one_call_agrees_with_the_frame_check():
    gpu = catalog.get_gpu("h100-sxm-80gb")
    fit = FittedPredictor(catalog.profiles_dir() / gpu.fitted_profile, gpu).fit
    rng = np.random.default_rng(13)
    sizes = np.exp(rng.uniform(0, 30, 2000)).round()
    calls = {"gemm": [(int(m), int(n), int(k)) for m, n, k in rng.integers(1, 60000, (2000, 3))],
             "p2p": [(float(b),) for b in sizes], "elementwise": [(float(b),) for b in sizes]}
    checks = [("gemm", fit.classes["gemm"]), ("p2p", fit.classes["p2p"]), ("elementwise", fit.classes["elementwise"]),
              *(("elementwise", sub) for sub in fit.classes["elementwise"].per_op.values())]
    for op_class, lc in checks:
        check = lc.domain_check()
        frame = pd.DataFrame(calls[op_class], columns=opdata.SHAPE_COLUMNS[op_class])
        one = [check.inside(CLASSES[op_class].call_features()(*c)) for c in calls[op_class]]
        assert one == check.inside_frame(class_features(op_class, frame)).tolist(), (op_class, lc.estimator_name)
        assert 20 < sum(one) < len(one) - 20, (op_class, lc.estimator_name)  # both sides of the boundary

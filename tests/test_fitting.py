"""Fitted cost models: estimators, selection, persistence, FittedPredictor."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from lmmsim.catalog import GpuSpec, LinkSpec, RooflineEfficiency, get_model
from lmmsim.costmodel import opdata
from lmmsim.costmodel.composed import ComposedStepCostModel
from lmmsim.costmodel.fitted import FittedPredictor
from lmmsim.costmodel.fitting import (
    Fit,
    RooflineRegressor,
    attention_decode_work,
    choose,
    class_features,
    derive_classes,
    fit_class,
    fit_profile,
    gemm_work,
    load_fit,
    matrix,
    save_fit,
    validate,
)
from lmmsim.costmodel.roofline import RooflinePredictor

NVLINK = LinkSpec(bandwidth_gbs=450, latency_us=2)
EFF = RooflineEfficiency(compute_max=0.8, compute_half_flops=8e9, memory_max=0.9, memory_half_bytes=4e6,
                         kernel_launch_us=3)
H100 = GpuSpec(name="h100-fit-test", display_name="H100-like", peak_bf16_tflops=989.4, hbm_bandwidth_tbs=3.35,
               memory_gib=80, num_sms=132, links={"nvlink": NVLINK}, efficiency=EFF, sources={})
A100 = GpuSpec(name="a100-fit-test", display_name="A100-like", peak_bf16_tflops=312, hbm_bandwidth_tbs=2.039,
               memory_gib=80, num_sms=108, links={"nvlink": LinkSpec(bandwidth_gbs=300, latency_us=2)},
               efficiency=EFF, sources={})
TRUE = {"cmax": 0.7, "chalf": 5e9, "mmax": 0.85, "launch": 4e-6}  # mhalf 0: the fit's canonical form


def roofline_time(gpu, flops, nbytes, p=TRUE):
    tc = (flops + p["chalf"]) / (gpu.peak_flops * p["cmax"])
    tm = nbytes / (gpu.hbm_bytes_per_s * p["mmax"])
    return np.maximum(tc, tm) + p["launch"]


def gemm_rows(gpu, n=240, seed=1, noise=0.03):
    rng = np.random.default_rng(seed)
    m = np.exp(rng.uniform(0, math.log(16384), n)).astype(int) + 1
    nn = rng.choice([1024, 4096, 12288, 28672], n)
    k = rng.choice([1024, 4096, 8192], n)
    flops, nbytes, _ = gemm_work(m, nn, k)
    t = roofline_time(gpu, flops, nbytes) * np.exp(rng.normal(0, noise, n))
    return pd.DataFrame({"m": m, "n": nn, "k": k, "time_ms": t * 1e3, "op": "synthetic"})


def decode_rows(gpu, n=120, seed=2):
    rng = np.random.default_rng(seed)
    batch = rng.integers(1, 256, n)
    df = pd.DataFrame({"batch": batch, "context_sum": batch * rng.integers(16, 8192, n), "num_heads": 32,
                       "num_kv_heads": 8, "head_dim": 128})
    f = class_features("attention_decode", df)
    df["time_ms"] = roofline_time(gpu, f["flops"], f["bytes"]) * np.exp(rng.normal(0, 0.03, n)) * 1e3
    return df


def staircase_rows(n=300, seed=3):
    """Elementwise times no smooth model follows: a step every octave of bytes."""
    rng = np.random.default_rng(seed)
    b = np.exp(rng.uniform(math.log(1e4), math.log(1e9), n))
    t = 1e-5 * (1 + np.floor(np.log2(b)) % 3) * (1 + b / 1e9) * np.exp(rng.normal(0, 0.01, n))
    return pd.DataFrame({"num_bytes": b, "time_ms": t * 1e3})


@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    """A synthetic H100 profile: gemm and decode from a known roofline, elementwise a staircase."""
    folder = tmp_path_factory.mktemp("profile")
    opdata.write_class(folder, "gemm", gemm_rows(H100))
    opdata.write_class(folder, "attention_decode", decode_rows(H100))
    opdata.write_class(folder, "elementwise", staircase_rows())
    opdata.write_class(folder, "p2p", pd.DataFrame({"num_bytes": [1e3, 1e4], "time_ms": [0.01, 0.02]}))  # too few
    opdata.write_meta(folder, {"device": "synthetic H100", "tool": "tests"})
    metrics = fit_profile(folder, H100)
    return folder, metrics


# ------------------------------------------------------------ estimators
def test_roofline_regressor_recovers_parameters():
    df = gemm_rows(H100, n=300)
    X = matrix(class_features("gemm", df), ("flops", "bytes", "count"))
    est = RooflineRegressor(H100.peak_flops, H100.hbm_bytes_per_s).fit(X, np.log(df["time_ms"] / 1e3))
    assert est.compute_max_ == pytest.approx(TRUE["cmax"], rel=0.03)
    assert est.compute_half_flops_ == pytest.approx(TRUE["chalf"], rel=0.05)
    assert est.memory_max_ == pytest.approx(TRUE["mmax"], rel=0.03)
    assert est.launch_s_ == pytest.approx(TRUE["launch"], rel=0.05)
    assert est.memory_half_bytes_ == pytest.approx(0.0, abs=1e3)


def test_roofline_regressor_with_pinned_launch_recovers_both_half_sizes():
    p = dict(TRUE, mhalf=1.5e7)  # ~5 us: large enough to show in the small memory-bound rows
    rng = np.random.default_rng(4)
    df = gemm_rows(H100, n=300, noise=0.0)
    f = class_features("gemm", df)
    tc = (f["flops"] + p["chalf"]) / (H100.peak_flops * p["cmax"])
    tm = (f["bytes"] + p["mhalf"]) / (H100.hbm_bytes_per_s * p["mmax"])
    y = np.log(np.maximum(tc, tm) + p["launch"]) + rng.normal(0, 0.01, len(df))
    est = RooflineRegressor(H100.peak_flops, H100.hbm_bytes_per_s, launch_s=p["launch"]).fit(
        matrix(f, ("flops", "bytes", "count")), y)
    assert est.compute_half_flops_ == pytest.approx(p["chalf"], rel=0.05)
    assert est.memory_half_bytes_ == pytest.approx(p["mhalf"], rel=0.1)
    assert est.launch_s_ == p["launch"]


def test_roofline_chosen_and_accurate_on_roofline_data(profile):
    _, metrics = profile
    gemm = metrics["classes"]["gemm"]
    assert gemm["chosen"] == "roofline"
    assert gemm["heldout_mape_pct"] < 5.0
    assert gemm["heldout_rows"] == round(0.2 * gemm["rows"])
    assert set(gemm["cv_mape_pct"]) == {"roofline", "poly2", "poly3", "forest"}


def test_polynomial_chosen_for_a_curved_power_law():
    rng = np.random.default_rng(5)
    b = np.exp(rng.uniform(math.log(1e4), math.log(1e10), 200))
    u = np.log(b)
    t = np.exp(-14 + 0.1 * u + 0.04 * u**2 + rng.normal(0, 0.01, len(b)))  # slope > 1 at large sizes
    cf = fit_class("elementwise", pd.DataFrame({"num_bytes": b, "time_ms": t * 1e3}), (None, 3.35e12))
    assert cf.estimator_name in ("poly2", "poly3")
    assert cf.metrics["heldout_mape_pct"] < 3.0


def test_forest_chosen_for_a_staircase():
    cf = fit_class("elementwise", staircase_rows(), (None, 3.35e12))
    assert cf.estimator_name == "forest"
    assert cf.metrics["cv_mape_pct"]["forest"] + 1.0 < min(
        cf.metrics["cv_mape_pct"][e] for e in ("roofline", "poly2", "poly3"))


def test_choose_prefers_extrapolating_estimators_within_a_point():
    assert choose({"roofline": 3.9, "poly2": 3.5, "poly3": 3.2, "forest": 3.0}) == "roofline"
    assert choose({"roofline": 9.0, "poly2": 3.5, "poly3": 3.2, "forest": 3.0}) == "poly2"
    assert choose({"roofline": 9.0, "poly2": 5.0, "poly3": 4.5, "forest": 3.0}) == "forest"
    assert choose({"roofline": float("inf"), "poly2": 2.0, "poly3": 2.5, "forest": 3.0}) == "poly2"


# ----------------------------------------------------------- persistence
@pytest.mark.parametrize("rows,op_class", [(staircase_rows, "elementwise"), (None, "gemm")])
def test_saved_fit_predicts_like_sklearn(tmp_path, rows, op_class):
    df = rows() if rows else gemm_rows(H100, n=150)
    peaks = (H100.peak_flops, H100.hbm_bytes_per_s)
    fit = Fit("h100-fit-test", {}, {})
    names = ("forest", "poly2", "roofline") if op_class == "elementwise" else ("poly3", "forest")
    for name in names:
        cf = fit_class(op_class, df, peaks, estimators=(name,))
        fit.classes = {op_class: cf}
        save_fit(tmp_path / name, fit)
        loaded = load_fit(tmp_path / name).classes[op_class]
        assert loaded.estimator_name == name
        probe = pd.concat([df, df.assign(**{c: df[c] * 1.37 for c in opdata.SHAPE_COLUMNS[op_class]})])
        feats = class_features(op_class, probe)
        expected = np.exp(cf.estimator.predict(matrix(feats, loaded.features)))
        np.testing.assert_allclose(loaded.predict_s(feats), expected, rtol=1e-9)
        # the pure-Python path of one call agrees with the vectorised one
        X = matrix(feats, loaded.features)
        scalar = [loaded.model.scalar_s(list(x)) if name != "roofline" else loaded.model.time_s(*x) for x in X[:25]]
        np.testing.assert_allclose(scalar, expected[:25], rtol=1e-9)


def test_fit_folder_holds_no_pickles(profile):
    folder, _ = profile
    files = sorted(p.name for p in (folder / "fit").iterdir())
    assert {p.rsplit(".", 1)[-1] for p in files} <= {"json", "npz", "md", "png"}
    assert {"model.json", "report.md", "pred_vs_measured.png", "elementwise.forest.npz"} <= set(files)
    doc = json.loads((folder / "fit" / "model.json").read_text())
    assert doc["profile"]["meta"] == {"device": "synthetic H100", "tool": "tests"}
    assert doc["classes"]["elementwise"]["kind"] == "forest"
    assert "p2p" in doc["skipped"]
    with np.load(folder / "fit" / "elementwise.forest.npz", allow_pickle=False) as arrays:
        assert set(arrays.files) >= {"children_left", "children_right", "feature", "threshold", "value"}
    report = (folder / "fit" / "report.md").read_text()
    assert "| gemm | 240 | roofline |" in report


# ------------------------------------------------------------ predictor
def test_predictor_falls_back_per_class_and_reports_it(profile):
    folder, _ = profile
    p = FittedPredictor(folder / "fit", H100, NVLINK)
    roof = RooflinePredictor(H100, NVLINK)
    assert p.fallback_classes == ("attention_prefill", "allreduce", "p2p")
    assert "roofline v0 fallback: attention_prefill, allreduce, p2p" in p.describe()
    assert p.attention_prefill_s(512, 1024, 32, 8, 128) == roof.attention_prefill_s(512, 1024, 32, 8, 128)
    assert p.allreduce_s(1e6, 4) == roof.allreduce_s(1e6, 4)
    assert p.p2p_s(1e6) == roof.p2p_s(1e6)
    # fitted classes follow the data, not the v0 roofline
    flops, nbytes, _ = gemm_work(4096, 4096, 4096)
    assert p.gemm_s(4096, 4096, 4096) == pytest.approx(roofline_time(H100, flops, nbytes), rel=0.03)
    assert p.gemm_s(0, 4096, 4096) == 0.0 and p.attention_decode_s(0, 0, 32, 8, 128) == 0.0


def test_predictor_rejects_another_gpu(profile):
    folder, _ = profile
    with pytest.raises(ValueError, match="fitted for"):
        FittedPredictor(folder / "fit", A100, NVLINK)


def test_forest_hands_shapes_outside_the_data_to_the_fitted_roofline(profile):
    folder, _ = profile
    p = FittedPredictor(folder / "fit", H100, NVLINK)
    inside = p.elementwise_s(1e6)
    assert p.extrapolated["elementwise"] == 0
    far = p.elementwise_s(1e12)  # data end at 1e9 bytes
    assert p.extrapolated["elementwise"] == 1
    assert far > 100 * inside
    assert far == p.fit.classes["elementwise"].roofline.time_s(0.0, 1e12, 1.0)


def test_parts_sum_to_totals(profile):
    folder, _ = profile
    p = FittedPredictor(folder / "fit", H100, NVLINK)
    calls = [
        ("gemm", (1, 4096, 4096)), ("gemm", (8192, 8192, 8192)), ("attention_prefill", (512, 1024, 32, 8, 128)),
        ("attention_decode", (64, 64 * 2000, 32, 8, 128)), ("elementwise", (1e6,)), ("allreduce", (1e6, 4)),
        ("p2p", (1e6,)),
    ]
    for op, args in calls:
        c, m = getattr(p, op + "_parts")(*args)
        assert c + m == getattr(p, op + "_s")(*args)
        assert c == 0.0 or m == 0.0
    assert p.gemm_parts(1, 4096, 4096)[0] == 0.0  # weight read: memory-bound
    assert p.gemm_parts(8192, 8192, 8192)[1] == 0.0  # compute-bound


def test_composed_model_runs_on_a_fitted_predictor(profile):
    folder, _ = profile
    p = FittedPredictor(folder / "fit", H100, NVLINK)
    composed = ComposedStepCostModel(get_model("llama-2-7b"), H100, 1, p)
    total = composed.llm_step_s(((256, 256),), 16, 16 * 1000, 17)
    c, m = composed.llm_step_parts(((256, 256),), 16, 16 * 1000, 17)
    assert total > 0 and c + m == pytest.approx(total, rel=1e-12)


def test_derived_class_uses_the_target_gpus_peaks(tmp_path):
    a100 = tmp_path / "a100"
    opdata.write_class(a100, "attention_decode", decode_rows(A100, n=60))
    fit_profile(a100, A100, out=a100 / "fit")
    # H100 has its own GEMM data but no attention: derive decode attention from A100
    h100 = tmp_path / "h100"
    opdata.write_class(h100, "gemm", gemm_rows(H100, n=60))
    fit_profile(h100, H100, out=h100 / "fit", classes=["gemm"])
    derive_classes(a100 / "fit", h100 / "fit", ["attention_decode"], target_gpu=H100.name)
    entry = json.loads((h100 / "fit" / "model.json").read_text())["classes"]["attention_decode"]
    assert entry["kind"] == "roofline" and entry["derived_from"] == A100.name

    p = FittedPredictor(h100 / "fit", H100, NVLINK)
    assert p.derived_classes == {"attention_decode": A100.name}
    assert "attention_decode" not in p.fallback_classes
    params = entry["params"]
    args = (128, 128 * 4000, 32, 8, 128)
    flops, nbytes, _ = attention_decode_work(*args)
    expected = (nbytes + params["memory_half_bytes"]) / (H100.hbm_bytes_per_s * params["memory_max"])
    expected = max(expected, (flops + params["compute_half_flops"]) / (H100.peak_flops * params["compute_max"]))
    assert p.attention_decode_s(*args) == pytest.approx(expected + params["launch_s"], rel=1e-12)
    # the same parameters on the A100 fit predict the A100 (slower HBM)
    on_a100 = FittedPredictor(a100 / "fit", A100, None).attention_decode_s(*args)
    assert on_a100 / p.attention_decode_s(*args) == pytest.approx(3.35 / 2.039, rel=0.05)


def test_validate_reports_per_class_errors(profile):
    folder, metrics = profile
    table = validate(folder / "fit", folder, gpu=H100)
    assert list(table["op_class"]) == ["gemm", "attention_decode", "elementwise", "p2p"]
    by = table.set_index("op_class")
    assert by.loc["gemm", "mape_pct"] < 5.0 and bool(by.loc["gemm", "in_sample"])
    assert by.loc["gemm", "fit_heldout_mape_pct"] == metrics["classes"]["gemm"]["heldout_mape_pct"]
    assert by.loc["p2p", "kind"] == "roofline-v0" and not by.loc["p2p", "in_sample"]


# ------------------------------------------------------ elementwise per op
EW_BANDWIDTH = {"rmsnorm": 0.7e12, "residual_add": 1.75e12, "emb": 0.3e12}  # B/s, as on an A100
EW_LAUNCH = 4e-6


def ew_time(op, num_bytes):
    return num_bytes / EW_BANDWIDTH[op] + EW_LAUNCH


def per_op_rows(n=80, seed=6, few_embedding=5, noise=0.02):
    """Elementwise rows of two kernels that differ 2.5x in bandwidth, plus a few embedding rows."""
    rng = np.random.default_rng(seed)
    parts = []
    for op, count in (("rmsnorm", n), ("residual_add", n), ("emb", few_embedding)):
        b = np.exp(rng.uniform(math.log(1e5), math.log(4e9), count))
        t = ew_time(op, b) * np.exp(rng.normal(0, noise, count))
        parts.append(pd.DataFrame({"num_bytes": b, "time_ms": t * 1e3, "op": op, "source": "synthetic"}))
    return pd.concat(parts, ignore_index=True)


@pytest.fixture(scope="module")
def per_op_fit(tmp_path_factory):
    folder = tmp_path_factory.mktemp("per_op")
    opdata.write_class(folder, "elementwise", per_op_rows())
    metrics = fit_profile(folder, H100)
    return folder, metrics


def test_canonical_elementwise_op_names():
    c = opdata.canonical_elementwise_op
    assert set(opdata.ELEMENTWISE_OPS) == {"norm", "add_norm", "act", "act_gated", "rotary", "embedding", "add",
                                           "softmax"}
    assert set(opdata.ELEMENTWISE_OP_DOC) == set(opdata.ELEMENTWISE_OPS)
    for op in opdata.ELEMENTWISE_OPS:
        assert c(op) == op
    for names, op in (
        (("rmsnorm", "layernorm", "input_layernorm", "post_attention_layernorm", "RMSNorm", "enc_layernorm"), "norm"),
        (("add_rmsnorm", "fused_add_rmsnorm", "fused-add-rms-norm"), "add_norm"),
        (("gelu", "mlp_act", "act", "enc_gelu"), "act"),
        (("silu_mul", "swiglu", "enc_silu_mul", "gelu_and_mul"), "act_gated"),
        (("rope", "attn_rope", "rotary", "enc_rotary"), "rotary"),
        (("emb", "embedding"), "embedding"),
        (("add", "residual_add", "enc_add"), "add"),
        (("softmax", "sampling"), "softmax"),
    ):
        assert {c(n) for n in names} == {op}, names
    assert c("my_fancy_kernel") == "my_fancy_kernel"  # unknown: the name itself
    assert c("enc_unknown") == "enc_unknown"


def test_per_op_fit_beats_the_pooled_model(per_op_fit):
    _, metrics = per_op_fit
    ew = metrics["classes"]["elementwise"]
    assert ew["per_op_models"] == ["add", "norm"]  # embedding has 5 rows: the pooled model answers it
    assert set(ew["per_op"]) == {"add", "norm"}
    assert ew["op_rows"] == {"add": 80, "norm": 80, "embedding": 5}
    # the class's held-out error is over all its rows, each by its op's model
    assert ew["heldout_rows"] == sum(ew["per_op"][op]["heldout_rows"] for op in ("add", "norm")) + 1
    assert ew["heldout_mape_pct"] <= 10.0
    assert ew["heldout_mape_pct"] < 0.5 * ew["pooled"]["heldout_mape_pct"]
    assert ew["pooled"]["heldout_mape_pct"] > 10.0  # one bytes-only curve cannot fit both kernels
    for op in ("add", "norm"):
        assert ew["per_op"][op]["chosen"] == "roofline"
        assert ew["per_op"][op]["heldout_mape_pct"] < 5.0
        assert ew["per_op"][op]["rows"] == 80


def test_fit_class_per_op_can_be_turned_off():
    df = per_op_rows()
    peaks = (H100.peak_flops, H100.hbm_bytes_per_s)
    pooled = fit_class("elementwise", df, peaks, estimators=("roofline",), per_op=False)
    routed = fit_class("elementwise", df, peaks, estimators=("roofline",))
    assert pooled.per_op == {} and set(routed.per_op) == {"add", "norm"}
    assert routed.metrics["heldout_mape_pct"] < pooled.metrics["heldout_mape_pct"]
    # every op too small for a model of its own: one pooled model, as without an op column
    few = df.groupby("op").head(7)
    assert fit_class("elementwise", few, peaks, estimators=("roofline",)).per_op == {}


def test_predictor_routes_elementwise_by_op(per_op_fit):
    folder, _ = per_op_fit
    p = FittedPredictor(folder / "fit", H100, NVLINK)
    assert p.elementwise_ops == ("add", "norm")
    assert "per op: add roofline, norm roofline" in p.describe()
    b = 2e8
    assert p.elementwise_s(b, op="norm") == pytest.approx(ew_time("rmsnorm", b), rel=0.05)
    assert p.elementwise_s(b, op="add") == pytest.approx(ew_time("residual_add", b), rel=0.05)
    assert p.elementwise_s(b, op="add") < 0.5 * p.elementwise_s(b, op="norm")
    # aliases reach the same model; an op without one (or none) gets the pooled model
    assert p.elementwise_s(b, op="rmsnorm") == p.elementwise_s(b, op="layernorm") == p.elementwise_s(b, op="norm")
    pooled = p.elementwise_s(b)
    assert p.elementwise_s(b, op="embedding") == pooled == p.elementwise_s(b, op="no_such_kernel")
    assert p.elementwise_s(b, "norm") == p.elementwise_s(b, op="norm")  # positional too
    assert p.elementwise_s(0, op="norm") == 0.0
    assert p.elementwise_parts(b, op="norm") == (0.0, p.elementwise_s(b, op="norm"))
    # vectorised (validate's path) routes by the op column as the scalar calls do
    df = per_op_rows(n=10, seed=9, few_embedding=3)
    frame = p.predict_frame("elementwise", df)
    scalar = [p.elementwise_s(b, op=op) for b, op in zip(df["num_bytes"], df["op"])]
    np.testing.assert_allclose(frame, scalar, rtol=1e-12)


def test_per_op_models_persist_without_pickles(per_op_fit):
    folder, metrics = per_op_fit
    doc = json.loads((folder / "fit" / "model.json").read_text())
    entry = doc["classes"]["elementwise"]
    assert set(entry["per_op"]) == {"add", "norm"}
    assert entry["per_op"]["norm"]["kind"] == "roofline"
    assert entry["metrics"]["heldout_mape_pct"] == metrics["classes"]["elementwise"]["heldout_mape_pct"]
    loaded = load_fit(folder / "fit").classes["elementwise"]
    assert set(loaded.per_op) == {"add", "norm"} and loaded.per_op["add"].per_op == {}
    report = (folder / "fit" / "report.md").read_text()
    assert "| elementwise | 165 | per op (2) + pooled |" in report
    assert "| elementwise: pooled | 165 | " in report
    assert "| elementwise: norm | 80 | roofline |" in report
    assert "embedding (5 rows)" in report
    table = validate(folder / "fit", folder, gpu=H100).set_index("op_class")
    assert table.loc["elementwise", "kind"] == "per-op+roofline"
    assert table.loc["elementwise", "mape_pct"] < 10.0


def test_per_op_forest_files_round_trip(tmp_path):
    df = per_op_rows()
    peaks = (H100.peak_flops, H100.hbm_bytes_per_s)
    cf = fit_class("elementwise", df, peaks, estimators=("forest",))
    save_fit(tmp_path, Fit(H100.name, {}, {"elementwise": cf}))
    names = {p.name for p in tmp_path.iterdir()}
    assert {"elementwise.forest.npz", "elementwise.norm.forest.npz", "elementwise.add.forest.npz"} <= names
    loaded = load_fit(tmp_path).classes["elementwise"]
    rows = df[df["op"] == "rmsnorm"]
    feats = class_features("elementwise", rows)
    expected = np.exp(cf.per_op["norm"].estimator.predict(matrix(feats, loaded.per_op["norm"].features)))
    np.testing.assert_allclose(loaded.per_op["norm"].predict_s(feats), expected, rtol=1e-9)
    p = FittedPredictor(tmp_path, H100, NVLINK)
    p.elementwise_s(1e13, op="norm")  # outside the data: the op's own fitted roofline
    assert p.extrapolated["elementwise"] == 1
    assert p.elementwise_s(1e13, op="norm") == loaded.per_op["norm"].roofline.time_s(0.0, 1e13, 1.0)


def test_fit_without_per_op_models_still_loads(per_op_fit, tmp_path):
    """A model.json from before per-op models (no ``per_op`` key) loads as one pooled model."""
    folder, _ = per_op_fit
    doc = json.loads((folder / "fit" / "model.json").read_text())
    del doc["classes"]["elementwise"]["per_op"]
    (tmp_path / "model.json").write_text(json.dumps(doc))
    p = FittedPredictor(tmp_path, H100, NVLINK)
    assert p.elementwise_ops == () and p.fit.classes["elementwise"].per_op == {}
    assert p.elementwise_s(2e8, op="norm") == p.elementwise_s(2e8, op="add") == p.elementwise_s(2e8)


def test_derived_elementwise_keeps_its_per_op_rooflines(per_op_fit, tmp_path):
    folder, _ = per_op_fit
    derive_classes(folder / "fit", tmp_path, ["elementwise"], target_gpu=A100.name)
    entry = json.loads((tmp_path / "model.json").read_text())["classes"]["elementwise"]
    assert set(entry["per_op"]) == {"add", "norm"}
    assert all(e["kind"] == "roofline" and e["derived_from"] == H100.name for e in entry["per_op"].values())
    on_a100 = FittedPredictor(tmp_path, A100, None)
    on_h100 = FittedPredictor(folder / "fit", H100, NVLINK)
    b = 2e9  # bandwidth-bound: the time scales with HBM bandwidth
    for op in ("norm", "add"):
        ratio = on_a100.elementwise_s(b, op=op) / on_h100.elementwise_s(b, op=op)
        assert ratio == pytest.approx(3.35 / 2.039, rel=0.02)
    assert on_a100.elementwise_s(b, op="add") < 0.5 * on_a100.elementwise_s(b, op="norm")


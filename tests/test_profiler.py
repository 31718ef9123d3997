"""The operator profiler: output format, thinning, failure handling, reference models.

Runs on the CPU in quick mode (toy dimensions), a few seconds in all.
"""

from __future__ import annotations

import itertools
import json
import types

import pytest

torch = pytest.importorskip("torch")

from lmmsim.catalog import get_gpu, get_model  # noqa: E402
from lmmsim.costmodel.composed import ComposedStepCostModel  # noqa: E402
from lmmsim.costmodel.opdata import SHAPE_COLUMNS, TIME_COLUMNS, read_class, read_meta  # noqa: E402
from lmmsim.costmodel.roofline import RooflinePredictor  # noqa: E402
from lmmsim.profiler import children, planning  # noqa: E402
from lmmsim.profiler import grid as G  # noqa: E402
from lmmsim.profiler import run as R  # noqa: E402
from lmmsim.profiler.reference import TinyDecoder, TinyViT, time_forward  # noqa: E402
from lmmsim.workload.request import EncoderWork  # noqa: E402

MODELS = ["llama-2-7b", "qwen2.5-vl-7b"]
CPU_CLASSES = ("gemm", "attention_prefill", "attention_decode", "elementwise", "encoder_layer")


@pytest.fixture(scope="module")
def quick_profile(tmp_path_factory):
    out = tmp_path_factory.mktemp("quick")
    R.profile("cpu", "cpu", MODELS, out, quick=True, progress=False, command="pytest")
    return out


def test_quick_profile_writes_every_cpu_class(quick_profile):
    for cls in CPU_CLASSES:
        df = read_class(quick_profile, cls)
        assert df is not None and len(df) > 0, cls
        for col in (*SHAPE_COLUMNS[cls], *TIME_COLUMNS, "dtype", "repeats"):
            assert col in df.columns, (cls, col)
        assert list(df.columns[: len(SHAPE_COLUMNS[cls])]) == list(SHAPE_COLUMNS[cls])
        assert (df["time_ms"] > 0).all(), cls
        assert (df["time_ms_p10"] <= df["time_ms"]).all() and (df["time_ms"] <= df["time_ms_p90"]).all(), cls
    for cls in ("allreduce", "p2p", "sm_limit"):
        assert read_class(quick_profile, cls) is None


def test_quick_profile_covers_the_composed_operators(quick_profile):
    gemm = read_class(quick_profile, "gemm")
    assert {"qkv", "o", "gate_up", "down", "lm_head", "projector", "enc_qkv", "stem"} <= set(gemm["op"])
    assert {"source", "tp"} <= set(gemm.columns)
    assert set(gemm["tp"]) == {1, 2}
    ew = read_class(quick_profile, "elementwise")
    assert {"add_rmsnorm", "silu_mul", "rotary", "embedding", "softmax", "rmsnorm", "add"} <= set(ew["op"])
    add_norm = ew[ew["op"] == "add_rmsnorm"].iloc[0]
    assert add_norm["num_bytes"] == 4 * add_norm["tokens"] * add_norm["width"] * 2
    pre = read_class(quick_profile, "attention_prefill")
    assert set(pre["causal"]) == {0, 1}
    assert (pre["context"] >= pre["new_tokens"]).all()
    assert (pre["new_tokens"] < pre["context"]).any()  # chunked prefill rows
    dec = read_class(quick_profile, "attention_decode")
    assert (dec["context_sum"] == dec["batch"] * dec["context"]).all()
    enc = read_class(quick_profile, "encoder_layer")
    qwen = enc[enc["family"] == "qwen_vit"]
    assert set(qwen["window_tokens"]) == {0, 16}  # windowed and full-attention variants


def test_meta_records_device_and_unmeasurable_classes(quick_profile):
    meta = read_meta(quick_profile)
    for key in ("device", "cpu_cores", "memory_gib", "torch_version", "dtype", "date", "command", "hardware",
                "models", "grid_sizes", "elapsed_s", "thinning", "skipped", "cuda_version", "driver_version"):
        assert key in meta, key
    assert meta["hardware"] == "cpu" and meta["models"] == MODELS and meta["command"] == "pytest"
    assert meta["allreduce"].startswith("not measurable")
    assert meta["sm_limit"].startswith("not measurable")
    assert meta["skipped"] == 0 and meta["thinning"]["factor"] == 1.0
    assert meta["grid_sizes"]["gemm"]["measured"] == len(read_class(quick_profile, "gemm"))
    json.dumps(meta)


def test_thin_indices_keep_endpoints():
    assert G.thin_indices(10, 1.0) == list(range(10))
    assert G.thin_indices(2, 0.0) == [0, 1]
    kept = G.thin_indices(10, 0.3)
    assert kept[0] == 0 and kept[-1] == 9 and len(kept) == 3
    assert G.thin_indices(23, 0.0) == [0, 22]


def test_max_minutes_thins_rows_and_keeps_endpoints(tmp_path, monkeypatch, quick_profile):
    # Make the plan deterministic: every shape is predicted to take 50 ms, and the
    # profiler's own clock (deadline, budget) advances 1 us per reading, so how long
    # the real probes take on a busy host cannot change what is thinned.
    monkeypatch.setattr(planning.Planner, "wall_s", lambda self, c: 0.05)
    monkeypatch.setattr(R, "WRITE_RESERVE_S", 0.0)
    ticks = itertools.count()
    monkeypatch.setattr(R, "time", types.SimpleNamespace(monotonic=lambda: next(ticks) * 1e-6))
    R.profile("cpu", "cpu", MODELS, tmp_path, quick=True, progress=False, max_minutes=0.08)
    meta = read_meta(tmp_path)
    assert 0 <= meta["thinning"]["factor"] < 1
    full, thinned = read_class(quick_profile, "gemm"), read_class(tmp_path, "gemm")
    assert len(thinned) < len(full)
    for key, group in full.groupby(["source", "op", "tp", "n", "k"]):
        sub = thinned.set_index(["source", "op", "tp", "n", "k"]).loc[[key]]
        assert {group["m"].min(), group["m"].max()} <= set(sub["m"]), key
    total_full = sum(len(read_class(quick_profile, c)) for c in CPU_CLASSES)
    total_thin = sum(len(read_class(tmp_path, c)) for c in CPU_CLASSES)
    assert total_thin < total_full


def test_failing_shape_is_skipped_and_counted(tmp_path, monkeypatch):
    real = R._measure_case

    def flaky(case, timer, pool):
        if case.op_class == "gemm" and case.params["m"] == 8:
            raise RuntimeError("CUDA out of memory (simulated)")
        return real(case, timer, pool)

    monkeypatch.setattr(R, "_measure_case", flaky)
    R.profile("cpu", "cpu", ["llama-2-7b"], tmp_path, quick=True, progress=False)
    meta = read_meta(tmp_path)
    gemm = read_class(tmp_path, "gemm")
    assert 8 not in set(gemm["m"]) and {1, 64} <= set(gemm["m"])
    assert meta["skipped"] == meta["grid_sizes"]["gemm"]["skipped"] > 0
    assert "out of memory" in meta["skipped_examples"][0]
    assert read_class(tmp_path, "attention_prefill") is not None


def test_grids_are_deterministic_and_respect_tp():
    cfg = G.grid_config("cpu")
    specs = [get_model("qwen2.5-vl-7b"), get_model("llava-onevision-qwen2-7b")]
    a, b = G.build_cases(specs, cfg), G.build_cases(specs, cfg)
    assert [c.key for c in a] == [c.key for c in b]
    assert G.valid_tps(specs[0], (1, 2, 4, 8)) == [1, 2, 4]  # 28 heads
    qkv = [c for c in a if c.row.get("op") == "qkv"]
    # Same LLM in both models: timed once, both named.
    assert qkv and all(c.row["source"] == "qwen2.5-vl-7b+llava-onevision-qwen2-7b" for c in qkv)
    tp4 = next(c for c in qkv if c.row["tp"] == 4)
    assert tp4.params["n"] == (28 // 4 + 2 * 1) * 128 and tp4.params["k"] == 3584


def test_reference_models_run_and_describe_themselves():
    dec = TinyDecoder(hidden=128, layers=2, heads=4, kv_heads=2, ffn=256, vocab=1000)
    assert tuple(dec.prefill(16).shape) == (1, 1000)
    probs = dec.decode(3, 32)
    assert tuple(probs.shape) == (3, 1000) and torch.isfinite(probs).all()
    assert time_forward(lambda: dec.decode(2, 16), repeats=3) > 0
    vit = TinyViT(hidden=64, layers=2, heads=2, ffn=128, patches=16, patch_size=4, output_dim=128)
    assert tuple(vit.forward(2).shape) == (32, 128)

    cpu = get_gpu("cpu")
    spec = TinyDecoder().as_model_spec()
    assert spec.llm.hidden_size == 512 and spec.encoder is None
    cm = ComposedStepCostModel(spec, cpu, 1, RooflinePredictor(cpu))
    assert cm.prefill_s(256) > 0 and cm.decode_s(8, 512) > 0
    vspec = TinyViT().as_model_spec()
    assert vspec.encoder.family == "siglip" and vspec.encoder.projector.input_dim == 384
    assert ComposedStepCostModel(vspec, cpu, 1, RooflinePredictor(cpu)).encode_s([EncoderWork(2, 196)]) > 0
    assert dec.as_model_spec().llm.num_kv_heads == 2
    # Reference models by name, as profile(models=[...]) resolves them; the ViT's media rule
    # gives the profiler its exact sequence length.
    tiny = R._resolve(["tiny-vit", "tiny-decoder-gqa"])
    assert tiny[0].encoder.hidden_size == 384 and tiny[1].llm.num_kv_heads == 2
    assert G.encoder_seq_lens(tiny[0], G.grid_config("cpu")) == [196]


def test_cli_main(tmp_path, capsys):
    assert R.main(["--device", "cpu", "--hardware", "cpu", "--models", "llama-2-7b", "--quick", "--no-progress",
                   "-o", str(tmp_path)]) == 0
    assert "gemm" in capsys.readouterr().out
    assert read_meta(tmp_path)["command"].startswith("python -m lmmsim.profiler.run")


def test_collective_sweep_runs_over_processes():
    # The multi-GPU path (spawned ranks, MAX over ranks, rank 0 writes) exercised with gloo on the CPU.
    ar, p2p, note = children.collectives(2, R.timing.policy_for("cpu", quick=True), None, backend="gloo",
                                        sizes=[1024, 1 << 16])
    assert [r["num_bytes"] for r in ar] == [1024, 1 << 16] and all(r["world"] == 2 for r in ar)
    assert len(p2p) == 2 and all(r["time_ms_p10"] <= r["time_ms"] <= r["time_ms_p90"] for r in ar + p2p)
    assert "measured (gloo)" in note

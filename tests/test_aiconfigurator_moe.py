"""The FP8 / MoE classes: aiconfigurator's MoE, all-to-all, FP8 GEMM and FP8-KV decode tables
(lmmsim.profiler.aiconfigurator_moe), their fit, and FittedPredictor's methods for them."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lmmsim import catalog
from lmmsim.costmodel import opdata
from lmmsim.costmodel.features import CLASSES, class_features, code, usable_rows
from lmmsim.costmodel.fitted import FittedPredictor
from lmmsim.profiler.aiconfigurator_import import import_aiconfigurator

EXTRA = list(opdata.EXTRA_FITTED_CLASSES)


def _h200_fit() -> Path:
    return Path(catalog.find(Path("ops") / "h200" / "fit"))


# ------------------------------------------------------------------ importer on hand-made tables
def _write(root, rel, rows):
    path = root / "h200_sxm" / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(path, index=False)


def _tiny_tables(root):
    moe = dict(framework="VLLM", version="0.24.0", device="NVIDIA H200", op_name="moe", hidden_size=2048,
               inter_size=768, topk=8, num_experts=128, moe_tp_size=1, distribution="balanced")
    _write(root, "moe/vllm/0.24.0/moe_perf.parquet", [
        {**moe, "kernel_source": "vllm_unquantizedfusedmoe_triton_tritonexperts", "moe_dtype": "bfloat16",
         "num_tokens": 64, "moe_ep_size": 1, "latency": 0.3},
        {**moe, "kernel_source": "vllm_fp8moe_triton_tritonexperts", "moe_dtype": "fp8_block",
         "num_tokens": 64, "moe_ep_size": 1, "latency": 0.2, "distribution": "power_law_1.2"},
        {**moe, "kernel_source": "vllm_fp8moe_flashinfer_cutlass_flashinferexperts", "moe_dtype": "fp8_block",
         "num_tokens": 64, "moe_ep_size": 8, "latency": 0.05},
        # per-tensor fp8 and a 4-bit kernel: left out
        {**moe, "kernel_source": "vllm_modeloptfp8moe_flashinfer_cutlass_flashinferexperts", "moe_dtype": "fp8",
         "num_tokens": 64, "moe_ep_size": 1, "latency": 1.0},
        {**moe, "kernel_source": "vllm_compressedtensorswna16marlinmoe_marlin_marlinexperts", "moe_dtype": "int4_wo",
         "num_tokens": 64, "moe_ep_size": 1, "latency": 0.1},
    ])
    a2a = dict(framework="vLLM", version="0.24.0", device="NVIDIA H200", op_name="moe_a2a", kernel_source="deepep",
               comm_dtype="default", ep_size=8, node_num=1, hidden_size=7168, topk=8, num_experts=256,
               num_tokens=4096, notify_us=0.0)
    _write(root, "comm/vllm/0.24.0/moe_a2a_perf.parquet", [
        {**a2a, "comm_backend": "deepep_ht", "phase": "dispatch", "sms": 20, "transmit_us": 1127.6, "latency": 1127.6},
        {**a2a, "comm_backend": "deepep_ht", "phase": "combine", "sms": 20, "transmit_us": 1510.3, "latency": 1510.3},
        {**a2a, "comm_backend": "deepep_ll", "phase": "dispatch", "sms": 0, "num_tokens": 128, "transmit_us": 120.0,
         "latency": 120.0},
    ])
    gemm = dict(framework="VLLM", version="0.24.0", device="NVIDIA H200", op_name="gemm", m=16, n=4096, k=4096)
    _write(root, "gemm/vllm/0.24.0/gemm_perf.parquet", [
        {**gemm, "kernel_source": "torch.nn.functional.linear", "gemm_dtype": "bfloat16", "latency": 0.02},
        {**gemm, "kernel_source": "CutlassFP8ScaledMMLinearKernel", "gemm_dtype": "fp8", "latency": 0.012},
        {**gemm, "kernel_source": "DeepGemmFp8BlockScaledMMKernel", "gemm_dtype": "fp8_block", "latency": 0.015},
    ])
    att = dict(framework="VLLM", version="0.24.0", device="NVIDIA H200", op_name="generation_attention",
               batch_size=4, isl=1, num_heads=32, num_key_value_heads=8, head_dim=128, beam_width=1,
               attn_dtype="bfloat16", step=1023, window_size=0)
    _write(root, "attention/vllm/0.24.0/generation_attention_perf.parquet", [
        {**att, "kernel_source": "vllm_flash_attn_fa3", "kv_cache_dtype": "fp8", "latency": 0.03},
        {**att, "kernel_source": "vllm_flash_attn_fa3", "kv_cache_dtype": "bfloat16", "latency": 0.04},
        {**att, "kernel_source": "vllm_flash_attn_fa3", "kv_cache_dtype": "fp8", "window_size": 128, "latency": 0.01},
    ])


def test_importer_maps_tiny_tables_to_the_new_classes(tmp_path):
    _tiny_tables(tmp_path / "data")
    rows = import_aiconfigurator(tmp_path / "out", gpu="h200", classes=EXTRA, root=tmp_path / "data")
    assert rows == {"gemm_fp8": 1, "attention_decode_fp8": 1, "moe_experts": 3, "moe_alltoall": 2}
    moe = opdata.read_class(tmp_path / "out", "moe_experts")
    assert list(moe.columns[:9]) == list(opdata.SHAPE_COLUMNS["moe_experts"])
    got = {(r.dtype, r.routing, r.moe_ep): (r.tokens, r.hidden, r.inter, r.num_experts, r.topk, r.moe_tp, r.time_ms)
           for r in moe.itertuples()}
    assert got == {("bf16", "balanced", 1): (64, 2048, 768, 128, 8, 1, 0.3),
                   ("fp8", "power_law_1.2", 1): (64, 2048, 768, 128, 8, 1, 0.2),
                   ("fp8", "balanced", 8): (64, 2048, 768, 128, 8, 1, 0.05)}
    a2a = opdata.read_class(tmp_path / "out", "moe_alltoall").sort_values("phase")
    assert a2a[["tokens", "hidden", "topk", "ep"]].drop_duplicates().values.tolist() == [[4096, 7168, 8, 8]]
    assert a2a["phase"].tolist() == ["combine", "dispatch"]
    assert a2a["time_ms"].tolist() == pytest.approx([1.5103, 1.1276])  # us -> ms; deepep_ll left out
    gemm = opdata.read_class(tmp_path / "out", "gemm_fp8")
    assert gemm[["m", "n", "k", "time_ms"]].values.tolist() == [[16, 4096, 4096, 0.012]]
    dec = opdata.read_class(tmp_path / "out", "attention_decode_fp8")
    assert dec[["batch", "context_sum", "num_heads", "num_kv_heads", "head_dim"]].values.tolist() == \
        [[4, 4 * 1024, 32, 8, 128]]
    assert dec["time_ms"].tolist() == [0.03]
    meta = json.loads((tmp_path / "out" / "meta.json").read_text())
    assert meta["kernels"]["moe_fp8_ep"] == "vllm_fp8moe_flashinfer_cutlass_flashinferexperts"
    assert meta["dropped_rows"]["h200_sxm/moe/vllm/0.24.0/moe_perf.parquet"] == {"moe: not bfloat16 / fp8_block": 2}


def test_features_code_names_and_count_half_fp8_flops():
    assert code("routing", "power_law_1.2") == 1.2 and code("phase", "combine") == 1.0
    with pytest.raises(ValueError, match="bf16, fp8"):
        code("dtype", "int4")
    bf16 = CLASSES["moe_experts"].work(256, 2048, 768, 128, 8, 1, 1, 0.0, 0.0)
    fp8 = CLASSES["moe_experts"].work(256, 2048, 768, 128, 8, 1, 1, 1.0, 0.0)
    assert fp8[0] == pytest.approx(bf16[0] / 2)  # FP8 tensor cores: twice the rate
    assert fp8[1] < bf16[1]  # one-byte weights
    # expert parallelism: an eighth of the pairs and of the experts on each GPU
    ep8 = CLASSES["moe_experts"].work(256, 2048, 768, 128, 8, 1, 8, 0.0, 0.0)
    assert ep8[0] == pytest.approx(bf16[0] / 8)
    df = pd.DataFrame({"tokens": [64, 0, 32, 32], "hidden": [2048] * 4, "inter": [768] * 4,
                       "num_experts": [128] * 4, "topk": [8] * 4, "moe_tp": [1] * 4, "moe_ep": [1] * 4,
                       "dtype": ["fp8", "bf16", "bf16", "int4"], "routing": ["balanced"] * 4, "time_ms": [0.1] * 4})
    rows = usable_rows("moe_experts", df)  # no tokens, or a dtype not modelled: not a row to fit
    assert rows["tokens"].tolist() == [64, 32]
    assert class_features("moe_experts", rows)["fp8"].tolist() == [1.0, 0.0]


# ------------------------------------------------------------------ the shipped H200 fit
def test_shipped_h200_fit_has_the_new_classes_and_keeps_the_old():
    fit = _h200_fit()
    doc = json.loads((fit / "model.json").read_text())
    assert set(EXTRA) <= set(doc["classes"])
    m = doc["classes"]["moe_experts"]["metrics"]
    assert m["heldout_rows"] > 1000 and m["heldout_mape_pct"] < 15.0
    assert doc["classes"]["moe_experts"]["kind"] == "forest"  # no polynomials (features.CLASSES)
    gpu = catalog.get_gpu("h200")
    p = FittedPredictor(fit, gpu, gpu.links["nvlink"])
    assert p.fallback_classes == ()
    # inside the data: a (hidden, inter, experts, topk) combination the table lacks, not extrapolated
    t = p.moe_experts_s(512, 3072, 1536, 128, 8, 1, 1, "bf16", "balanced")
    assert p.extrapolated["moe_experts"] == 0
    # the fp8 layer reads half the weight bytes: faster where weights dominate (few tokens)
    assert p.moe_experts_s(512, 3072, 1536, 128, 8, 1, 1, "fp8", "balanced") < t
    # more tokens cost more; outside the measured topk range is extrapolated
    assert p.moe_experts_s(8192, 3072, 1536, 128, 8, 1, 1, "bf16", "balanced") > t
    p.moe_experts_s(512, 3072, 1536, 128, 64, 1, 1, "bf16", "balanced")
    assert p.extrapolated["moe_experts"] == 1 and 0 < p.extrapolated_share()["moe_experts"] < 1
    assert p.moe_alltoall_s(4096, 7168, 8, 8, "dispatch") > p.moe_alltoall_s(64, 7168, 8, 8, "dispatch") > 0
    assert p.moe_alltoall_s(64, 7168, 8, 1, "combine") == 0.0
    assert 0 < p.gemm_fp8_s(4096, 4096, 4096) < p.gemm_s(4096, 4096, 4096)  # compute-bound: FP8 is faster
    assert 0 < p.attention_decode_fp8_s(64, 64 * 4096, 32, 8, 128) < p.attention_decode_s(64, 64 * 4096, 32, 8, 128)
    assert sum(p.moe_experts_parts(512, 3072, 1536, 128, 8, 1, 1, "bf16", "balanced")) == t
    with pytest.raises(ValueError, match="routing"):
        p.moe_experts_s(512, 3072, 1536, 128, 8, 1, 1, "bf16", "zipf")


@pytest.mark.skipif(importlib.util.find_spec("aiconfigurator_core") is None,
                    reason="needs aiconfigurator-core (the calibrate extra) for its H200 MoE table")
def test_forest_predicts_a_moe_shape_it_never_saw(tmp_path):
    """Leave one (hidden, inter, experts, topk) shape of the H200 table out of a fit of the
    class's estimator and predict it: median error within 20%, p90 within 50% (the full
    leave-one-shape-out over all 23 shapes: median 10%, p90 34%; bench/fp8_moe_accuracy.py)."""
    from lmmsim.costmodel.estimators import make_estimator
    from lmmsim.costmodel.features import class_peaks, matrix

    import_aiconfigurator(tmp_path / "p", gpu="h200", classes=["moe_experts"])
    df = usable_rows("moe_experts", opdata.read_class(tmp_path / "p", "moe_experts"))
    df = df[(df["routing"] == "balanced") & (df["dtype"] == "bf16")].reset_index(drop=True)
    held = ((df["hidden"] == 4096) & (df["inter"] == 1536) & (df["num_experts"] == 128)).to_numpy()
    feats = class_features("moe_experts", df)
    X, y = matrix(feats, CLASSES["moe_experts"].log_features), np.log(df["time_ms"].to_numpy() / 1e3)
    model = make_estimator("forest", "moe_experts", class_peaks("moe_experts", catalog.get_gpu("h200"), None), None)
    model.fit(X[~held], y[~held])
    err = 100 * np.abs(np.exp(model.predict(X[held]) - y[held]) - 1)
    assert held.sum() > 100
    assert np.median(err) < 20 and np.percentile(err, 90) < 50


# ------------------------------------------------------------------ a fit without the classes
def test_methods_fall_back_to_the_roofline_where_the_fit_lacks_the_class(tmp_path):
    fit = tmp_path / "fit"
    shutil.copytree(_h200_fit(), fit)
    doc = json.loads((fit / "model.json").read_text())
    for c in EXTRA:
        doc["classes"].pop(c, None)
    (fit / "model.json").write_text(json.dumps(doc))
    gpu = catalog.get_gpu("h200")
    p = FittedPredictor(fit, gpu, gpu.links["nvlink"])
    calls = {"gemm_fp8": (64, 4096, 4096), "attention_decode_fp8": (8, 8 * 512, 32, 8, 128),
             "moe_experts": (64, 2048, 768, 128, 8, 1, 1, "bf16", "balanced"),
             "moe_alltoall": (64, 7168, 8, 8, "dispatch")}
    for c, args in calls.items():
        roof = getattr(p._roof, c + "_s", None)
        if roof is None:  # the roofline versions come from roofline.py; without them the call says so
            with pytest.raises(NotImplementedError, match=c):
                getattr(p, c + "_s")(*args)
            continue
        twin = {"gemm_fp8": "gemm", "attention_decode_fp8": "attention_decode"}.get(c)
        if twin is None:
            assert getattr(p, c + "_s")(*args) == roof(*args)
        else:  # the fitted bf16 kernel scaled by the roofline's FP8 / bf16 ratio
            want = getattr(p, twin + "_s")(*args) * roof(*args) / getattr(p._roof, twin + "_s")(*args)
            assert getattr(p, c + "_s")(*args) == pytest.approx(want, rel=1e-12)
            assert getattr(p, c + "_s")(*args) <= getattr(p, twin + "_s")(*args)  # never slower than bf16
        assert c in p.roofline_answered and p.extrapolated_share()[c] == 1.0
    assert p.fallback_classes == ()  # the dense classes are all fitted


def test_fit_reports_a_named_fp8_moe_class_without_rows(tmp_path):
    """Named classes that a profile lacks are reported (not "no rows in any of" nothing)."""
    from lmmsim.costmodel.fitting import fit_profile
    from lmmsim.errors import UserError

    (tmp_path / "meta.json").write_text("{}")
    with pytest.raises(UserError, match="moe_experts.csv"):
        fit_profile(tmp_path, catalog.get_gpu("h200"), out=tmp_path / "fit", classes=["moe_experts"])


def test_a_split_by_both_tp_and_ep_counts_as_outside_the_data():
    """The MoE tables hold rows split by TP or by EP, never both; such a call is extrapolated."""
    from lmmsim import catalog
    from lmmsim.costmodel.fitted import FittedPredictor

    gpu = catalog.get_gpu("h200")
    fit = FittedPredictor(catalog.find(gpu.fitted_profile), gpu, gpu.links["nvlink"])
    fit.moe_experts_s(256, 4096, 1536, 128, 8, 1, 8, "bf16", "power_law_1.2")
    assert fit.extrapolated["moe_experts"] == 0
    fit.moe_experts_s(256, 4096, 1536, 128, 8, 2, 4, "bf16", "power_law_1.2")
    assert fit.extrapolated["moe_experts"] == 1
    assert fit.extrapolated_share()["moe_experts"] > 0

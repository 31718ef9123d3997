"""FP8 weights (W8A8 GEMMs) and FP8 KV cache: bytes halved, FP8 peak for compute-bound GEMMs."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from lmmsim import catalog
from lmmsim.build import _check_dtype
from lmmsim.catalog import GpuSpec, LinkSpec, LlmSpec, ModelSpec, RooflineEfficiency
from lmmsim.costmodel.composed import ComposedStepCostModel
from lmmsim.costmodel.roofline import RooflinePredictor
from lmmsim.errors import UserError
from lmmsim.placement import plan_llm_memory

LINK = LinkSpec(bandwidth_gbs=100, latency_us=2)
EXACT = GpuSpec(name="exact", display_name="exact", peak_bf16_tflops=100, peak_fp8_tflops=200, hbm_bandwidth_tbs=1,
                memory_gib=80, num_sms=100, links={"nvlink": LINK}, sources={},
                efficiency=RooflineEfficiency(compute_max=1, compute_half_flops=0, memory_max=1,
                                              memory_half_bytes=0, kernel_launch_us=0))
LLAMA8B = LlmSpec(hidden_size=4096, num_layers=32, num_heads=32, num_kv_heads=8, intermediate_size=14336,
                  vocab_size=128256, max_context=8192)


def test_catalog_fp8_peaks():
    with_fp8 = ["h100-sxm-80gb", "h200", "b200", "gb200", "l40s", "rtx-6000-ada", "rtx-pro-6000", "h100-96gb"]
    for name in with_fp8:
        gpu = catalog.get_gpu(name)
        assert gpu.peak_fp8_tflops == pytest.approx(2 * gpu.peak_bf16_tflops, rel=0.02), name  # twice bf16 dense (L40S: 733 vs 2 x 362)
        assert "peak_fp8_tflops" in gpu.sources
    assert catalog.get_gpu("a100-sxm-80gb").peak_fp8_tflops is None


def test_fp8_gemm_by_hand():
    roof = RooflinePredictor(EXACT, LINK)
    m = n = k = 8192  # compute-bound: 2 m n k FLOPs at the FP8 peak
    assert roof.gemm_fp8_s(m, n, k) == pytest.approx(2 * m * n * k / 200e12)
    assert roof.gemm_s(m, n, k) / roof.gemm_fp8_s(m, n, k) == pytest.approx(200 / 100)
    # memory-bound decode GEMM: weights 1 B, activations 1 B in, 2 B out
    assert roof.gemm_fp8_s(1, n, k) == pytest.approx((k + k * n + 2 * n) / 1e12)
    assert roof.gemm_fp8_parts(m, n, k) == (roof.gemm_fp8_s(m, n, k), 0.0)
    with pytest.raises(ValueError, match="FP8"):
        RooflinePredictor(catalog.get_gpu("a100-sxm-80gb")).gemm_fp8_s(1, 1, 1)


def test_fp8_kv_decode_reads_half():
    roof = RooflinePredictor(EXACT, LINK)
    batch, ctx, heads, kv, hd = 64, 64 * 4000, 32, 8, 128
    kv_bf16 = 2 * ctx * kv * hd * 2
    q_o = 2 * batch * heads * hd * 2
    assert roof.attention_decode_s(batch, ctx, heads, kv, hd) == pytest.approx((kv_bf16 + q_o) / 1e12)
    assert roof.attention_decode_fp8_s(batch, ctx, heads, kv, hd) == pytest.approx((kv_bf16 / 2 + q_o) / 1e12)


def test_fp8_halves_weights_and_kv():
    model = ModelSpec(name="m", display_name="m", hf_id="m", llm=LLAMA8B, sources={})
    l = LLAMA8B
    embed_head_norms = l.num_params - l.linear_params
    assert embed_head_norms == 2 * 128256 * 4096 + 32 * 2 * 4096 + 4096  # stay bf16
    assert l.weight_bytes_per_gpu(tp=2, dtype="fp8") == (embed_head_norms * 2 + l.linear_params) / 2
    assert l.weight_bytes_per_gpu(tp=2) == l.num_params * 2 / 2
    roof = RooflinePredictor(EXACT, LINK)
    bf16 = ComposedStepCostModel(model, EXACT, 2, roof)
    fp8 = ComposedStepCostModel(model, EXACT, 2, roof, dtype="fp8", kv_cache_dtype="fp8")
    assert fp8.kv_bytes_per_token_per_gpu == bf16.kv_bytes_per_token_per_gpu / 2
    assert fp8.weight_bytes_per_gpu == l.weight_bytes_per_gpu(tp=2, dtype="fp8")
    # a compute-bound prefill runs its linear layers at twice the rate: faster, not twice overall
    t_bf16, t_fp8 = bf16.prefill_s(8192), fp8.prefill_s(8192)
    assert t_bf16 / 2 < t_fp8 < t_bf16
    # memory plan: FP8 weights leave more KV
    gpu = catalog.get_gpu("h100-sxm-80gb")
    batching = SimpleNamespace(token_budget=8192, max_running=256)
    plans = {}
    for dtype in ("bf16", "fp8"):
        dep = SimpleNamespace(gpu_memory_utilization=0.9, block_size=16, activation_reserve_gib=4, max_model_len=8192,
                              dtype=dtype)
        plans[dtype] = plan_llm_memory(dep, batching, model, gpu, tp=1, pp=1, include_encoder=False,
                                       kv_bytes_per_token_tp=bf16.kv_bytes_per_token_per_gpu * 2)
    saved = plans["bf16"].weight_bytes - plans["fp8"].weight_bytes
    assert saved == l.linear_params  # one byte per linear-layer parameter
    assert plans["fp8"].kv_bytes == pytest.approx(plans["bf16"].kv_bytes + saved)


def test_fp8_needs_fp8_tensor_cores():
    dep = SimpleNamespace(dtype="fp8")
    with pytest.raises(UserError, match=r"deployment\.dtype.*a100-sxm-80gb lacks.*h100-sxm-80gb"):
        _check_dtype(dep, catalog.get_gpu("a100-sxm-80gb"))
    _check_dtype(dep, catalog.get_gpu("h100-sxm-80gb"))
    _check_dtype(SimpleNamespace(dtype="bf16"), catalog.get_gpu("a100-sxm-80gb"))

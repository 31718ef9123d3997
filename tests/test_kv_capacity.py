"""KV capacity as vLLM V1 sizes it (lmmsim.placement), against hand computations."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from lmmsim import catalog
from lmmsim.placement import (GIB, NON_TORCH_TP1_BYTES, NON_TORCH_TP_BYTES, SAMPLER_BYTES_PER_LOGIT,
                              activation_reserve_bytes, plan_llm_memory)


def _dep(**kw):
    base = dict(gpu_memory_utilization=0.9, block_size=16, activation_reserve_gib=None, max_model_len=None)
    return SimpleNamespace(**{**base, **kw})


def _batching(token_budget, max_running):
    return SimpleNamespace(token_budget=token_budget, max_running=max_running)


def _plan(model, gpu, tp, dep, batching):
    kv_tp = 2 * model.llm.num_layers * max(1, model.llm.num_kv_heads // tp) * model.llm.dim_head * 2
    return plan_llm_memory(dep, batching, model, gpu, tp=tp, pp=1, kv_bytes_per_token_tp=kv_tp,
                           include_encoder=False)


def test_llama3_8b_h100_by_hand():
    """total x util - weights - max(forward, sampler) peak - non-torch, in whole 16-token blocks."""
    model = catalog.get_model("llama-3-8b")
    gpu = catalog.get_gpu("h100-sxm-80gb")
    plan = _plan(model, gpu, 1, _dep(), _batching(8192, 1024))
    l = model.llm
    weights = l.num_params * 2  # embedding and (untied) LM head included
    assert weights == pytest.approx(8.03e9 * 2, rel=0.001)  # Llama-3-8B: 8.03 B parameters
    forward = 8192 * (2 * 4096 + 2 * 14336 + 14336) * 2
    sampler = 1024 * 128256 * SAMPLER_BYTES_PER_LOGIT + 8192 * 4096 * 2
    assert sampler > forward  # the sampler pass sets the peak (vLLM logs 4.76 GiB)
    kv = 80 * GIB * 0.9 - weights - sampler - NON_TORCH_TP1_BYTES
    per_token = 2 * 32 * 8 * 128 * 2
    assert plan.kv_capacity_tokens == int(kv // (16 * per_token)) * 16
    assert plan.non_torch_bytes == NON_TORCH_TP1_BYTES


def test_llama3_8b_h100_matches_vllm_log():
    """vLLM logged 51.38 GiB of KV cache on a 79.18 GiB H100 (llm-d-benchmark, see lmmsim.placement)."""
    model = catalog.get_model("llama-3-8b")
    gpu = catalog.get_gpu("h100-sxm-80gb").model_copy(update={"memory_gib": 79.18})
    plan = _plan(model, gpu, 1, _dep(), _batching(8192, 1024))
    assert plan.activation_bytes - plan.non_torch_bytes == pytest.approx(4.76 * GIB, rel=0.01)
    assert plan.kv_bytes == pytest.approx(51.38 * GIB, rel=0.002)
    assert plan.kv_capacity_tokens == pytest.approx(51.38 * GIB / (2 * 32 * 8 * 128 * 2), rel=0.002)


def test_tensor_parallel_uses_the_tp_non_torch_figure():
    model = catalog.get_model("llama-2-70b")
    gpu = catalog.get_gpu("a100-sxm-80gb")
    plan = _plan(model, gpu, 2, _dep(), _batching(512, 128))
    assert plan.non_torch_bytes == NON_TORCH_TP_BYTES
    assert plan.weight_bytes == model.llm.num_params  # x 2 bytes / tp 2
    assert plan.activation_bytes == activation_reserve_bytes(model, 2, 512, 128) + NON_TORCH_TP_BYTES


def test_override_replaces_activation_and_non_torch():
    model = catalog.get_model("llama-2-70b")
    gpu = catalog.get_gpu("a100-sxm-80gb")
    plan = _plan(model, gpu, 2, _dep(activation_reserve_gib=2.0), _batching(512, 128))
    assert plan.activation_bytes == 2 * GIB
    assert plan.non_torch_bytes == 0.0
    assert plan.kv_bytes == pytest.approx(80 * GIB * 0.9 - plan.weight_bytes - 2 * GIB)


def test_kv_tokens_shown_in_summary_and_validate(tmp_path):
    from lmmsim.results import run_scenario
    from lmmsim.scenario import load_scenario

    path = tmp_path / "s.yaml"
    path.write_text("""
model: llama-3-8b
hardware: {gpu: h100-sxm-80gb}
workload:
  num_requests: 2
  arrival: {kind: poisson, rate: 1}
  mix: [{name: t, weight: 1, text_tokens: {kind: fixed, value: 100}}]
  output_tokens: {kind: fixed, value: 4}
""")
    scn, base = load_scenario(str(path), [])
    s = run_scenario(scn, base).summary
    pool = s["deployment"]["pools"]["llm"]
    assert pool["kv_capacity_tokens_per_worker"] > 400_000
    assert pool["non_torch_gib_per_gpu"] == pytest.approx(0.13)

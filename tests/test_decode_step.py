"""A decode step folded for a fixed batch (lmmsim.costmodel.decode_step) prices every
context exactly as ``llm_step_s`` does: the same float, whatever the model, its engine
terms, KV dtype, data parallelism or predictor."""

from __future__ import annotations

import pytest

from lmmsim import catalog
from lmmsim.costmodel.composed import ComposedStepCostModel
from lmmsim.costmodel.constant import ConstantStepCost
from lmmsim.costmodel.engine_overheads import EngineCostsConfig, EngineOverheads
from lmmsim.costmodel.fitted import FittedPredictor
from lmmsim.costmodel.roofline import RooflinePredictor
from lmmsim.engine.decode_cohort import decode_step_cost

GPU = "h100-sxm-80gb"
BATCHES = (1, 3, 64, 255)


def _contexts(n: int) -> list[int]:
    return [n, n + 1, 17 * n + 5, 1000 * n + 999, 40_000 * n, 131_072 * n - 1]


def _roofline():
    gpu = catalog.get_gpu(GPU)
    return gpu, RooflinePredictor(gpu, gpu.links["nvlink"])


def _check(cost) -> None:
    for n in BATCHES:
        at = cost.decode_step_at(n)
        for ctx in _contexts(n):
            assert at(ctx) == cost.llm_step_s((), n, ctx, n), (n, ctx)


@pytest.mark.parametrize("model", ["llama-2-70b", "qwen2.5-vl-7b", "qwen3-vl-30b-a3b"])
@pytest.mark.parametrize("tp", [1, 4])
def test_roofline_folded_equals_llm_step_s(model, tp):
    gpu, pred = _roofline()
    _check(ComposedStepCostModel(catalog.get_model(model), gpu, tp, pred))


def test_engine_terms_fp8_kv_and_dp_fall_in_line():
    gpu, pred = _roofline()
    model = catalog.get_model("llama-2-70b")
    ov = EngineOverheads.from_config(EngineCostsConfig(), max_running=256, predictor=pred)
    _check(ComposedStepCostModel(model, gpu, 2, pred, overheads=ov))
    _check(ComposedStepCostModel(model, gpu, 2, pred, kv_cache_dtype="fp8"))
    moe = catalog.get_model("qwen3-vl-30b-a3b")
    _check(ComposedStepCostModel(moe, gpu, 2, pred, ep=4, dp=2))


def test_fitted_predictor_takes_the_general_path():
    gpu = catalog.get_gpu(GPU)
    fitted = FittedPredictor(catalog.find(gpu.fitted_profile), gpu, gpu.links["nvlink"])
    _check(ComposedStepCostModel(catalog.get_model("llama-3-8b"), gpu, 1, fitted))


def test_a_cost_model_without_it_is_wrapped():
    cost = ConstantStepCost(step_s=0.01, per_token_s=1e-5)
    assert not hasattr(cost, "decode_step_at")
    for n in BATCHES:
        at = decode_step_cost(cost, n)
        assert [at(c) for c in _contexts(n)] == [cost.llm_step_s((), n, c, n) for c in _contexts(n)]


def test_roofline_terms_give_attention_decode_s():
    """decode attention from attention_decode_terms, evaluated as kernel_s evaluates, is the roofline's."""
    _, pred = _roofline()
    for n in BATCHES:
        fpk, bpu, kvk, q_out, c_half, c_rate, m_half, m_rate, launch = pred.attention_decode_terms(n, 8, 1, 128)
        for ctx in _contexts(n):
            flops, num_bytes = fpk * ctx, bpu * (kvk * ctx + q_out)
            t_c = (flops + c_half) / c_rate if flops > 0 else 0.0
            t_m = (num_bytes + m_half) / m_rate if num_bytes > 0 else 0.0
            assert (t_c if t_c > t_m else t_m) + launch == pred.attention_decode_s(n, ctx, 8, 1, 128)


def test_regimes_away_from_the_crossing_give_the_same_floats():
    """The folded step evaluates only the larger attention term away from where the compute
    and memory terms cross (decode_step._regime_bounds): every context around the crossing,
    and far on both sides, prices as llm_step_s does."""
    from lmmsim.costmodel.decode_step import _regime_bounds

    gpu, pred = _roofline()
    cost = ComposedStepCostModel(catalog.get_model("internvl3.5-38b"), gpu, 1, pred)
    for n in (1, 8, 64):
        lo, hi = _regime_bounds(*pred.attention_decode_terms(n, cost._heads, cost._kv_heads, cost._head_dim)[:8])
        assert 1 < lo < hi, "this model's terms cross: both regimes are exercised"
        at = cost.decode_step_at(n)
        window = range(max(1, int(lo) - 300), int(hi) + 300)
        for ctx in [*range(1, 50), *window, *range(int(hi) + 300, 2_000_000, 9_973)]:
            assert at(ctx) == cost.llm_step_s((), n, ctx, n), (n, ctx)

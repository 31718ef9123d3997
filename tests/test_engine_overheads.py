"""Engine terms (lmmsim.costmodel.engine_overheads): each off -> kernels only, each on -> its increment."""

from __future__ import annotations

import pytest

from lmmsim import catalog
from lmmsim.costmodel.composed import ComposedStepCostModel
from lmmsim.costmodel.engine_overheads import (EngineCostsConfig, EngineOverheads, attention_includes_kv_write,
                                               capture_sizes)
from lmmsim.costmodel.roofline import RooflinePredictor

SHAPES = [((), 1, 1000, 1), ((), 7, 7000, 7), (((300, 300),), 5, 5000, 6), (((600, 600),), 0, 0, 1),
          (((400, 400),), 0, 0, 0)]


def _cost(tp=2, **cfg):
    gpu = catalog.get_gpu("a100-sxm-80gb")
    pred = RooflinePredictor(gpu, gpu.links["nvlink"])
    ov = EngineOverheads.from_config(EngineCostsConfig(**cfg), max_running=128, predictor=pred)
    return ComposedStepCostModel(catalog.get_model("llama-2-70b"), gpu, tp, pred, overheads=ov)


OFF = dict(cudagraphs=False, collective_launch_us=0, step_cpu_us=0, kv_write=False)


def test_capture_sizes_are_vllm_defaults():
    sizes = capture_sizes(512)
    assert sizes[:5] == (1, 2, 4, 8, 16) and sizes[-3:] == (480, 496, 512)
    assert 248 in sizes and 256 in sizes and 264 not in sizes and 272 in sizes
    assert capture_sizes(256)[-1] == 256 and capture_sizes(100)[-1] == 96


def test_padding_picks_the_next_capture_size():
    ov = EngineOverheads.from_config(EngineCostsConfig(), max_running=256, predictor=None)
    assert ov.max_capture == 512
    assert [ov.padded_tokens(n) for n in (1, 3, 5, 9, 255, 257, 512, 513)] == [1, 4, 8, 16, 256, 272, 512, 513]
    assert not ov.graph_captured(513)
    assert EngineOverheads.from_config(EngineCostsConfig(cudagraph_padding=False), max_running=256).padded_tokens(3) == 3


def test_all_off_equals_kernels_only():
    gpu = catalog.get_gpu("a100-sxm-80gb")
    pred = RooflinePredictor(gpu, gpu.links["nvlink"])
    plain = ComposedStepCostModel(catalog.get_model("llama-2-70b"), gpu, 2, pred)
    off = _cost(**OFF)
    assert not off.overheads.active
    for shape in SHAPES:
        assert off.llm_step_s(*shape) == plain.llm_step_s(*shape)
        assert off.llm_step_parts(*shape) == plain.llm_step_parts(*shape)


def test_collective_launch_on_eager_steps_only():
    base = _cost(**OFF)
    eager = _cost(**{**OFF, "collective_launch_us": 20})  # cudagraphs off: every step eager
    # 80 layers x 2 all-reduces + embedding + logits gather
    assert eager.decode_s(1, 1000) - base.decode_s(1, 1000) == pytest.approx(162 * 20e-6)
    # a prefill-only chunk that samples nothing: no logits gather
    assert eager.llm_step_s(((400, 400),), 0, 0, 0) - base.llm_step_s(((400, 400),), 0, 0, 0) == pytest.approx(161 * 20e-6)
    graphs = _cost(**{**OFF, "cudagraphs": True, "cudagraph_padding": False, "collective_launch_us": 20})
    assert graphs.decode_s(1, 1000) == base.decode_s(1, 1000)  # replayed from a graph: no CPU launches
    big = ((300, 300),), 0, 0, 1  # 300 tokens > 256 (max capture for max_running 128): eager
    assert graphs.llm_step_s(*big) - base.llm_step_s(*big) == pytest.approx(162 * 20e-6)
    tp1 = _cost(tp=1, **{**OFF, "collective_launch_us": 20})
    assert tp1.decode_s(1, 1000) == _cost(tp=1, **OFF).decode_s(1, 1000)


def test_step_cpu_adds_a_constant():
    base = _cost(**OFF)
    cpu = _cost(**{**OFF, "step_cpu_us": 150})
    for shape in SHAPES:
        assert cpu.llm_step_s(*shape) - base.llm_step_s(*shape) == pytest.approx(150e-6)
        c0, m0 = base.llm_step_parts(*shape)
        c1, m1 = cpu.llm_step_parts(*shape)
        assert c1 == c0 and m1 - m0 == pytest.approx(150e-6)


def test_kv_write_is_an_elementwise_kernel_per_layer():
    base = _cost(**OFF)
    kv = _cost(**{**OFF, "kv_write": True})
    pred = base.predictor
    for shape in SHAPES:
        tokens = shape[1] + sum(c[0] for c in shape[0])
        per_layer = pred.elementwise_s(2 * 2 * tokens * 4 * 128 * 2, op="kv_write")  # 8 kv heads / tp 2
        assert kv.llm_step_s(*shape) - base.llm_step_s(*shape) == pytest.approx(80 * per_layer)


def test_kv_write_auto_off_for_imported_fits():
    gpu = catalog.get_gpu("a100-sxm-80gb")
    assert not attention_includes_kv_write(RooflinePredictor(gpu))
    from lmmsim.costmodel.fitted import FittedPredictor

    fit = FittedPredictor(catalog.profiles_dir() / gpu.fitted_profile, gpu, gpu.links["nvlink"])
    assert attention_includes_kv_write(fit)
    assert not EngineOverheads.from_config(EngineCostsConfig(), max_running=128, predictor=fit).kv_write
    assert EngineOverheads.from_config(EngineCostsConfig(), max_running=128, predictor=RooflinePredictor(gpu)).kv_write


def test_padding_charges_dense_layers_at_the_padded_count():
    base = _cost(**OFF)
    pad = _cost(**{**OFF, "cudagraphs": True})  # padding on, no launch cost
    assert pad.decode_s(8, 8000) == base.decode_s(8, 8000)  # 8 is a capture size
    d = pad.decode_s(5, 5000) - base.decode_s(5, 5000)
    assert d == pytest.approx(base._dense_cost(base.predictor, 8) - base._dense_cost(base.predictor, 5))
    assert d > 0


def test_breakdown_sums_to_step_and_names_terms():
    cost = _cost(step_cpu_us=100, kv_write=True, cudagraphs=False)
    for shape in SHAPES:
        parts = cost.llm_step_breakdown(*shape)
        assert sum(parts.values()) == pytest.approx(cost.llm_step_s(*shape), rel=1e-12)
        assert sum(cost.llm_step_parts(*shape)) == pytest.approx(cost.llm_step_s(*shape), rel=1e-12)
        assert parts["step_cpu"] == pytest.approx(100e-6)


def test_deterministic_and_memoised():
    a, b = _cost(step_cpu_us=50), _cost(step_cpu_us=50)
    first = [a.llm_step_s(*s) for s in SHAPES]
    assert first == [b.llm_step_s(*s) for s in SHAPES] == [a.llm_step_s(*s) for s in SHAPES]


def test_scenario_key_validates():
    from lmmsim.errors import UserError
    from lmmsim.scenario import validate_scenario

    raw = {"model": "llama-3-8b", "hardware": {"gpu": "h100-sxm-80gb"},
           "workload": {"num_requests": 1, "arrival": {"kind": "poisson", "rate": 1},
                        "mix": [{"name": "t", "weight": 1, "text_tokens": {"kind": "fixed", "value": 10}}]}}
    assert validate_scenario({**raw, "engine": {"step_cpu_us": 80}}).engine.step_cpu_us == 80
    with pytest.raises(UserError, match="engine.collective_launch_us"):
        validate_scenario({**raw, "engine": {"collective_launch_us": -1}})
    with pytest.raises(UserError, match="engine"):
        validate_scenario({**raw, "engine": {"bogus": 1}})

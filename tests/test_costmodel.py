"""Cost model v0: roofline operators, composed step costs, transfers."""

from __future__ import annotations

import math

import pytest

from lmmsim.catalog import (
    EncoderSpec,
    GpuSpec,
    LinkSpec,
    LlmSpec,
    ModelSpec,
    ProjectorSpec,
    RooflineEfficiency,
)
from lmmsim.costmodel.composed import ComposedStepCostModel
from lmmsim.costmodel.roofline import RooflinePredictor
from lmmsim.costmodel.transfer import transfer_s
from lmmsim.errors import UserError
from lmmsim.workload.request import EncoderWork

NVLINK = LinkSpec(bandwidth_gbs=450, latency_us=2)

H100 = GpuSpec(
    name="h100-test",
    display_name="H100-like",
    peak_bf16_tflops=989,
    hbm_bandwidth_tbs=3.35,
    memory_gib=80,
    num_sms=132,
    links={"nvlink": NVLINK},
    efficiency=RooflineEfficiency(
        compute_max=0.8, compute_half_flops=8e9, memory_max=0.9, memory_half_bytes=4e6, kernel_launch_us=3
    ),
    sources={},
)

LLAMA2_7B = LlmSpec(
    hidden_size=4096,
    num_layers=32,
    num_heads=32,
    num_kv_heads=32,
    intermediate_size=11008,
    vocab_size=32000,
    max_context=4096,
)

SIGLIP = EncoderSpec(
    family="siglip",
    hidden_size=1152,
    num_layers=27,
    num_heads=16,
    intermediate_size=4304,
    patch_size=14,
    projector=ProjectorSpec(input_dim=1152, hidden_dim=4096, output_dim=4096),
)

QWEN_VIT = EncoderSpec(
    family="qwen_vit",
    hidden_size=1280,
    num_layers=32,
    num_heads=16,
    intermediate_size=3420,
    gated_mlp=True,
    patch_size=14,
    window_tokens=64,
    full_attention_layers=(7, 15, 23, 31),
    projector=ProjectorSpec(input_dim=5120, hidden_dim=5120, output_dim=4096, tokens_merged=4),
)


def make_model(encoder=SIGLIP, llm=LLAMA2_7B) -> ModelSpec:
    return ModelSpec(name="test-model", display_name="Test", hf_id="test/model", llm=llm, encoder=encoder, sources={})


def make_cost(tp=1, encoder=SIGLIP, llm=LLAMA2_7B) -> ComposedStepCostModel:
    return ComposedStepCostModel(make_model(encoder, llm), H100, tp, RooflinePredictor(H100, NVLINK))


@pytest.fixture
def pred() -> RooflinePredictor:
    return RooflinePredictor(H100, NVLINK)


# ------------------------------------------------------------------ operators
def test_gemm_monotonic_in_every_dimension(pred):
    for dims in ((1, 4096, 4096), (64, 4096, 4096), (4096, 256, 4096), (4096, 4096, 128)):
        m, n, k = dims
        assert pred.gemm_s(m, n, k) < pred.gemm_s(2 * m, n, k)
        assert pred.gemm_s(m, n, k) < pred.gemm_s(m, 2 * n, k)
        assert pred.gemm_s(m, n, k) < pred.gemm_s(m, n, 2 * k)
    assert pred.gemm_s(0, 4096, 4096) == 0.0


def test_large_gemm_approaches_compute_max(pred):
    n = 16384
    achieved = 2 * n**3 / pred.gemm_s(n, n, n)
    best = H100.efficiency.compute_max * H100.peak_flops
    assert 0.97 * best < achieved < best


def test_tiny_gemm_is_launch_and_efficiency_bound(pred):
    eff = H100.efficiency
    # A 1x1x1 product costs the launch plus the efficiency penalty, nothing else.
    floor = eff.kernel_launch_us * 1e-6 + eff.compute_half_flops / (eff.compute_max * H100.peak_flops)
    assert pred.gemm_s(1, 1, 1) == pytest.approx(floor, rel=1e-3)
    # A batch-1 projection reaches a tiny fraction of peak.
    assert 2 * 4096 * 4096 / pred.gemm_s(1, 4096, 4096) < 0.01 * H100.peak_flops


def test_per_token_cost_decode_vs_prefill():
    cost = make_cost()
    per_token_decode = cost.decode_s(1, 512)
    per_token_prefill = cost.prefill_s(2048) / 2048
    assert per_token_decode > 50 * per_token_prefill


def test_attention_prefill_flops_and_causality(pred):
    big = dict(num_heads=32, num_kv_heads=32, head_dim=128)
    # Causal fresh prefill does about half the work of the unmasked square.
    causal = pred.attention_prefill_s(8192, 8192, causal=True, **big)
    full = pred.attention_prefill_s(8192, 8192, causal=False, **big)
    assert 0.45 < causal / full < 0.55
    # More context or more new tokens costs more.
    assert pred.attention_prefill_s(512, 4096, **big) > pred.attention_prefill_s(512, 1024, **big)
    assert pred.attention_prefill_s(1024, 4096, **big) > pred.attention_prefill_s(512, 4096, **big)
    with pytest.raises(ValueError):
        pred.attention_prefill_s(100, 50, **big)


def test_decode_attention_scales_with_context_sum(pred):
    shape = dict(num_heads=32, num_kv_heads=8, head_dim=128)
    small = pred.attention_decode_s(64, 64 * 4096, **shape)
    large = pred.attention_decode_s(64, 2 * 64 * 4096, **shape)
    assert 1.9 < large / small < 2.0  # memory-bound, nearly linear
    cost = make_cost()
    assert cost.decode_s(32, 4000) > cost.decode_s(32, 1000)


def test_elementwise_bytes_only(pred):
    assert pred.elementwise_s(0) == 0.0
    assert pred.elementwise_s(1e9) < pred.elementwise_s(2e9)
    eff = H100.efficiency
    expected = (1e9 + eff.memory_half_bytes) / (eff.memory_max * H100.hbm_bytes_per_s) + eff.kernel_launch_us * 1e-6
    assert pred.elementwise_s(1e9) == pytest.approx(expected)


def test_allreduce_and_p2p(pred):
    assert pred.allreduce_s(64e6, 1) == 0.0
    ring2 = 2 * 1 / 2 * 64e6 / 450e9 + 2 * 1 * 2e-6
    assert pred.allreduce_s(64e6, 2) == pytest.approx(ring2)
    assert pred.allreduce_s(64e6, 8) > pred.allreduce_s(64e6, 2) > 0
    assert pred.p2p_s(1e6) == transfer_s(1e6, NVLINK)
    with pytest.raises(ValueError):
        RooflinePredictor(H100, None).allreduce_s(1e6, 2)


def test_transfer_exact():
    link = LinkSpec(bandwidth_gbs=25, latency_us=10)
    assert transfer_s(5e9, link) == 10e-6 + 5e9 / 25e9
    assert transfer_s(0, link) == 10e-6


# --------------------------------------------------------------- LLM steps
def test_step_monotonic_in_tokens():
    cost = make_cost()
    times = [cost.prefill_s(n) for n in (1, 16, 128, 1024, 4096)]
    assert times == sorted(times) and len(set(times)) == len(times)
    assert cost.decode_s(8, 1000) < cost.decode_s(64, 1000)
    assert cost.llm_step_s((), 0, 0, 0) == 0.0


def test_mixed_step_composes():
    cost = make_cost()
    mixed = cost.llm_step_s(((512, 1536),), 32, 32 * 800, 33)
    assert mixed > cost.llm_step_s(((512, 1536),), 0, 0, 1)
    assert mixed > cost.decode_s(32, 800)
    # A chunk deep into a long prompt costs more than the same chunk at its start.
    assert cost.llm_step_s(((512, 4096),), 0, 0, 0) > cost.llm_step_s(((512, 512),), 0, 0, 0)


def test_tp2_faster_but_not_twice():
    t1 = make_cost(tp=1).prefill_s(4096)
    t2 = make_cost(tp=2).prefill_s(4096)
    assert 1.0 < t1 / t2 < 2.0


def test_memory_per_gpu_halves_with_tp2():
    c1, c2 = make_cost(tp=1), make_cost(tp=2)
    assert c2.weight_bytes_per_gpu == c1.weight_bytes_per_gpu / 2
    assert c2.kv_bytes_per_token_per_gpu == c1.kv_bytes_per_token_per_gpu / 2
    assert c1.kv_bytes_per_token_per_gpu == LLAMA2_7B.kv_bytes_per_token
    assert c1.weight_bytes_per_gpu == (LLAMA2_7B.num_params + SIGLIP.num_params) * 2


def test_kv_heads_replicated_when_fewer_than_tp():
    gqa = LLAMA2_7B.model_copy(update={"num_kv_heads": 4})
    c8 = make_cost(tp=8, llm=gqa)
    one_head = 2 * gqa.num_layers * 1 * gqa.dim_head * 2
    assert c8.kv_bytes_per_token_per_gpu == one_head
    assert make_cost(tp=2, llm=gqa).kv_bytes_per_token_per_gpu == 2 * one_head


def test_heads_must_split_over_tp():
    with pytest.raises(UserError):
        make_cost(tp=3)


def test_memo_returns_identical_floats():
    cost = make_cost(tp=2)
    args = (((300, 300), (128, 2048)), 17, 17 * 1234, 18)
    first = cost.llm_step_s(*args)
    assert cost.llm_step_s(*args) == first
    assert cost.llm_step_s([[300, 300], [128, 2048]], 17, 17 * 1234, 18) == first  # lists work too
    fresh = make_cost(tp=2)
    assert fresh.llm_step_s(*args) == first  # a miss computes exactly what a hit returns
    works = [EncoderWork(1, 729), EncoderWork(2, 729)]
    e = cost.encode_s(works)
    assert cost.encode_s(list(reversed(works))) == e
    assert cost.encode_s([EncoderWork(3, 729)]) == e  # grouping of units into items is irrelevant


def test_memo_bound_does_not_change_results():
    cost = make_cost()
    cost.MEMO_LIMIT = 4
    values = [cost.prefill_s(n) for n in range(1, 20)]
    assert [cost.prefill_s(n) for n in range(1, 20)] == values
    assert len(cost._dense_memo) <= 4


# ----------------------------------------------------------------- encoder
def test_window_attention_cheaper_on_large_image():
    windowed = make_cost(encoder=QWEN_VIT)
    full = make_cost(encoder=QWEN_VIT.model_copy(update={"window_tokens": None}))
    big = [EncoderWork(1, 74 * 74)]  # ~1036x1036 image in 14-px patches
    assert windowed.encode_s(big) < 0.9 * full.encode_s(big)


def test_encode_batching_is_efficient():
    cost = make_cost()
    one = cost.encode_s([EncoderWork(1, 729)])
    four = cost.encode_s([EncoderWork(1, 729)] * 4)
    assert one < four < 4 * one


def test_encode_monotonic_and_empty():
    cost = make_cost(encoder=QWEN_VIT)
    sizes = [cost.encode_s([EncoderWork(1, n)]) for n in (64, 256, 1024, 4096)]
    assert sizes == sorted(sizes)
    assert cost.encode_s([]) == 0.0
    assert cost.encode_s([EncoderWork(2, 1024)]) > cost.encode_s([EncoderWork(1, 1024)])


def test_encoder_tp_and_no_encoder():
    big = [EncoderWork(4, 1024)]
    assert make_cost(tp=2).encode_s(big) < make_cost(tp=1).encode_s(big)
    text_only = make_cost(encoder=None)
    assert text_only.weight_bytes_per_gpu == LLAMA2_7B.num_params * 2
    with pytest.raises(UserError):
        text_only.encode_s([EncoderWork(1, 16)])


def test_whisper_and_odd_heads_encoder():
    whisper = EncoderSpec(
        family="whisper",
        hidden_size=1280,
        num_layers=32,
        num_heads=20,
        intermediate_size=5120,
        patch_size=2,
        projector=ProjectorSpec(input_dim=10240, hidden_dim=4096, output_dim=4096, tokens_merged=8),
    )
    t = make_cost(encoder=whisper).encode_s([EncoderWork(1, 1500)])
    assert math.isfinite(t) and t > 0
    intern = EncoderSpec(
        family="intern_vit",
        hidden_size=3200,
        num_layers=45,
        num_heads=25,  # does not divide by tp=2: padded like vLLM does
        intermediate_size=12800,
        patch_size=14,
        projector=ProjectorSpec(input_dim=12800, hidden_dim=4096, output_dim=4096, num_layers=3, tokens_merged=4),
    )
    assert make_cost(tp=2, encoder=intern).encode_s([EncoderWork(1, 1024)]) > 0


# ------------------------------------------------- compute / memory split
def test_operator_parts_sum_exactly_to_totals(pred):
    for m, n, k in ((0, 4096, 4096), (1, 1, 1), (1, 4096, 4096), (64, 4096, 4096), (4096, 11008, 4096)):
        c, mem = pred.gemm_parts(m, n, k)
        assert c + mem == pred.gemm_s(m, n, k) and (c == 0.0 or mem == 0.0)
    for new, ctx, causal in ((0, 0, True), (1, 1, True), (100, 5000, True), (4096, 4096, True), (729, 729, False)):
        c, mem = pred.attention_prefill_parts(new, ctx, 32, 8, 128, causal)
        assert c + mem == pred.attention_prefill_s(new, ctx, 32, 8, 128, causal)
    for batch, ctx_sum in ((0, 0), (1, 10), (64, 64 * 4000), (256, 256 * 100)):
        c, mem = pred.attention_decode_parts(batch, ctx_sum, 32, 8, 128)
        assert c + mem == pred.attention_decode_s(batch, ctx_sum, 32, 8, 128)
    for flops, nbytes in ((0, 0), (1e12, 1e6), (1e6, 1e9)):
        c, mem = pred.kernel_parts(flops, nbytes)
        assert c + mem == pred.kernel_s(flops, nbytes) and (c == 0.0 or mem == 0.0)
    # Bandwidth-only operators are all memory-bound (links count as memory).
    assert pred.elementwise_parts(1e9) == (0.0, pred.elementwise_s(1e9))
    assert pred.allreduce_parts(64e6, 4) == (0.0, pred.allreduce_s(64e6, 4))
    assert pred.p2p_parts(1e6) == (0.0, pred.p2p_s(1e6))
    with pytest.raises(ValueError):
        pred.attention_prefill_parts(100, 50, 32, 8, 128)


def test_operator_parts_follow_the_binding_term(pred):
    assert pred.gemm_parts(8192, 8192, 8192)[1] == 0.0  # big square GEMM: compute-bound
    assert pred.gemm_parts(16, 11008, 4096)[0] == 0.0  # decode-size GEMM: weight reads
    assert pred.attention_decode_parts(64, 64 * 4096, 32, 8, 128)[0] == 0.0


STEP_CASES = [
    (((512, 1536),), 32, 32 * 800, 33),  # mixed
    ((), 64, 64 * 1500, 64),  # decode-only
    (((4096, 4096),), 0, 0, 1),  # one fresh prefill
    (((300, 300), (128, 2048)), 17, 17 * 1234, 18),
    (((7, 7),), 0, 0, 0),  # a chunk that samples nothing
    ((), 0, 0, 0),
]


@pytest.mark.parametrize("tp", [1, 2])
def test_llm_step_parts_sum_to_step_time(tp):
    cost = make_cost(tp=tp)
    for args in STEP_CASES:
        c, m = cost.llm_step_parts(*args)
        assert c >= 0 and m >= 0
        assert c + m == pytest.approx(cost.llm_step_s(*args), rel=1e-12, abs=0)
    assert cost.llm_step_parts((), 0, 0, 0) == (0.0, 0.0)


def test_decode_memory_bound_prefill_compute_bound():
    cost = make_cost()
    c, m = cost.llm_step_parts((), 64, 64 * 1500, 64)
    assert m > 0.9 * (c + m)
    c, m = cost.llm_step_parts(((4096, 4096),), 0, 0, 1)
    assert c > 0.85 * (c + m)
    _, m1 = cost.llm_step_parts(((512, 1536),), 0, 0, 1)
    _, m2 = cost.llm_step_parts(((512, 1536),), 32, 32 * 800, 33)
    assert m2 > m1  # adding decodes adds memory-bound time (KV reads)


@pytest.mark.parametrize("encoder", [SIGLIP, QWEN_VIT])
def test_encode_parts_sum_to_encode_time(encoder):
    for tp in (1, 2):
        cost = make_cost(tp=tp, encoder=encoder)
        for works in ([EncoderWork(1, 729)], [EncoderWork(3, 1024), EncoderWork(1, 130)], [EncoderWork(1, 74 * 74)]):
            c, m = cost.encode_parts(works)
            assert c > 0 and m > 0
            assert c + m == pytest.approx(cost.encode_s(works), rel=1e-12, abs=0)
        assert cost.encode_parts([]) == (0.0, 0.0)
        assert cost.encode_parts([EncoderWork(0, 729)]) == (0.0, 0.0)
    # A batch of images through a ViT is mostly compute-bound.
    c, m = make_cost(encoder=encoder).encode_parts([EncoderWork(8, 1024)])
    assert c > m
    with pytest.raises(UserError):
        make_cost(encoder=None).encode_parts([EncoderWork(1, 16)])


def test_parts_memoised_and_do_not_disturb_totals():
    cost = make_cost(tp=2)
    args = (((300, 300), (128, 2048)), 17, 17 * 1234, 18)
    total = make_cost(tp=2).llm_step_s(*args)
    first = cost.llm_step_parts(*args)
    assert cost.llm_step_parts(*args) == first
    assert cost.llm_step_parts([[300, 300], [128, 2048]], 17, 17 * 1234, 18) == first
    assert make_cost(tp=2).llm_step_parts(*args) == first
    assert cost.llm_step_s(*args) == total  # parts have their own memos
    works = [EncoderWork(1, 729), EncoderWork(2, 729)]
    e = cost.encode_parts(works)
    assert cost.encode_parts(list(reversed(works))) == e == cost.encode_parts([EncoderWork(3, 729)])
    cost.MEMO_LIMIT = 4
    values = [cost.llm_step_parts(((n, n),), 0, 0, 1) for n in range(1, 20)]
    assert [cost.llm_step_parts(((n, n),), 0, 0, 1) for n in range(1, 20)] == values
    assert len(cost._dense_parts_memo) <= 4 and len(cost._prefill_parts_memo) <= 4


class _FittedLike:
    """A predictor with only the ``*_s`` methods (as a fitted one would be): 1.25x the roofline."""

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name):
        if not name.endswith("_s"):
            raise AttributeError(name)
        f = getattr(self._inner, name)
        return lambda *a, **kw: 1.25 * f(*a, **kw)


def test_parts_of_a_predictor_without_parts_methods():
    roof = RooflinePredictor(H100, NVLINK)
    fitted = ComposedStepCostModel(make_model(), H100, 2, _FittedLike(roof))
    ref = ComposedStepCostModel(make_model(), H100, 2, roof)
    for args in STEP_CASES[:4]:
        c, m = fitted.llm_step_parts(*args)
        assert c + m == pytest.approx(fitted.llm_step_s(*args), rel=1e-12)
        rc, rm = ref.llm_step_parts(*args)
        # Same kernels in the same buckets, each 1.25x as long.
        assert c == pytest.approx(1.25 * rc, rel=1e-12) and m == pytest.approx(1.25 * rm, rel=1e-12)
    c, m = fitted.encode_parts([EncoderWork(2, 729)])
    assert c + m == pytest.approx(fitted.encode_s([EncoderWork(2, 729)]), rel=1e-12)


# ------------------------------------------------------- elementwise kernels
def test_roofline_ignores_the_elementwise_op(pred):
    from lmmsim.costmodel.opdata import ELEMENTWISE_OPS

    for nbytes in (0, 1, 1e6, 3.7e9):
        base = pred.elementwise_s(nbytes)
        for op in (*ELEMENTWISE_OPS, None, "rmsnorm", "not_a_kernel"):
            assert pred.elementwise_s(nbytes, op=op) == base
            assert pred.elementwise_s(nbytes, op) == base
            assert pred.elementwise_parts(nbytes, op=op) == (0.0, base)


class _RecordingPredictor:
    """The roofline, recording the ``op`` of every elementwise call."""

    def __init__(self, inner):
        self._inner = inner
        self.ops = []

    def elementwise_s(self, num_bytes, op=None):
        self.ops.append(op)
        return self._inner.elementwise_s(num_bytes, op=op)

    def elementwise_parts(self, num_bytes, op=None):
        self.ops.append(op)
        return self._inner.elementwise_parts(num_bytes, op=op)

    def __getattr__(self, name):
        return getattr(self._inner, name)


@pytest.mark.parametrize("encoder,expected", [
    (SIGLIP, {"norm", "add", "act"}),
    (QWEN_VIT, {"norm", "add", "act_gated", "act", "rotary"}),  # gated layers, GELU projector
])
def test_composition_names_a_canonical_op_for_every_elementwise_call(encoder, expected):
    from lmmsim.costmodel.opdata import ELEMENTWISE_OPS

    for tp in (1, 2):
        rec = _RecordingPredictor(RooflinePredictor(H100, NVLINK))
        cost = ComposedStepCostModel(make_model(encoder), H100, tp, rec)
        cost.llm_step_s(((512, 1536),), 32, 32 * 800, 33)
        cost.llm_step_parts(((512, 1536),), 32, 32 * 800, 33)
        assert set(rec.ops) == {"rotary", "add_norm", "act_gated", "embedding", "softmax"}
        rec.ops.clear()
        cost.encode_s([EncoderWork(2, 729)])
        cost.encode_parts([EncoderWork(2, 729)])
        assert set(rec.ops) == expected
        assert set(rec.ops) <= set(ELEMENTWISE_OPS)

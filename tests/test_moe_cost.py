"""MoE layers, expert and data parallelism in the cost model and the memory plan, by hand."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from lmmsim import catalog
from lmmsim.build import _check_expert_parallel
from lmmsim.catalog import (
    EncoderSpec,
    GpuSpec,
    LinkSpec,
    LlmSpec,
    ModelSpec,
    MoeSpec,
    ProjectorSpec,
    RooflineEfficiency,
)
from lmmsim.costmodel.composed import ComposedStepCostModel
from lmmsim.costmodel.moe import busiest_rank, expert_loads
from lmmsim.costmodel.roofline import RooflinePredictor, moe_expert_kernels
from lmmsim.errors import UserError
from lmmsim.placement import plan_llm_memory
from lmmsim.workload.request import EncoderWork

LINK = LinkSpec(bandwidth_gbs=100, latency_us=2)
# An exact roofline: time = max(FLOPs / peak, bytes / bandwidth), no size penalty, no launch.
EXACT = GpuSpec(name="exact", display_name="exact", peak_bf16_tflops=100, peak_fp8_tflops=200, hbm_bandwidth_tbs=1,
                memory_gib=80, num_sms=100, links={"nvlink": LINK}, sources={},
                efficiency=RooflineEfficiency(compute_max=1, compute_half_flops=0, memory_max=1,
                                              memory_half_bytes=0, kernel_launch_us=0))
TINY_MOE = LlmSpec(hidden_size=64, num_layers=5, num_heads=4, num_kv_heads=2, intermediate_size=96, vocab_size=100,
                   max_context=4096, moe=MoeSpec(num_experts=4, experts_per_token=2, expert_intermediate_size=32,
                                                 shared_expert_intermediate_size=16, first_dense_layers=1,
                                                 layer_step=2))
# Qwen3-235B-A22B-shaped (config.json: 94 layers, 128 experts of 1536, top-8, 64 / 4 heads of 128).
QWEN3_MOE = LlmSpec(hidden_size=4096, num_layers=94, num_heads=64, num_kv_heads=4, head_dim=128,
                    intermediate_size=12288, vocab_size=151936, max_context=40960, qk_norm=True,
                    moe=MoeSpec(num_experts=128, experts_per_token=8, expert_intermediate_size=1536))


def _model(llm, encoder=None):
    return ModelSpec(name="m", display_name="m", hf_id="m", llm=llm, encoder=encoder, sources={})


def test_layer_plan_and_params_by_hand():
    # layers 0 (first dense), then every 2nd after it is MoE: layers 2 and 4
    assert TINY_MOE.num_moe_layers == 2
    h, hd = 64, 16
    attn = h * (4 + 2 * 2) * hd + 4 * hd * h
    dense_mlp = 3 * h * 96
    moe_mlp = h * 4 + 4 * 3 * h * 32 + 3 * h * 16  # router, 4 experts, shared expert
    norms = 5 * 2 * h + h
    embed_head = 2 * 100 * h
    assert TINY_MOE.num_params == 5 * attn + 3 * dense_mlp + 2 * moe_mlp + norms + embed_head
    assert TINY_MOE.expert_params == 2 * 4 * 3 * h * 32
    assert TINY_MOE.active_params == TINY_MOE.num_params - 2 * 2 * 3 * h * 32  # 2 of 4 experts unused
    assert TINY_MOE.linear_params == 5 * attn + 3 * dense_mlp + 2 * (4 * 3 * h * 32 + 3 * h * 16)
    # the published sizes of Qwen3-235B-A22B: 235 B total, 22 B active
    assert QWEN3_MOE.num_params / 1e9 == pytest.approx(235, rel=0.01)
    assert QWEN3_MOE.active_params / 1e9 == pytest.approx(22, rel=0.02)


def test_expert_loads_and_busiest_rank():
    for routing in ("balanced", "power_law_1.01", "power_law_1.2"):
        for tokens in (1, 7, 64, 3000):
            loads = expert_loads(tokens, 128, 8, routing)
            assert sum(loads) == pytest.approx(tokens * 8)
            assert max(loads) <= tokens + 1e-9  # a token picks distinct experts
            assert list(loads) == sorted(loads, reverse=True)
            pairs, touched = busiest_rank(tokens, 128, 8, 8, routing)
            assert tokens * 8 / 8 - 1e-9 <= pairs <= sum(loads[:16]) + 1e-9
            assert touched <= 16 + 1e-9
            assert busiest_rank(tokens, 128, 8, 1, routing)[0] == tokens * 8  # one rank holds all
    assert busiest_rank(512, 128, 8, 8, "balanced")[0] == 512  # even spread: 4096 / 8
    # skew: the busiest of 8 ranks carries more than its share, more so for the larger exponent
    mild, strong = busiest_rank(4096, 128, 8, 8, "power_law_1.01")[0], busiest_rank(4096, 128, 8, 8, "power_law_1.2")[0]
    assert 4096 < mild < strong
    # one token touches exactly topk experts; a large batch touches every expert
    assert busiest_rank(1, 128, 8, 1, "balanced")[1] == pytest.approx(8)
    assert busiest_rank(4096, 128, 8, 8, "balanced")[1] == pytest.approx(16)


def test_moe_experts_flops_and_bytes_by_hand():
    # 4 tokens, top-2 of 4 experts, balanced: 8 assignments, 2 per expert; an expert is untouched
    # with probability (1 - 2/4)^4, so 4 x (1 - 1/16) = 3.75 experts read their weights
    h, i = 64, 32
    permute, gate_up, act, down, unpermute = moe_expert_kernels(4, h, i, 4, 2, 1, 1, "bf16", "balanced")
    assert gate_up == (2 * 8 * h * 2 * i, 3.75 * h * 2 * i * 2 + 8 * (h * 2 + 2 * i * 2))
    assert act == (0.0, 8 * 3 * i * 2)
    assert down == (2 * 8 * i * h, 3.75 * i * h * 2 + 8 * (i * 2 + h * 2))
    assert gate_up[0] + down[0] == 2 * 3 * 8 * h * i  # 2 x 3 x pairs x hidden x inter
    assert permute == (0.0, 2 * 8 * h * 2)  # read + write each of the 8 routed copies
    assert unpermute == (0.0, (8 + 4) * h * 2)  # read the 8 copies, write the 4 tokens
    # moe_tp 2 splits the width; fp8 halves weight and input bytes and runs at the FP8 peak
    _, g2, _, _, _ = moe_expert_kernels(4, h, i, 4, 2, 2, 1, "fp8", "balanced")
    assert g2 == (2 * 8 * h * 16 * 2, 3.75 * h * 2 * 16 + 8 * (h + 2 * 16 * 2))
    roof = RooflinePredictor(EXACT, LINK)
    expected = (sum(max(f / 100e12, b / 1e12) for f, b in (gate_up, down))
                + (permute[1] + act[1] + unpermute[1]) / 1e12)
    assert roof.moe_experts_s(4, h, i, 4, 2, 1, 1, "bf16", "balanced") == pytest.approx(expected, rel=1e-12)
    assert sum(roof.moe_experts_parts(4, h, i, 4, 2, 1, 1, "bf16", "balanced")) == pytest.approx(expected)


def test_alltoall_volume_by_hand():
    roof = RooflinePredictor(EXACT, LINK)
    # 10 tokens x top-2 x 64 hidden x 2 B, 3 of 4 copies leave the GPU, over 100 GB/s, + 2 us
    assert roof.moe_alltoall_s(10, 64, 2, 4, "dispatch") == pytest.approx(10 * 2 * 64 * 2 * 3 / 4 / 100e9 + 2e-6)
    assert roof.moe_alltoall_s(10, 64, 2, 4, "combine") == roof.moe_alltoall_s(10, 64, 2, 4, "dispatch")
    assert roof.moe_alltoall_s(10, 64, 2, 1) == 0.0


def test_moe_layer_composition_counts():
    """The MoE model's dense cost = attention of every layer + 3 dense MLPs + 2 MoE MLPs: check by
    swapping the MoE layers for dense ones in a copy (same attention, same dense MLP)."""
    roof = RooflinePredictor(EXACT, LINK)
    moe_cost = ComposedStepCostModel(_model(TINY_MOE), EXACT, 2, roof, routing="balanced")
    dense = TINY_MOE.model_copy(update={"moe": None})
    dense_cost = ComposedStepCostModel(_model(dense), EXACT, 2, roof)
    from lmmsim.costmodel.moe import moe_mlp_cost
    t = 64
    x = moe_cost._ext_s
    mlp_dense = (roof.gemm_s(t, 96, 64) + roof.elementwise_s(t * (96 + 48) * 2) + roof.gemm_s(t, 64, 48)
                 + roof.allreduce_s(t * 64 * 2, 2) + roof.elementwise_s(4 * t * 64 * 2))
    got = moe_cost._dense_cost(roof, t) - dense_cost._dense_cost(roof, t)
    assert got == pytest.approx(2 * (moe_mlp_cost(moe_cost, roof, x, t) - mlp_dense), rel=1e-9)
    # the MoE MLP: router, top-k, fused experts (permute .. unpermute), shared expert, all-reduce, add+norm
    by_hand = (roof.gemm_s(t, 4, 64) + roof.elementwise_s(t * 4 * 4 + t * 2 * 8)
               + roof.moe_experts_s(t, 64, 32, 4, 2, 2, 1, "bf16", "balanced")
               + roof.gemm_s(t, 16, 64) + roof.elementwise_s(t * 3 * 8 * 2) + roof.gemm_s(t, 64, 8)
               + roof.allreduce_s(t * 128, 2) + roof.elementwise_s(4 * t * 128))
    assert moe_mlp_cost(moe_cost, roof, x, t) == pytest.approx(by_hand, rel=1e-12)


def test_moe_steps_memoised_by_tokens():
    roof = RooflinePredictor(EXACT, LINK)
    cost = ComposedStepCostModel(_model(TINY_MOE), EXACT, 2, roof, ep=2)
    first = cost.llm_step_s(((100, 100),), 4, 400, 5)
    assert 104 in cost._dense_memo
    calls = []
    cost._ext_s.moe_experts_s = lambda *a: calls.append(a) or 0.0
    assert cost.llm_step_s(((100, 100),), 4, 400, 5) == first and not calls


def test_dp_ranks_split_the_batch_and_spread_kv():
    roof = RooflinePredictor(EXACT, LINK)
    tp8 = ComposedStepCostModel(_model(QWEN3_MOE), EXACT, 8, roof, ep=8)
    dp8 = ComposedStepCostModel(_model(QWEN3_MOE), EXACT, 1, roof, ep=8, dp=8)
    assert dp8.moe_tp == 1 and tp8.moe_tp == 1
    # a rank holds all KV heads over its tp = 1 GPU: 4 x the tp-8 GPU's one (replicated) head
    assert dp8.kv_bytes_per_token_per_gpu == 2 * 94 * 4 * 128 * 2
    # one 4096-token prefill runs whole on one rank: no cheaper than 8 chunks of 512 spread over 8
    one = dp8.llm_step_s(((4096, 4096),), 0, 0, 1)
    spread = dp8.llm_step_s(((512, 512),) * 8, 0, 0, 8)
    assert one > spread
    assert sum(dp8.llm_step_parts(((512, 512),) * 8, 0, 0, 8)) == pytest.approx(spread, rel=1e-9)
    # DP adds dispatch + combine all-to-alls, not the all-reduce over 8 GPUs
    assert dp8.llm_step_s((), 64, 64 * 1000, 64) != tp8.llm_step_s((), 64, 64 * 1000, 64)


def test_dp_busiest_rank_runs_router_and_alltoall_on_its_tokens():
    """A 4096-token chunk runs whole on one of 8 DP ranks: that rank's router, top-k, all-to-alls
    and add + norm see 4096 tokens (not the even share 512); the experts see all 4096 routed."""
    from lmmsim.costmodel.moe import moe_mlp_cost
    roof = RooflinePredictor(EXACT, LINK)
    dp8 = ComposedStepCostModel(_model(QWEN3_MOE), EXACT, 1, roof, ep=8, dp=8, routing="balanced",
                                all2all="deepep_high_throughput")
    x, h = dp8._ext_s, 4096

    def by_hand(r, exchange=None):
        if exchange is None:  # DeepEP: dispatch and combine of the rank's own tokens
            exchange = roof.moe_alltoall_s(r, h, 8, 8, "dispatch") + roof.moe_alltoall_s(r, h, 8, 8, "combine")
        return (roof.gemm_s(r, 128, h) + roof.elementwise_s(r * 128 * 4 + r * 8 * 8)
                + roof.moe_experts_s(4096, h, 1536, 128, 8, 1, 8, "bf16", "balanced")
                + exchange + roof.allreduce_s(r * h * 2, 1) + roof.elementwise_s(4 * r * h * 2))

    assert moe_mlp_cost(dp8, roof, x, 4096) == pytest.approx(by_hand(512), rel=1e-12)
    assert moe_mlp_cost(dp8, roof, x, 4096, 4096) == pytest.approx(by_hand(4096), rel=1e-12)
    assert by_hand(4096) > by_hand(512)
    # vLLM's default backend: all 4096 tokens' hidden states gathered to the 8 GPUs and the outputs
    # reduce-scattered back, the traffic of one all-reduce of the gathered batch
    ag = ComposedStepCostModel(_model(QWEN3_MOE), EXACT, 1, roof, ep=8, dp=8, routing="balanced")
    assert ag.all2all == "allgather_reducescatter"
    assert moe_mlp_cost(ag, roof, ag._ext_s, 4096) == pytest.approx(
        by_hand(512, roof.allreduce_s(4096 * h * 2, 8)), rel=1e-12)
    # DP without EP (vLLM: experts TP-split over all dp x tp GPUs): no all-to-all; the partial
    # sums are reduced over the 8 GPUs once per token (top-k summed first), not once per copy
    dp8_tp = ComposedStepCostModel(_model(QWEN3_MOE), EXACT, 1, roof, ep=1, dp=8, routing="balanced")
    assert dp8_tp.moe_tp == 8
    r = 64
    want = (roof.gemm_s(r, 128, h) + roof.elementwise_s(r * 128 * 4 + r * 8 * 8)
            + roof.moe_experts_s(512, h, 1536, 128, 8, 8, 1, "bf16", "balanced")
            + roof.allreduce_s(512 * h * 2, 8) + roof.allreduce_s(r * h * 2, 1) + roof.elementwise_s(4 * r * h * 2))
    assert moe_mlp_cost(dp8_tp, roof, dp8_tp._ext_s, 512) == pytest.approx(want, rel=1e-12)


def test_memory_plan_moe_with_and_without_ep():
    gpu = catalog.get_gpu("h200")
    model = _model(QWEN3_MOE)
    dep = SimpleNamespace(gpu_memory_utilization=0.9, block_size=16, activation_reserve_gib=4, max_model_len=32768,
                          dtype="bf16")
    batching = SimpleNamespace(token_budget=8192, max_running=256)

    def plan(tp, dp, ep):
        cost = ComposedStepCostModel(model, gpu, tp, RooflinePredictor(gpu, LINK), ep=ep, dp=dp)
        return plan_llm_memory(dep, batching, model, gpu, tp=tp, pp=1, dp=dp, ep=ep, include_encoder=False,
                               kv_bytes_per_token_tp=cost.kv_bytes_per_token_per_gpu)

    tp8, tp8_ep8, dp8_ep8 = plan(8, 1, 1), plan(8, 1, 8), plan(1, 8, 8)
    # TP-split experts or EP: each GPU holds 1/8 of every weight either way, and a whole router
    router = QWEN3_MOE.router_params * 2
    assert tp8.weight_bytes == tp8_ep8.weight_bytes == (QWEN3_MOE.num_params * 2 - router) / 8 + router
    non_expert = QWEN3_MOE.num_params - QWEN3_MOE.expert_params - QWEN3_MOE.router_params
    assert dp8_ep8.weight_bytes == (non_expert * 2 + QWEN3_MOE.router_params * 2 + QWEN3_MOE.expert_params * 2 / 8)
    # KV: dp ranks each keep their own requests' KV, the worker's capacity is 8 GPUs' worth
    per_gpu = int(dp8_ep8.kv_bytes // (16 * dp8_ep8.kv_bytes_per_token))
    assert dp8_ep8.num_blocks == 8 * per_gpu


def test_moe_activation_reserve_by_hand():
    """Peak activation of a MoE layer: hidden + residual and vLLM's fused-MoE workspaces
    (M x topk x (max(2 I, hidden) + I), bf16), M the tokens entering the layer, at most one
    fused-MoE chunk (VLLM_FUSED_MOE_CHUNK_SIZE 32768); the sampler is smaller here."""
    from lmmsim.placement import FUSED_MOE_CHUNK_TOKENS, activation_reserve_bytes
    model, h, i = _model(QWEN3_MOE), 4096, 1536

    def workspace(m, inter):
        return m * 8 * (max(2 * inter, h) + inter) * 2

    hidden = 2 * 8192 * h * 2
    assert activation_reserve_bytes(model, 8, 8192, 16) == hidden + workspace(8192, i // 8)  # TP-split experts
    assert activation_reserve_bytes(model, 8, 8192, 16, ep=8) == hidden + workspace(8192, i)  # whole experts
    # DP: all ranks' tokens are gathered before the experts, but vLLM works through them by chunks
    assert FUSED_MOE_CHUNK_TOKENS == 32768
    assert activation_reserve_bytes(model, 1, 8192, 16, dp=8, ep=8) == hidden + workspace(32768, i)
    assert activation_reserve_bytes(model, 1, 2048, 16, dp=8, ep=8) == 2 * 2048 * h * 2 + workspace(8 * 2048, i)


def test_ep_validation():
    moe_pool = SimpleNamespace(tp=4, dp=2, ep=3)
    with pytest.raises(UserError, match=r"deployment\.ep.*valid: \[1, 2, 4, 8\]"):
        _check_expert_parallel("deployment", moe_pool, _model(QWEN3_MOE))
    _check_expert_parallel("deployment", SimpleNamespace(tp=4, dp=2, ep=8), _model(QWEN3_MOE))
    dense = _model(QWEN3_MOE.model_copy(update={"moe": None}))
    with pytest.raises(UserError, match=r"deployment\.ep"):
        _check_expert_parallel("deployment", SimpleNamespace(tp=4, dp=1, ep=2), dense)
    with pytest.raises(UserError, match=r"deployment\.dp"):
        _check_expert_parallel("deployment", SimpleNamespace(tp=4, dp=2, ep=1), dense)


def test_qk_norm_adds_one_elementwise_op_per_layer():
    roof = RooflinePredictor(EXACT, LINK)
    base = QWEN3_MOE.model_copy(update={"moe": None, "qk_norm": False})
    normed = base.model_copy(update={"qk_norm": True})
    a = ComposedStepCostModel(_model(base), EXACT, 8, roof)._dense_cost(roof, 256)
    b = ComposedStepCostModel(_model(normed), EXACT, 8, roof)._dense_cost(roof, 256)
    q, kv = 8 * 128, 1 * 128  # per GPU: 64 / 8 heads, max(1, 4 / 8) KV head
    assert b - a == pytest.approx(94 * roof.elementwise_s(2 * 256 * (q + kv) * 2), rel=1e-9)


ENC = EncoderSpec(family="qwen_vit", hidden_size=1152, num_layers=27, num_heads=16, intermediate_size=4304,
                  patch_size=16, projector=ProjectorSpec(input_dim=4608, hidden_dim=4608, output_dim=4096,
                                                         tokens_merged=4))


def test_encoder_deepstack_and_position_embedding():
    roof = RooflinePredictor(EXACT, LINK)
    llm = QWEN3_MOE.model_copy(update={"moe": None})
    works = [EncoderWork(num_units=1, seq_len=4096)]

    def encode(**kw):
        return ComposedStepCostModel(_model(llm, ENC.model_copy(update=kw)), EXACT, 2, roof).encode_s(works)

    base = encode()
    proj = ComposedStepCostModel(_model(llm, ENC), EXACT, 2, roof)._projector(roof, 4096)
    assert encode(deepstack_mergers=3) == pytest.approx(base + 3 * proj, rel=1e-12)
    assert encode(position_embedding="rotary_2d") == base  # the qwen_vit default, spelled out
    add = roof.elementwise_s(3 * 4096 * 1152 * 2)
    assert encode(position_embedding="learned_and_rotary_2d") == pytest.approx(base + add, rel=1e-12)


def test_dp_ranks_encode_their_own_items():
    """With dp ranks an encoder call's items spread over the ranks: 8 images on 8 ranks cost one
    image's call, not 8 images' on one rank; one rank's worth (dp = 1) is the whole call."""
    roof = RooflinePredictor(EXACT, LINK)
    model = _model(QWEN3_MOE, ENC)
    one, eight = [EncoderWork(num_units=1, seq_len=4096)], [EncoderWork(num_units=1, seq_len=4096)] * 8
    tp1 = ComposedStepCostModel(model, EXACT, 1, roof, ep=1)
    dp8 = ComposedStepCostModel(model, EXACT, 1, roof, ep=8, dp=8)
    assert tp1.encode_call_s(eight) == tp1.encode_s(eight) > tp1.encode_s(one)
    assert dp8.encode_call_s(eight) == pytest.approx(max(tp1.encode_s(eight) / 8, tp1.encode_s(one)), rel=1e-12)
    assert dp8.encode_call_s(one) == tp1.encode_s(one)


# Regression values of the unchanged dense model (computed before MoE / FP8 were added, with
# lmmsim.build.make_predictor("roofline", ...) on the catalog's H100 SXM): dense models must not move.
BEFORE = {
    ("llama-3-8b", 1): {"prefill_2048": 0.044296723230019305, "mixed": 0.015456909526738654,
                        "decode_64": 0.00983191719633971, "parts_mixed": (0.012124979003355569, 0.0033319305233830846)},
    ("qwen2.5-vl-7b", 2): {"prefill_2048": 0.0243802634200209, "mixed": 0.00894189946819547,
                           "decode_64": 0.004927676837562742, "encode": 0.006591242429483631},
}


@pytest.mark.parametrize("name,tp", sorted(BEFORE))
def test_dense_models_unchanged(name, tp):
    gpu = catalog.get_gpu("h100-sxm-80gb")
    cost = ComposedStepCostModel(catalog.get_model(name), gpu, tp, RooflinePredictor(gpu, gpu.links["nvlink"]))
    want = BEFORE[(name, tp)]
    assert cost.llm_step_s(((2048, 2048),), 0, 0, 1) == want["prefill_2048"]
    assert cost.llm_step_s(((512, 1536),), 32, 32 * 900, 33) == want["mixed"]
    assert cost.llm_step_s((), 64, 64 * 1200, 64) == want["decode_64"]
    if "parts_mixed" in want:
        assert cost.llm_step_parts(((512, 1536),), 32, 32 * 900, 33) == want["parts_mixed"]
    if "encode" in want:
        assert cost.encode_s([EncoderWork(seq_len=1024, num_units=2)]) == want["encode"]


def test_dp_ranks_cap_a_prefill_chunk_at_one_ranks_budget():
    """One engine stands for 8 DP ranks with 8 x the token budget, but a chunk runs on one rank:
    a 30,000-token prompt goes in chunks of at most that rank's 8192, two prompts in one step."""
    from lmmsim.engine.kv_cache import BlockPool
    from lmmsim.engine.scheduler import ContinuousBatchingScheduler, SeqState
    from lmmsim.policies.queueing import FcfsQueue
    from lmmsim.workload.request import Request, build_segments

    sched = ContinuousBatchingScheduler(FcfsQueue(), BlockPool(10_000, 16), 8 * 8192, 64, 10**9,
                                        max_chunk_tokens=8192)
    seqs = [SeqState(Request(i, 0.0, "text", "t", build_segments([30_000]), 4)) for i in range(2)]
    for s in seqs:
        sched.add(s)
    plan = sched.schedule(0.0)
    assert sorted(n for _, n, _ in plan.chunks) == [8192, 8192]
    default = ContinuousBatchingScheduler(FcfsQueue(), BlockPool(10_000, 16), 8 * 8192, 64, 10**9)
    default.add(SeqState(Request(0, 0.0, "text", "t", build_segments([30_000]), 4)))
    assert [n for _, n, _ in default.schedule(0.0).chunks] == [30_000]

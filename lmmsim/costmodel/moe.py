"""Mixture-of-experts layers: the load-imbalance model and a MoE layer's composition.

Parallelism (vLLM's, as :class:`~lmmsim.deployments.LlmPoolConfig` configures it)
---------------------------------------------------------------------------------
A stage of a worker has ``dp x tp`` GPUs. Attention and the dense layers run on each
of the ``dp`` ranks with ``tp``-way tensor parallelism. The routed experts are spread
over all ``dp x tp`` GPUs: ``ep`` groups hold disjoint sets of ``num_experts / ep``
experts, and each expert is tensor-parallel over the ``moe_tp = dp x tp / ep`` GPUs of
its group (aiconfigurator's constraint ``tp x attention_dp = moe_tp x moe_ep``).

* ``dp == 1`` (vLLM's TP + ``--enable-expert-parallel`` without DP): after attention
  every token is on every GPU of the TP group, so there is nothing to dispatch; each
  GPU runs its local experts over all tokens routed to them and the post-MLP
  all-reduce that a dense layer has anyway sums the partial outputs.
* ``dp > 1`` (vLLM's DP attention + EP): one simulated engine stands for the ``dp``
  ranks, with the batch split evenly over them. That is an idealisation: vLLM's DP
  coordinator balances requests over the ranks, and the ranks step in lockstep (a
  rank with no work runs a dummy batch; every rank's MoE waits for the slowest), so a
  step costs what the most loaded rank costs; the even split is the best case of
  that. Each rank's tokens go to the expert ranks by a dispatch all-to-all and come
  back by a combine: by default vLLM's all-gather / reduce-scatter, or DeepEP's dispatch and
  combine all-to-alls (``all2all``, :data:`ALL2ALL_BACKENDS`);
  a rank's tokens are spread over its ``tp`` GPUs for the all-to-alls (each sends a
  disjoint ``1 / tp`` of them).

Load imbalance (``routing``)
----------------------------
Token-to-expert routing is not uniform, and the slowest expert rank decides a MoE
layer's time. The routing names are aiconfigurator's measured distributions: its
collector (``collector/*/collect_moe.py``, ``power_law_logits_v3``; described in
ai-dynamo/aiconfigurator ``docs/POWER_LAW_DISTRIBUTION.md``) benchmarks every MoE
shape with ``balanced`` routing and with per-expert loads drawn from a bounded power
law of exponent 1.01 (matched there to DeepSeek-V3/R1 traffic) and 1.2 (matched to
Qwen3-235B), and times the most loaded EP group. This module's construction, with no
random numbers (same inputs, same loads):

1. ``A = tokens x topk`` token-expert assignments.
2. ``balanced``: every expert gets ``A / E``.
3. ``power_law_<alpha>``: expert ``i`` of ``E`` gets the bounded power law's quantile
   at ``u_i = (i + 1/2) / E`` -- ``x(u) = ((x_max^(1-a) - x_min^(1-a)) u + x_min^(1-a))^(1/(1-a))``,
   the inverse CDF aiconfigurator samples from, with its bounds (``x_min = 1``,
   ``x_max = 0.8 tokens`` when ``A > E``, else ``0.01`` and ``2``) -- scaled so the
   loads sum to ``A``; then no expert takes more than ``tokens`` (a token picks distinct
   experts): the excess is given to the others in proportion to their loads.
   Evenly spaced quantiles are the deterministic stand-in for the collector's E draws.
4. Experts sit on EP ranks independently of their popularity (vLLM places them by id),
   so a rank's load is the sum of ``n = E / ep`` loads drawn without replacement: mean
   ``A / ep``, variance ``n s^2 (E - n) / (E - 1)`` (``s^2`` the loads' variance). The
   busiest rank is taken at the expected maximum of ``ep`` such sums, mean +
   ``z_ep`` standard deviations with ``z_ep = Phi^-1((ep - 0.375) / (ep + 0.25))``
   (Blom's approximation of the largest of ``ep`` normal order statistics), never above
   the ``n`` largest loads together (aiconfigurator's measured worst group). ``ep = 1``:
   all of ``A``.
5. Weight reads: an expert with expected load ``l`` (of ``tokens``) is touched by at
   least one token with probability ``1 - (1 - l / tokens)^tokens``; the busiest rank
   reads the weights of ``1 / ep`` of the expected number touched over all experts. At
   a decode batch of a few tokens that is ``~A / ep`` experts; from a few hundred
   tokens on it is every local expert, and the layer reads all its expert weights.

Composition of one MoE layer's MLP part (per GPU; :func:`moe_mlp_cost`): router GEMM
(``tokens x hidden -> num_experts``, replicated: vLLM's router is a ReplicatedLinear,
in bf16), top-k (a softmax-like pass over the fp32 logits), the fused-experts call
(:meth:`~lmmsim.costmodel.roofline.RooflinePredictor.moe_experts_s`: permute -- a row
gather of the routed copies --, the routed experts, unpermute -- the top-k weighted sum
back to token order -- as vLLM's fused MoE runs them and aiconfigurator times them),
the shared expert (a dense gated MLP of ``shared_expert_intermediate_size``, TP-split
over the rank's ``tp`` GPUs), then the all-reduce (``dp == 1``) or the all-to-alls
(``dp > 1``), and the fused add + norm.
"""

from __future__ import annotations

from functools import lru_cache
from statistics import NormalDist

from lmmsim.catalog import BYTES_PER_PARAM_BF16
from lmmsim.costmodel.opdata import MOE_ROUTINGS

B = BYTES_PER_PARAM_BF16
ROUTINGS = MOE_ROUTINGS  # the measured distributions' names (lmmsim.costmodel.opdata)
# How dp > 1 ranks exchange tokens around the experts, named as vLLM's --all2all-backend:
# ``allgather_reducescatter`` (vLLM's default: all ranks' hidden states gathered to every GPU,
# outputs reduce-scattered back, priced as the all-reduce it equals) or ``deepep_high_throughput``
# (DeepEP dispatch / combine, aiconfigurator's measured moe_alltoall).
ALL2ALL_BACKENDS = ("allgather_reducescatter", "deepep_high_throughput")
DEFAULT_ALL2ALL = "allgather_reducescatter"
# aiconfigurator's default MoE workload (sdk/config.py ModelConfig.workload_distribution
# "power_law") at the exponent its generic MoE family uses (sdk/models/moe.py MOEModel,
# which Qwen3-MoE and Qwen3-VL-MoE ride: _power_law_alpha 1.2). Its DeepSeek and hybrid
# (Llama 4) families use 1.01; choose that per scenario.
DEFAULT_ROUTING = "power_law_1.2"


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@lru_cache(maxsize=1 << 14)
def expert_loads(tokens: int, num_experts: int, topk: int, routing: str) -> tuple[float, ...]:
    """Expected token-expert assignments of every expert (largest first) for ``tokens``
    tokens routed to ``topk`` experts each (steps 1-3 of the module docstring)."""
    if routing not in ROUTINGS:
        raise ValueError(f"unknown MoE routing {routing!r}; valid: {', '.join(ROUTINGS)}")
    a = tokens * topk
    if routing == "balanced" or tokens <= 0:
        return (a / num_experts,) * num_experts
    alpha = float(routing.rsplit("_", 1)[1])
    lo, hi = (1.0, 0.8 * tokens) if a > num_experts else (0.01, 2.0)
    hi = max(hi, lo)
    e = 1.0 - alpha
    x = [((hi**e - lo**e) * (num_experts - i - 0.5) / num_experts + lo**e) ** (1.0 / e)
         for i in range(num_experts)]  # largest first
    total = sum(x)
    loads = [v * a / total for v in x]
    for _ in range(num_experts):  # cap at ``tokens``, hand the excess to the rest
        excess = sum(v - tokens for v in loads if v > tokens)
        if excess <= 1e-9 * a:
            break
        free = sum(v for v in loads if v < tokens)
        if free <= 0:  # every expert full (topk == num_experts)
            break
        loads = [float(tokens) if v >= tokens else v + excess * v / free for v in loads]
    return tuple(loads)


@lru_cache(maxsize=1 << 14)
def busiest_rank(tokens: int, num_experts: int, topk: int, ep: int, routing: str) -> tuple[float, float]:
    """``(assignments, experts_touched)`` of the most loaded of ``ep`` expert ranks
    (steps 4-5 of the module docstring); ``tokens`` enter the layer before dispatch."""
    if tokens <= 0:
        return (0.0, 0.0)
    loads = expert_loads(tokens, num_experts, topk, routing)
    touched = sum(1.0 - (1.0 - min(1.0, v / tokens)) ** tokens for v in loads) / ep
    a = tokens * topk
    if ep <= 1:
        return (float(a), touched)
    n = num_experts // ep
    mean = a / num_experts
    var = sum((v - mean) ** 2 for v in loads) / num_experts
    sd = (n * var * (num_experts - n) / (num_experts - 1)) ** 0.5 if num_experts > 1 else 0.0
    z = NormalDist().inv_cdf((ep - 0.375) / (ep + 0.25))
    worst = sum(loads[:n])
    return (min(a / ep + z * sd, worst), touched)


def layers_cost(cm, p, tokens: int, rank: int | None = None):
    """``ComposedStepCostModel._dense_cost`` of a model with MoE layers, QK-norm, FP8 linear
    layers or DP ranks (``cm`` the cost model, ``p`` its predictor or split view): attention and dense MLPs on a rank's ``ceil(tokens / dp)`` tokens, MoE
    MLPs by :func:`lmmsim.costmodel.moe.moe_mlp_cost` (``first_dense_layers`` /
    ``layer_step`` decide which layers)."""
    llm, tp = cm.model.llm, cm.tp
    x = cm._split if p is cm._split else cm._ext_s
    h, hd = cm._hidden, cm._head_dim
    q_width, kv_width = cm._heads * hd, cm._kv_heads * hd
    m = rank or _ceil_div(tokens, cm.dp)  # a rank's tokens (the busiest rank's, when given)
    act = m * h * B
    attention = (
        cm._linear(p, x, m, q_width + 2 * kv_width, h)
        + (p.elementwise_s(2 * m * (q_width + kv_width) * B, op="norm") if llm.qk_norm else 0)  # per-head RMSNorm on Q, K
        + p.elementwise_s(2 * m * (q_width + kv_width) * B, op="rotary")
        + cm._linear(p, x, m, h, q_width)
        + p.allreduce_s(act, tp)
        + p.elementwise_s(4 * act, op="add_norm")
    )
    n_moe = llm.num_moe_layers
    t = cm._layers * attention
    if cm._layers > n_moe:
        mlp = (
            cm._linear(p, x, m, cm._up_width, h)
            + p.elementwise_s(m * (cm._up_width + cm._ffn) * B, op=cm._act_op)
            + cm._linear(p, x, m, h, cm._ffn)
            + p.allreduce_s(act, tp)
            + p.elementwise_s(4 * act, op="add_norm")
        )
        t += (cm._layers - n_moe) * mlp
    if n_moe:
        t += n_moe * moe_mlp_cost(cm, p, x, tokens, m)
    embed = p.elementwise_s(2 * act, op="embedding") + p.allreduce_s(act, tp)
    return t + embed + p.elementwise_s(4 * act, op="add_norm")


def moe_mlp_cost(cm, p, x, tokens: int, rank: int | None = None):
    """One MoE layer's MLP part on one GPU (see the module docstring); ``cm`` the
    :class:`~lmmsim.costmodel.composed.ComposedStepCostModel`, ``p`` its predictor or split
    view, ``x`` the matching provider of the MoE / FP8 operators; ``tokens`` the step's;
    ``rank`` the busiest DP rank's tokens (default: the even share ``ceil(tokens / dp)``),
    which the router, top-k, shared expert and all-to-alls of that rank run on."""
    moe = cm.model.llm.moe
    h, e, k = cm._hidden, moe.num_experts, moe.experts_per_token
    rank_tokens = rank or _ceil_div(tokens, cm.dp)
    act = rank_tokens * h * B
    pairs, _ = busiest_rank(tokens, e, k, cm.ep, cm.routing)
    t = (
        p.gemm_s(rank_tokens, e, h)  # router logits, replicated, bf16
        + p.elementwise_s(rank_tokens * e * 4 + rank_tokens * k * 8, op="softmax")  # top-k: read fp32 logits, write ids + weights
        # the fused-experts call, permute to top-k weighted sum (what moe_perf times)
        + x.moe_experts_s(tokens, h, moe.expert_intermediate_size, e, k, cm.moe_tp, cm.ep, cm.dtype, cm.routing)
    )
    if moe.shared_expert_intermediate_size:
        sh = _ceil_div(moe.shared_expert_intermediate_size, cm.tp)
        t += (cm._linear(p, x, rank_tokens, 2 * sh, h)
              + p.elementwise_s(rank_tokens * 3 * sh * B, op="act_gated")
              + cm._linear(p, x, rank_tokens, h, sh))
    if cm.dp > 1 and cm.all2all == "deepep_high_throughput":
        local = _ceil_div(rank_tokens, cm.tp)  # each GPU of a rank dispatches its 1/tp of the rank's tokens
        t += x.moe_alltoall_s(local, h, k, cm.ep, "dispatch") + x.moe_alltoall_s(local, h, k, cm.ep, "combine")
        if cm.moe_tp > 1:  # partial sums of TP-split experts, top-k summed per token first: at most
            # one row per token the busiest group receives (ep 1: every token, vLLM's DP without EP)
            t += p.allreduce_s(min(pairs, tokens) * h * B, cm.moe_tp)
    elif cm.dp > 1:  # vLLM's default: every rank's hidden states all-gathered to every GPU, the
        # experts' outputs (TP-split experts' partial sums included) reduce-scattered back; a ring
        # all-gather plus a ring reduce-scatter of the gathered batch move what one all-reduce does
        t += p.allreduce_s(tokens * h * B, cm.dp * cm.tp)
    return t + p.allreduce_s(act, cm.tp) + p.elementwise_s(4 * act, op="add_norm")

"""A step's cost by term, for reports (:meth:`~lmmsim.costmodel.composed.ComposedStepCostModel.llm_step_breakdown`)."""

from __future__ import annotations

from typing import Sequence

from lmmsim.costmodel.data_parallel import dp_attention, rank_tokens
from lmmsim.costmodel.moe import layers_cost


def breakdown(
    cost,
    prefill_chunks: Sequence[tuple[int, int]],
    num_decodes: int,
    decode_context_sum: int,
    num_sampled: int,
) -> dict[str, float]:
    """The terms of ``cost.llm_step_s`` (``cost``: a composed step cost model) by name
    (seconds; they sum to it up to float rounding): the kernels (``dense``: linear layers,
    norms, collectives at the real token count; ``prefill_attention``; ``decode_attention``;
    ``lm_head``) and the engine terms of :mod:`lmmsim.costmodel.engine_overheads` (0 when off). Not memoised;
    for reports, not the hot path."""
    p = cost.predictor
    tokens = num_decodes + sum(c[0] for c in prefill_chunks)
    out = {"dense": 0.0, "prefill_attention": 0.0, "decode_attention": 0.0, "lm_head": 0.0,
           "cudagraph_padding": 0.0, "kv_write": 0.0, "collective_launch": 0.0, "step_cpu": 0.0}
    if tokens <= 0:
        return out
    out["dense"] = (cost._dense_cost(p, tokens) if cost.dp == 1
                    else layers_cost(cost, p, tokens, rank_tokens(cost, tokens, prefill_chunks)))
    att = [cost._prefill_attention_cost(p, tuple(c)) for c in prefill_chunks]
    out["prefill_attention"] = sum(att) if cost.dp == 1 else dp_attention(att, cost.dp)
    if num_decodes > 0:
        out["decode_attention"] = cost._layers * cost._decode_attention(
            num_decodes, decode_context_sum, cost._heads, cost._kv_heads, cost._head_dim)
    if num_sampled > 0:
        out["lm_head"] = cost._lm_head_cost(p, num_sampled)
    if cost._ov_active:
        out.update({k: float(v) for k, v in cost._engine_terms(p, tokens if num_sampled > 0 else -tokens).items()})
    return out

"""Steps of a worker whose ``dp`` attention ranks (vLLM's data parallelism with expert
parallelism, :mod:`lmmsim.costmodel.moe`) split each batch evenly.

:class:`~lmmsim.costmodel.composed.ComposedStepCostModel` with ``dp > 1`` answers
``llm_step_s`` / ``llm_step_parts`` here. The linear layers and norms of attention and
dense MLPs run on the busiest rank's tokens -- the even share ``ceil(tokens / dp)``, or
the largest prefill chunk when that is more (a chunk is one request's and runs on one
rank) -- and the MoE layers on all tokens (:func:`lmmsim.costmodel.moe.layers_cost`),
memoised by ``(tokens, rank tokens)``; decode attention is one rank's
share (:func:`per_rank`); the prefill chunks of a step are spread over the ranks, which
step in lockstep, so their attention costs the ranks' even share of the total but never
less than the largest chunk (:func:`dp_attention`). The LM head and engine terms are per
rank in the cost model itself. With ``dp == 1`` nothing here runs.
"""

from __future__ import annotations

from lmmsim.costmodel.engine_overheads import step_terms
from lmmsim.costmodel.moe import layers_cost
from lmmsim.costmodel.split_view import Split


def step_s(cm, prefill_chunks, num_decodes, decode_context_sum, num_sampled) -> float:
    """``ComposedStepCostModel.llm_step_s`` of ``dp > 1`` ranks: prefill chunks spread over the ranks
    (:func:`dp_attention`), decode attention on one rank's share; memoised alike."""
    chunks = [tuple(c) for c in prefill_chunks]
    tokens = num_decodes + sum(c[0] for c in chunks)
    if tokens <= 0:
        return 0.0
    total = _dense(cm, cm.predictor, cm._dense_memo, tokens, chunks)
    if chunks:
        total += dp_attention([cm._prefill_memo.get(c) or cm._prefill_attention(c) for c in chunks], cm.dp)
    if num_decodes > 0:
        total += cm._layers * cm._decode_attention(
            num_decodes, decode_context_sum, cm._heads, cm._kv_heads, cm._head_dim)
    if num_sampled > 0:
        t = cm._head_memo.get(num_sampled)
        total += cm._lm_head(num_sampled) if t is None else t
    if cm._ov_active:
        total += cm._engine_step_s(tokens, num_sampled)
    return total


def step_parts(cm, prefill_chunks, num_decodes, decode_context_sum, num_sampled):
    """``ComposedStepCostModel.llm_step_parts`` of ``dp > 1`` ranks (as :func:`step_s`)."""
    chunks = [tuple(c) for c in prefill_chunks]
    tokens = num_decodes + sum(c[0] for c in chunks)
    if tokens <= 0:
        return (0.0, 0.0)
    s, memo = cm._split, cm._prefill_parts_memo
    terms = [Split(*_dense(cm, s, cm._dense_parts_memo, tokens, chunks))]
    if chunks:
        terms.append(dp_attention([Split(*(memo[c] if c in memo else cm._store(
            memo, c, cm._prefill_attention_cost(s, c).pair()))) for c in chunks], cm.dp))
    if num_decodes > 0:
        terms.append(Split(*cm._decode_attention_parts(
            num_decodes, decode_context_sum, cm._heads, cm._kv_heads, cm._head_dim)) * cm._layers)
    if num_sampled > 0:
        terms.append(cm._lm_head_cost(s, num_sampled))
    if cm._ov_active:
        terms.append(sum(step_terms(cm, s, tokens if num_sampled > 0 else -tokens).values()))
    return sum(terms).pair()


def rank_tokens(cm, tokens: int, chunks) -> int:
    """The busiest rank's tokens: the even share, or the largest prefill chunk when more."""
    return max(-(-tokens // cm.dp), max((c[0] for c in chunks), default=0))


def _dense(cm, p, memo: dict, tokens: int, chunks: list):
    """Memoised ``layers_cost`` at the busiest rank's token count (a pair for the split view)."""
    rank = rank_tokens(cm, tokens, chunks)
    key = tokens if rank == -(-tokens // cm.dp) else (tokens, rank)
    t = memo.get(key)
    if t is None:
        t = layers_cost(cm, p, tokens, rank)
        t = cm._store(memo, key, t if p is cm.predictor else t.pair())
    return t


def per_rank(decode, dp: int):
    """``decode`` attention of one of ``dp`` ranks holding an even share of the batch."""
    return lambda batch, context_sum, *shape: decode(-(-batch // dp), -(-context_sum // dp), *shape)


def dp_attention(chunk_costs: list, dp: int):
    """Prefill attention of a step whose chunks spread evenly over ``dp`` lockstep ranks:
    the ranks' even share of the total, but never less than the largest chunk (it runs
    whole on one rank)."""
    if not chunk_costs:
        return 0.0
    total = sum(chunk_costs)
    largest = max(chunk_costs, key=_size)
    return total / dp if _size(total) / dp >= _size(largest) else largest


def _size(t) -> float:
    return t if isinstance(t, (int, float)) else t.c + t.m

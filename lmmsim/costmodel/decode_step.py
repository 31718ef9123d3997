"""A decode-only step of a fixed batch, priced by its attended context alone.

A fast-forward (the monolithic engine's decode stretches, a pipeline's run ahead)
prices one decode step of the same cohort every step while only the attended
context grows: ``llm_step_s((), n, context_sum, n)``. Everything but decode
attention depends on ``n`` alone, so :func:`folded_decode_step` looks those terms up
once and asks the predictor for decode attention of the one batch shape as a
function of the context (``attention_decode_at``, the roofline's constants folded).
The sum keeps ``llm_step_s``'s order, so every float is the same.
"""

from __future__ import annotations


class DecodeSteps:
    """``cm.decode_step_at``: ``batch -> (context_sum -> cm.llm_step_s((), batch, context_sum,
    batch))``, memoised by batch (bounded as ``cm``'s memos are)."""

    __slots__ = ("cm", "memo")

    def __init__(self, cm):
        self.cm, self.memo = cm, {}

    def __call__(self, batch: int):
        fn = self.memo.get(batch)
        if fn is None:
            fn = self.cm._store(self.memo, batch, folded_decode_step(self.cm, batch))
        return fn


def folded_decode_step(cm, n: int):
    """``context_sum -> cm.llm_step_s((), n, context_sum, n)`` for a
    :class:`~lmmsim.costmodel.composed.ComposedStepCostModel` ``cm``."""
    at = getattr(cm.predictor, "attention_decode_at", None)
    if n <= 0 or cm.dp > 1 or cm._kv_fp8 or at is None:  # the general path, unfolded
        step = cm.llm_step_s
        return lambda context_sum: step((), n, context_sum, n)
    dense = cm._dense_memo.get(n)
    dense = cm._dense(n) if dense is None else dense
    head = cm._head_memo.get(n)
    head = cm._lm_head(n) if head is None else head
    attention, layers = at(n, cm._heads, cm._kv_heads, cm._head_dim), cm._layers
    if not cm._ov_active:  # llm_step_s's sum, in its order
        return lambda context_sum: dense + layers * attention(context_sum) + head
    engine = cm._engine_step_s(n, n)
    return lambda context_sum: dense + layers * attention(context_sum) + head + engine

"""A decode-only step of a fixed batch, priced by its attended context alone.

A fast-forward (the monolithic engine's decode stretches, a pipeline's run ahead)
prices one decode step of the same cohort every step while only the attended
context grows: ``llm_step_s((), n, context_sum, n)``. Everything but decode
attention depends on ``n`` alone, so :func:`folded_decode_step` looks those terms up
once and, where the predictor is the roofline (``attention_decode_terms``), folds decode
attention's constants into one function of the context. The sum keeps ``llm_step_s``'s
order and the kernel's terms are evaluated as ``RooflinePredictor.kernel_s`` does, so
every float is the same (tests/test_decode_step.py).
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
    terms = getattr(cm.predictor, "attention_decode_terms", None)
    if n <= 0 or cm.dp > 1 or cm._kv_fp8 or terms is None:  # the general path, unfolded
        step = cm.llm_step_s
        return lambda context_sum: step((), n, context_sum, n)
    dense = cm._dense_memo.get(n)
    dense = cm._dense(n) if dense is None else dense
    head = cm._head_memo.get(n)
    head = cm._lm_head(n) if head is None else head
    tail = cm._engine_step_s(n, n) if cm._ov_active else None  # llm_step_s adds it last
    fpk, bpu, kvk, q_out, c_half, c_rate, m_half, m_rate, launch = terms(n, cm._heads, cm._kv_heads, cm._head_dim)
    layers = cm._layers

    def step_s(context_sum: int) -> float:  # one call a step: a fast-forward's hot path
        flops = fpk * context_sum
        t_compute = (flops + c_half) / c_rate if flops > 0 else 0.0
        num_bytes = bpu * (kvk * context_sum + q_out)
        t_memory = (num_bytes + m_half) / m_rate if num_bytes > 0 else 0.0
        total = dense + layers * ((t_compute if t_compute > t_memory else t_memory) + launch) + head
        return total if tail is None else total + tail

    return step_s

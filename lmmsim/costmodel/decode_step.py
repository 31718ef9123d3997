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

    bounds = _regime_bounds(fpk, bpu, kvk, q_out, c_half, c_rate, m_half, m_rate)
    if bounds is None:
        return step_s
    lo, hi = bounds

    def regime_step_s(context_sum: int) -> float:  # only the larger term evaluated, away from the crossing
        if context_sum > hi:  # memory-bound
            total = dense + layers * ((bpu * (kvk * context_sum + q_out) + m_half) / m_rate + launch) + head
        elif 1 <= context_sum < lo:  # compute-bound
            total = dense + layers * ((fpk * context_sum + c_half) / c_rate + launch) + head
        else:
            return step_s(context_sum)
        return total if tail is None else total + tail

    return regime_step_s


def _regime_bounds(fpk, bpu, kvk, q_out, c_half, c_rate, m_half, m_rate) -> tuple[float, float] | None:
    """``(lo, hi)``: decode attention's compute term is the larger below ``lo`` attended keys and
    its memory term above ``hi``, each by a margin far beyond rounding (both terms are linear in
    the context; the memory one grows faster, the compute one may lead at first by its larger
    half-saturation work). None when the terms are not of that shape."""
    if min(fpk, bpu, kvk, c_rate, m_rate) <= 0 or min(q_out, c_half, m_half) < 0:
        return None
    compute_at0, compute_slope = c_half / c_rate, fpk / c_rate
    memory_at0, memory_slope = (bpu * q_out + m_half) / m_rate, bpu * kvk / m_rate
    if memory_slope <= compute_slope:
        return None
    cross = (compute_at0 - memory_at0) / (memory_slope - compute_slope)
    slack = 1 + 1e-6 * abs(cross)  # keys either side of the crossing: the terms differ there by ...
    if (memory_slope - compute_slope) * slack < 1e-9 * (compute_at0 + compute_slope * abs(cross)):
        return None  # ... at least a billionth of their size, or no regime is trusted
    return cross - slack, max(cross + slack, 0.5)

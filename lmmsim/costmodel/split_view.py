"""Kernel times split into (compute, memory) parts, for GPUs shared between workers.

:class:`~lmmsim.costmodel.composed.ComposedStepCostModel` composes a step from
operator predictions; run through :class:`SplitView` the same composition yields
``(compute_s, memory_s)`` pairs (:class:`Split`) that :mod:`lmmsim.engine.gpu_share`
slows down separately. :class:`BorrowedSplit` gives a predictor without ``*_parts``
methods the roofline's classification of each kernel.
"""

from __future__ import annotations

from lmmsim.catalog import GpuSpec
from lmmsim.costmodel.base import OperatorPredictor
from lmmsim.costmodel.roofline import RooflinePredictor


class Split:
    """A (compute_s, memory_s) pair with the arithmetic the composition uses.

    ``+`` another pair (or the int/float 0 that ``sum`` starts from), ``*`` and
    ``/`` by a number, componentwise; anything else is an error (so a composed
    term that is not a kernel time cannot slip in unsplit).
    """

    __slots__ = ("c", "m")

    def __init__(self, c: float, m: float):
        self.c = c
        self.m = m

    def __add__(self, other):
        if isinstance(other, Split):
            return Split(self.c + other.c, self.m + other.m)
        if isinstance(other, (int, float)) and other == 0:
            return self
        return NotImplemented

    __radd__ = __add__

    def __mul__(self, k):
        if isinstance(k, (int, float)):
            return Split(self.c * k, self.m * k)
        return NotImplemented

    __rmul__ = __mul__

    def __truediv__(self, k):
        if isinstance(k, (int, float)):
            return Split(self.c / k, self.m / k)
        return NotImplemented

    def pair(self) -> tuple[float, float]:
        return (float(self.c), float(self.m))


OPS = ("gemm", "attention_prefill", "attention_decode", "elementwise", "allreduce", "p2p")
# Operators of MoE and FP8 models. A predictor may lack them (a fitted one gets them from
# measured tables when it has those); :class:`ExtraOps` then answers with the roofline on
# the same GPU, so a dense bf16 model never needs them and never changes.
EXTRA_OPS = ("gemm_fp8", "attention_decode_fp8", "moe_experts", "moe_alltoall")


def fallback_roofline(predictor, gpu: GpuSpec) -> RooflinePredictor:
    """The roofline that stands in for ``predictor``'s missing operators: itself, a fitted
    predictor's own fallback (``_roof``, with its interconnect), or a new one on ``gpu``."""
    if isinstance(predictor, RooflinePredictor):
        return predictor
    roof = getattr(predictor, "_roof", None)
    return roof if isinstance(roof, RooflinePredictor) else RooflinePredictor(gpu, getattr(predictor, "interconnect", None))


class ExtraOps:
    """``*_s`` of :data:`EXTRA_OPS`: the predictor's own where it has them, else the roofline's."""

    def __init__(self, predictor, gpu: GpuSpec):
        roof = fallback_roofline(predictor, gpu)
        for op in EXTRA_OPS:
            setattr(self, op + "_s", getattr(predictor, op + "_s", None) or getattr(roof, op + "_s"))

    @staticmethod
    def parts(predictor, gpu: GpuSpec) -> dict:
        """``op -> *_parts`` for :data:`EXTRA_OPS`: the predictor's own; else its ``*_s`` time in
        the bucket the roofline puts that kernel in; else the roofline's parts."""
        roof = fallback_roofline(predictor, gpu)
        out = {}
        for op in EXTRA_OPS:
            own, total = getattr(predictor, op + "_parts", None), getattr(predictor, op + "_s", None)
            ref = getattr(roof, op + "_parts")
            if own is None and total is not None:
                def own(*a, _t=total, _ref=ref):
                    t = _t(*a)
                    return (t, 0.0) if _ref(*a)[0] > 0 else (0.0, t)
            out[op] = own or ref
        return out


class BorrowedSplit:
    """``*_parts`` for a predictor without them: its own time, put whole into the
    bucket the roofline on the same GPU puts that kernel in."""

    def __init__(self, predictor: OperatorPredictor, gpu: GpuSpec):
        self._p = predictor
        self._roof = RooflinePredictor(gpu)

    def _classify(self, op: str, *args) -> tuple[float, float]:
        t = getattr(self._p, op + "_s")(*args)
        compute, _ = getattr(self._roof, op + "_parts")(*args)
        return (t, 0.0) if compute > 0 else (0.0, t)

    def gemm_parts(self, *args):
        return self._classify("gemm", *args)

    def attention_prefill_parts(self, *args):
        return self._classify("attention_prefill", *args)

    def attention_decode_parts(self, *args):
        return self._classify("attention_decode", *args)

    def elementwise_parts(self, num_bytes, op=None):
        return (0.0, self._p.elementwise_s(num_bytes, op=op))

    def allreduce_parts(self, num_bytes, world):
        return (0.0, self._p.allreduce_s(num_bytes, world))

    def p2p_parts(self, num_bytes):
        return (0.0, self._p.p2p_s(num_bytes))


class SplitView:
    """Predictor facade whose ``*_s`` methods return :class:`Split` pairs, so the
    composition code computes ``(compute_s, memory_s)`` instead of totals."""

    def __init__(self, source, extra: dict | None = None):
        # ``extra``: op -> *_parts for :data:`EXTRA_OPS` (:meth:`ExtraOps.parts`)
        for op, parts in [*((op, getattr(source, op + "_parts")) for op in OPS), *(extra or {}).items()]:
            setattr(self, op + "_s", lambda *a, _parts=parts, **kw: Split(*_parts(*a, **kw)))

"""Fitted operator predictor: a saved ``lmmsim fit`` folder behind the ``OperatorPredictor`` methods.

:class:`FittedPredictor` answers every
:class:`~lmmsim.costmodel.base.OperatorPredictor` method (seconds; profiles
are in ms) from the per-class models of ``fit_folder/model.json`` (see
:mod:`lmmsim.costmodel.fitting`), evaluated in numpy / pure Python floats --
scikit-learn is not imported.

* **Fallback.** A class the fit lacks (too few rows, not profiled) is answered
  by :class:`~lmmsim.costmodel.roofline.RooflinePredictor` on the same GPU, for
  that class only; :attr:`FittedPredictor.fallback_classes` lists them (the
  run summary prints it).
* **Derived classes.** A class marked ``derived_from: <gpu>`` in model.json
  holds roofline parameters fitted on another GPU's data; it is evaluated with
  *this* GPU's peak FLOP/s and HBM bandwidth (the interconnect's bandwidth for
  collectives). :attr:`FittedPredictor.derived_classes` lists them.
* **Outside the data.** Every class of a fit carries its *domain*, where its
  rows lie (:mod:`lmmsim.costmodel.domain`; for attention, per kernel and
  octave of sequence length / batch, see :mod:`lmmsim.costmodel.features`). A
  call outside it is an extrapolation. A forest is flat beyond its data, and
  a polynomial of an attention class bends, so such calls are answered by the
  class's fitted roofline instead; other models answer them themselves. Either
  way they are counted in :attr:`FittedPredictor.extrapolated` (calls) and
  weighed by :meth:`FittedPredictor.extrapolated_share`.
* **Extrapolated share** (the run summary's ``cost_model.extrapolated_share``):
  per class, the predicted seconds of the *evaluations* that fell outside the
  domain over the predicted seconds of all evaluations. An evaluation is one
  miss of this predictor's memo (one distinct call shape; the step cost model
  memoises again above it, per prefill chunk and per encoder batch), every
  call of an unmemoised decode model, and every shape of a GEMM block
  (``_fill_gemm_block``, the token counts around a missed one). So the share
  weighs distinct shapes by their predicted time, not by how often a run
  asked for them: counting uses would cost a counter on every memo hit, on
  the hot path. A class without data on this GPU (a roofline v0 fallback or a
  class derived from another GPU) is wholly extrapolated: its share is 1 by
  definition, its calls are not counted (decode attention is called every
  step, and a counter there costs ~7 % of a roofline step).
* **Elementwise kernels by op.** A fit with per-op elementwise models
  (:mod:`lmmsim.costmodel.selection`) answers ``elementwise_s(num_bytes, op)``
  with the model of ``op``'s canonical name
  (:func:`~lmmsim.costmodel.opdata.canonical_elementwise_op`); an op without
  a model of its own, or no op, gets the class's pooled model.
  :attr:`FittedPredictor.elementwise_ops` lists the ops with their own model.
* **Speed.** Results are memoised per exact argument tuple (a dict per class,
  cleared past ``MEMO_LIMIT`` entries, which never changes a result; one per
  elementwise model, shared by the op names that map to it). Below this run's
  memo, the loaded fit and its evaluations are the process's
  (:mod:`lmmsim.costmodel.fitcache`): a later run of a sweep evaluates no
  forest its process evaluated before, yet counts its own memo's misses, so its
  extrapolated share is what it would be alone. Decode
  attention is called every engine step with a new context sum, so for a
  roofline or polynomial decode model it skips the memo and evaluates the
  closed form in Python floats (about 1-2 us for a roofline, a few us for a
  polynomial). A forest decode model is evaluated on a grid of
  :attr:`FittedPredictor.DECODE_GRID` points per octave of the context sum
  (memoised per batch and head shape) and interpolated linearly between the
  two grid points around the call: an exact-argument memo never hits there,
  and a forest evaluation in Python costs about 15 us per step. Against the
  forest evaluated at the exact context (H100 fit, 300 random decode shapes)
  the interpolation differs by 0 at the median and 2% at the 95th percentile
  (the decode held-out MAPE is 2%); the largest difference, 11%, sits next to
  one of the forest's own steps, which the interpolation smooths.
* **Compute / memory split** (``*_parts``, used under GPU sharing): the fitted
  time goes whole into the bucket the class's *fitted* roofline puts that
  shape in (compute-bound iff its compute term is strictly larger), so
  ``sum(x_parts(...)) == x_s(...)`` exactly; elementwise kernels and
  collectives are memory/link-bound, ``(0.0, t)``. Fallback classes use the
  v0 roofline's own parts.
* **FP8 and MoE classes** (:data:`~lmmsim.costmodel.opdata.EXTRA_FITTED_CLASSES`:
  ``gemm_fp8_s``, ``attention_decode_fp8_s``, ``moe_experts_s``,
  ``moe_alltoall_s``) are answered like the others, with their domains and
  extrapolated shares. A fit without one of them answers it by the roofline
  predictor's method of the same name (:attr:`FittedPredictor.roofline_answered`
  lists those called; their share is 1). They are not part of
  ``fallback_classes``, which stays about the dense classes every model runs.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from lmmsim.catalog import GpuSpec, LinkSpec
from lmmsim.costmodel import opdata
from lmmsim.costmodel.features import CLASSES, LINK_CLASSES, class_features, code, row_ops
from lmmsim.costmodel.fitcache import OUTSIDE, shared_fit
from lmmsim.costmodel.fitstore import LoadedClass
from lmmsim.costmodel.prefill_shape import prefill_fn
from lmmsim.costmodel.roofline import RooflinePredictor


# An FP8 class a fit lacks is answered from its bf16 twin (same arguments) scaled by the roofline.
FP8_TWINS = {"gemm_fp8": "gemm", "attention_decode_fp8": "attention_decode"}


class FittedPredictor:
    """Operator predictor from a fit folder for one GPU (implements ``OperatorPredictor``).

    ``interconnect`` is the tensor-parallel link; it only matters for the
    collectives that fall back to the roofline or are derived from another GPU.
    Raises ``ValueError`` when the fit was made for another GPU (derive the
    classes instead: :func:`lmmsim.costmodel.fitting.derive_classes`).
    """

    MEMO_LIMIT = 1 << 18

    def __init__(self, fit_folder: Path, gpu: GpuSpec, interconnect: LinkSpec | None = None):
        self.fit_folder = Path(fit_folder)
        self.gpu = gpu
        self.interconnect = interconnect
        # The loaded fit and its pure evaluations are the process's (lmmsim.costmodel.fitcache);
        # the memos and counters below are this run's.
        self._shared = shared_fit(self.fit_folder, gpu, interconnect)
        self.fit = self._shared.fit
        self._roof = RooflinePredictor(gpu, interconnect)
        classes = self.fit.classes
        self.fallback_classes: tuple[str, ...] = tuple(c for c in opdata.FITTED_CLASSES if c not in classes)
        self.derived_classes: dict[str, str] = {c: lc.derived_from for c, lc in classes.items() if lc.derived_from}
        self.extrapolated: dict[str, int] = {c: 0 for c in opdata.ALL_FITTED_CLASSES}
        # Predicted seconds of every evaluation, and of those outside the data, per class.
        self.predicted_s: dict[str, float] = {c: 0.0 for c in opdata.ALL_FITTED_CLASSES}
        self.extrapolated_s: dict[str, float] = {c: 0.0 for c in opdata.ALL_FITTED_CLASSES}
        self.roofline_answered: set[str] = set()  # FP8 / MoE classes the fit lacks, answered by the roofline

        self._fn = {c: self._scalar_fn(c, classes[c]) if c in classes else self._no_data_fn(c)
                    for c in opdata.FITTED_CLASSES}
        self._memo: dict[str, dict] = {c: {} for c in opdata.FITTED_CLASSES}
        self._gemm_memo = self._memo["gemm"]
        self._gemm_forest = "gemm" in classes and classes["gemm"].kind == "forest"
        self._prefill_memo = self._memo["attention_prefill"]
        elementwise = classes.get("elementwise")
        per_op = elementwise.per_op if elementwise is not None else {}
        self.elementwise_ops: tuple[str, ...] = tuple(sorted(per_op))
        # (memo, model) per canonical op with a model of its own, and for the pooled model (key None);
        # _elementwise_by_op maps each op name as called to one of them on its first call.
        self._elementwise_models: dict[str | None, tuple[dict, object]] = {
            op: ({}, self._scalar_fn("elementwise", lc, op)) for op, lc in per_op.items()}
        self._elementwise_models[None] = (self._memo["elementwise"], self._fn["elementwise"])
        self._elementwise_by_op = {None: self._elementwise_models[None]}
        self._allreduce_memo = self._memo["allreduce"]
        self._p2p_memo = self._memo["p2p"]
        decode = classes.get("attention_decode")
        if decode is None or decode.kind in ("roofline", "poly"):
            self._decode = self._fn["attention_decode"]  # closed form: no memo
        else:
            self._decode = self._gridded_decode()
        self._extra = {c: self._scalar_fn(c, classes[c]) if c in classes else None
                       for c in opdata.EXTRA_FITTED_CLASSES}
        self._memo.update({c: {} for c in opdata.EXTRA_FITTED_CLASSES})
        decode8 = classes.get("attention_decode_fp8")
        if decode8 is not None and decode8.kind == "forest":
            self._extra["attention_decode_fp8"] = self._gridded_decode("attention_decode_fp8")

    def describe(self) -> str:
        """One line for a run summary: which classes are fitted, derived, or fall back."""
        fitted = [f"{c} ({self._estimators(lc)})" for c, lc in self.fit.classes.items()
                  if not lc.derived_from and c in opdata.FITTED_CLASSES]
        parts = [f"fitted: {', '.join(fitted) or 'none'}"]
        # FP8 / MoE classes only once a run used them (a dense model's summary stays as it was)
        used = [c for c in opdata.EXTRA_FITTED_CLASSES if self.predicted_s[c] > 0 and c in self.fit.classes]
        if used:
            parts.append("fitted FP8/MoE: " + ", ".join(f"{c} ({self.fit.classes[c].estimator_name})" for c in used))
        if self.roofline_answered:
            parts.append("FP8/MoE by roofline: " + ", ".join(sorted(self.roofline_answered)))
        if self.derived_classes:
            parts.append("derived: " + ", ".join(f"{c} from {g}" for c, g in self.derived_classes.items()))
        if self.fallback_classes:
            parts.append("roofline v0 fallback: " + ", ".join(self.fallback_classes))
        return "; ".join(parts)

    @staticmethod
    def _estimators(lc: LoadedClass) -> str:
        if not lc.per_op:
            return lc.estimator_name
        ops = ", ".join(f"{op} {sub.estimator_name}" for op, sub in sorted(lc.per_op.items()))
        return f"per op: {ops}; others {lc.estimator_name}"

    def extrapolated_share(self) -> dict[str, float]:
        """Per class evaluated so far: the share of its predicted time that came from
        calls outside the data (module docstring, "Extrapolated share"), in [0, 1]."""
        share = {c: (self.extrapolated_s[c] / t if t > 0 else 0.0)
                 for c, t in self.predicted_s.items() if t > 0 or self.extrapolated[c]}
        share.update({c: 1.0 for c in (*self.fallback_classes, *self.derived_classes, *self.roofline_answered)})
        return {c: share[c] for c in opdata.ALL_FITTED_CLASSES if c in share}

    # ------------------------------------------------------------ building
    def _no_data_fn(self, op_class: str):
        """The v0 roofline for a class the fit lacks (wholly extrapolated; not counted per call)."""
        return getattr(self._roof, op_class + "_s")

    def _scalar_fn(self, op_class: str, lc: LoadedClass, op: str | None = None):
        """``f(*shape) -> seconds`` for one call of ``lc`` (a class or per-op model ``op``), in Python
        floats, counted into the class's predicted / extrapolated seconds (the evaluation itself
        is the process's, :meth:`~lmmsim.costmodel.fitcache.SharedFit.scalar`)."""
        ev = self._shared.scalar(op_class, lc, op)
        total, extra, counts = self.predicted_s, self.extrapolated_s, self.extrapolated
        if lc.derived_from:  # no data here, wholly extrapolated (not counted per call)
            return lambda *args: ev(*args)[0]

        def model(*args):
            t, flag = ev(*args)
            total[op_class] += t
            if flag == OUTSIDE:
                extra[op_class] += t
                counts[op_class] += 1
            return t

        return model

    DECODE_GRID = 32  # grid points per octave of a forest decode model's context sum

    def _gridded_decode(self, op_class: str = "attention_decode"):
        """Decode attention of a forest, interpolated between memoised grid points in log2(context_sum)."""
        fn = self._fn[op_class] if op_class in self._fn else self._extra[op_class]
        memo, store, steps = self._memo[op_class], self._store, self.DECODE_GRID

        def at(i: int, batch, heads, kv_heads, head_dim) -> float:
            key = (i, batch, heads, kv_heads, head_dim)
            t = memo.get(key)
            if t is None:
                t = store(memo, key, fn(batch, 2.0 ** (i / steps), heads, kv_heads, head_dim))
            return t

        get, log2, floor = memo.get, math.log2, math.floor

        def call(batch, context_sum, heads, kv_heads, head_dim):  # a decode step's hot path: hits inline
            x = log2(context_sum) * steps
            i = floor(x)
            lo = get((i, batch, heads, kv_heads, head_dim))
            if lo is None:
                lo = at(i, batch, heads, kv_heads, head_dim)
            if x == i:
                return lo
            hi = get((i + 1, batch, heads, kv_heads, head_dim))
            if hi is None:
                hi = at(i + 1, batch, heads, kv_heads, head_dim)
            return lo + (hi - lo) * (x - i)

        return call

    def _store(self, memo: dict, key, value: float) -> float:
        if len(memo) >= self.MEMO_LIMIT:
            memo.clear()
        memo[key] = value
        return value

    def _compute_bound(self, op_class: str, *args) -> bool:
        roof = self.fit.classes[op_class].roofline
        if roof.num_sms:  # occupancy needs the grid size
            f = CLASSES[op_class].features(*args)
            return roof.compute_bound(f["flops"], f["bytes"], f["ctas"])
        flops, nbytes, _ = CLASSES[op_class].work(*args)
        return roof.compute_bound(flops, nbytes)

    # ----------------------------------------------------------- operators
    def gemm_s(self, m: int, n: int, k: int) -> float:
        """``[m, k] x [k, n]`` bf16 matmul; 0 for an empty one."""
        if m <= 0 or n <= 0 or k <= 0:
            return 0.0
        key = (m, n, k)
        t = self._gemm_memo.get(key)
        if t is None:
            if self._gemm_forest:
                self._fill_gemm_block(m, n, k)
                t = self._gemm_memo[key]
            else:
                t = self._store(self._gemm_memo, key, self._fn["gemm"](m, n, k))
        return t

    GEMM_BLOCK = 128

    def _fill_gemm_block(self, m: int, n: int, k: int) -> None:
        """Predict a forest GEMM for a block of token counts around ``m`` in one
        vectorised pass: an engine asks for most token counts up to its budget
        with the same weight shapes, and a forest's scalar evaluation in Python
        costs tens to hundreds of microseconds."""
        lo = (m - 1) // self.GEMM_BLOCK * self.GEMM_BLOCK + 1
        memo = self._gemm_memo
        if len(memo) + self.GEMM_BLOCK > self.MEMO_LIMIT:
            memo.clear()
        times, predicted, extrapolated, count = self._shared.gemm_block(lo, n, k, self.GEMM_BLOCK)
        self.predicted_s["gemm"] += predicted
        self.extrapolated_s["gemm"] += extrapolated
        self.extrapolated["gemm"] += count
        for mm, t in zip(range(lo, lo + self.GEMM_BLOCK), times):
            memo[(mm, n, k)] = t

    def attention_prefill_s(
        self, new_tokens: int, context: int, num_heads: int, num_kv_heads: int, head_dim: int, causal: bool = True
    ) -> float:
        """One sequence's attention, ``new_tokens`` queries over ``context`` keys (new ones included)."""
        if new_tokens <= 0:
            return 0.0
        if context < new_tokens:
            raise ValueError(f"attention context ({context}) is shorter than the new tokens ({new_tokens})")
        key = (new_tokens, context, num_heads, num_kv_heads, head_dim, bool(causal))
        t = self._prefill_memo.get(key)
        if t is None:
            t = self._store(self._prefill_memo, key, self._fn["attention_prefill"](*key))
        return t

    def attention_prefill_fn(self, num_heads: int, num_kv_heads: int, head_dim: int, causal: bool = True):
        """``fn(new_tokens, context)``: :meth:`attention_prefill_s` with the head shape fixed (the same
        seconds, memos and counters), its miss path specialised (:mod:`lmmsim.costmodel.prefill_shape`);
        the plain method's calls where :meth:`attention_prefill_s` is not this class's own."""
        if type(self).attention_prefill_s is not FittedPredictor.attention_prefill_s or "attention_prefill_s" in vars(self):
            return lambda n, c: self.attention_prefill_s(n, c, num_heads, num_kv_heads, head_dim, causal)
        return prefill_fn(self, num_heads, num_kv_heads, head_dim, causal)

    def attention_decode_s(
        self, batch: int, context_sum: int, num_heads: int, num_kv_heads: int, head_dim: int
    ) -> float:
        """Decode attention of ``batch`` single-token queries over ``context_sum`` cached tokens."""
        if batch <= 0:
            return 0.0
        return self._decode(batch, context_sum, num_heads, num_kv_heads, head_dim)

    def elementwise_s(self, num_bytes: float, op: str | None = None) -> float:
        """A memory-bound kernel ``op`` moving ``num_bytes``; 0 for none. ``op``'s own
        model when the fit has one (any alias of a canonical op), else the pooled model."""
        if num_bytes <= 0:
            return 0.0
        entry = self._elementwise_by_op.get(op)
        if entry is None:
            models = self._elementwise_models
            entry = self._elementwise_by_op[op] = models.get(opdata.canonical_elementwise_op(op), models[None])
        memo, fn = entry
        t = memo.get(num_bytes)
        if t is None:
            t = self._store(memo, num_bytes, fn(num_bytes))
        return t

    def prefetch_elementwise(self, calls) -> None:
        """Evaluate the elementwise calls ``(num_bytes, op)`` this run may make soon, together,
        into the process's memo (:mod:`lmmsim.costmodel.fitcache`); nothing is counted or
        memoised for this run, so its results and its summary stay as they were."""
        classes = self.fit.classes
        if "elementwise" not in classes or classes["elementwise"].derived_from:
            return
        per_op = classes["elementwise"].per_op
        model_of: dict = {}  # op as called -> the op of its model (None: the pooled one), looked up once
        by_model: dict[str | None, list] = {}
        for num_bytes, op in calls:
            if num_bytes > 0:
                model = model_of.get(op, model_of)
                if model is model_of:
                    canonical = opdata.canonical_elementwise_op(op)
                    model = model_of[op] = canonical if canonical in per_op else None
                by_model.setdefault(model, []).append((num_bytes,))
        for op, args in by_model.items():
            lc = classes["elementwise"] if op is None else classes["elementwise"].per_op[op]
            self._shared.scalar("elementwise", lc, op).fill(args)

    def prefetch_attention_prefill(self, calls) -> None:
        """Evaluate the prefill-attention calls ``calls`` (:meth:`attention_prefill_s`'s arguments) this
        run may make soon, together, into the process's memo, as :meth:`prefetch_elementwise` does:
        nothing is counted or memoised for this run. Only a forest gains (one pass for all)."""
        lc = self.fit.classes.get("attention_prefill")
        if lc is None or lc.kind != "forest" or lc.derived_from:
            return
        self._shared.scalar("attention_prefill", lc).fill(
            [(n, c, h, kv, hd, bool(causal)) for n, c, h, kv, hd, causal in calls if 0 < n <= c])

    def allreduce_s(self, num_bytes: float, world: int) -> float:
        """All-reduce of ``num_bytes`` over ``world`` GPUs; 0 for one GPU or no bytes."""
        if world <= 1 or num_bytes <= 0:
            return 0.0
        key = (num_bytes, world)
        t = self._allreduce_memo.get(key)
        if t is None:
            t = self._store(self._allreduce_memo, key, self._fn["allreduce"](num_bytes, world))
        return t

    def p2p_s(self, num_bytes: float) -> float:
        """Send ``num_bytes`` to a neighbouring GPU (a zero-byte message still pays its latency)."""
        t = self._p2p_memo.get(num_bytes)
        if t is None:
            t = self._store(self._p2p_memo, num_bytes, self._fn["p2p"](num_bytes))
        return t

    # ------------------------------------------------ FP8 and MoE operators
    def _extra_s(self, op_class: str, key: tuple, args: tuple) -> float:
        """``op_class``'s time for the call ``key`` (memoised; ``args``: its numeric form), from the
        fit, else from the roofline predictor's method of that name (module docstring)."""
        memo = self._memo[op_class]
        t = memo.get(key)
        if t is None:
            fn = self._extra[op_class]
            if fn is None:
                roof = getattr(self._roof, op_class + "_s", None)
                if roof is None:
                    raise NotImplementedError(f"{op_class}: not in the fit {self.fit_folder}, and the roofline "
                                              f"predictor has no {op_class}_s")
                self.roofline_answered.add(op_class)
                twin = FP8_TWINS.get(op_class)
                if twin is None:
                    return self._store(memo, key, roof(*key))
                # the fit's own bf16 kernel, sped up by what the roofline says FP8 gains on this GPU
                # (an absolute roofline would sit beside fitted bf16 times several-fold apart)
                ratio = roof(*key) / getattr(self._roof, twin + "_s")(*key)
                return self._store(memo, key, getattr(self, twin + "_s")(*key) * ratio)
            t = self._store(memo, key, fn(*args))
        return t

    def gemm_fp8_s(self, m: int, n: int, k: int) -> float:
        """``[m, k] x [k, n]`` W8A8 FP8 matmul (per-tensor scales, input quantisation included); 0 if empty."""
        if m <= 0 or n <= 0 or k <= 0:
            return 0.0
        key = (m, n, k)
        return self._extra_s("gemm_fp8", key, key)

    def attention_decode_fp8_s(self, batch: int, context_sum: int, num_heads: int, num_kv_heads: int,
                               head_dim: int) -> float:
        """Decode attention as :meth:`attention_decode_s`, over an FP8 KV cache."""
        if batch <= 0:
            return 0.0
        key = (batch, context_sum, num_heads, num_kv_heads, head_dim)
        fn = self._extra["attention_decode_fp8"]
        if fn is not None and self.fit.classes["attention_decode_fp8"].kind == "forest":
            return fn(*key)  # gridded: memoised per grid point
        return self._extra_s("attention_decode_fp8", key, key)

    def moe_experts_s(self, tokens: int, hidden: int, inter: int, num_experts: int, topk: int, moe_tp: int,
                      moe_ep: int, dtype: str = "bf16", routing: str = "balanced") -> float:
        """One MoE layer's expert computation on one GPU: ``tokens`` = the batch before dispatch
        (:mod:`lmmsim.profiler.aiconfigurator_moe`), experts ``inter / moe_tp`` wide, ``num_experts /
        moe_ep`` of them here; ``dtype`` bf16 | fp8, ``routing`` balanced | power_law_1.01 | power_law_1.2."""
        if tokens <= 0:
            return 0.0
        key = (tokens, hidden, inter, num_experts, topk, moe_tp, moe_ep, dtype, routing)
        t = self._memo["moe_experts"].get(key)
        if t is None:
            before = self.extrapolated["moe_experts"]
            t = self._extra_s("moe_experts", key, (*key[:7], code("dtype", dtype), code("routing", routing)))
            if (moe_tp > 1 and moe_ep > 1 and self._extra["moe_experts"] is not None
                    and self.extrapolated["moe_experts"] == before):
                # aiconfigurator measures experts split by TP or by EP, never both: every feature can lie
                # in range while the combination was never measured, so the call is outside the data.
                self.extrapolated_s["moe_experts"] += t
                self.extrapolated["moe_experts"] += 1
        return t

    def moe_alltoall_s(self, tokens: int, hidden: int, topk: int, ep: int, phase: str) -> float:
        """DeepEP ``phase`` (dispatch | combine) of ``tokens`` per EP rank over ``ep`` ranks; 0 for one rank."""
        if ep <= 1 or tokens <= 0:
            return 0.0
        key = (tokens, hidden, topk, ep, phase)
        t = self._memo["moe_alltoall"].get(key)
        if t is None:
            t = self._extra_s("moe_alltoall", key, (*key[:4], code("phase", phase)))
        return t

    def _extra_parts(self, op_class: str, t: float, args: tuple) -> tuple[float, float]:
        """``(compute_s, memory_s)`` of a fitted FP8 / MoE call (the bucket its fitted roofline puts it in)."""
        if t == 0.0 or op_class in LINK_CLASSES:
            return (0.0, t)
        return (t, 0.0) if self._compute_bound(op_class, *args) else (0.0, t)

    def gemm_fp8_parts(self, m: int, n: int, k: int) -> tuple[float, float]:
        if "gemm_fp8" not in self.fit.classes:
            return self._roof.gemm_fp8_parts(m, n, k)
        return self._extra_parts("gemm_fp8", self.gemm_fp8_s(m, n, k), (m, n, k))

    def attention_decode_fp8_parts(self, batch: int, context_sum: int, num_heads: int, num_kv_heads: int,
                                   head_dim: int) -> tuple[float, float]:
        args = (batch, context_sum, num_heads, num_kv_heads, head_dim)
        if "attention_decode_fp8" not in self.fit.classes:
            return self._roof.attention_decode_fp8_parts(*args)
        return self._extra_parts("attention_decode_fp8", self.attention_decode_fp8_s(*args), args)

    def moe_experts_parts(self, tokens: int, hidden: int, inter: int, num_experts: int, topk: int, moe_tp: int,
                          moe_ep: int, dtype: str = "bf16", routing: str = "balanced") -> tuple[float, float]:
        key = (tokens, hidden, inter, num_experts, topk, moe_tp, moe_ep, dtype, routing)
        if "moe_experts" not in self.fit.classes:
            return self._roof.moe_experts_parts(*key)
        args = (*key[:7], code("dtype", dtype), code("routing", routing))
        return self._extra_parts("moe_experts", self.moe_experts_s(*key), args)

    def moe_alltoall_parts(self, tokens: int, hidden: int, topk: int, ep: int, phase: str) -> tuple[float, float]:
        if "moe_alltoall" not in self.fit.classes:
            return self._roof.moe_alltoall_parts(tokens, hidden, topk, ep, phase)
        return (0.0, self.moe_alltoall_s(tokens, hidden, topk, ep, phase))

    # -------------------------------------------------------------- parts
    def gemm_parts(self, m: int, n: int, k: int) -> tuple[float, float]:
        if "gemm" not in self.fit.classes:
            return self._roof.gemm_parts(m, n, k)
        t = self.gemm_s(m, n, k)
        if t == 0.0:
            return (0.0, 0.0)
        return (t, 0.0) if self._compute_bound("gemm", m, n, k) else (0.0, t)

    def attention_prefill_parts(
        self, new_tokens: int, context: int, num_heads: int, num_kv_heads: int, head_dim: int, causal: bool = True
    ) -> tuple[float, float]:
        args = (new_tokens, context, num_heads, num_kv_heads, head_dim, causal)
        if "attention_prefill" not in self.fit.classes:
            return self._roof.attention_prefill_parts(*args)
        t = self.attention_prefill_s(*args)
        if t == 0.0:
            return (0.0, 0.0)
        return (t, 0.0) if self._compute_bound("attention_prefill", *args) else (0.0, t)

    def attention_decode_parts(
        self, batch: int, context_sum: int, num_heads: int, num_kv_heads: int, head_dim: int
    ) -> tuple[float, float]:
        args = (batch, context_sum, num_heads, num_kv_heads, head_dim)
        if "attention_decode" not in self.fit.classes:
            return self._roof.attention_decode_parts(*args)
        t = self.attention_decode_s(*args)
        if t == 0.0:
            return (0.0, 0.0)
        return (t, 0.0) if self._compute_bound("attention_decode", *args) else (0.0, t)

    def elementwise_parts(self, num_bytes: float, op: str | None = None) -> tuple[float, float]:
        return (0.0, self.elementwise_s(num_bytes, op))

    def allreduce_parts(self, num_bytes: float, world: int) -> tuple[float, float]:
        return (0.0, self.allreduce_s(num_bytes, world))

    def p2p_parts(self, num_bytes: float) -> tuple[float, float]:
        return (0.0, self.p2p_s(num_bytes))

    # --------------------------------------------------------- vectorised
    def predict_frame(self, op_class: str, df: pd.DataFrame) -> np.ndarray:
        """Seconds for every row of a profile DataFrame of ``op_class`` (fitted classes;
        the same rules as the scalar methods: forests' out-of-range rows, and
        elementwise rows by their ``op`` column's model)."""
        lc = self.fit.classes[op_class]
        pred = lc.predict_in_range_s(class_features(op_class, df))
        ops = row_ops(df) if lc.per_op else None
        if ops is not None:
            for op, sub in lc.per_op.items():
                rows = ops == op
                if rows.any():
                    pred[rows] = sub.predict_in_range_s(class_features(op_class, df[rows]))
        return pred


def extrapolated_share(predictors) -> dict[str, float] | None:
    """Per class, the share of predicted time from extrapolation over the fitted ``predictors``
    of one run (:meth:`FittedPredictor.extrapolated_share`; with several, their seconds are
    summed, and a class without data in any of them is 1), rounded to 6 digits; None when
    none of them is fitted (a roofline v0 run has no data at all)."""
    fitted = [p for p in {id(p): p for p in predictors}.values() if isinstance(p, FittedPredictor)]
    if not fitted:
        return None
    total: dict[str, float] = {}
    extra: dict[str, float] = {}
    no_data: set[str] = set()
    for p in fitted:
        no_data.update(p.fallback_classes, p.derived_classes, p.roofline_answered)
        for c, t in p.predicted_s.items():
            total[c] = total.get(c, 0.0) + t
            extra[c] = extra.get(c, 0.0) + p.extrapolated_s[c]
    share = {c: extra[c] / t for c, t in total.items() if t > 0}
    share.update({c: 1.0 for c in no_data})
    return {c: round(share[c], 6) for c in opdata.ALL_FITTED_CLASSES if c in share}

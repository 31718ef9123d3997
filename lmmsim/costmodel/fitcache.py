"""Loaded fits and their evaluations, shared by every run of one process.

A sweep, ``lmmsim reproduce``, a search's trials and RPS-Serve's profiling runs
build one :class:`~lmmsim.costmodel.fitted.FittedPredictor` per run; without
sharing, each loaded the fit folder again (~0.1 s) and evaluated its forests
for every call shape again (~0.4 s of a short run's loop). :func:`shared_fit`
returns one :class:`SharedFit` per fit folder *as it is on disk* (the size,
modification time and inode of ``model.json`` and every forest file), GPU
and interconnect (every input that changes a prediction), holding the loaded
fit and memos of *pure* evaluations: a shape's seconds and whether it lies
outside the fit's data, never a run's counters.

What a run reports is kept per run: each predictor keeps its own memo exactly
as before and counts an evaluation (its ``extrapolated_share``) on a miss of
*its* memo, whether the shared memo answered or the model did. So a run's
summary is the same byte for byte whether it ran first or tenth in its process.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lmmsim.costmodel import prediction_cache
from lmmsim.costmodel.features import CLASSES, LINK_CLASSES
from lmmsim.costmodel.fitstore import LoadedClass, LoadedFit, load_fit

#: A shared memo is cleared past this many entries (a result never changes, only its cost).
SHARED_MEMO_LIMIT = 1 << 19
#: At most this many fits x GPUs kept (a process rarely uses more than a handful).
MAX_FITS = 16

_FITS: dict[tuple, SharedFit] = {}

#: An evaluation's flag: not counted (no data here), counted inside the data, counted outside.
UNCOUNTED, INSIDE, OUTSIDE = 0, 1, 2


def _files_key(folder: Path) -> tuple:
    """Name, size and modification time (ns) of ``model.json`` and every forest file: a fit
    rewritten in place names another shared fit. (Stat, not content: hashing the ~9 MB of
    a fit cost ~20 ms a run, a tenth of a short sweep run.)"""
    out = []
    for path in [folder / "model.json", *sorted(folder.glob("*.npz"))]:
        st = path.stat()
        out.append((path.name, st.st_size, st.st_mtime_ns, st.st_ino))
    return tuple(out)


def shared_fit(folder: Path, gpu, interconnect) -> SharedFit:
    """The process's :class:`SharedFit` of ``folder`` on ``gpu`` / ``interconnect`` (loaded once per
    content; its memos start from the disk entry with ``$LMMSIM_PREDICTION_CACHE``)."""
    folder = Path(folder)
    files = _files_key(folder)
    gpu_json = gpu.model_dump_json()
    link_json = interconnect.model_dump_json() if interconnect is not None else None
    key = (str(folder.resolve()), files, gpu_json, link_json)
    hit = _FITS.get(key)
    if hit is None:
        if len(_FITS) >= MAX_FITS:
            _FITS.clear()
        hit = _FITS[key] = SharedFit(folder, gpu, interconnect, prediction_cache.entry_path(files, gpu_json, link_json))
    return hit


def clear() -> None:
    """Forget every shared fit (tests; a long-lived process that wants its memory back)."""
    _FITS.clear()


def save_predictions() -> None:
    """Write the memos that grew since read to their disk entries (``$LMMSIM_PREDICTION_CACHE``;
    a run calls it as it ends, so sweep workers leave their evaluations behind too)."""
    for fit in _FITS.values():
        fit.save()


class SharedFit:
    """A loaded fit plus memoised pure evaluations (``(seconds, flag)`` per call shape)."""

    def __init__(self, folder: Path, gpu, interconnect, disk_entry: Path | None = None):
        self.fit: LoadedFit = load_fit(folder, gpu, interconnect)
        if self.fit.gpu and self.fit.gpu != gpu.name:
            raise ValueError(f"{folder}: fitted for {self.fit.gpu!r}, not {gpu.name!r}")
        if interconnect is None:  # a derived collective cannot be scaled to an unknown link
            for op_class in LINK_CLASSES:
                if op_class in self.fit.classes and self.fit.classes[op_class].derived_from:
                    del self.fit.classes[op_class]
        self._scalars: dict[tuple, object] = {}
        self._disk_entry = disk_entry  # lmmsim.costmodel.prediction_cache: None without the variable
        self._memos: dict[tuple, dict]  # every scalar memo by (class, op), each _Memo's own dict
        self._gemm_blocks: dict[tuple, tuple]
        self._memos, self._gemm_blocks = prediction_cache.load(disk_entry)  # empty without an entry
        self._saved_size = self._size()

    def _size(self) -> int:
        return len(self._gemm_blocks) + sum(map(len, self._memos.values()))

    def save(self) -> None:
        """Write the memos to the disk entry if they grew since read or written (no-op without one)."""
        if self._disk_entry is None or self._size() == self._saved_size:
            return
        # copies (each made in one step): a dask worker's other threads may be filling them
        prediction_cache.save(self._disk_entry, {n: dict(m) for n, m in self._memos.items()}, dict(self._gemm_blocks))
        self._saved_size = self._size()

    # ------------------------------------------------------------ scalars
    def scalar(self, op_class: str, lc: LoadedClass, op: str | None = None):
        """``f(*args) -> (seconds, flag)`` of ``lc`` (``op_class``'s model, or its per-op model
        ``op``), memoised per argument tuple and types; the flag as :data:`OUTSIDE` etc."""
        name = (op_class, op)
        fn = self._scalars.get(name)
        if fn is None:
            fn = self._scalars[name] = _Memo(op_class, lc, self._memos.setdefault(name, {}))
        return fn

    def gemm_block(self, lo: int, n: int, k: int, block: int) -> tuple:
        """A forest GEMM's ``(times, predicted_s, extrapolated_s, extrapolated)`` for token counts
        ``lo .. lo + block - 1`` (memoised): one vectorised pass, as ``_fill_gemm_block`` needs it."""
        key = (lo, n, k, block, type(n), type(k))
        hit = self._gemm_blocks.get(key)
        if hit is None:
            if len(self._gemm_blocks) >= SHARED_MEMO_LIMIT // block:
                self._gemm_blocks.clear()
            # as features.class_features computes them from a frame, without building one
            args = (np.arange(lo, lo + block, dtype=float), np.full(block, float(n)), np.full(block, float(k)))
            feats = {nm: np.broadcast_to(np.asarray(v, float), (block,)).copy()
                     for nm, v in CLASSES["gemm"].features(*args).items()}
            lc = self.fit.classes["gemm"]
            times = lc.predict_in_range_s(feats)
            outside = ~lc.domain_check().inside_frame(feats)
            hit = self._gemm_blocks[key] = (times.tolist(), float(times.sum()), float(times[outside].sum()),
                                            int(outside.sum()))
        return hit


class _Memo:
    """An evaluator memoised per argument tuple and types; :meth:`fill` evaluates many
    calls of a forest in one pass (the same floats as one at a time)."""

    def __init__(self, op_class: str, lc: LoadedClass, memo: dict | None = None):
        self.op_class, self.lc = op_class, lc
        self.memo: dict = {} if memo is None else memo  # SharedFit's (filled from the disk entry)
        # The evaluator is built on the first miss: a predictor makes a memo for every class
        # and op, and building it reads a forest's arrays (LoadedClass.model) a run may never use.
        self.ev = self._first
        self._rows = None  # fill's row function (a forest's), made on its first use

    def _first(self, *args):
        self.ev = evaluator(self.op_class, self.lc)
        return self.ev(*args)

    def __call__(self, *args):
        key = (args, tuple(map(type, args)))  # 2 and 2.0 may evaluate differently in a feature
        hit = self.memo.get(key)
        if hit is None:
            if len(self.memo) >= SHARED_MEMO_LIMIT:
                self.memo.clear()
            hit = self.memo[key] = self.ev(*args)
        return hit

    def fill(self, calls) -> None:
        """Evaluate the argument tuples ``calls`` not memoised yet, the forest's ones together."""
        memo = self.memo
        todo = {}
        for args in calls:
            key = (args, tuple(map(type, args)))
            if key not in memo:
                todo[key] = args
        if not todo:
            return
        if len(memo) + len(todo) >= SHARED_MEMO_LIMIT:
            memo.clear()
        lc = self.lc
        if lc.kind != "forest" or lc.derived_from:
            for key, args in todo.items():
                memo[key] = self.ev(*args)
            return
        if self._rows is None:
            self._rows = _row_fn(self.op_class, lc)
        rows_of = self._rows
        forest_keys, rows = [], []
        for key, args in todo.items():
            row = rows_of(*args)  # (features, flag) for the forest, else the finished (seconds, flag)
            if isinstance(row[0], list):
                forest_keys.append((key, row[1]))
                rows.append(row[0])
            else:
                memo[key] = row
        for (key, flag), t in zip(forest_keys, lc.model.scalar_many(rows)):
            memo[key] = (t, flag)


def _row_fn(op_class: str, lc: LoadedClass):
    """For a forest: ``f(*args) -> (feature row, flag)`` when the forest answers the call, else
    its ``(seconds, flag)`` from the fitted roofline (the rules of :func:`evaluator`)."""
    features = CLASSES[op_class].call_features()
    inside = lc.domain_check().inside
    names, roof_s = lc.features, lc.roofline.time_s

    def row(*args):
        f = features(*args)
        if inside(f):
            return [f[nm] for nm in names], INSIDE
        return roof_s(f["flops"], f["bytes"], f["count"], f.get("ctas")), OUTSIDE  # a forest: always

    return row


def evaluator(op_class: str, lc: LoadedClass):
    """``f(*shape) -> (seconds, flag)`` for one call of ``lc`` in Python floats; the rules of
    :mod:`lmmsim.costmodel.fitted` (derived: uncounted; outside the domain: the fitted
    roofline for a forest or an attention class, else the model itself)."""
    spec = CLASSES[op_class]
    work, features = spec.work, spec.call_features()
    inside = lc.domain_check().inside
    if lc.kind == "roofline" and lc.derived_from and lc.model.num_sms is None:
        time_s = lc.model.time_s  # derived, no occupancy term: no data here, wholly extrapolated
        return lambda *args: (time_s(*work(*args)), UNCOUNTED)
    if lc.kind == "roofline":
        time_s, derived = lc.model.time_s, bool(lc.derived_from)

        def roofline(*args):  # with occupancy: the grid size comes with the features
            f = features(*args)
            t = time_s(f["flops"], f["bytes"], f["count"], f.get("ctas"))
            return t, (UNCOUNTED if derived else INSIDE if inside(f) else OUTSIDE)

        return roofline
    names = lc.features
    scalar_s = lc.model.scalar_s
    roof_s = lc.roofline.time_s
    # (Outside a class without a physical domain is the box of its log features, which
    # are a forest's inputs: the box the forest answered in before domains.)
    to_roofline = lc.roofline_outside()

    def model(*args):
        f = features(*args)
        if inside(f):
            return scalar_s([f[nm] for nm in names]), INSIDE
        if to_roofline:
            return roof_s(f["flops"], f["bytes"], f["count"], f.get("ctas")), OUTSIDE
        return scalar_s([f[nm] for nm in names]), OUTSIDE

    return model


# ------------------------------------------------------------- prefetching
PREFETCH_BLOCK = 128  # token counts per prefetched block (a power of two)


class _ElementwiseCalls:
    """A stand-in predictor for the plain dense composition: records its elementwise calls
    (``(num_bytes, op)``) and answers every call 0."""

    def __init__(self):
        self.calls: list[tuple] = []

    def elementwise_s(self, num_bytes, op=None) -> float:
        self.calls.append((num_bytes, op))
        return 0.0

    def gemm_s(self, m, n, k) -> float:
        return 0.0

    def allreduce_s(self, num_bytes, world) -> float:
        return 0.0


class _PrefillCalls:
    """A stand-in predictor for a prefill chunk's composition: records its attention calls
    (the predictor's arguments) and answers every call 0."""

    def __init__(self):
        self.calls: list[tuple] = []

    def attention_prefill_s(self, *args) -> float:
        self.calls.append(args)
        return 0.0


def prefetch_dense_block(cm, tokens: int) -> None:
    """On a step cost model's first dense miss in a block of :data:`PREFETCH_BLOCK` token
    counts, hand its fitted predictor the elementwise calls of the whole block (the
    composition's own arithmetic, run on :class:`_ElementwiseCalls`): it evaluates a
    forest for them in one pass (one call in Python costs ~40 us) into the shared memo,
    which counts nothing; the run then counts its own calls as before, so step times and
    the extrapolated share are those of calls made one by one. ``cm``: a
    :class:`~lmmsim.costmodel.composed.ComposedStepCostModel` of a plain dense model."""
    _prefetch_block(cm, "dense", tokens, "prefetch_elementwise", _ElementwiseCalls, cm._dense_cost)


def prefetch_fresh_prefills(cm, chunk: tuple) -> None:
    """On a step cost model's first miss of a fresh prefill ``(n, n)`` (a whole prompt, or its
    first chunk) in a block of :data:`PREFETCH_BLOCK` prompt lengths, hand its predictor the
    attention calls of the block's fresh prefills (the composition's own, run on
    :class:`_PrefillCalls`): an engine meets most prompt lengths up to its chunk budget that
    way, each a forest walk of its own (~40 us a call, most of a prefill's memo misses), and the
    predictor evaluates them in one pass into the shared memo, which counts nothing. The run
    then counts its own calls as before. A later chunk of a prompt, ``(n, context)``, rarely
    repeats a shape: it is left to its own call."""
    new_tokens, context = chunk
    if new_tokens != context or type(new_tokens) is not int or new_tokens <= 0:
        return  # (another int type would be memoised under another key)
    _prefetch_block(cm, "fresh", new_tokens, "prefetch_attention_prefill", _PrefillCalls,
                    lambda recorder, n: cm._prefill_attention_cost(recorder, (n, n)))


def _prefetch_block(cm, kind: str, count: int, prefetch_name: str, recorder_cls, compose) -> None:
    """Once per cost model and block of :data:`PREFETCH_BLOCK` counts (``kind``'s, the block of
    ``count``): run ``compose(recorder, n)`` for each count ``n`` of the block on a
    ``recorder_cls()`` and hand its calls to the predictor's ``prefetch_name`` method, if it has one."""
    block = (count - 1) // PREFETCH_BLOCK
    if (kind, block) in cm._prefetched:
        return
    cm._prefetched.add((kind, block))
    prefetch = getattr(cm.predictor, prefetch_name, None)
    if prefetch is None:
        return
    recorder = recorder_cls()
    lo = block * PREFETCH_BLOCK + 1
    for n in range(lo, lo + PREFETCH_BLOCK):
        compose(recorder, n)
    prefetch(recorder.calls)

"""Saved cost models evaluated with numpy only: roofline, polynomial, forest.

What :mod:`lmmsim.costmodel.fitstore` rebuilds from a fit folder and
:class:`~lmmsim.costmodel.fitted.FittedPredictor` calls: each model predicts
seconds, vectorised over a feature matrix (``predict_s``) and for one call
(``time_s`` / ``scalar_s``: pure Python floats for the roofline and the
polynomial, a numpy walk of one row for the forest), and the two agree to float
rounding. No scikit-learn: the polynomial and the forest are
the arrays scikit-learn fitted (:mod:`lmmsim.costmodel.estimators`), replayed.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left

import numpy as np


def occupancy(ctas, num_sms):
    """Share of the GPU's SMs a grid of ``ctas`` thread blocks keeps busy: ``min(1, ctas / num_sms)``
    (:class:`~lmmsim.costmodel.estimators.RooflineRegressor`, "Occupancy")."""
    if isinstance(ctas, np.ndarray):
        return np.minimum(1.0, np.maximum(ctas, 1.0) / num_sms)
    return min(1.0, max(ctas, 1.0) / num_sms)


class RooflineModel:
    """Fitted roofline, evaluated in numpy (vectorised) or pure Python floats (:meth:`time_s`).

    A roofline fitted with occupancy (``params["num_sms"]``, attention prefill) takes the
    grid's thread blocks as a fourth input (``ctas``; a 4th column of ``X``) and divides
    the bytes by :func:`occupancy`; ``num_sms`` replaces the fitted GPU's SM count (a class
    derived for another GPU)."""

    def __init__(self, params: dict, peak_flops: float | None = None, peak_bytes_per_s: float | None = None,
                 num_sms: int | None = None):
        self.params = dict(params)
        sms = params.get("num_sms")
        self.num_sms = (num_sms or sms) if sms else None
        P = peak_flops if peak_flops is not None else params.get("peak_flops")
        Bw = peak_bytes_per_s if peak_bytes_per_s is not None else params["peak_bytes_per_s"]
        self.uses_compute = bool(params.get("uses_compute")) and P is not None
        if self.uses_compute:
            self._c_rate = P * params["compute_max"]
            self._c_half = params["compute_half_flops"]
        else:
            self._c_rate, self._c_half = 1.0, 0.0
        self._m_rate = Bw * params["memory_max"]
        self._m_half = params["memory_half_bytes"]
        self._launch = params["launch_s"]

    def terms(self, flops: float, nbytes: float, ctas: float | None = None) -> tuple[float, float]:
        if self.num_sms and ctas is not None:
            nbytes = nbytes / occupancy(ctas, self.num_sms)
        tc = (flops + self._c_half) / self._c_rate if (flops > 0 and self.uses_compute) else 0.0
        tm = (nbytes + self._m_half) / self._m_rate if nbytes > 0 else 0.0
        return tc, tm

    def time_s(self, flops: float, nbytes: float, count: float = 1.0, ctas: float | None = None) -> float:
        # terms() and occupancy() inlined, the same expressions: every outside-the-data call of a
        # forest or attention class ends here (prefill attention's chunked calls, mostly)
        if self.num_sms and ctas is not None:
            nbytes = nbytes / min(1.0, max(ctas, 1.0) / self.num_sms)
        tc = (flops + self._c_half) / self._c_rate if (flops > 0 and self.uses_compute) else 0.0
        tm = (nbytes + self._m_half) / self._m_rate if nbytes > 0 else 0.0
        return (tc if tc > tm else tm) + self._launch * count

    def compute_bound(self, flops: float, nbytes: float, ctas: float | None = None) -> bool:
        tc, tm = self.terms(flops, nbytes, ctas)
        return tc > tm

    def predict_s(self, X: np.ndarray) -> np.ndarray:
        flops, nbytes, count = X[:, 0], X[:, 1], X[:, 2]
        if self.num_sms and X.shape[1] > 3:
            nbytes = nbytes / occupancy(X[:, 3], self.num_sms)
        tm = np.where(nbytes > 0, (nbytes + self._m_half) / self._m_rate, 0.0)
        if self.uses_compute:
            tm = np.maximum(np.where(flops > 0, (flops + self._c_half) / self._c_rate, 0.0), tm)
        return tm + self._launch * count


class PolyModel:
    """Standardise -> polynomial terms -> linear, predicting log seconds."""

    def __init__(self, params: dict):
        self.mean = np.asarray(params["mean"], float)
        self.scale = np.asarray(params["scale"], float)
        self.powers = np.asarray(params["powers"], np.int64)
        self.coef = np.asarray(params["coef"], float)
        self.intercept = float(params["intercept"])
        # Pure-Python form for one call: each term as the feature indices it multiplies.
        self._mean, self._scale = self.mean.tolist(), self.scale.tolist()
        self._terms = [(c, [i for i, p in enumerate(row) for _ in range(p)])
                       for c, row in zip(self.coef.tolist(), self.powers.tolist())]

    def predict_s(self, X: np.ndarray) -> np.ndarray:
        Z = (X - self.mean) / self.scale
        terms = np.prod(Z[:, None, :] ** self.powers[None, :, :], axis=2)
        return np.exp(terms @ self.coef + self.intercept)

    def scalar_s(self, x) -> float:
        z = [(v - m) / s for v, m, s in zip(x, self._mean, self._scale)]
        acc = self.intercept
        for c, idx in self._terms:
            for i in idx:
                c *= z[i]
            acc += c
        return math.exp(acc)


class ForestModel:
    """Mean of regression trees (sklearn's arrays), predicting log seconds.

    Inputs are rounded to float32 before the ``x <= threshold`` tests, as
    scikit-learn does, so predictions equal its own to float rounding.

    Both paths walk every tree at once over flat arrays with the children as global
    node indices, descending all trees together for the forest's depth (a leaf is its
    own child, so finished trees stay put): :meth:`predict_s` all (tree, row) pairs of a
    matrix, :meth:`scalar_s` the trees of one row, in numpy. One row's walk was a Python
    loop over lists of boxed numbers, tree by tree; numpy's gathers over compact arrays
    take a third of its time when the nodes are out of the CPU caches, as between engine
    steps, and about two thirds warm (``python bench/forest_walk.py``, H100 prefill
    attention, 40 trees of depth 12: 145 vs 373 us a cold call, 30 vs 49 us warm). Neither
    changes a prediction: the same tests, the trees' values summed in tree order.

    The walk's arrays (:meth:`_walk_arrays`) are derived on the first prediction, not
    when the forest is read: derived eagerly, a fit's twelve forests cost a run ~50 ms
    of memory writes before its first step, for classes it may never call. A forest
    whose every split tests one input (p2p, elementwise) answers :meth:`scalar_s` and
    :meth:`scalar_many` from its step table instead (:class:`_Steps`, the same floats).
    Preparing twice (two threads of a sweep worker) is harmless: either way is exact.
    """

    def __init__(self, arrays):
        self.offsets = np.asarray(arrays["tree_offsets"], np.int64)
        self.left = np.asarray(arrays["children_left"])
        self.right = np.asarray(arrays["children_right"])
        self.feature = np.asarray(arrays["feature"])
        self.threshold = np.asarray(arrays["threshold"], float)
        self.value = np.asarray(arrays["value"], float)
        self._walk = None  # _walk_arrays(), built on the first prediction (a loaded class may never predict)
        self._steps: _Steps | None = None  # a forest of one input, once _prepare() has seen it is one

    def _prepare(self) -> None:
        """On the first prediction: the walk's arrays, and the step table of a one-input forest."""
        self._walk = self._walk_arrays()
        inner = self.left >= 0
        first = int(self.feature[inner.argmax()])  # an inner node's input (any node's, when none is inner)
        if inner.any() and not (inner & (self.feature != first)).any():
            self._steps = _Steps(self, first, np.unique(self.threshold[inner]).tolist())

    def _walk_arrays(self) -> tuple:
        """``(children, feature, threshold, roots, depth)``: the flat arrays both walks descend.
        A node ``i`` sits at doubled index ``2 i``, so that ``children[2 i + (x <= threshold)]``
        is the doubled index of the child taken (a leaf is its own child; its test reads input 0
        and is discarded), ``feature`` and ``threshold`` hold node ``i`` at ``2 i``,
        and ``depth`` descents bring every root to its leaf; a leaf's value is ``value[node >> 1]``.
        ``feature`` and ``threshold`` are views of one array, a node's input beside its threshold:
        a descent reads two cache lines per node visited instead of three (RServe's GEMM blocks,
        128 rows, caches evicted: ~560 -> ~525 us a walk), and the memory is half as large.
        (Built on the first prediction; the arrays are written once, in place, as fresh memory
        costs a page fault per 4 KB.)"""
        n = len(self.left)
        children = np.empty(2 * n, np.int64)
        right, left = children[0::2], children[1::2]
        base = np.repeat(self.offsets, np.diff(self.offsets, append=n))  # each node's tree's first node
        np.add(self.right, base, out=right)
        np.add(self.left, base, out=left)
        leaves = np.flatnonzero(self.left < 0)
        right[leaves] = leaves
        left[leaves] = leaves
        children <<= 1
        # Node i's threshold at 2 i and its input at 2 i + 1 of one array; the input's view starts one
        # place on, so both are read at the walk's (always even, doubled) node index.
        tests = np.empty(2 * n, np.int64)
        np.maximum(self.feature, 0, out=tests[1::2], casting="unsafe")
        threshold = tests.view(np.float64)
        threshold[0::2] = self.threshold
        roots = 2 * self.offsets
        return children, tests[1:], threshold, roots, _depth(roots, children)

    def _leaf_totals(self, X32: np.ndarray) -> np.ndarray:
        """Per row of float32-rounded inputs, the sum of its leaf values over the trees, in tree order."""
        if self._walk is None:
            self._prepare()
        children, feature, threshold, roots, depth = self._walk
        rows, width = X32.shape
        flat = np.ascontiguousarray(X32).ravel()
        at = np.tile(np.arange(0, rows * width, width), len(roots))  # (tree, row) -> its row's first input
        node = np.repeat(roots, rows)  # (tree, row) pairs, tree-major
        for _ in range(depth):
            node = children.take(node + (flat.take(at + feature.take(node)) <= threshold.take(node)))
        total = np.zeros(rows)
        for v in self.value.take(node >> 1).reshape(len(roots), rows):  # tree by tree, as the trees were summed
            total += v
        return total

    def predict_s(self, X: np.ndarray) -> np.ndarray:
        X32 = np.asarray(X, np.float32).astype(float)
        return np.exp(self._leaf_totals(X32) / len(self.offsets))

    def predict_s_reference(self, X: np.ndarray) -> np.ndarray:
        """:meth:`predict_s` one tree at a time, the straightforward way (the tests' reference)."""
        X32 = np.asarray(X, np.float32).astype(float)
        rows = np.arange(len(X32))
        total = np.zeros(len(X32))
        for off in self.offsets:
            node = np.zeros(len(X32), np.int64) + off
            while True:
                left = self.left[node]
                inner = left >= 0
                if not inner.any():
                    break
                f = np.where(inner, self.feature[node], 0)
                go_left = X32[rows, f] <= self.threshold[node]
                node = np.where(inner, np.where(go_left, left, self.right[node]) + off, node)
            total += self.value[node]
        return np.exp(total / len(self.offsets))

    def scalar_s(self, x) -> float:
        if self._walk is None:
            self._prepare()
        if self._steps is not None:
            return self._steps.at(array("f", (x[self._steps.input],))[0])
        children, feature, threshold, roots, depth = self._walk
        x32 = np.array(x, np.float32).astype(float)
        node = roots
        for _ in range(depth):
            node = children[node + (x32[feature[node]] <= threshold[node])]
        total = 0.0
        for v in self.value[node >> 1].tolist():  # tree by tree, as the trees were summed one at a time
            total += v
        return math.exp(total / len(roots))

    def scalar_many(self, rows) -> list[float]:
        """``[scalar_s(x) for x in rows]`` in one vectorised descent, the very same floats: the
        same float32 rounding and tests, the trees' values summed in order, Python's exp."""
        if not len(rows):
            return []
        if self._walk is None:
            self._prepare()
        if self._steps is not None:
            j = self._steps.input
            return list(map(self._steps.at, array("f", [x[j] for x in rows])))
        total = self._leaf_totals(np.array([array("f", x).tolist() for x in rows]))
        n = len(self.offsets)
        return [math.exp(t / n) for t in total.tolist()]

    def scalar_s_reference(self, x) -> float:
        """:meth:`scalar_s` over one Python list per tree, the straightforward way (the tests' reference)."""
        ends = list(self.offsets[1:]) + [len(self.left)]
        x = array("f", x).tolist()
        total = 0.0
        for s, e in zip(self.offsets, ends):
            left, right, feature, threshold, value = (a[s:e].tolist() for a in (
                self.left, self.right, self.feature, self.threshold, self.value))
            node = 0
            while left[node] >= 0:
                node = left[node] if x[feature[node]] <= threshold[node] else right[node]
            total += value[node]
        return math.exp(total / len(ends))


class _Steps:
    """A forest that splits on one input only, as the step function it is.

    Its distinct thresholds ``cuts`` (sorted) bound ``len(cuts) + 1`` intervals, interval ``i``
    being ``(cuts[i - 1], cuts[i]]`` (the last one: above every cut, NaN included). Every
    ``x <= threshold`` test of the forest comes out the same for all inputs of one interval,
    so they reach the same leaves and get the very same float; a representative of each
    (``cuts[i]`` itself, +inf for the last) is walked instead of the call. The values are
    walked :data:`BLOCK` intervals at a time, in one vectorised descent, when a call first
    falls in the block: a p2p or elementwise call then costs a bisection, where a walk of
    its own read ~40 trees x 12 levels of nodes, most of them out of the caches between
    engine steps.
    """

    BLOCK = 128

    def __init__(self, forest: ForestModel, input_index: int, cuts: list[float]):
        self.forest, self.input, self.cuts = forest, input_index, cuts
        self._blocks: dict[int, list[float]] = {}

    def at(self, x32: float) -> float:
        """The forest's seconds for an input already rounded to float32."""
        i = bisect_left(self.cuts, x32) if x32 == x32 else len(self.cuts)
        block = self._blocks.get(i // self.BLOCK)
        if block is None:
            block = self._walk_block(i // self.BLOCK)
        return block[i % self.BLOCK]

    def _walk_block(self, b: int) -> list[float]:
        lo = b * self.BLOCK
        reps = self.cuts[lo:lo + self.BLOCK]
        if lo + self.BLOCK > len(self.cuts):
            reps.append(math.inf)
        X = np.zeros((len(reps), self.input + 1))
        X[:, self.input] = reps
        n = len(self.forest.offsets)
        block = self._blocks[b] = [math.exp(t / n) for t in self.forest._leaf_totals(X).tolist()]
        return block


def _depth(roots, children) -> int:
    """Edges on the longest root-to-leaf path of any tree (doubled indices, as in
    :meth:`ForestModel._walk_arrays`: a leaf ``i`` has ``children[i] == i``)."""
    depth, node = 0, roots
    while True:
        node = node[children[node] != node]
        if not len(node):
            return depth
        node = np.concatenate((children[node], children[node + 1]))
        depth += 1

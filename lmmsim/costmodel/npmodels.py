"""Saved cost models evaluated with numpy only: roofline, polynomial, forest.

What :mod:`lmmsim.costmodel.fitstore` rebuilds from a fit folder and
:class:`~lmmsim.costmodel.fitted.FittedPredictor` calls: each model predicts
seconds, vectorised over a feature matrix (``predict_s``) and for one call in
pure Python floats (``time_s`` / ``scalar_s``, no numpy overhead), and the two
agree to float rounding. No scikit-learn: the polynomial and the forest are
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
        tc, tm = self.terms(flops, nbytes, ctas)
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
    node indices: :meth:`predict_s` descends all (tree, row) pairs together for the
    forest's depth (a leaf is its own child, so finished pairs stay put), and
    :meth:`scalar_s` walks flat Python lists (built on its first call). Neither
    changes a prediction: the same tests, the trees' values summed in tree order.
    """

    def __init__(self, arrays):
        self.offsets = np.asarray(arrays["tree_offsets"], np.int64)
        self.left = np.asarray(arrays["children_left"], np.int64)
        self.right = np.asarray(arrays["children_right"], np.int64)
        self.feature = np.asarray(arrays["feature"], np.int64)
        self.threshold = np.asarray(arrays["threshold"], float)
        self.value = np.asarray(arrays["value"], float)
        n = len(self.left)
        tree = np.repeat(np.arange(len(self.offsets)), np.diff(np.append(self.offsets, n)))
        base = self.offsets[tree]
        leaf = self.left < 0
        own = np.arange(n, dtype=np.int64)
        self._left_g = np.where(leaf, own, self.left + base)
        self._right_g = np.where(leaf, own, self.right + base)
        self._feature_g = np.where(leaf, 0, self.feature)
        self._depth = self._max_depth()
        self._lists = None

    def _max_depth(self) -> int:
        """Edges on the longest root-to-leaf path of any tree (the descents :meth:`predict_s` needs)."""
        depth = 0
        node = self.offsets.copy()
        while True:
            inner = self.left[node] >= 0
            if not inner.any():
                return depth
            node = np.concatenate([self._left_g[node[inner]], self._right_g[node[inner]]])
            depth += 1

    def _leaf_totals(self, X32: np.ndarray) -> np.ndarray:
        """Per row of float32-rounded inputs, the sum of its leaf values over the trees, in tree order."""
        cols = np.arange(len(X32))[None, :]
        node = np.repeat(self.offsets[:, None], len(X32), axis=1)  # (trees, rows)
        for _ in range(self._depth):
            go_left = X32[cols, self._feature_g[node]] <= self.threshold[node]
            node = np.where(go_left, self._left_g[node], self._right_g[node])
        total = np.zeros(len(X32))
        for v in self.value[node]:  # tree by tree, as the trees were summed one at a time
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
        if self._lists is None:
            inner = self.left >= 0
            self._lists = (self.offsets.tolist(), np.where(inner, self._left_g, -1).tolist(),
                           self._right_g.tolist(), self.feature.tolist(), self.threshold.tolist(),
                           self.value.tolist())
        roots, left, right, feature, threshold, value = self._lists
        x = array("f", x).tolist()
        total = 0.0
        for node in roots:
            while left[node] >= 0:
                node = left[node] if x[feature[node]] <= threshold[node] else right[node]
            total += value[node]
        return math.exp(total / len(roots))

    def pruned(self, fixed: dict[int, float]) -> "PrunedForest":
        """This forest for rows whose columns ``fixed`` (index -> value) hold those values."""
        return PrunedForest(self, fixed)

    def recurring_walk(self, columns: tuple[int, ...] = ()) -> "RecurringWalk":
        """:meth:`scalar_s` for one caller's calls, faster where they recur (one walker per
        ``columns``: the inputs its rows take few values of)."""
        walks = self.__dict__.setdefault("_walks", {})
        walk = walks.get(columns)
        if walk is None:
            walk = walks[columns] = RecurringWalk(self, columns)
        return walk

    def scalar_many(self, rows) -> list[float]:
        """``[scalar_s(x) for x in rows]`` in one vectorised descent, the very same floats: the
        same float32 rounding and tests, the trees' values summed in order, Python's exp."""
        if not len(rows):
            return []
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


# A forest is pruned for a tuple of fixed-column values, or a one-input forest tabled, once it
# has seen this many calls (pruning the H100 prefill-attention forest takes ~35 ms, 100-200
# cold walks; a value that comes back rarely, such as an encoder batch folded into its head
# count, is not worth it), and pruned for at most this many tuples (~1 MB each).
PRUNE_AFTER = 16
MAX_PRUNED = 32


class RecurringWalk:
    """``forest.scalar_s``, the same floats, faster for calls that recur.

    * A forest of one input is a step function of it: after ``PRUNE_AFTER`` calls it is
      tabled once (:class:`StepTable`) and answered by a bisection.
    * ``columns`` are inputs the caller's rows take few values of (one model's heads and
      head size): rows with values seen ``PRUNE_AFTER`` times walk the forest pruned to
      them (:class:`PrunedForest`).
    """

    def __init__(self, forest: ForestModel, columns: tuple[int, ...]):
        self._forest, self._columns = forest, columns
        self._one_input = bool((forest.feature[forest.left >= 0] == 0).all())
        self._table: StepTable | None = None
        self._calls = 0
        self._pruned: dict[tuple, PrunedForest] = {}
        self._seen: dict[tuple, int] = {}

    def __call__(self, x) -> float:
        if self._table is not None:
            return self._table(x)
        if self._one_input:
            self._calls += 1
            if self._calls >= PRUNE_AFTER:
                self._table = StepTable(self._forest)
                return self._table(x)
            return self._forest.scalar_s(x)
        if not self._columns:
            return self._forest.scalar_s(x)
        key = tuple([x[i] for i in self._columns])
        pruned = self._pruned.get(key)
        if pruned is None:
            seen = self._seen[key] = self._seen.get(key, 0) + 1
            if seen < PRUNE_AFTER or len(self._pruned) >= MAX_PRUNED:
                return self._forest.scalar_s(x)
            pruned = self._pruned[key] = self._forest.pruned({i: x[i] for i in self._columns})
        return pruned.scalar_s(x)


class StepTable:
    """A forest of one input as the step function it is: the prediction of every interval
    between consecutive thresholds, computed once (in one vectorised descent), then read
    by bisection.

    Inputs are float32-rounded before the trees' ``x <= threshold`` tests, so each interval
    ``(t[i-1], t[i]]`` is evaluated at a float32 inside it (the largest at or below
    ``t[i]``); one that holds no float32 can never be asked for. The same floats as a walk:
    every input in an interval makes every tree take the same path.
    """

    def __init__(self, forest: ForestModel):
        thr = np.unique(forest.threshold[forest.left >= 0])
        rep = thr.astype(np.float32)
        rep = np.where(rep.astype(float) > thr, np.nextafter(rep, np.float32(-np.inf)), rep)
        top = np.float32(thr[-1]) if len(thr) else np.float32(0.0)
        if len(thr) and float(top) <= thr[-1]:
            top = np.nextafter(top, np.float32(np.inf))
        rep = np.append(rep, top).astype(float)
        below = np.append(-np.inf, thr)  # each interval's lower end (exclusive)
        reachable = rep > below
        values = forest.scalar_many([[r] for r in rep[reachable].tolist()])
        self._values = [None] * len(rep)
        for i, v in zip(np.flatnonzero(reachable).tolist(), values):
            self._values[i] = v
        self._thresholds = thr.tolist()
        self._forest = forest

    def __call__(self, x) -> float:
        v = array("f", x).tolist()[0]
        if v != v:  # NaN fails every test: the walk goes right throughout
            return self._forest.scalar_s(x)
        return self._values[bisect_left(self._thresholds, v)]


class PrunedForest:
    """A forest with some inputs fixed and its tests on them resolved, for one call at a time.

    A forest fitted across models splits on their heads, KV heads and head size; one model's
    calls only ever take one side of those tests, so resolving them keeps a fraction of the
    nodes (the H100 prefill-attention forest: 28,740 of 171,756 for Qwen2-72B's attention).
    The rest is stored in flat arrays in depth-first order (a node's left child right after
    it) instead of Python lists of boxed numbers: the walk of a cold call (its nodes out of
    the CPU caches, as between engine steps) touches a few compact arrays, not 30 MB of
    scattered objects (`python bench/forest_walks.py` on this 2-core EPYC, caches evicted before
    each call: 147 vs 348 us a call; 30 vs 52 us warm).

    Exact for any row whose fixed columns round to the same float32 as the values given:
    the walk makes the same tests and sums the same leaf values in tree order.
    """

    def __init__(self, forest: ForestModel, fixed: dict[int, float]):
        left, right = forest.left.tolist(), forest.right.tolist()
        feature, threshold, value = forest.feature.tolist(), forest.threshold.tolist(), forest.value.tolist()
        fixed32 = dict(zip(fixed, array("f", list(fixed.values())).tolist()))
        feat, thr, val = array("h"), array("d"), array("d")
        children: list[int] = []  # per node: (right, left), so that [2 * node + (x <= threshold)] descends
        self._roots = roots = []
        for base in forest.offsets.tolist():
            stack = [(base, None)]  # (global node, (parent, 0 right / 1 left) to point at it)
            while stack:
                g, link = stack.pop()
                while left[g] >= 0 and feature[g] in fixed32:  # a resolved test: go straight through it
                    g = base + (left[g] if fixed32[feature[g]] <= threshold[g] else right[g])
                i = len(thr)
                if link is None:
                    roots.append(i)
                else:
                    children[2 * link[0] + link[1]] = i
                leaf = left[g] < 0
                feat.append(-1 if leaf else feature[g])
                thr.append(threshold[g])
                val.append(value[g])
                children += (-1, -1)
                if not leaf:  # left pushed last: visited next, so it sits right after its parent
                    stack.append((base + right[g], (i, 0)))
                    stack.append((base + left[g], (i, 1)))
        self._feat, self._thr, self._val = feat, thr, val
        self._children = array("i", children)
        self.num_nodes = len(thr)

    def scalar_s(self, x) -> float:
        feat, thr, children, val = self._feat, self._thr, self._children, self._val
        x = array("f", x).tolist()
        total = 0.0
        for node in self._roots:
            f = feat[node]
            while f >= 0:
                node = children[2 * node + (x[f] <= thr[node])]
                f = feat[node]
            total += val[node]
        return math.exp(total / len(self._roots))

"""The domain of a fitted class: which calls lie inside the data it was fitted on.

Why cells and not one box, and which features: :mod:`lmmsim.costmodel.features`
(section "Domain"). A domain is fitted from the feature arrays of a class's
rows (:func:`fit_domain`), saved as plain JSON in ``model.json``
(``classes.<class>.domain``) and checked per call (:class:`DomainCheck`, pure
Python floats, a dict look-up and a few comparisons) or per frame
(:meth:`DomainCheck.inside_frame`).

JSON layout::

    {"cells": [feature, ...], "octave": feature | null, "box": [feature, ...],
     "boxes": {cell key: [[lo, hi], ...]}}   # one [lo, hi] per box feature

A cell key joins the cell features' values (rounded to 6 decimals) and the
octave index ``floor(log2 size)`` with ``|``; a call whose cell the data never
had is outside. Octave ``k``'s box spans the rows of octaves ``k-1 .. k+1``, so
a size between two measured ones in adjacent octaves is inside (interpolated),
while one beyond the smallest or largest measured size stays outside (``log_new_tokens`` is a box feature).
"""

from __future__ import annotations

import math
from operator import itemgetter

import numpy as np

from lmmsim.costmodel.features import CLASSES

#: Slack on every bound: float noise between fit-time (vectorised) and call-time features.
EPS = 1e-9
_LN2 = math.log(2.0)


def _spec(op_class: str, log_features) -> tuple[tuple[str, ...], str | None, tuple[str, ...]]:
    d = CLASSES[op_class].domain
    if d is None:
        return (), None, tuple(log_features)
    return d.cells, d.octave, d.box



def _key(values) -> str:
    return "|".join(f"{v:.6f}" if isinstance(v, float) else str(v) for v in values)


def fit_domain(op_class: str, feats: dict, log_features=None) -> dict:
    """The domain of rows with features ``feats`` (arrays, :func:`~lmmsim.costmodel.features.class_features`)."""
    cells, octave, box = _spec(op_class, log_features or CLASSES[op_class].log_features)
    n = len(next(iter(feats.values())))
    cols = [np.round(np.asarray(feats[c], float), 6) for c in cells]
    values = np.column_stack([np.asarray(feats[b], float) for b in box]) if box else np.zeros((n, 0))
    cell_keys = np.array([_key([float(c[i]) for c in cols]) for i in range(n)], dtype=object)
    boxes: dict[str, list] = {}

    def add(key: str, rows: np.ndarray) -> None:
        boxes[key] = [[float(lo), float(hi)] for lo, hi in zip(rows.min(axis=0), rows.max(axis=0))]

    for cell in sorted(set(cell_keys.tolist())):
        in_cell = cell_keys == cell
        if octave is None:
            add(cell, values[in_cell])
            continue
        # Octave k's box is drawn from the rows of octaves k-1..k+1: a length between two
        # measured ones in adjacent octaves (729 patches between 576 and 1024) interpolates.
        octs = np.floor(np.asarray(feats[octave], float)[in_cell] / _LN2 + 1e-9).astype(int)
        rows = values[in_cell]
        for k in range(int(octs.min()) - 1, int(octs.max()) + 2):
            near = np.abs(octs - k) <= 1
            if near.any():
                add(f"{cell}|{k}" if cells else str(k), rows[near])
    return {"cells": list(cells), "octave": octave, "box": list(box), "boxes": boxes}


class DomainCheck:
    """``inside(feature dict) -> bool`` for one saved domain (None: nothing is inside)."""

    def __init__(self, domain: dict | None):
        self.domain = domain
        if domain is None:
            self._cells, self._octave, self._box, self._boxes = (), None, (), {}
            return
        self._cells = tuple(domain["cells"])
        self._octave = domain["octave"]
        self._box = tuple(domain["box"])
        self._boxes = {k: tuple((lo - EPS, hi + EPS) for lo, hi in v) for k, v in domain["boxes"].items()}
        # The same boxes keyed by tuples (cell values rounded as floats, octave as int): a call's
        # check builds no string (decode attention is checked every engine step).
        self._by_tuple = {self._parse(k): v for k, v in self._boxes.items()}
        if not self._cells and self._octave is None:  # one box: no key to build
            self.inside = self._box_inside(self._boxes.get(""))
        else:
            self.inside = self._cell_inside()

    def _cell_inside(self):
        """:meth:`inside` for a domain of cells, as a closure over its parts (it runs on every
        memo miss of an attention class: no attribute look-ups, no second call for the box).
        A cell's rounded values are memoised by the call's values (a call's cell features take
        a few values in a run, and ``round(x, 6)`` is a decimal conversion)."""
        cells, octave, box, by_tuple = self._cells, self._octave, self._box, self._by_tuple
        floor, ln2 = math.floor, _LN2
        values = itemgetter(*cells) if len(cells) > 1 else (lambda f: tuple([f[c] for c in cells]))
        rounded: dict[tuple, tuple] = {}

        def inside(f: dict) -> bool:
            raw = values(f)
            key = rounded.get(raw)
            if key is None:
                if len(rounded) >= 4096:  # NaN never hits: keep it bounded
                    rounded.clear()
                key = rounded[raw] = tuple([round(v, 6) for v in raw])
            if octave is not None:
                key += (floor(f[octave] / ln2 + 1e-9),)
            bounds = by_tuple.get(key)
            if bounds is None:
                return False
            for nm, (lo, hi) in zip(box, bounds):
                v = f[nm]
                if v < lo or v > hi:
                    return False
            return True

        return inside

    def _box_inside(self, bounds):
        """:meth:`inside` for a domain of one box (``bounds``; None: no box, nothing inside), as a
        closure over its (feature, (lo, hi)) pairs."""
        if bounds is None:
            return lambda f: False
        pairs = tuple(zip(self._box, bounds))

        def inside(f: dict) -> bool:
            for nm, (lo, hi) in pairs:
                v = f[nm]
                if v < lo or v > hi:
                    return False
            return True

        return inside

    def _parse(self, key: str) -> tuple:
        parts = key.split("|") if key else []
        cells = tuple(float(v) for v in parts[:len(self._cells)])
        return cells + ((int(parts[len(self._cells)]),) if self._octave is not None else ())

    @classmethod
    def from_ranges(cls, ranges: dict, names) -> DomainCheck:
        """One box over ``names`` from a fit's ``feature_ranges`` (fits saved before domains)."""
        names = [nm for nm in names if nm in ranges]
        return cls({"cells": [], "octave": None, "box": names, "boxes": {"": [ranges[nm] for nm in names]}})

    def inside(self, f: dict) -> bool:
        """Do the features ``f`` of one call lie in the data? A saved domain replaces this, per
        instance, by :meth:`_box_inside`'s or :meth:`_cell_inside`'s closure (both tested against
        :meth:`inside_frame`); without one, nothing is inside."""
        return False

    def inside_frame(self, feats: dict) -> np.ndarray:
        """Vectorised :meth:`inside` over feature arrays."""
        n = len(next(iter(feats.values())))
        if self.domain is None:
            return np.zeros(n, bool)
        vals = [np.asarray(feats[b], float) for b in self._box]
        if not self._cells and self._octave is None:  # one box: vectorised
            bounds = self._boxes.get("")
            out = np.full(n, bounds is not None)
            for v, (lo, hi) in zip(vals, bounds or ()):
                out &= (v >= lo) & (v <= hi)
            return out
        out = np.zeros(n, bool)
        cols = [np.round(np.asarray(feats[c], float), 6) for c in self._cells]
        octs = (np.floor(np.asarray(feats[self._octave], float) / _LN2 + 1e-9).astype(int)
                if self._octave is not None else None)
        for i in range(n):
            parts = [f"{c[i]:.6f}" for c in cols]
            if octs is not None:
                parts.append(str(int(octs[i])))
            bounds = self._boxes.get("|".join(parts))
            out[i] = bounds is not None and all(lo <= v[i] <= hi for v, (lo, hi) in zip(vals, bounds))
        return out

"""Repeated media in a synthetic workload: which items reuse one seen before.

Users send the same picture, clip or video again (a chat that resends its image
each turn, a popular product photo); engines then skip work through caches keyed
by the item's identity (:mod:`lmmsim.engine.media_cache`). The ``reuse:`` key of a
mix class (or of the whole workload, for every class without its own) says how
often and which:

* ``probability`` p: each media item of the class, in request order then prompt
  order, is with probability p a copy of an item the class produced before (same
  medium), otherwise new. The first item of each medium is always new, so a run
  of n items has about p (n - 1) copies. A copy carries the original's shape
  (same resolution, frames or seconds, hence the same tokens and encoder work)
  and its ``media_id``; a new item gets a fresh id, ``"<class>/<medium>/<k>"``.
* ``popularity``: which earlier item a copy takes, among the candidates (the
  distinct items of that medium so far, or only the ``window`` most recently
  introduced ones). ``uniform``: each equally likely -- no locality beyond the
  window. ``zipf``: the k-th most recently introduced candidate with weight
  ``k ** -zipf_exponent`` -- recent items are the popular ones (temporal
  locality, as in multi-turn chats), the kind of reuse an LRU cache serves.
* ``window`` K (default: all seen): only the K newest distinct items are
  candidates, a sliding catalogue; reuse distance then stays bounded.

Probability 0 (the default) draws nothing and sets no ids, so requests are
exactly those of a workload without the key. Draws come from their own random
stream, one child stream per class (so one class's reuse settings do not move
another's), two uniforms per media item.
"""

from __future__ import annotations

import bisect
from dataclasses import replace
from typing import Literal

import numpy as np
from pydantic import Field

from lmmsim.workload.distributions import PositiveCount, PositiveNumber, StrictModel
from lmmsim.workload.request import MediaItem


class ReuseConfig(StrictModel):
    """How often a class's media items repeat earlier ones, and which (module docstring)."""

    probability: float = Field(0.0, ge=0, le=1)
    popularity: Literal["uniform", "zipf"] = "uniform"
    zipf_exponent: PositiveNumber = 1.0
    window: PositiveCount | None = None

    @property
    def active(self) -> bool:
        return self.probability > 0


class _Chooser:
    """Picks a candidate from the ``m`` newest distinct items with one uniform draw."""

    def __init__(self, cfg: ReuseConfig):
        self.zipf = cfg.popularity == "zipf"
        self.exponent = cfg.zipf_exponent
        self.window = cfg.window
        self._cum: list[float] = []  # cumulative Zipf weights of ranks 1, 2, ...

    def offset_from_newest(self, num_seen: int, v: float) -> int:
        """0 = the newest candidate, up to ``m - 1`` (m: candidates)."""
        m = num_seen if self.window is None else min(num_seen, self.window)
        if not self.zipf:
            return min(int(v * m), m - 1)
        cum = self._cum
        while len(cum) < m:  # grows once per new rank: O(log m) per pick overall
            cum.append((cum[-1] if cum else 0.0) + (len(cum) + 1) ** -self.exponent)
        return min(bisect.bisect_right(cum, v * cum[m - 1], 0, m), m - 1)


def apply_reuse(media: list[tuple[MediaItem, ...]], cfg: ReuseConfig, rng: np.random.Generator,
                prefix: str) -> list[tuple[MediaItem, ...]]:
    """``media`` (one tuple of items per request of a class, request order) with ids
    given and copies made as ``cfg`` says; ``prefix`` (the class name) starts new ids."""
    total = sum(len(items) for items in media)
    draws = rng.random((total, 2)).tolist()
    chooser = _Chooser(cfg)
    seen: dict[str, list[MediaItem]] = {}  # medium -> distinct items, oldest first
    out = []
    d = 0
    for items in media:
        row = []
        for item in items:
            pool = seen.setdefault(item.modality, [])
            u, v = draws[d]
            d += 1
            if pool and u < cfg.probability:
                row.append(pool[len(pool) - 1 - chooser.offset_from_newest(len(pool), v)])
                continue
            fresh = replace(item, media_id=f"{prefix}/{item.modality}/{len(pool)}")
            pool.append(fresh)
            row.append(fresh)
        out.append(tuple(row))
    return out

"""A claim's simulated value over seeds: mean, 95% confidence interval, and verdicts that hold up.

One run decides nothing: a claim is evaluated once per seed (the sweep's
``repeat``), and its verdicts are read off the confidence interval of the mean
(Student's t, two-sided 95%):

* direction (``change``: the sign; ``ratio``: which side of 1) -- ``yes`` when
  the whole interval lies on the paper's side, ``no`` when it lies on the other,
  ``tie`` when it straddles; with one seed the point decides and is marked so;
* ``holds`` claims (0/1 per seed) -- ``yes`` when every seed holds, ``no`` when
  none does, ``k/n`` otherwise;
* magnitude (simulated effect over the paper's, 1 = same size) -- the interval
  mapped through the same linear map; it *misses* only when the whole interval
  lies outside 0.65-1.35.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import stats

CONFIDENCE = 0.95
MATCH_BAND = (0.65, 1.35)


@dataclass(frozen=True)
class SeedStats:
    values: tuple[float, ...]

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return math.fsum(self.values) / self.n if self.n else math.nan

    @property
    def half_width(self) -> float:
        """Half the 95% CI of the mean (0 with one seed: nothing to say about the spread)."""
        n = self.n
        if n < 2 or any(v != v for v in self.values):
            return 0.0 if n == 1 else math.nan
        m = self.mean
        sd = math.sqrt(math.fsum((v - m) ** 2 for v in self.values) / (n - 1))
        return float(stats.t.ppf(0.5 + CONFIDENCE / 2, n - 1)) * sd / math.sqrt(n)

    @property
    def interval(self) -> tuple[float, float]:
        h = self.half_width
        return (self.mean - h, self.mean + h)

    def text(self) -> str:
        if self.n < 2:
            return f"{self.mean:.3g}"
        return f"{self.mean:.3g} ± {self.half_width:.2g} (n={self.n})"


def direction(kind: str, paper: float, s: SeedStats) -> str:
    """``yes`` / ``no`` / ``tie`` (``k/n`` for ``holds``; ``-`` where a claim has no direction)."""
    if kind == "holds":
        held = sum(1 for v in s.values if v == 1)
        return "yes" if held == s.n else "no" if held == 0 else f"{held}/{s.n}"
    if kind not in ("change", "ratio"):
        return "-"
    if s.mean != s.mean:
        return "no"
    pivot = 0.0 if kind == "change" else 1.0
    lo, hi = s.interval
    want_above = paper > pivot
    if lo > pivot or hi < pivot:
        return "yes" if (lo > pivot) == want_above else "no"
    return "tie" if s.n > 1 else "no"  # one seed sitting on the pivot: no effect at all


def magnitude_interval(kind: str, paper: float, s: SeedStats) -> tuple[float, float] | None:
    """The CI of the simulated effect over the paper's effect (None for ``holds``, and where
    the paper's effect is nil -- "no gain", 0 -- so no ratio to it exists: the row shows
    the simulator's value and its CI, and makes no magnitude verdict)."""
    if kind == "holds" or paper == (1 if kind == "ratio" else 0):
        return None

    def mag(v: float) -> float:
        if kind == "ratio":
            return (v - 1) / (paper - 1) if paper != 1 else math.nan
        return v / paper if paper else math.nan

    a, b = (mag(v) for v in s.interval)
    return (min(a, b), max(a, b))


def magnitude_misses(interval: tuple[float, float] | None) -> bool:
    if interval is None:
        return False
    lo, hi = interval
    if lo != lo or hi != hi:
        return True
    return hi < MATCH_BAND[0] or lo > MATCH_BAND[1]


def magnitude_text(interval: tuple[float, float] | None, mean_mag: float) -> str:
    if interval is None:
        return "-"
    text = f"{mean_mag:.2f}" if interval[0] == interval[1] else f"{mean_mag:.2f} [{interval[0]:.2f}, {interval[1]:.2f}]"
    return f"**{text}**" if magnitude_misses(interval) else text

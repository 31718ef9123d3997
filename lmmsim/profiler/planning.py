"""Planning a time-limited profile: predicted costs of shapes, and the thinning factor that fits.

:class:`Planner` predicts a shape's kernel time and the wall time of its
measurement from a few timed probes per class; :func:`choose_factor` finds the
largest thinning factor (:func:`lmmsim.profiler.grid.thin_indices`) whose kept
shapes fit a budget; :func:`nominal_rates` gives the starting rates. How
:func:`lmmsim.profiler.run.profile` uses them (calibration, re-plans, hard
stop) is in that module's docstring.
"""

from __future__ import annotations

import math

import numpy as np

from lmmsim import catalog
from lmmsim.profiler import grid as G
from lmmsim.profiler import timing


class Planner:
    """Predicts a case's kernel time and measurement wall time (see module doc).

    Kernel time: piecewise-linear interpolation, in log-log space, of the
    probes' measured kernel time against their work estimate (roofline time at
    nominal rates); outside the probes, proportional to the nearest one. Wall
    time: a per-class fixed cost (build, first-call overheads; the probes'
    median) plus the calls the repeat policy makes.
    """

    def __init__(self, rates: tuple[float, float, float], policy: timing.RepeatPolicy, per_call_s: float,
                 default_overhead_s: float):
        self.flops_per_s, self.bytes_per_s, self.launch_s = rates
        self.policy = policy
        self.per_call_s = per_call_s
        self.default_overhead_s = default_overhead_s
        self.fits: dict[str, tuple[list[float], list[float], float]] = {}

    def model_s(self, c: G.Case) -> float:
        return c.launches * self.launch_s + c.flops / self.flops_per_s + c.bytes / self.bytes_per_s

    def kernel_s(self, c: G.Case) -> float:
        fit = self.fits.get(c.op_class)
        m = self.model_s(c)
        if fit is None:
            return m
        xs, ys, _ = fit
        x = math.log(m)
        if x <= xs[0]:
            return math.exp(ys[0] + x - xs[0])
        if x >= xs[-1]:
            return math.exp(ys[-1] + x - xs[-1])
        return math.exp(float(np.interp(x, xs, ys)))

    def wall_s(self, c: G.Case) -> float:
        k = self.kernel_s(c)
        fit = self.fits.get(c.op_class)
        over = fit[2] if fit else self.default_overhead_s
        return over + self.policy.calls_for(k) * (k + self.per_call_s)

    def fit(self, op_class: str, samples: list[tuple[G.Case, float, float]]) -> None:
        """``samples``: (case, kernel_s, wall_s) of the class's probes."""
        pts = sorted((math.log(self.model_s(c)), math.log(max(k, 1e-9)), k, w) for c, k, w in samples)
        if not pts:
            return
        xs, ys = [], []
        for x, y, _, _ in pts:  # strictly increasing x, non-decreasing y
            if xs and x <= xs[-1] + 1e-9:
                ys[-1] = max(ys[-1], y)
                continue
            xs.append(x)
            ys.append(max(y, ys[-1]) if ys else y)
        over = sorted(w - self.policy.calls_for(k) * (k + self.per_call_s) for *_, k, w in pts)
        self.fits[op_class] = (xs, ys, max(0.0, over[len(over) // 2]))

    def probes(self, cases: list[G.Case], idx: list[int], count: int = 5) -> set[int]:
        """``count`` cases of ``idx`` spread evenly over log work, extremes included."""
        logs = {i: math.log(self.model_s(cases[i])) for i in idx}
        lo, hi = min(logs.values()), max(logs.values())
        picks = set()
        for j in range(count):
            target = lo + (hi - lo) * j / max(1, count - 1)
            picks.add(min(idx, key=lambda i: (abs(logs[i] - target), i)))
        return picks


def choose_factor(cases: list[G.Case], cost: list[float], budget_s: float, exclude: set[int],
                   whole: frozenset = frozenset()) -> float:
    """Largest thinning factor whose kept cases (less ``exclude``; grids in
    ``whole`` entire) cost <= budget (0: endpoints only)."""
    groups = [([(i, 0.0 if i in exclude else cost[i]) for i in idx], grid in whole)
              for grid, idx in G.group_by_grid(cases).items()]

    def total(f):
        return sum(g[j][1] for g, entire in groups
                   for j in (range(len(g)) if entire else G.thin_indices(len(g), f)))

    if total(1.0) <= budget_s:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(20):
        mid = (lo + hi) / 2
        if total(mid) <= budget_s:
            lo = mid
        else:
            hi = mid
    return lo


def nominal_rates(device_type: str, hardware: str) -> tuple[float, float, float]:
    """(FLOP/s, bytes/s, launch s) to start from: the catalog's figures for
    ``hardware`` when it has them; only ratios between shapes matter, since the
    probes rescale them."""
    try:
        gpu = catalog.get_gpu(hardware)
        return gpu.peak_flops * 0.7, gpu.hbm_bytes_per_s * 0.8, gpu.efficiency.kernel_launch_us * 1e-6
    except Exception:  # noqa: BLE001 - not in the catalog
        return (7e14, 3e12, 5e-6) if device_type == "cuda" else (5e11, 2e10, 2e-5)

"""Goodput as the highest sustainable request rate under tail-latency bounds.

DistServe (Zhong et al., 2024) -- whose metrics EAServe follows (easerve.txt
§4.1, "SLO thresholds at the P99 level (TTFT in s / TPOT in ms)") -- defines
goodput as the highest arrival rate a system serves while meeting its SLO. A
run's summary already gives ``goodput_requests_per_s`` at its own rate (the
rate of requests that met the per-request SLO); this module gives the other
reading, from a sweep over rates: the largest rate whose P99 TTFT and P99 TPOT
are both within the bounds, every lower rate included.

Choice (ours): between the last rate that meets the bounds and the first that
misses, the crossing is interpolated linearly in whichever metric crosses
first, so goodput is not quantised to the sweep's grid. A system that meets
the bounds at every rate of the sweep gets the top rate (a lower bound: the
sweep should reach past saturation). One that misses at the lowest rate gets 0.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

RATE = "workload.arrival.rate"


def sustainable_rate(rates: Sequence[float], ttft_p99: Sequence[float], tpot_p99: Sequence[float],
                     ttft_bound: float | None, tpot_bound: float | None) -> float:
    """Highest rate (interpolated) at which P99 TTFT <= ``ttft_bound`` and P99 TPOT <=
    ``tpot_bound`` hold, at it and at every lower rate. A bound of None is not checked;
    a NaN metric (no request finished) misses."""
    points = sorted(zip(rates, ttft_p99, tpot_p99))
    bounds = [(i, b) for i, b in ((1, ttft_bound), (2, tpot_bound)) if b is not None]

    def meets(p) -> bool:
        return all(p[i] == p[i] and p[i] <= b for i, b in bounds)

    if not points or not meets(points[0]):
        return 0.0
    for prev, cur in zip(points, points[1:]):
        if meets(cur):
            continue
        fractions = []
        for i, b in bounds:
            if cur[i] == cur[i] and cur[i] <= b:
                continue
            if cur[i] != cur[i]:  # NaN: nothing finished there; no interpolation
                fractions.append(0.0)
            else:
                fractions.append((b - prev[i]) / (cur[i] - prev[i]))
        return float(prev[0] + min(fractions) * (cur[0] - prev[0]))
    return float(points[-1][0])


def tiered_goodput(frame: pd.DataFrame, scales: Sequence[float], ttft_base_s: float | None,
                   tpot_base_s: float | None, *, series: str = "name", rate: str = RATE) -> pd.DataFrame:
    """One row per (series, tier): ``slo.scale``, the bounds ``scale x base`` and
    ``goodput_requests_per_s`` = :func:`sustainable_rate` over the series' runs (the
    mean P99 over repeats at each rate)."""
    rows = []
    for name, part in frame.groupby(series, sort=True):
        by_rate = part.groupby(rate)[["ttft_s.p99", "tpot_s.p99"]].mean().reset_index()
        for scale in scales:
            ttft = None if ttft_base_s is None else ttft_base_s * scale
            tpot = None if tpot_base_s is None else tpot_base_s * scale
            rows.append({series: name, "slo.scale": float(scale), "slo.ttft_p99_s": ttft, "slo.tpot_p99_s": tpot,
                         "goodput_requests_per_s": sustainable_rate(by_rate[rate], by_rate["ttft_s.p99"],
                                                                    by_rate["tpot_s.p99"], ttft, tpot),
                         "max_rate": float(by_rate[rate].max()), "status": "ok"})
    return pd.DataFrame(rows)

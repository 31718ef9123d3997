"""RServe's claims as functions of a sweep's ``results.parquet`` (one seed's rows).

Where the paper gives a number averaged "over request rates" we average the
per-rate relative change over the sweep's rates; "up to" is the largest
per-rate value; a plateau throughput is the highest input-token throughput
over the rates (the sweeps run past saturation).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

RATE = "workload.arrival.rate"
TTFT = "ttft_s.mean"
TPUT = "throughput.input_tokens_per_s"
C_KEY = "deployment.encoder.dispatch.embedding_batch_tokens"
ADMISSION = "deployment.admission"


def label_column(df: pd.DataFrame) -> str:
    """The column naming a run's system: ``name`` where a sweep labels variants of one
    preset (fig12's ``rserve-tt``), else ``system``."""
    return "name" if "name" in df.columns else "system"


def by_rate(df: pd.DataFrame, system: str, metric: str) -> pd.Series:
    rows = df[df[label_column(df)] == system]
    return rows.groupby(RATE)[metric].mean()


def mean_change(df: pd.DataFrame, system: str, baseline: str, metric: str = TTFT) -> float:
    """Mean over rates of ``system / baseline - 1``."""
    a, b = by_rate(df, system, metric), by_rate(df, baseline, metric)
    both = a.index.intersection(b.index)
    return float((a[both] / b[both] - 1).mean()) if len(both) else math.nan


def mean_abs_change(df: pd.DataFrame, system: str, baseline: str, metric: str = TTFT) -> float:
    a, b = by_rate(df, system, metric), by_rate(df, baseline, metric)
    both = a.index.intersection(b.index)
    return float((a[both] / b[both] - 1).abs().mean()) if len(both) else math.nan


def max_ratio_to_best(df: pd.DataFrame, system: str, others: tuple[str, ...], metric: str = TTFT) -> float:
    """Largest per-rate ``system / min(others)``."""
    a = by_rate(df, system, metric)
    best = pd.concat([by_rate(df, o, metric) for o in others], axis=1).min(axis=1)
    both = a.index.intersection(best.index)
    return float((a[both] / best[both]).max()) if len(both) else math.nan


def plateau(df: pd.DataFrame, system: str) -> float:
    return float(by_rate(df, system, TPUT).max())


def plateau_change(df: pd.DataFrame, system: str, baseline: str) -> float:
    return plateau(df, system) / plateau(df, baseline) - 1


def mean_slo(df: pd.DataFrame, system: str) -> float:
    return float(by_rate(df, system, "slo_attainment").mean())


def slo_area_change(df: pd.DataFrame, system: str, baseline: str) -> float:
    """Area under SLO attainment vs rate (trapezoids), relative to the baseline's."""
    def area(s):
        return curve_area(by_rate(df, s, "slo_attainment"))
    return area(system) / area(baseline) - 1


def curve_area(curve: pd.Series) -> float:
    """Area under a curve indexed by rate (trapezoids over the sorted rates)."""
    curve = curve.sort_index()
    x, y = curve.index.to_numpy(float), curve.to_numpy(float)
    return float(np.sum((y[1:] + y[:-1]) / 2 * np.diff(x)))


def fraction_better(df: pd.DataFrame, system: str, others: tuple[str, ...]) -> float:
    """1 if ``system`` has the lowest mean TTFT at every rate, else 0."""
    a = by_rate(df, system, TTFT)
    best = pd.concat([by_rate(df, o, TTFT) for o in others], axis=1).min(axis=1)
    both = a.index.intersection(best.index)
    return float(bool(len(both)) and bool((a[both] < best[both]).all()))


def epd_worse_at_lowest_rate(df: pd.DataFrame) -> float:
    a, b = by_rate(df, "gllm-epd", TTFT), by_rate(df, "gllm", TTFT)
    low = min(a.index.intersection(b.index))
    return float(a[low] > b[low])


def advantage_shrinks(df: pd.DataFrame, system: str, baseline: str) -> float:
    """1 if the relative TTFT gain at the highest rate is smaller than at the lowest."""
    a, b = by_rate(df, system, TTFT), by_rate(df, baseline, TTFT)
    both = sorted(a.index.intersection(b.index))
    gain = 1 - a[both] / b[both]
    return float(gain.iloc[-1] < gain.iloc[0])


# --- Fig. 16: the embedding batch size sweep (two requests)
def _c_curve(df: pd.DataFrame, metric: str) -> pd.Series:
    rows = df[df[ADMISSION] == "streaming"]
    return rows.groupby(C_KEY)[metric].mean().sort_index()


def _epd_point(df: pd.DataFrame, metric: str) -> float:
    return float(df.loc[df[ADMISSION] == "after_encode", metric].mean())


def ttft_growth_over_c(df: pd.DataFrame) -> float:
    """TTFT with everything encoded first (gLLM-epd) / TTFT at C = one item."""
    return _epd_point(df, TTFT) / float(_c_curve(df, TTFT).iloc[0])


def throughput_drop_over_c(df: pd.DataFrame) -> float:
    return _epd_point(df, TPUT) / float(_c_curve(df, TPUT).iloc[0]) - 1


def monotone_in_c(df: pd.DataFrame) -> float:
    curve = list(_c_curve(df, TTFT)) + [_epd_point(df, TTFT)]
    return float(all(b >= a for a, b in zip(curve, curve[1:])) and curve[-1] > curve[0])


def u_shaped_in_c(df: pd.DataFrame) -> float:
    """1 if TTFT's minimum over C lies strictly inside the range (falls, then rises)."""
    curve = list(_c_curve(df, TTFT)) + [_epd_point(df, TTFT)]
    k = int(np.argmin(curve))
    return float(0 < k < len(curve) - 1 and curve[0] > curve[k] < curve[-1])


# --- shapes over the rate grid
def gain_peaks_inside(df: pd.DataFrame, system: str, baseline: str) -> float:
    """1 if the per-rate TTFT gain of ``system`` over ``baseline`` rises, then falls:
    its largest value lies strictly between the lowest and the highest rate."""
    a, b = by_rate(df, system, TTFT), by_rate(df, baseline, TTFT)
    both = sorted(a.index.intersection(b.index))
    gain = (1 - a[both] / b[both]).to_numpy()
    k = int(np.argmax(gain))
    return float(0 < k < len(gain) - 1 and gain[k] > gain[0] and gain[k] > gain[-1])


def better_at_every_rate(df: pd.DataFrame, system: str, baseline: str) -> float:
    a, b = by_rate(df, system, TTFT), by_rate(df, baseline, TTFT)
    both = a.index.intersection(b.index)
    return float(bool(len(both)) and bool((a[both] < b[both]).all()))


def better_at_highest_rate(df: pd.DataFrame, system: str, baseline: str) -> float:
    a, b = by_rate(df, system, TTFT), by_rate(df, baseline, TTFT)
    top = max(a.index.intersection(b.index))
    return float(a[top] < b[top])


def rises_then_plateaus(df: pd.DataFrame, system: str, flat: float = 0.05) -> float:
    """1 if input throughput grows with the rate and its last two rates lie within ``flat``
    of each other (the plateau the paper reads off Fig. 13)."""
    curve = by_rate(df, system, TPUT).sort_index().to_numpy()
    return float(curve[-1] > 2 * curve[0] and abs(curve[-1] / curve[-2] - 1) <= flat)


def slo_falls_off(df: pd.DataFrame, system: str) -> float:
    """1 if SLO attainment is 100% at the lowest rate and below 20% at the highest."""
    curve = by_rate(df, system, "slo_attainment").sort_index()
    return float(curve.iloc[0] >= 0.995 and curve.iloc[-1] < 0.2)


def slo_gap_narrows(df: pd.DataFrame, system: str, baseline: str) -> float:
    """1 if ``system``'s SLO attainment lead over ``baseline`` at the highest rate is below its largest."""
    gap = (by_rate(df, system, "slo_attainment") - by_rate(df, baseline, "slo_attainment")).dropna().sort_index()
    return float(gap.iloc[-1] < gap.max())


def throughput_flat(df: pd.DataFrame, system: str, within: float = 0.1) -> float:
    """1 if input throughput stays within ``within`` of its mean over every rate of the sweep."""
    curve = by_rate(df, system, TPUT)
    return float((curve / curve.mean() - 1).abs().max() <= within)


def throughput_same_then_apart(df: pd.DataFrame, systems: tuple[str, ...], same: float = 0.02) -> float:
    """1 if at the lowest rate every system's throughput lies within ``same`` of the others',
    and at the highest rate they lie further apart than that."""
    table = pd.concat([by_rate(df, s, TPUT) for s in systems], axis=1).dropna().sort_index()
    spread = table.max(axis=1) / table.min(axis=1) - 1
    return float(spread.iloc[0] <= same < spread.iloc[-1])


# --- the abstract's "up to": the best case over the figures the paper evaluates against baselines
OURS = ("rserve", "rserve-tt", "rserve-intra")


def best_case(df: pd.DataFrame, metric: str, exclude: tuple[str, ...] = ()) -> float:
    """Largest per-rate gain of RServe over any baseline in any figure of ``df`` (a
    ``figure`` column): TTFT as a reduction (returned negative, -0.66 = 66% lower),
    throughput as an increase (1.09 = +109%)."""
    best = -math.inf
    for _, fig in df.groupby("figure"):
        col = label_column(fig)
        ours = by_rate(fig, "rserve", metric)
        for base in sorted(set(fig[col]) - set(OURS) - set(exclude)):
            theirs = by_rate(fig, base, metric)
            both = ours.index.intersection(theirs.index)
            ratio = ours[both] / theirs[both]
            best = max(best, float((1 - ratio).max() if metric == TTFT else (ratio - 1).max()))
    return -best if metric == TTFT else best

"""The trial history of a search: one row per trial, how trials rank, when HAS stops.

Every method records its trials through :class:`TrialRecorder`, which also
adds up the search cost: per trial, the simulated time its run lasted
(``sim_duration_s``) plus ``deploy_s`` (starting the trial's workers: loading
weights and warming up, which on real hardware is most of a trial's "several
minutes", easerve.txt §3.1), on top of the method's start cost (HAS: Stage 1's
profiling, :func:`lmmsim.search.profiling.stage1_cost`). A trial answered from
the evaluator's cache costs nothing.

Ranking. TPE needs one number (:func:`objective_value`): throughput rounded
to a quantum ``q = tie_tolerance x Λ`` (1% of Λ) plus ``q x`` a tie-breaker
in [0, 0.99) that falls with mean TTFT, then mean TPOT, so the sampler ranks
lexicographically. The reported best (:func:`best_index`) is exactly
lexicographic with a tolerance: among trials within 1% of the highest
throughput, the lowest mean TTFT, then the lowest mean TPOT. Stop
(:func:`stop_reason`) when the top-3 throughputs (distinct configurations)
spread less than 1%, or after 5 consecutive trials without a new best, or at
the budget (30, the caller's); the two early rules apply only from
``min_trials`` (10) on, so they cannot fire on the seeds alone (at an
under-saturating Λ every good trial reaches Λ).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lmmsim.search.mapping import Config

SPREAD_TOLERANCE = 0.01  # stop when the top-3 throughputs spread less than this (relative)
PATIENCE = 5  # stop after this many consecutive trials without a new best
MIN_TRIALS = 10  # the two early-stopping rules apply from this many trials on
TIE_TOLERANCE = 0.01  # throughputs within this fraction (of Λ / of the best) are comparable
TTFT_REF_S = 1.0  # tie-breaker scales (objective_value)
TPOT_REF_S = 0.05

#: The columns of ``trials.csv`` / ``trials.parquet``, in order.
HISTORY_COLUMNS = ["trial", "method", "alloc", "n_e", "n_p", "tp_p", "n_d", "tp_d", "local_tp", "batch_bound",
                   "offload_s", "throughput_rps", "ttft_mean_s", "tpot_mean_s", "num_finished", "objective",
                   "sim_duration_s", "cum_sim_cost_s", "wall_s", "cached", "status", "error"]


def objective_value(throughput: float, ttft: float | None, tpot: float | None, quantum: float) -> float:
    """Scalar for TPE: throughput rounded to ``quantum``, plus ``quantum x`` a
    tie-breaker in [0, 0.99) falling with mean TTFT (weight 0.9) and mean TPOT (0.09)."""
    if throughput is None or not math.isfinite(throughput):
        return -1.0
    ttft = math.inf if ttft is None or not math.isfinite(ttft) else ttft
    tpot = math.inf if tpot is None or not math.isfinite(tpot) else tpot
    tie = 0.9 / (1.0 + ttft / TTFT_REF_S) + 0.09 / (1.0 + tpot / TPOT_REF_S)
    return round(throughput / quantum) * quantum + quantum * tie


def _metric(row: dict, key: str) -> float:
    v = row.get(key)
    return math.inf if v is None or not math.isfinite(v) else v


def best_index(rows: Sequence[dict], tolerance: float = TIE_TOLERANCE) -> int | None:
    """Index of the best row: among rows within ``tolerance`` (relative) of the highest
    throughput, the lowest mean TTFT, then mean TPOT, then the earliest."""
    ok = [(i, r) for i, r in enumerate(rows) if r.get("status") == "ok" and r.get("throughput_rps") is not None]
    if not ok:
        return None
    top = max(r["throughput_rps"] for _, r in ok)
    near = [(i, r) for i, r in ok if r["throughput_rps"] >= top * (1 - tolerance) - 1e-12]
    return min(near, key=lambda p: (_metric(p[1], "ttft_mean_s"), _metric(p[1], "tpot_mean_s"), p[0]))[0]


def stop_reason(rows: Sequence[dict], *, min_trials: int = MIN_TRIALS, spread: float = SPREAD_TOLERANCE,
                patience: int = PATIENCE, tolerance: float = TIE_TOLERANCE) -> str | None:
    """Why HAS stops after ``rows`` (None: go on): the top-3 throughputs of distinct
    configurations spread less than ``spread``, or ``patience`` trials in a row brought
    no new best (:func:`best_index`); neither before ``min_trials``. Budget is the caller's."""
    if len(rows) < max(3, min_trials):
        return None
    distinct = {}  # a configuration tried twice counts once
    for i, r in enumerate(rows):
        if r.get("status") == "ok":
            distinct.setdefault((r.get("alloc", i), r.get("batch_bound"), r.get("offload_s")), r["throughput_rps"])
    thr = sorted(distinct.values(), reverse=True)
    if len(thr) >= 3 and thr[0] > 0 and (thr[0] - thr[2]) / thr[0] < spread:
        return f"top-3 throughput spread below {spread:.0%}"
    bests = [best_index(rows[:n + 1], tolerance) for n in range(len(rows))]
    last_improvement = max((n for n in range(len(rows)) if bests[n] == n), default=-1)
    if len(rows) - 1 - last_improvement >= patience:
        return f"{patience} consecutive trials without improvement"
    return None


class TrialRecorder:
    """Appends one history row per trial (:data:`HISTORY_COLUMNS`) and adds up ``cost``
    (seconds of simulated search cost; see the module docstring)."""

    def __init__(self, method: str, quantum: float, start_cost: float = 0.0, deploy_s: float = 0.0,
                 on_trial=None):
        self.on_trial = on_trial  # called with each new row (progress lines)
        self.method = method
        self.deploy_s = deploy_s
        self.quantum = quantum
        self.rows: list[dict] = []
        self.cost = start_cost

    def add(self, config: Config, metrics: dict, cached: bool) -> dict:
        a = config.alloc
        sim = 0.0 if cached else metrics["sim_duration_s"]
        self.cost += sim + (0.0 if cached else self.deploy_s)
        row = {"trial": len(self.rows), "method": self.method, "alloc": a.label, "n_e": a.n_e, "n_p": a.n_p,
               "tp_p": a.tp_p, "n_d": a.n_d, "tp_d": a.tp_d, "local_tp": a.local_tp,
               "batch_bound": int(config.batch_bound), "offload_s": float(config.offload_s),
               "throughput_rps": metrics["throughput_rps"], "ttft_mean_s": metrics["ttft_mean_s"],
               "tpot_mean_s": metrics["tpot_mean_s"], "num_finished": metrics["num_finished"],
               "objective": objective_value(metrics["throughput_rps"] if metrics["status"] == "ok" else None,
                                            metrics["ttft_mean_s"], metrics["tpot_mean_s"], self.quantum),
               "sim_duration_s": sim, "cum_sim_cost_s": self.cost, "wall_s": 0.0 if cached else metrics["wall_s"],
               "cached": cached, "status": metrics["status"], "error": metrics["error"]}
        self.rows.append(row)
        if self.on_trial is not None:
            self.on_trial(row)
        return row


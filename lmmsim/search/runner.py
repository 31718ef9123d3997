"""``search(problem, method=...)``: one search of a scenario's ``(alloc, B, s)``, end to end.

EAServe's Hybrid Auto Selection (HAS, easerve.txt §3.1) in order: Stage 1
profiles per-worker capacities by simulation (:mod:`lmmsim.search.profiling`)
and prunes the enumerated allocations analytically (:mod:`lmmsim.search.capacity`);
Stage 2 refines the survivors with TPE (:mod:`lmmsim.search.drivers`). The
baselines ``random`` and ``coordinate`` skip Stage 1 and search every
feasible allocation. Every method gets the same trial function
(:mod:`lmmsim.search.evaluator`), ranking and cost accounting
(:mod:`lmmsim.search.trials`); this module checks the arguments, finds the
feasible allocations, runs the method and assembles the
:class:`SearchResult` (history, best trial, its runnable scenario, and a
summary that :mod:`lmmsim.search.outputs` writes as ``summary.json``).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from lmmsim.errors import UserError
from lmmsim.search.capacity import (
    PRUNING_FACTOR,
    TOP_K,
    Allocation,
    Capacities,
    enumerate_allocations,
    prune,
)
from lmmsim.search.drivers import (
    COORDINATE_STARTS,
    require_optuna,
    run_coordinate,
    run_has,
    run_random,
)
from lmmsim.search.evaluator import Evaluator
from lmmsim.search.mapping import Config, Problem
from lmmsim.search.profiling import (
    TP_CHOICES,
    profile_capacities,
    stage1_cost,
    usable_tps,
)
from lmmsim.search.trials import MIN_TRIALS, TIE_TOLERANCE, TrialRecorder, best_index

METHODS = ("has", "random", "coordinate")
DEFAULT_BUDGET = 30
#: The best trial's fields copied into the summary.
BEST_FIELDS = ("trial", "alloc", "n_e", "n_p", "tp_p", "n_d", "tp_d", "local_tp", "batch_bound", "offload_s",
               "throughput_rps", "ttft_mean_s", "tpot_mean_s", "num_finished")


@dataclass
class SearchResult:
    method: str
    rate: float
    history: list[dict]  # one row per trial, HISTORY_COLUMNS
    best: dict | None  # the best row (None: no trial finished)
    best_config: Config | None
    summary: dict
    best_scenario: dict | None  # the scenario mapping with the best configuration


def _check_arguments(method: str, coordinate_start: str, budget: int, jobs: int) -> None:
    if method not in METHODS:
        raise UserError("--method", f"unknown method {method!r}; valid: {', '.join(METHODS)}")
    if coordinate_start not in COORDINATE_STARTS:
        raise UserError("--start", f"unknown start {coordinate_start!r}; valid: {', '.join(COORDINATE_STARTS)}")
    if budget < 1:
        raise UserError("--budget", f"must be >= 1 (got {budget})")
    if jobs < 1:
        raise UserError("--jobs", f"must be >= 1 (got {jobs})")
    if method == "has":
        require_optuna()


def _stage1(problem: Problem, tp_choices: Sequence[int], summary: dict, log: Callable[[str], None]
            ) -> tuple[Capacities, float, dict[str, list[int]]]:
    """HAS's profiling: capacities, its search cost, the usable TPs (into ``summary`` too)."""
    log("Stage 1: profiling per-worker capacities")
    caps, runs, role_tps = profile_capacities(problem, tp_choices=tp_choices, log=log)
    start_cost = stage1_cost(runs, problem.deploy_s)
    summary["capacities"] = caps.to_json()
    summary["profiling"] = {"runs": [asdict(r) for r in runs], "sim_cost_s": start_cost,
                            "wall_s": sum(r.wall_s for r in runs)}
    return caps, start_cost, role_tps


def _feasible_allocations(problem: Problem, role_tps: dict[str, list[int]], summary: dict) -> list[Allocation]:
    """Every enumerated allocation that builds; a user error when none does."""
    local_tps = role_tps["prefill"] if problem.has_local else None
    allocs = enumerate_allocations(problem.budget, role_tps["prefill"], role_tps["decode"], local_tps)
    infeasible = {}
    feasible = []
    for a in allocs:
        why = problem.feasible(a)
        if why is None:
            feasible.append(a)
        else:
            infeasible[a.label] = why
    if not feasible:
        first = next(iter(infeasible.values()), "no allocation fits the GPU budget")
        raise UserError("search", f"no feasible allocation within {problem.budget} GPUs: {first}")
    summary["allocations"] = {"enumerated": len(allocs), "feasible": len(feasible),
                              "infeasible_examples": dict(itertools.islice(infeasible.items(), 5))}
    return feasible


def _prune_for_has(problem: Problem, feasible: list[Allocation], caps: Capacities, summary: dict,
                   log: Callable[[str], None], *, factor: float, top_k: int, drop_dominated: bool,
                   prune_rule: str):
    """Stage 1's pruning; its record goes into ``summary``. Returns the survivors."""
    pr = prune(feasible, caps, problem.rate, local=problem.local, factor=factor, top_k=top_k,
               drop_dominated=drop_dominated, rule=prune_rule)
    summary["pruning"] = {"rule": prune_rule, "factor": factor, "top_k": top_k,
                          "drop_dominated": drop_dominated, **pr.to_json()}
    summary["alpha_rule"] = ("static: 1 - static_encoder_share" if problem.local.sm_partitioning == "static"
                             else "1 - min(1, rate / (n_E C_E))")
    log(f"Stage 1: {len(feasible)} feasible allocations, {len(pr.undominated)} undominated, "
        f"{len(pr.within_capacity)} within capacity, kept {len(pr.kept)}: "
        + ", ".join(c.alloc.label for c in pr.kept))
    return pr.kept


def _progress(log, budget: int, t0: float):
    """A trial's progress line: trials done of the budget, its result, the best so far, the
    wall time and an estimate of what is left (at the mean wall time per trial so far)."""
    best = -1.0

    def line(row: dict) -> None:
        nonlocal best
        done = row["trial"] + 1
        tput = row["throughput_rps"]
        if tput == tput and tput is not None:
            best = max(best, tput)
        elapsed = time.perf_counter() - t0
        eta = elapsed / done * (budget - done)
        log(f"  trial {done}/{budget}: {row['alloc']} B={row['batch_bound']} s={row['offload_s']:.2f} -> "
            f"{tput:.3f} req/s{' (cached)' if row['cached'] else ''}; best {f'{best:.3f}' if best >= 0 else '-'}; "
            f"{elapsed:.0f} s, ETA <= {eta:.0f} s")  # at most: a stopping rule may end sooner
    return line


def _result(problem: Problem, method: str, rec: TrialRecorder, reason: str, summary: dict, t0: float
            ) -> SearchResult:
    """The best trial (:func:`best_index`), its scenario, and the summary's closing fields."""
    rows = rec.rows
    bi = best_index(rows)
    best = rows[bi] if bi is not None else None
    best_config = None
    best_raw = None
    if best is not None:
        a = Allocation(best["n_e"], best["n_p"], best["tp_p"], best["n_d"], best["tp_d"], best["local_tp"])
        best_config = Config(a, best["batch_bound"], best["offload_s"])
        best_raw = problem.best_scenario(best_config)
    summary.update({
        "trials": len(rows), "stop_reason": reason, "sim_cost_s": rec.cost,
        "best": None if best is None else {k: best[k] for k in BEST_FIELDS},
        "wall_s": time.perf_counter() - t0,
    })
    return SearchResult(method, problem.rate, rows, best, best_config, summary, best_raw)


def search(problem: Problem, *, method: str = "has", budget: int = DEFAULT_BUDGET, jobs: int = 1, seed: int = 0,
           tp_choices: Sequence[int] = TP_CHOICES, top_k: int = TOP_K, factor: float = PRUNING_FACTOR,
           min_trials: int = MIN_TRIALS, n_startup: int | None = None, drop_dominated: bool = True,
           prune_rule: str = "score", log: Callable[[str], None] = lambda m: None,
           executor: str = "local", address: str | None = None, coordinate_start: str = "scenario"
           ) -> SearchResult:
    """Run one search method on ``problem``; see the module docstring. ``executor``
    ``dask`` runs the trials on a Dask cluster (``address``, or a local one of ``jobs``
    workers); trials then complete in any order but are recorded in submission order."""
    _check_arguments(method, coordinate_start, budget, jobs)
    t0 = time.perf_counter()
    summary: dict = {"method": method, "rate_rps": problem.rate, "budget": budget, "jobs": jobs, "seed": seed,
                     "gpu_budget": problem.budget, "trial_requests": problem.trial_requests,
                     "deploy_cost_s": problem.deploy_s,
                     "scenario": problem.scn.name, "model": problem.scn.model,
                     "hardware": f"{problem.scn.hardware.count}x {problem.scn.hardware.gpu}"}
    caps, start_cost = None, 0.0
    if method == "has":
        caps, start_cost, role_tps = _stage1(problem, tp_choices, summary, log)
    else:
        role_tps = usable_tps(problem, tp_choices)
    feasible = _feasible_allocations(problem, role_tps, summary)
    rec = TrialRecorder(method, TIE_TOLERANCE * problem.rate, start_cost, problem.deploy_s,
                        on_trial=_progress(log, budget, time.perf_counter()))
    with Evaluator(problem, jobs, executor, address) as evaluator:
        if method == "has":
            kept = _prune_for_has(problem, feasible, caps, summary, log, factor=factor, top_k=top_k,
                                  drop_dominated=drop_dominated, prune_rule=prune_rule)
            reason = run_has(evaluator, kept, budget, seed, rec, min_trials, n_startup)
        elif method == "random":
            reason = run_random(problem, evaluator, feasible, budget, seed, rec)
        else:
            reason = run_coordinate(problem, evaluator, feasible, budget, rec, coordinate_start)
    return _result(problem, method, rec, reason, summary, t0)

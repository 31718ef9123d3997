"""The search methods: HAS's Stage 2 (TPE), and the random and coordinate-descent baselines.

Each driver asks for configurations, has the :class:`~lmmsim.search.evaluator.Evaluator`
simulate them and records every trial in a :class:`~lmmsim.search.trials.TrialRecorder`;
it returns why it stopped.

HAS, Stage 2 -- Bayesian refinement (easerve.txt §3.1; :func:`run_has`). One
Optuna study, TPE sampler seeded with ``seed``. Parameters: ``alloc``
(categorical among Stage 1's top-K), then conditional ``B@<i>`` in ``[1,
B_max]`` and ``s@<i>`` in the window (fixed values are not suggested). The
first K trials are enqueued at each survivor's analytical point ``(B_max,
s*)``. Each trial is a full simulated run at rate Λ (``trial_requests``
requests, default 200), ranked and stopped by :mod:`lmmsim.search.trials`.

Baselines under the same budget and trial function: ``random``
(:func:`run_random`: uniform over every feasible allocation, ``B`` in ``[1,
max B_max]``, ``s`` in [0, 1]) and ``coordinate`` (:func:`run_coordinate`:
coordinate descent from the scenario's own configuration, or with
``start_at="center"`` from the middle allocation with B = 1, s = 1: alloc,
then B, then s, each a line search over the neighbours ``±r`` in the
allocation order, ``B ± r``, ``2B``, ``B // 2``, ``s ± step``; after a cycle
without a move ``r`` grows by 1 and ``step`` halves; it stops early once
cycles keep finding nothing new). Neither uses Stage 1's profiling (no
profiling cost); both use the same feasibility check (memory fit).

Parallelism and determinism. ``jobs = 1``: ``study.optimize`` with a stopping
callback, trials in this process -- the history is a function of (scenario,
Λ, seed, budget). ``jobs > 1``: batches of ``jobs`` trials asked from the
study (TPE's constant liar keeps a batch's trials apart), simulated at once,
told back in trial order, stopping rules checked after each batch. The
simulator is deterministic and nothing depends on completion order, so the
history is also a function of (..., jobs) -- reproducible, but different from
the ``jobs = 1`` one (``random`` and ``coordinate`` give the same history for
any ``jobs``).
"""

from __future__ import annotations

from collections.abc import Sequence

from lmmsim.errors import UserError
from lmmsim.search.capacity import Allocation, Candidate, seed_batch_bound
from lmmsim.search.evaluator import Evaluator
from lmmsim.search.mapping import Config, Problem
from lmmsim.search.trials import TrialRecorder, best_index, stop_reason

OPTUNA_HINT = 'needs optuna: pip install "lmmsim[search]"'
COORDINATE_STARTS = ("scenario", "center")


def require_optuna():
    """The optuna module, or a one-line user error saying how to install it."""
    try:
        import optuna
    except ImportError:
        raise UserError("search", OPTUNA_HINT) from None
    return optuna


# ------------------------------------------------------------------ HAS (TPE)
def _params_of(c: Candidate, i: int, b: int, s: float) -> dict:
    """The study's parameters for survivor ``i`` at ``(b, s)``; fixed values are left out."""
    p: dict = {"alloc": i}
    if c.b_max > 1:
        p[f"B@{i}"] = b
    if c.s_high > c.s_low:
        p[f"s@{i}"] = s
    return p


def _suggest(trial, kept: list[Candidate]) -> Config:
    i = trial.suggest_categorical("alloc", list(range(len(kept))))
    c = kept[i]
    b = trial.suggest_int(f"B@{i}", 1, c.b_max) if c.b_max > 1 else 1
    s = trial.suggest_float(f"s@{i}", c.s_low, c.s_high) if c.s_high > c.s_low else c.s_low
    return Config(c.alloc, b, round(s, 4))


def _record(rec: TrialRecorder, trial, config: Config, metrics: dict, cached: bool) -> float:
    row = rec.add(config, metrics, cached)
    trial.set_user_attr("row", row["trial"])
    return row["objective"]


def _study(kept: list[Candidate], seed: int, n_startup: int | None, constant_liar: bool):
    """A maximising TPE study with each survivor's analytical point enqueued."""
    optuna = require_optuna()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=n_startup or len(kept) + 2,
                                         constant_liar=constant_liar)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    for i, c in enumerate(kept):  # seeds: each survivor's analytical point
        study.enqueue_trial(_params_of(c, i, c.b_max, min(max(c.s_star, c.s_low), c.s_high)))
    return study


def _optimize_serial(study, evaluator: Evaluator, kept: list[Candidate], budget: int, rec: TrialRecorder,
                     min_trials: int) -> str:
    """``jobs = 1``: ``study.optimize`` with a stopping callback."""
    reason = "budget"

    def objective(trial):
        config = _suggest(trial, kept)
        (metrics, cached), = evaluator.run([config])
        return _record(rec, trial, config, metrics, cached)

    def stopper(study_, frozen):
        nonlocal reason
        why = stop_reason(rec.rows, min_trials=min_trials)
        if why:
            reason = why
            study_.stop()

    study.optimize(objective, n_trials=budget, callbacks=[stopper])
    return reason


def _optimize_batches(study, evaluator: Evaluator, kept: list[Candidate], budget: int, rec: TrialRecorder,
                      min_trials: int) -> str:
    """``jobs > 1``: ask a batch, simulate it at once, tell it back in trial order."""
    while len(rec.rows) < budget:
        trials = [study.ask() for _ in range(min(evaluator.jobs, budget - len(rec.rows)))]
        configs = [_suggest(t, kept) for t in trials]
        for t, c, (metrics, cached) in zip(trials, configs, evaluator.run(configs)):
            study.tell(t, _record(rec, t, c, metrics, cached))
        why = stop_reason(rec.rows, min_trials=min_trials)
        if why:
            return why
    return "budget"


def run_has(evaluator: Evaluator, kept: list[Candidate], budget: int, seed: int, rec: TrialRecorder,
            min_trials: int, n_startup: int | None) -> str:
    """Stage 2 over Stage 1's survivors ``kept``; returns the stop reason."""
    study = _study(kept, seed, n_startup, constant_liar=evaluator.jobs > 1)
    if evaluator.jobs == 1:
        return _optimize_serial(study, evaluator, kept, budget, rec, min_trials)
    return _optimize_batches(study, evaluator, kept, budget, rec, min_trials)


# ------------------------------------------------------------------ baselines
def _full_b(problem: Problem, allocs: Sequence[Allocation]) -> int:
    return max(seed_batch_bound(problem.rate, min(a.n_e for a in allocs)), 1)


def run_random(problem: Problem, evaluator: Evaluator, allocs: list[Allocation], budget: int, seed: int,
               rec: TrialRecorder) -> str:
    """Uniform samples over every feasible allocation, ``B`` and ``s``, ``jobs`` at a time."""
    import numpy as np

    rng = np.random.default_rng(seed)
    b_full = _full_b(problem, allocs)
    while len(rec.rows) < budget:
        configs = []
        for _ in range(min(evaluator.jobs, budget - len(rec.rows))):
            a = allocs[int(rng.integers(len(allocs)))]
            b = int(rng.integers(1, b_full + 1))
            s = round(float(rng.uniform(0.0, 1.0)), 4) if a.local_tp else 1.0
            configs.append(Config(a, b, s))
        for c, (metrics, cached) in zip(configs, evaluator.run(configs)):
            rec.add(c, metrics, cached)
    return "budget"


class _CoordinateDescent:
    """The state of one coordinate descent: the allocation order, the current point and
    the configurations already tried (key -> history row)."""

    def __init__(self, problem: Problem, evaluator: Evaluator, allocs: list[Allocation], budget: int,
                 rec: TrialRecorder, start_at: str):
        self.evaluator, self.budget, self.rec = evaluator, budget, rec
        self.order = sorted(allocs, key=Allocation.sort_key)
        self.b_full = _full_b(problem, self.order)
        order = self.order
        start = problem.default_config() if start_at == "scenario" else Config(order[len(order) // 2], 1, 1.0)
        idx = order.index(start.alloc) if start.alloc in order else len(order) // 2
        self.cur = Config(order[idx], min(max(start.batch_bound, 1), self.b_full),
                          start.offload_s if order[idx].local_tp else 1.0)
        self.seen: dict[tuple, int] = {}

    def evaluate(self, configs: list[Config]) -> None:
        configs = [c for c in dict.fromkeys(configs) if c.key() not in self.seen][: self.budget - len(self.rec.rows)]
        for c, (metrics, cached) in zip(configs, self.evaluator.run(configs)):
            self.seen[c.key()] = self.rec.add(c, metrics, cached)["trial"]

    def best_of(self, configs: list[Config]) -> Config:
        cands = [c for c in configs if c.key() in self.seen]
        rows = [self.rec.rows[self.seen[c.key()]] for c in cands]
        i = best_index(rows)
        return self.cur if i is None else cands[i]

    def fit(self, alloc: Allocation, b: int, s: float) -> Config:
        return Config(alloc, min(max(b, 1), self.b_full),
                      round(min(max(s, 0.0), 1.0), 4) if alloc.local_tp else 1.0)

    def neighbours(self, coord: str, radius: int, step: float) -> list[Config] | None:
        """The line search's candidates along ``coord`` (None: ``s`` without local prefill)."""
        cur = self.cur
        if coord == "alloc":
            i = self.order.index(cur.alloc)
            return [self.fit(self.order[j], cur.batch_bound, cur.offload_s if cur.alloc.local_tp else 0.5)
                    for j in (i - radius, i + radius) if 0 <= j < len(self.order)]
        if coord == "B":
            b = cur.batch_bound
            return [self.fit(cur.alloc, v, cur.offload_s) for v in (b - radius, b + radius, 2 * b, b // 2)]
        if not cur.alloc.local_tp:
            return None
        return [self.fit(cur.alloc, cur.batch_bound, cur.offload_s + d) for d in (-step, step)]

    def cycle(self, radius: int, step: float) -> tuple[bool, int]:
        """One pass over alloc, B, s; returns (moved, configurations newly tried)."""
        moved, tried = False, 0
        for coord in ("alloc", "B", "s"):
            if len(self.rec.rows) >= self.budget:
                break
            cands = self.neighbours(coord, radius, step)
            if cands is None:
                continue
            new = [c for c in cands if c.key() not in self.seen]
            tried += len(new)
            self.evaluate(new)
            nxt = self.best_of([self.cur] + cands)
            if nxt != self.cur:
                self.cur, moved = nxt, True
        return moved, tried


def run_coordinate(problem: Problem, evaluator: Evaluator, allocs: list[Allocation], budget: int,
                   rec: TrialRecorder, start_at: str = "scenario") -> str:
    """``start_at``: ``scenario`` -- the scenario's own configuration (a user's warm
    start); ``center`` -- an uninformed start: the middle allocation of the order with
    Dynamo's pass-through settings B = 1, s = 1 (easerve.txt §3.1)."""
    descent = _CoordinateDescent(problem, evaluator, allocs, budget, rec, start_at)
    descent.evaluate([descent.cur])
    radius, step, idle = 1, 0.1, 0
    while len(rec.rows) < budget:
        moved, tried = descent.cycle(radius, step)
        idle = 0 if tried else idle + 1
        if idle > len(descent.order) + 2 * descent.b_full + 12:  # every neighbourhood, at every radius, already seen
            return "search space exhausted"
        if not moved:
            radius, step = radius + 1, step / 2
    return "budget"

"""Simulating search trials: one configuration in, four numbers out; a cache; executors.

:func:`simulate` runs one trial's scenario mapping and returns its metrics
(throughput, mean TTFT, mean TPOT, finished requests, simulated duration); a
user error or a deadlocked run is a failed trial that scores nothing, not an
exception. :class:`Evaluator` runs batches of configurations and answers in
submission order: in this process (``jobs = 1``), in a process pool
(``jobs > 1``) or on a Dask cluster (``executor="dask"``). A configuration
seen before is not simulated again: its trial repeats the earlier metrics
with no simulated cost (``cached``).

The executor names and the Dask client come from :mod:`lmmsim.sweep.executors`;
its ``execute`` is not reused: a sweep run writes a results folder and reports
completions in any order, while a trial only needs its metrics back, in
order, and the process pool stays open across a search's batches.

Determinism: the simulator is deterministic and nothing depends on completion
order, so a search's history is a function of its inputs and ``jobs`` (see
:mod:`lmmsim.search.drivers`), whichever executor runs it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from lmmsim.errors import StuckRunError, UserError
from lmmsim.search.mapping import Config, Problem
from lmmsim.sweep.executors import bounded_map, check_executor, dask_client, pool_for


def simulate(task: tuple[dict, str]) -> dict:
    """Run one scenario mapping; a picklable worker function. Never raises on a
    user error: returns ``status: failed`` and its message."""
    from lmmsim.results import run_scenario
    from lmmsim.scenario import validate_scenario

    raw, base_dir = task
    start = time.perf_counter()
    try:
        run = run_scenario(validate_scenario(raw), Path(base_dir))
    except (UserError, StuckRunError) as exc:  # an infeasible or deadlocked trial scores nothing
        return {"status": "failed", "error": str(exc), "throughput_rps": 0.0, "ttft_mean_s": None,
                "tpot_mean_s": None, "num_finished": 0, "sim_duration_s": 0.0,
                "wall_s": time.perf_counter() - start}
    s = run.summary
    return {"status": "ok", "error": None, "throughput_rps": s["throughput"]["requests_per_s"] or 0.0,
            "ttft_mean_s": s["ttft_s"]["mean"], "tpot_mean_s": s["tpot_s"]["mean"],
            "num_finished": s["num_finished"], "sim_duration_s": s["sim_end_at_s"],
            "wall_s": time.perf_counter() - start}


class Evaluator:
    """Simulates trial configurations, in this process (``jobs = 1``) or a process pool,
    results in submission order; a configuration seen before is answered from memory."""

    def __init__(self, problem: Problem, jobs: int = 1, executor: str = "local", address: str | None = None):
        if jobs < 1:
            raise UserError("--jobs", f"must be >= 1 (got {jobs})")
        check_executor(executor)
        self.problem = problem
        self.jobs = jobs
        self.cache: dict[tuple, dict] = {}
        self._pool: ProcessPoolExecutor | None = None
        # dask: trials run on the cluster at ``address`` (or a local one of ``jobs`` workers)
        self.executor = executor
        self.address = address
        self._dask = contextlib.ExitStack()  # holds the client once opened
        self._client = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None
        self._dask.close()
        self._client = None

    def run(self, configs: Sequence[Config]) -> list[tuple[dict, bool]]:
        """``(metrics, cached)`` per configuration."""
        todo: dict[tuple, Config] = {}
        for c in configs:
            if c.key() not in self.cache:
                todo.setdefault(c.key(), c)
        results = self._simulate([(self.problem.scenario_raw(c), str(self.problem.base_dir)) for c in todo.values()])
        fresh = set()
        for key, res in zip(todo, results):
            self.cache[key] = res
            fresh.add(key)
        out = []
        for c in configs:
            cached = c.key() not in fresh
            fresh.discard(c.key())  # a duplicate inside one batch is cached after its first
            out.append((self.cache[c.key()], cached))
        return out

    def _simulate(self, tasks: list[tuple[dict, str]]) -> list[dict]:
        """:func:`simulate` of each task, in order, wherever this evaluator runs trials."""
        if tasks and self.executor == "dask":
            if self._client is None:
                self._client = self._dask.enter_context(dask_client(self.jobs, self.address))
            return self._client.gather(self._client.map(simulate, tasks, pure=False))
        if len(tasks) > 1 and self.jobs > 1:
            shared = pool_for()  # lmmsim reproduce's pool, when one is open (this search's jobs at a time)
            if shared is not None:
                return bounded_map(shared, simulate, tasks, self.jobs)
            if self._pool is None:
                self._pool = ProcessPoolExecutor(max_workers=self.jobs)
            return list(self._pool.map(simulate, tasks))
        return [simulate(t) for t in tasks]

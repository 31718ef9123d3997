"""Where sweep runs execute: ``local`` (in-process or a process pool) or ``dask``.

The worker function :func:`run_one` takes plain data (the resolved scenario
YAML text and paths) and returns a small status dict; it writes the run
contract into its run dir itself, so nothing large travels back. With dask,
``out`` must be on a filesystem every worker sees. The executor names
(:func:`check_executor`) and :func:`dask_client` are shared with ``lmmsim
search`` (:mod:`lmmsim.search.evaluator`), whose trials need no run dir.

Inside :func:`shared_pool` every local execution with more than one job uses
one process pool, started once: ``lmmsim reproduce`` runs a dozen figure
sweeps, and starting a pool per figure cost about half of a short
reproduction; its workers also keep their warm cost models
(:mod:`lmmsim.costmodel.fitcache`) from figure to figure. A run's results do
not depend on which worker runs it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Callable, Iterable

import yaml

from lmmsim.errors import UserError
from lmmsim.outputs import write_text_atomic

DONE = "done.json"
ERROR = "error.json"
EXECUTORS = ("local", "dask")

_shared: dict = {}  # while shared_pool() is open: "workers" (int) and "pool" (started on first use)


def check_executor(executor: str) -> None:
    """A user error unless ``executor`` is one of :data:`EXECUTORS` (also `lmmsim search`'s)."""
    if executor not in EXECUTORS:
        raise UserError("--executor", f"unknown executor {executor!r}; valid: 'dask', 'local'")


def write_json_atomic(path: Path, data) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, default=str) + "\n")


def record_failure(run_dir: Path, task: dict, message: str, tb: str) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / DONE).unlink(missing_ok=True)
    write_json_atomic(run_dir / ERROR, {"message": message, "traceback": tb, **task["meta"]})


def run_one(task: dict) -> dict:
    """Simulate one resolved scenario into ``task['run_dir']``; never raises.

    ``task``: ``scenario_yaml`` (resolved), ``base_dir``, ``run_dir``, ``run_id``,
    ``meta`` (swept values, repeat, seed: written into done.json / error.json).
    """
    from lmmsim.results import run_scenario, spill_place, write_results
    from lmmsim.scenario import validate_scenario

    run_dir = Path(task["run_dir"])
    start = time.perf_counter()
    try:
        # Start from an empty dir (it is lmmsim's, under runs/): a stale error.json, or the
        # files of a damaged earlier run, must not sit beside the new contract.
        if run_dir.exists():
            shutil.rmtree(run_dir)
        scn = validate_scenario(yaml.safe_load(task["scenario_yaml"]))
        run = run_scenario(scn, Path(task["base_dir"]), spill_near=spill_place(run_dir))
        write_results(run, scn, run_dir, force=True)
        write_json_atomic(run_dir / DONE, {**task["meta"], "run_id": task["run_id"],
                                           "wall_s": time.perf_counter() - start})
        return {"run_id": task["run_id"], "status": "ok", "error": None}
    except Exception as exc:  # noqa: BLE001 - a failed run must not stop the sweep
        message = f"{type(exc).__name__}: {exc}"
        try:
            if run_dir.exists() and not (run_dir / DONE).exists():
                shutil.rmtree(run_dir, ignore_errors=True)  # no half-written contract left behind
            record_failure(run_dir, task, message, traceback.format_exc())
        except OSError:
            pass
        return {"run_id": task["run_id"], "status": "failed", "error": message}


def _failed(task: dict, exc: BaseException) -> dict:
    """A task whose worker died (not an exception inside the run)."""
    message = f"{type(exc).__name__}: {exc}"
    record_failure(Path(task["run_dir"]), task, message,
                   "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
    return {"run_id": task["run_id"], "status": "failed", "error": message}


def execute(tasks: list[dict], *, executor: str = "local", jobs: int | None = None,
            address: str | None = None, on_done: Callable[[dict], None] = lambda s: None,
            on_start: Callable[[], None] = lambda: None) -> list[dict]:
    """Run ``tasks`` with ``run_one``; ``on_start()`` once every task is submitted (worker
    processes are forked by then, so a progress thread started there is not inherited),
    ``on_done(status)`` after each. Returns the statuses."""
    check_executor(executor)
    if not tasks:
        on_start()
        return []
    if executor == "local":
        return _local(tasks, jobs, on_done, on_start)
    return _dask(tasks, jobs, address, on_done, on_start)


def _collect(pairs: Iterable, on_done) -> list[dict]:
    out = []
    for task, get in pairs:
        try:
            status = get()
        except Exception as exc:  # noqa: BLE001 - e.g. BrokenProcessPool, a dask worker lost
            status = _failed(task, exc)
        out.append(status)
        on_done(status)
    return out


def _local(tasks, jobs, on_done, on_start):
    if jobs is not None and jobs < 1:
        raise UserError("--jobs", f"must be >= 1 (got {jobs})")
    workers = min(jobs or os.cpu_count() or 1, len(tasks))
    if workers == 1:
        on_start()
        return _collect(((t, lambda t=t: run_one(t)) for t in tasks), on_done)
    if _shared:  # reproduce's pool may have more workers than this caller asked for
        return _bounded(pool_for(), tasks, workers, on_done, on_start)
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return _bounded(pool, tasks, workers, on_done, on_start)


def _bounded(pool, tasks, workers, on_done, on_start):
    pairs = bounded_completions(pool, run_one, tasks, workers)
    on_start()
    with contextlib.closing(pairs):  # an interrupt cancels what is still queued
        return _collect(((tasks[i], f.result) for i, f in pairs), on_done)


def bounded_completions(pool, fn, items: list, limit: int):
    """``(index, future)`` of ``fn(items[index])`` on ``pool`` as each completes, with at most
    ``limit`` submitted and not yet done: a caller that asked for ``limit`` jobs gets no more
    inside a larger shared pool. The first ``limit`` are submitted before the first is yielded."""
    futures: dict = {}
    ahead = 0  # the next index to submit

    def top_up() -> None:
        nonlocal ahead
        while len(futures) < limit and ahead < len(items):
            futures[pool.submit(fn, items[ahead])] = ahead
            ahead += 1

    def completions():
        try:
            while futures:
                done, _ = wait(futures, return_when=FIRST_COMPLETED)
                for f in sorted(done, key=futures.get):
                    index = futures.pop(f)
                    top_up()
                    yield index, f
        finally:
            for f in futures:
                f.cancel()

    top_up()  # now, not on the first next(): the caller's on_start comes after the workers start
    return completions()


def bounded_map(pool, fn, items: list, limit: int) -> list:
    """``[fn(x) for x in items]`` on ``pool``, at most ``limit`` at a time (:func:`bounded_completions`)."""
    out = [None] * len(items)
    for index, f in bounded_completions(pool, fn, items, limit):
        out[index] = f.result()
    return out


@contextlib.contextmanager
def shared_pool(jobs: int | None):
    """One local process pool of ``jobs`` workers (default: the CPU count) for every
    :func:`execute` and search trial batch inside (started on first use, shut down on exit)."""
    if jobs is not None and jobs < 1:
        raise UserError("--jobs", f"must be >= 1 (got {jobs})")
    if _shared:  # already inside one: keep it
        yield
        return
    _shared["workers"] = jobs or os.cpu_count() or 1
    try:
        yield
    finally:
        pool = _shared.pop("pool", None)
        _shared.clear()
        if pool is not None:
            pool.shutdown(cancel_futures=True)


def pool_for() -> ProcessPoolExecutor | None:
    """The open :func:`shared_pool`'s executor (started now if need be; a broken one is replaced),
    or None outside one."""
    if not _shared:
        return None
    pool = _shared.get("pool")
    if pool is None or getattr(pool, "_broken", False):
        if pool is not None:
            pool.shutdown(cancel_futures=True)
        pool = _shared["pool"] = ProcessPoolExecutor(max_workers=_shared["workers"])
    return pool


@contextlib.contextmanager
def dask_client(jobs: int | None, address: str | None):
    """A dask Client on ``address``, or on a local cluster of ``jobs`` one-thread
    worker processes (closed on exit)."""
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise UserError("--executor", "dask is not installed; pip install 'lmmsim[dask]'") from None
    cluster = None
    if address is None:
        cluster = LocalCluster(n_workers=jobs or os.cpu_count() or 1, threads_per_worker=1,
                               processes=True, dashboard_address=None)
        address = cluster.scheduler_address
    try:
        with Client(address) as client:
            yield client
    finally:
        if cluster is not None:
            cluster.close()


def _dask(tasks, jobs, address, on_done, on_start):
    with dask_client(jobs, address) as client:
        from dask.distributed import as_completed as dask_as_completed

        futures = {}
        for t in tasks:
            futures[client.submit(run_one, t, pure=False)] = t
        on_start()
        try:
            return _collect(((futures[f], f.result) for f in dask_as_completed(list(futures))), on_done)
        except BaseException:
            client.cancel(list(futures))
            raise

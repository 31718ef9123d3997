"""Host preprocessing: the CPU work between a request's arrival and its first GPU stage.

A real multimodal server decodes a request's media and runs the model's
processor (resize, tiling, normalisation, patchify, mel features) on CPU
processes before anything reaches a GPU -- vLLM's API-server processes
(``api_server_count``, serial within each), a Dynamo-style encode worker's
own process. :class:`HostPool` is one such group of processes: ``workers``
identical CPU workers serving jobs first come, first served, each job holding
one worker for ``cost_s(job)`` seconds, then handed on with ``deliver(job)``.
A job is whatever its placement hands in -- a request's engine state at the
front end, a request's media items at an encode worker. It costs two scheduled
callbacks per job (start, end), no SimPy process.

Engines that fast-forward decode-only stretches must not skip a delivery:
:meth:`HostPool.next_delivery_at` is the earliest moment a job leaves the
pool, which the simulation folds into the engines' barrier.

A pool fed only by exogenous arrivals (the front end's) can be laid out before
the run instead: :meth:`HostPool.plan` gives every job's start, end and worker
for known submission times -- the same first-come-first-served schedule -- and
:meth:`HostPool.record` books one when the simulation delivers it. The
simulation then moves each request once, at its delivery, with no event of the
pool's own.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from typing import Callable

from simpy.events import NORMAL

from lmmsim.engine.steplog import StepRecord


def stamp_preprocess(seq, started_at: float, finished_at: float | None = None) -> None:
    """Record host work on a request's state: ``preprocess_started_at`` is the start of its first
    host job, ``preprocess_finished_at`` the end of its last (a request may meet two pools:
    tokenisation at the front end, media at its encode worker)."""
    if started_at is not None and seq.preprocess_started_at != seq.preprocess_started_at:  # NaN: first job
        seq.preprocess_started_at = started_at
    if finished_at is not None and not finished_at <= seq.preprocess_finished_at:  # NaN or later
        seq.preprocess_finished_at = finished_at


class HostPool:
    def __init__(self, env, workers: int, cost_s: Callable, deliver: Callable, *, name: str = "host",
                 seqs_of: Callable = lambda job: (job,), step_log: list | None = None):
        if workers < 1:
            raise ValueError("a host pool needs at least one worker")
        self.env = env
        self.workers = workers
        self.name = name
        self.cost_s = cost_s  # job -> seconds of one worker's time
        self.deliver = deliver  # job -> None: hand the preprocessed job on
        self.seqs_of = seqs_of  # job -> the request states it carries (for timestamps)
        self.step_log = step_log
        self.waiting: deque = deque()  # (job, submitted_at)
        self.in_service: dict[int, float] = {}  # job key -> when its preprocessing ends
        self._free = list(range(workers))  # idle worker indices, lowest first (stable trace tracks)
        self._keys = itertools.count()
        self.busy_s = 0.0
        self.wait_s: list[float] = []  # per job: time queued for a worker

    def submit(self, job) -> None:
        if self._free:
            self._start(job, self.env.now)
        else:
            self.waiting.append((job, self.env.now))

    def next_delivery_at(self) -> float:
        return min(self.in_service.values(), default=math.inf)

    def plan(self, jobs, submitted_at) -> list[tuple[float, float, int]]:
        """(start, end, worker) of each job, submitted in order at ``submitted_at`` (non-decreasing):
        each takes the lowest-numbered idle worker, or waits for the first to free up, and holds it for
        ``cost_s(job)`` -- evaluated in start order, as the event-driven pool does."""
        take = self.planner()
        return [take(job, at) for job, at in zip(jobs, submitted_at)]

    def planner(self):
        """:meth:`plan` one job at a time: ``take(job, submitted_at) -> (start, end, worker)``."""
        idle = list(range(self.workers))  # a heap of the idle workers' indices
        busy: list = []  # a heap of (free at, worker) of the others
        cost_s = self.cost_s

        def take(job, at: float) -> tuple[float, float, int]:
            while busy and busy[0][0] <= at:  # submissions come in time order: free for good
                heapq.heappush(idle, heapq.heappop(busy)[1])
            if idle:
                worker, start = heapq.heappop(idle), at
            else:  # the first to free up (lowest index on a tie)
                start, worker = heapq.heappop(busy)
            end = start + cost_s(job)
            heapq.heappush(busy, (end, worker))
            return start, end, worker

        return take

    def record(self, job, submitted_at: float, start: float, end: float, worker: int) -> None:
        """Book a planned job as it is delivered: timestamps, busy time, wait, trace record."""
        self.wait_s.append(start - submitted_at)
        self.busy_s += end - start
        seqs = self.seqs_of(job)
        for seq in seqs:
            stamp_preprocess(seq, start, end)
        self._log(seqs, start, end, worker)

    def _log(self, seqs, start: float, end: float, worker: int) -> None:
        if self.step_log is not None:
            ids = tuple(dict.fromkeys(s.request.request_id for s in seqs))
            self.step_log.append(StepRecord(f"{self.name}{worker}", start, end, "preprocess", ids, 0, len(seqs)))

    def _start(self, job, submitted_at: float) -> None:
        env = self.env
        now = env.now
        worker = heapq.heappop(self._free)
        self.wait_s.append(now - submitted_at)
        seqs = self.seqs_of(job)
        for seq in seqs:
            stamp_preprocess(seq, now)
        cost = self.cost_s(job)
        end = now + cost
        self.busy_s += cost
        key = next(self._keys)
        self.in_service[key] = end
        # ordinary priority, as an arrival: the engines of this instant see the request
        env.call_at(end, self._finish, (job, seqs, key, worker, now), NORMAL)

    def _finish(self, job_in_service: tuple) -> None:
        job, seqs, key, worker, started_at = job_in_service
        del self.in_service[key]
        now = self.env.now
        for seq in seqs:
            stamp_preprocess(seq, None, now)
        self._log(seqs, started_at, now, worker)
        heapq.heappush(self._free, worker)
        if self.waiting:  # the freed worker takes the next job before this one moves on
            self._start(*self.waiting.popleft())
        self.deliver(job)

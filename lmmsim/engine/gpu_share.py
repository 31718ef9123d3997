"""Two (or more) workers sharing one GPU: exclusive, time-sliced, or SM-split.

Physical picture
----------------
An EAServe-style deployment co-locates an encoder worker and a (local)
prefill worker on one GPU (EAServe, /work/shared/seeds/easerve.txt, §2.3 and
§3.4). What each gets depends on the sharing primitive:

* **exclusive** -- one process owns the GPU; a kernel batch (an engine step)
  takes exactly its predicted time ``compute_s + memory_s``.
* **time_slice** -- the default CUDA scheduler time-slices the contexts of
  different processes: only one runs at a time, each at full speed, so
  concurrency is lost. Modelled as a FIFO mutex at kernel-batch (step)
  granularity: a step, once started, runs to completion at full speed.
* **sm_split** -- spatial SM partitioning: MPS with an active-thread
  percentage, CUDA green contexts, or libsmctrl TPC masks give each process a
  disjoint set of SMs (a fraction ``share`` of them). Compute-bound kernels run
  on their own SMs only, at speed ``g(share)`` along a *saturating* curve
  (:class:`SmShareCurve`; EAServe Fig. 7: encode latency drops sharply with
  more SMs, then flattens). HBM bandwidth is **not** partitioned: "the SM
  subsets still share a single memory bus, and whichever process issues more
  traffic displaces the other's" (EAServe §2.3) -- which is why EAServe keeps
  decode off the encode GPU. So memory-bound work of one tenant slows down
  while another tenant runs. (MIG partitions HBM too; it is not modelled here.)

The cost model provides the split of a step into compute-bound and
memory-bound seconds (``ComposedStepCostModel.llm_step_parts`` /
``encode_parts``); workers pass both to :meth:`SharedGpu.run`.

The sm_split rate model
-----------------------
A run of ``(compute_s, memory_s)`` (exclusive-GPU seconds) by a worker with
SM fraction ``x``, while ``n_other`` other tenants have a run in flight, takes
at the current rates::

    period = compute_s * stretch(x) + memory_s * (1 + memory_interference * n_other)

and progresses through its work at ``1 / period`` (fraction of the run per
second). Rates are piecewise constant: they change only when another run
starts or finishes (or the shares change), and at each such instant every
affected run's remaining fraction is updated and its end rescheduled (event
driven; no fixed ticks). With two tenants this is exactly the
``1 / (1 + memory_interference * [other tenant active])`` memory rate of the
design; with more, each other active tenant adds one ``memory_interference``.
``memory_interference = 1`` means two memory-bound tenants split the
bandwidth evenly; 0 means bandwidth is effectively isolated.

Choice: **blended rate, not sequential phases.** A step is hundreds of
kernels alternating between GEMMs (compute-bound) and norms, attention reads
and collectives (memory-bound), each a few to a few hundred microseconds --
far finer than the millisecond scale on which the other tenant starts and
stops. Over any interval between two such events the step therefore spends
its time in compute and memory kernels in the same proportion as over the
whole step, which is what the proportional (fluid) progress above says.
Treating the compute part and the memory part as two sequential phases would
make the interference depend on an arbitrary order.

Simplifications (documented so calibration can revisit them):

* the other tenant counts as contending for HBM for its whole run, whether it
  is in a compute-bound or a memory-bound kernel at that moment (pessimistic
  for a compute-heavy neighbour; its actual traffic is not modelled);
* SM isolation is perfect for the compute part (shared L2 cache, power and
  clock throttling are ignored), and the memory part does not depend on the
  SM share (a very small share cannot saturate HBM on a real GPU);
* kernel launch overhead is part of whichever bucket its kernel is in
  (:mod:`lmmsim.costmodel.roofline`); collectives count as memory-bound;
* time slicing switches at step granularity and costs nothing (no context
  switch overhead, no interleaving within a step).

Exactness: a run that never sees a rate change ends at
``start + (compute_s * stretch(x) + memory_s * 1.0)``; with ``x = 1`` that is
``start + (compute_s + memory_s)``, the same float as exclusive use (and as an
engine computing ``start + duration`` itself). Exclusive and time_slice runs
end at exactly ``started_at + (compute_s + memory_s)``. Results depend only on
the sequence of calls: same inputs, identical floats.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Literal, NamedTuple

from simpy.events import Event

from lmmsim.engine.clock import SimEnvironment

ShareMode = Literal["exclusive", "time_slice", "sm_split"]
MODES: tuple[str, ...] = ("exclusive", "time_slice", "sm_split")

#: Shares may exceed 1 in total by this much (float rounding of e.g. 0.1 + 0.2 + 0.7).
SHARE_SUM_TOLERANCE = 1e-9


@dataclass(frozen=True)
class SmShareCurve:
    """Speed of compute-bound work as a function of the SM fraction it gets.

    ``speed(x) = (1 + k) * x / (x + k)`` for ``x`` in (0, 1]: relative to the
    whole GPU (``speed(1) == 1`` exactly), increasing, concave, saturating.
    ``k`` (> 0, dimensionless) sets how early it saturates: ``speed(k) = (1 +
    k) / 2``; small ``k`` -> a few SMs already give nearly full speed
    (``k -> 0``: flat at 1), large ``k`` -> nearly linear (``k -> inf``:
    ``speed(x) = x``, perfect scaling).

    The default ``k = 0.25`` (half the GPU gives 83 % of full speed, a quarter
    62.5 %) is an **assumption** in the range EAServe's Fig. 7 suggests; the
    calibration issue fits ``k`` from profiled encoder latency under SM limits
    (MPS active-thread percentage / green contexts).
    """

    k: float = 0.25

    def __post_init__(self):
        if not (self.k > 0 and math.isfinite(self.k)):
            raise ValueError(f"SmShareCurve.k must be finite and > 0, got {self.k!r}")

    def speed(self, x: float) -> float:
        """g(x): speed of compute-bound work at SM fraction ``x`` (1 = whole GPU)."""
        self._check(x)
        return (1.0 + self.k) * x / (x + self.k)

    def stretch(self, x: float) -> float:
        """1 / g(x) (up to rounding): factor on compute-bound time; ``stretch(1) == 1`` exactly."""
        self._check(x)
        return (x + self.k) / ((1.0 + self.k) * x)

    @staticmethod
    def _check(x: float) -> None:
        if not (0.0 < x <= 1.0):
            raise ValueError(f"SM fraction must be in (0, 1], got {x!r}")


class GpuRun(NamedTuple):
    """The value of the event :meth:`SharedGpu.run` returns (times in seconds)."""

    worker: str
    submitted_at: float  # when run() was called
    started_at: float  # when it got the GPU (later than submitted_at only when queued in time_slice)
    finished_at: float
    compute_s: float  # as submitted (exclusive-GPU seconds)
    memory_s: float


class _Run:
    __slots__ = (
        "compute_s", "done", "end_at", "gen", "memory_s", "period",
        "remaining", "seg_start", "started_at", "submitted_at", "worker",
    )

    def __init__(self, worker: str, compute_s: float, memory_s: float, now: float, done: Event):
        self.worker = worker
        self.compute_s = compute_s
        self.memory_s = memory_s
        self.submitted_at = now
        self.started_at = now
        self.done = done
        # sm_split state: fraction of the work left at seg_start, the time the
        # whole run would take at the current rates, the scheduled end, timer generation.
        self.remaining = 1.0
        self.seg_start = now
        self.period: float | None = None
        self.end_at = now
        self.gen = 0


class SharedGpu:
    """The arbiter workers go through to run a kernel batch on one GPU.

    ``SharedGpu(env, gpu_id, mode, shares=None, curve=SmShareCurve(), memory_interference=1.0)``

    * ``mode``: ``"exclusive"`` (one worker only: the first to call
      :meth:`run` owns the GPU), ``"time_slice"`` (any workers, one at a time,
      FIFO) or ``"sm_split"`` (concurrent, each on its SM share).
    * ``shares`` (sm_split only, required there): worker name -> SM fraction
      in [0, 1], summing to at most 1. A worker with share 0 may not run work.
    * ``curve``: compute speed vs SM fraction (sm_split).
    * ``memory_interference`` (>= 0): extra slowdown of memory-bound time per
      other active tenant (sm_split); see the module docstring.

    :meth:`run` returns a SimPy event; the worker ``yield``s it (from its own
    process, or combined with other events). It succeeds with a
    :class:`GpuRun` when the work is done. Each worker may have one run in
    flight at a time (an engine runs one step at a time).

    Invariants: ``busy_s`` (seconds with at least one run executing -- the
    union of run intervals) <= the sum of :meth:`worker_busy_s` (each worker's
    executing time; time queued in time_slice is not busy); in exclusive and
    time_slice modes the two are equal. Internal timers run at the engine
    priority (``late=True``); the returned event then succeeds at the same
    instant, before later-queued engine events.
    """

    def __init__(
        self,
        env: SimEnvironment,
        gpu_id: int,
        mode: ShareMode = "exclusive",
        shares: dict[str, float] | None = None,
        curve: SmShareCurve | None = None,
        memory_interference: float = 1.0,
    ):
        if mode not in MODES:
            raise ValueError(f"GPU {gpu_id}: sharing mode must be one of {', '.join(MODES)}, got {mode!r}")
        if not (memory_interference >= 0 and math.isfinite(memory_interference)):
            raise ValueError(f"GPU {gpu_id}: memory_interference must be finite and >= 0, got {memory_interference!r}")
        self.env = env
        self.gpu_id = gpu_id
        self.mode = mode
        self.curve = curve if curve is not None else SmShareCurve()
        self.memory_interference = float(memory_interference)
        self._shares: dict[str, float] = {}
        self._stretch: dict[str, float] = {}
        if mode == "sm_split":
            if shares is None:
                raise ValueError(f"GPU {gpu_id}: sm_split needs shares (worker -> SM fraction)")
            self._set_shares(dict(shares))
        elif shares is not None:
            raise ValueError(f"GPU {gpu_id}: shares apply to mode sm_split only, not {mode!r}")
        self.num_runs = 0  # completed runs
        self._owner: str | None = None  # exclusive mode
        self._in_flight: dict[str, _Run] = {}  # submitted, not completed (queued included)
        self._active: dict[str, _Run] = {}  # executing now (insertion order: deterministic)
        self._queue: deque[_Run] = deque()  # time_slice waiters
        self._busy_s = 0.0
        self._busy_since = env.now
        self._worker_busy: dict[str, float] = {}

    # ------------------------------------------------------------------ public
    def run(self, worker: str, compute_s: float, memory_s: float) -> Event:
        """Run ``compute_s`` compute-bound + ``memory_s`` memory-bound seconds
        (as predicted for exclusive use) for ``worker``; the returned event
        succeeds with a :class:`GpuRun` when done."""
        for name, value in (("compute_s", compute_s), ("memory_s", memory_s)):
            if not (value >= 0 and math.isfinite(value)):
                raise ValueError(f"GPU {self.gpu_id}: {name} must be finite and >= 0, got {value!r}")
        if worker in self._in_flight:
            raise RuntimeError(f"GPU {self.gpu_id}: worker {worker!r} already has a run in flight")
        env = self.env
        now = env.now
        run = _Run(worker, compute_s, memory_s, now, env.event())
        mode = self.mode
        if mode == "exclusive":
            if self._owner is None:
                self._owner = worker
            elif self._owner != worker:
                raise ValueError(
                    f"GPU {self.gpu_id} is exclusive to worker {self._owner!r}; {worker!r} cannot run on it"
                )
            self._in_flight[worker] = run
            self._start_fixed(run)
        elif mode == "time_slice":
            self._in_flight[worker] = run
            if self._active or self._queue:
                self._queue.append(run)
            else:
                self._start_fixed(run)
        else:
            share = self._shares.get(worker)
            if share is None:
                raise ValueError(f"GPU {self.gpu_id}: worker {worker!r} has no SM share (shares: {self._shares})")
            if share <= 0 and (compute_s > 0 or memory_s > 0):
                raise ValueError(f"GPU {self.gpu_id}: worker {worker!r} has SM share 0 and cannot run work")
            self._in_flight[worker] = run
            if compute_s + memory_s == 0:
                # Nothing to execute: done at this instant, never counted as active
                # (it must not perturb the other tenants' rates).
                timer = env.timeout_at(now)
                timer.callbacks.append(lambda _ev, run=run: self._complete(run))
            else:
                self._mark_start(run)
                self._reshape()
        return run.done

    def set_shares(self, shares: dict[str, float]) -> None:
        """Change the SM split now (sm_split only), e.g. per encode micro-batch as
        EAServe §3.4 does; runs in flight continue at their new rates."""
        if self.mode != "sm_split":
            raise ValueError(f"GPU {self.gpu_id}: shares apply to mode sm_split only, not {self.mode!r}")
        shares = dict(shares)
        for worker in self._active:
            if shares.get(worker, 0.0) <= 0:
                raise ValueError(f"GPU {self.gpu_id}: worker {worker!r} is running and needs an SM share > 0")
        self._set_shares(shares)
        self._reshape()

    @property
    def shares(self) -> dict[str, float]:
        """Worker -> SM fraction (sm_split; empty otherwise). A copy."""
        return dict(self._shares)

    @property
    def busy_s(self) -> float:
        """Seconds so far with at least one run executing (union of intervals)."""
        if self._active:
            return self._busy_s + (self.env.now - self._busy_since)
        return self._busy_s

    def worker_busy_s(self, worker: str) -> float:
        """Seconds so far ``worker`` had a run executing (queued time excluded)."""
        busy = self._worker_busy.get(worker, 0.0)
        run = self._active.get(worker)
        if run is not None:
            busy += self.env.now - run.started_at
        return busy

    @property
    def active_workers(self) -> tuple[str, ...]:
        """Workers executing now, in the order they started."""
        return tuple(self._active)

    @property
    def num_queued(self) -> int:
        """Runs waiting for the GPU (time_slice)."""
        return len(self._queue)

    def __repr__(self) -> str:
        return f"SharedGpu({self.gpu_id!r}, {self.mode!r}, shares={self._shares})"

    # ---------------------------------------------------------------- internal
    def _set_shares(self, shares: dict[str, float]) -> None:
        for worker, share in shares.items():
            if not (0.0 <= share <= 1.0):
                raise ValueError(f"GPU {self.gpu_id}: SM share of {worker!r} must be in [0, 1], got {share!r}")
        total = sum(shares.values())
        if total > 1.0 + SHARE_SUM_TOLERANCE:
            raise ValueError(f"GPU {self.gpu_id}: SM shares sum to {total} > 1")
        self._shares = shares
        self._stretch = {w: self.curve.stretch(s) for w, s in shares.items() if s > 0}

    def _mark_start(self, run: _Run) -> None:
        now = self.env.now
        if not self._active:
            self._busy_since = now
        run.started_at = now
        self._active[run.worker] = run

    def _mark_stop(self, run: _Run) -> None:
        now = self.env.now
        del self._active[run.worker]
        self._worker_busy[run.worker] = self._worker_busy.get(run.worker, 0.0) + (now - run.started_at)
        if not self._active:
            self._busy_s += now - self._busy_since

    def _complete(self, run: _Run) -> None:
        del self._in_flight[run.worker]
        self.num_runs += 1
        now = self.env.now
        run.done.succeed(GpuRun(run.worker, run.submitted_at, run.started_at, now, run.compute_s, run.memory_s))

    # exclusive / time_slice: full speed, fixed end once started.
    def _start_fixed(self, run: _Run) -> None:
        self._mark_start(run)
        run.end_at = run.started_at + (run.compute_s + run.memory_s)
        timer = self.env.timeout_at(run.end_at)
        timer.callbacks.append(lambda _ev, run=run: self._finish_fixed(run))

    def _finish_fixed(self, run: _Run) -> None:
        self._mark_stop(run)
        self._complete(run)
        if self._queue:
            self._start_fixed(self._queue.popleft())

    # sm_split: piecewise-constant rates.
    def _period(self, run: _Run, n_other: int) -> float:
        t = 0.0
        if run.compute_s:
            t = run.compute_s * self._stretch[run.worker]
        return t + run.memory_s * (1.0 + self.memory_interference * n_other)

    def _reshape(self) -> None:
        """Bring every active run's progress up to now at its old rate, apply the
        new rate, and reschedule the runs whose rate changed."""
        now = self.env.now
        n_other = len(self._active) - 1
        for run in self._active.values():
            period = self._period(run, n_other)
            if period == run.period:
                continue  # same rate: the scheduled end stands (keeps exact floats)
            if run.period is not None:  # progress since the last change
                if now >= run.end_at:
                    run.remaining = 0.0  # due now: land on it exactly
                else:
                    run.remaining = max(run.remaining - (now - run.seg_start) / run.period, 0.0)
            run.seg_start = now
            run.period = period
            run.end_at = now + run.remaining * period  # remaining == 1.0 at start: now + period exactly
            run.gen += 1
            timer = self.env.timeout_at(run.end_at)
            timer.callbacks.append(lambda _ev, run=run, gen=run.gen: self._on_timer(run, gen))

    def _on_timer(self, run: _Run, gen: int) -> None:
        if gen != run.gen or self._active.get(run.worker) is not run:
            return  # superseded by a rate change
        self._mark_stop(run)
        self._reshape()
        self._complete(run)

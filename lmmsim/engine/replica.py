"""A monolithic engine replica: encoder + LLM on one TP group, stepping batches.

One SimPy event per engine step. Each step runs the encoder over the media
items its chunks need (vLLM v1 runs them before the LLM forward, on the same
GPUs) and then the LLM forward over the batch. Step durations come from the
:class:`~lmmsim.costmodel.base.StepCostModel`.

Fast-forward: while the batch is decode-only and nothing can join it, the
replica computes a stretch of steps in a plain loop and yields one event at
its end. The stretch stops before the next decode completion step ends past
it, before KV blocks would run out, and before any step that would end at or
after ``barrier_at()``, so every request sees the same timeline as stepping
one by one (tests compare the two bit for bit).

A stretch is interruptible: ``barrier_at`` need not foresee arrivals (a fleet
has one somewhere almost always, which would cut every stretch short). When
work reaches the replica mid-stretch (:meth:`submit`, :meth:`notify`), it first
*syncs*: it applies the steps that ended strictly before now -- exactly those
a stretch cut at this arrival would have run -- and turns the step in progress
into an ordinary step ending when it was going to, so the timeline is
unchanged. Arrivals are ordinary events and engine events run after them at
the same instant (:mod:`lmmsim.engine.clock`): a step ending exactly now is
still in progress and sees the arrival, as when stepping. The replica's
``load`` needs no sync: it only changes at completions, which end a stretch.
"""

from __future__ import annotations

from bisect import bisect_left
from heapq import heapify
from typing import Callable

from lmmsim.engine.clock import SimEnvironment
from lmmsim.engine.decode_cohort import decode_step_cost, plan_step_s
from lmmsim.engine.pipeline import plan_kind, plan_request_ids
from lmmsim.engine.scheduler import ContinuousBatchingScheduler, SeqState
from lmmsim.engine.steplog import StepRecord, engine_counters


def until_next_event(env, barrier_at: Callable[[], float]) -> Callable[[], float]:
    """The barrier of an engine other events feed (a decode worker by KV transfers, an e_pd worker
    by embeddings): ``barrier_at()`` or the simulation's next event, whichever is sooner. Work only
    reaches the engine in an event, so a stretch that ends before the next one -- whatever it is --
    meets nothing (no sync), and the events drawn meanwhile are its own: stepping's order, event
    ids included."""
    def barrier() -> float:
        nxt, bound = env.peek(), barrier_at()
        return nxt if nxt < bound else bound
    return barrier


class Replica:
    def __init__(
        self,
        env: SimEnvironment,
        index: int,
        scheduler: ContinuousBatchingScheduler,
        cost,
        gpu_ids: tuple[int, ...],
        on_finish: Callable[[SeqState], None],
        barrier_at: Callable[[], float],
        fast_forward: bool = True,
        step_log: list | None = None,
        name: str | None = None,
        on_handoff: Callable[[SeqState], None] | None = None,
        on_batch: Callable | None = None,
        run: Callable | None = None,
    ):
        self.env = env
        self.index = index
        self.name = name or f"replica{index}"
        self.on_handoff = on_handoff
        self.on_batch = on_batch  # called with each completed StepPlan (embedding release)
        # run(compute_s, memory_s) -> Event: the step on a GPU shared with another
        # worker (lmmsim.engine.gpu_share); None: the GPUs are this engine's alone.
        self.run = run
        self.scheduler = scheduler
        self.cost = cost
        self.gpu_ids = gpu_ids
        self.on_finish = on_finish
        self.barrier_at = barrier_at
        self.fast_forward = fast_forward
        self.step_log = step_log  # optional list of StepRecord, one per step
        self.busy_s = 0.0
        self.num_steps = 0
        self._wakeup = None
        # the stretch being waited for: (start, step ends, KV blocks, busy_s after each step, counters)
        self._stretch = None
        # after a sync: the step in progress, (start, plan, encode_s, step_s, end, counters)
        self._in_progress = None
        self._abandoned: list = []  # stretch-end timeouts a sync left in the event queue
        self.process = env.process(self._run())

    @property
    def load(self) -> int:
        return self.scheduler.num_outstanding

    def gpu_busy_s(self) -> dict[int, float]:
        return {g: self.busy_s for g in self.gpu_ids}

    def submit(self, seq: SeqState) -> None:
        if self._stretch is not None:
            self.sync()
        seq.replica = self.index
        self.scheduler.add(seq)
        self.notify()

    def notify(self) -> None:
        """New work may be schedulable (an arrival, a hand-off, freed KV): wake if idle."""
        if self._stretch is not None:
            self.sync()
        if self._wakeup is not None and not self._wakeup.triggered:
            self.env.succeed_late(self._wakeup)

    def _finish_all(self, finished: list) -> None:
        for seq in finished:
            self.on_finish(seq)

    def _sleep(self):
        """Wait to be notified."""
        if self._abandoned:
            self._drop_abandoned()
        self._wakeup = self.env.event()
        yield self._wakeup
        self._wakeup = None

    def _run(self):
        env = self.env
        sched = self.scheduler
        cost = self.cost
        while True:
            if not sched.has_work():
                yield from self._sleep()
            now = env.now
            if self.fast_forward and sched.can_fast_forward():
                steps, end_at, ends, blocks, busies = self._plan_stretch(now)
                if steps > 1:
                    counters = engine_counters(sched) if self.step_log is not None else None
                    self._stretch = (now, ends, blocks, busies, counters)
                    yield env.timeout_at(end_at)
                    step = self._in_progress
                    if step is None:  # the stretch ran to its end
                        self._stretch = None
                        self.busy_s = busies[-1]
                        self._apply(now, ends, blocks, counters)
                    else:  # a sync cut it: the step then in progress has ended
                        self._in_progress = None
                        self._complete(*step)
                    continue
            plan = sched.schedule(now)
            if plan.is_empty:
                if plan.preempted:
                    continue  # the step only evicted; admission is allowed on the retry
                # A prefill-only engine may wait for blocks its hand-offs hold until their KV
                # leaves (the transfer's end wakes it), whatever its media path.
                if sched.media != "remote" and not sched.prefill_only:
                    raise RuntimeError(
                        f"{self.name}: work is waiting but nothing can be scheduled "
                        f"(free KV blocks {sched.pool.num_free}, waiting {len(sched.queue)})"
                    )
                # Embeddings still on the way: sleep until an arrival or hand-off wakes us.
                yield from self._sleep()
                continue
            counters = engine_counters(sched) if self.step_log is not None else None  # as the step starts
            if self.run is None:
                encode_s = cost.encode_call_s([seg.item.encoder for _, seg in plan.encodes]) if plan.encodes else 0.0
                step_s = encode_s + plan_step_s(cost, plan)
                end_at = now + step_s
                yield env.timeout_at(end_at)
            else:
                encode_s = 0.0  # engines on shared GPUs are disaggregated: no local encoder
                compute_s, memory_s = cost.llm_step_parts(
                    plan.chunk_shapes, plan.num_decodes, plan.decode_context_sum, plan.num_sampled
                )
                yield self.run(compute_s, memory_s)
                end_at = env.now
                step_s = end_at - now
            self._complete(now, plan, encode_s, step_s, end_at, counters)

    def _complete(self, now: float, plan, encode_s: float, step_s: float, end_at: float, counters) -> None:
        """The step ``plan`` that started at ``now`` has ended at ``end_at``."""
        sched = self.scheduler
        self.busy_s += step_s
        self.num_steps += 1
        if self.step_log is not None:
            self.step_log.append(StepRecord(self.name, now, end_at, plan_kind(plan), plan_request_ids(plan, sched),
                                            plan.num_tokens, len(plan.chunks) + plan.num_decodes, **counters))
        handoffs: list = []
        self._finish_all(sched.complete(plan, now, now + encode_s, end_at, handoffs))
        if self.on_batch is not None:
            self.on_batch(plan)
        for seq in handoffs:
            self.on_handoff(seq)

    def _apply(self, start: float, ends: list, blocks: int, counters) -> None:
        """Count the decode-only steps that ran from ``start`` and ended at ``ends`` (busy_s is set)."""
        sched = self.scheduler
        steps = len(ends)
        self.num_steps += steps
        if self.step_log is not None:
            self.step_log.append(StepRecord(self.name, start, ends[-1], "decode_run", tuple(sched.decoding),
                                            len(sched.decoding) * steps, steps, **counters))
        self._finish_all(sched.advance_decodes(ends, blocks))

    def sync(self) -> None:
        """Mid-stretch: apply the steps that ended before now and make the one in
        progress an ordinary step (see the module docstring)."""
        start, ends, _, busies, counters = self._stretch
        self._stretch = None
        env, sched, cost = self.env, self.scheduler, self.cost
        done = bisect_left(ends, env.now)  # steps that ended strictly before now
        if done:
            first = sched.step_no
            self.busy_s = busies[done - 1]
            self._apply(start, ends[:done], sum(map(sched.decode_blocks_needed, range(first, first + done))),
                        counters)
            start = ends[done - 1]
        # As stepping would have: the batch built when the step began, before the arrival.
        plan = sched.schedule(start)
        counters = engine_counters(sched) if self.step_log is not None else None  # as the step starts
        step_s = 0.0 + plan_step_s(cost, plan)
        end_at = start + step_s
        if end_at != ends[done] or plan.chunks or plan.preempted:
            raise RuntimeError(f"{self.name}: sync rebuilt a different step ({end_at} != {ends[done]})")
        self._in_progress = (start, plan, 0.0, step_s, end_at, counters)
        if done + 1 < len(ends):  # it ends before the stretch would: wake the process then instead
            proc = self.process
            old = proc._target  # as simpy's Interrupt detaches a waiting process
            old.callbacks.remove(proc._resume)
            self._abandoned = [e for e in self._abandoned if e.callbacks is not None]
            self._abandoned.append(old)
            new = env.timeout_at(end_at)
            new.callbacks.append(proc._resume)
            proc._target = new

    def _drop_abandoned(self) -> None:
        """Before going idle: take abandoned stretch ends still queued out of the event
        queue, so that none can be a run's last event (its end time, ``sim_end_at_s``)."""
        queue = self.env._queue
        live = {id(e) for e in self._abandoned if e.callbacks is not None}
        self._abandoned = []
        if live:
            queue[:] = [entry for entry in queue if id(entry[3]) not in live]
            heapify(queue)

    def _plan_stretch(self, now: float) -> tuple[int, float, list, int, list]:
        """How many decode-only steps can be applied as one event, their end,
        each step's end (the token times of the stretch), the KV blocks they
        take, and ``busy_s`` after each step (a sync applies a first part).

        Sums step durations exactly as stepping would (``t += dt`` in order) and
        adds them to ``busy_s`` likewise.
        """
        sched = self.scheduler
        cost = self.cost
        max_steps = sched.steps_to_next_finish()
        barrier = self.barrier_at()
        num_decodes = len(sched.decoding)
        free = sched.pool.num_free
        first = sched.step_no
        t = now
        busy = self.busy_s
        steps = 0
        ends: list = []
        busies: list = []
        # the hot loop of a run: methods bound once (the scheduler's single-slot views, inlined)
        cohort = sched.cohorts[0]
        blocks_needed, step_s = cohort.blocks_needed, decode_step_cost(cost, num_decodes)
        add_end, add_busy = ends.append, busies.append
        context = cohort.context_sum(first)  # grows by the (fixed) members each step: integers, exact
        while steps < max_steps:
            need = blocks_needed(first + steps)
            if need > free:
                break
            dt = step_s(context + num_decodes * steps)
            if t + dt >= barrier:
                break
            free -= need
            t = t + dt
            add_end(t)
            busy += dt
            add_busy(busy)
            steps += 1
        return steps, t, ends, sched.pool.num_free - free, busies

"""Fast-forward of a pipeline engine: its own events run ahead of the clock.

While every batch is decode-only and nothing can join (no waiting, prefilling
or prefilled request), nothing outside the engine can change what it does
until the next arrival: its events -- stage 0 granted to a slot, a batch
leaving stage 0, a batch leaving the last stage, the change signal idle slots
wait on -- only feed each other. :func:`run_ahead` then takes the engine's
events out of the simulation's queue and runs them, with the engine's own
handlers, in a plain loop on a private queue (:class:`AheadQueue`) whose
events keep the keys (time, priority, event id) the simulation would give
them, so they run in the order they would have. Two things differ from
stepping, both exact while the conditions hold:

* a decode batch is built from its cohort's counters (:meth:`Ahead.plan`: the
  whole cohort, its KV blocks and attended context) and completed by noting
  its end (:meth:`Ahead.completed`), instead of the scheduler's walk;
* the scheduler takes all those steps at once when the loop ends
  (:meth:`Ahead.commit`: each cohort advances over its step ends, the KV pool
  gives the blocks), before anything outside can look.

The loop stops before the first event it may not run this way: one at or
after ``barrier`` (the next arrival, or the horizon; for a pipeline fed by other
events too, an e_pd one's embeddings, also the simulation's next event that is
not the engine's own: :func:`first_outside_event`), a completion that
finishes a request (``on_finish`` reaches outside), or a grant whose batch's
KV blocks do not fit (the scheduler preempts). The events still queued go
back to the simulation's queue under their keys. Tests compare runs with and
without fast-forward bit for bit.

Where a request may still join (one waits or is mid-prefill), :func:`run_private`
runs the engine's events in the same private queue with the engine's own
handlers, the scheduler's walk included: the same events under the same keys,
without SimPy's machinery. It stops before the barrier, before a completion
that reaches outside (:func:`reaches_outside`), and before a batch leaving
stage 0 at a quiet point, whose event then starts :func:`run_ahead` from the
simulation's queue. A pipeline fed by outside events (e_pd) does not use it:
they come too often for it to pay.
"""

from __future__ import annotations

from heapq import heapify, heappop, heappush

from lmmsim.engine.clock import LATE
from lmmsim.engine.decode_cohort import decode_step_cost
from lmmsim.engine.pipeline_batch import Batch, pass_stages
from lmmsim.engine.pipeline_steady import run_steady, steady
from lmmsim.engine.scheduler import StepPlan

NONE = ()  # a decode batch's chunks, encodes, cache hits and preemptions (read, never grown)


class AheadQueue:
    """The engine's events while it runs ahead: the simulation's interface, its own heap."""

    __slots__ = ("env", "now", "heap")

    def __init__(self, env, entries: list):
        self.env = env
        self.now = env.now
        self.heap = entries  # (when, priority, event id, fn, value)
        heapify(entries)

    def call_at(self, when: float, fn, value, priority: int = LATE):
        heappush(self.heap, (when, priority, next(self.env._eid), fn, value))

    def call_keyed(self, key: tuple, fn, value):
        heappush(self.heap, (*key, fn, value))


class Step:
    """A decode batch run ahead: its slot, cohort step, size, attended context, times."""

    __slots__ = ("slot", "step", "num_decodes", "context_sum", "start", "stage_s", "done_at")

    def __init__(self, slot, step, num_decodes, context_sum, start, stage_s):
        self.slot = slot
        self.step = step
        self.num_decodes = num_decodes
        self.context_sum = context_sum
        self.start = start
        self.stage_s = stage_s
        self.done_at = None

    def batch(self, batch_cls):
        """As the engine's own batch, once back in the simulation's queue."""
        n = self.num_decodes
        batch = batch_cls(self.slot, StepPlan(self.step, self.slot, NONE, NONE, NONE, n, self.context_sum, n, n, NONE),
                          self.start, 0.0, self.stage_s, "decode", (), None)
        batch.done_at = self.done_at
        return batch


class Ahead:
    """The engine's batch handlers while it runs ahead, and the scheduler state they change,
    kept aside: each cohort's step, the KV blocks taken, each slot's step ends, the last grant.
    A batch is built from its cohort's counters (the whole cohort, its KV blocks and attended
    context) and completed by noting when it ended; stage 0 and the change signal go through
    the engine's own code."""

    def __init__(self, engine, queue: AheadQueue):
        sched = engine.scheduler
        self.engine = engine
        self.sched = sched
        self.queue = queue
        self.cohorts = cohorts = sched.cohorts
        self.step = [c.step_no for c in cohorts]
        # members never join or leave while running ahead: each slot's next finishing step is fixed
        self.finish_step = [c.step_no + c.steps_to_next_finish() - 1 if c.members else -1 for c in cohorts]
        self.kv_free = self.kv_start = sched.pool.num_free
        self.ends: list[list] = [[] for _ in cohorts]  # per slot: when each step run ahead ended
        self.last_grant = None
        self.num_stages = engine.num_stages
        # members are fixed, so per slot: its size, its activation send, its context at the
        # first step (it grows by the size each step)
        self.size = [len(c) for c in cohorts]
        cost = engine.cost
        self.step_cost = [decode_step_cost(cost, n) if n else None for n in self.size]  # by context
        self.act = [engine._activation_of(n) if n else 0.0 for n in self.size]
        self.step0 = list(self.step)
        self.ctx0 = [c.context_sum(c.step_no) for c in cohorts]
        self.blocks_needed = [c.blocks_needed for c in cohorts]
        self.phase, self.block_size = [c.phase_counts for c in cohorts], sched.block_size  # blocks_needed, inline
        self.runs = [Step(s, 0, n, 0, 0.0, 0.0) for s, n in enumerate(self.size)]  # one batch per slot at a time
        self.any_decode = any(self.size)  # a slot decodes: lmmsim.engine.pipeline_steady may take over
        # handlers as attributes, so a queued event's function can be told by identity
        self.h_granted, self.h_left0, self.h_done = self.granted, self.left_stage0, self.done

    def new_run(self, slot: int, step: int, start: float, stage_s: float) -> Step:
        """``slot``'s batch of cohort step ``step``, granted stage 0 at ``start``."""
        run = self.runs[slot]
        run.step, run.start, run.stage_s, run.done_at = step, start, stage_s, None
        run.context_sum = self.ctx0[slot] + self.size[slot] * (step - self.step0[slot])
        return run

    def fits(self, slot: int) -> bool:
        """Would ``slot``'s next batch's new KV blocks fit?"""
        return self.blocks_needed[slot](self.step[slot]) <= self.kv_free

    def granted(self, slot: int) -> None:
        engine = self.engine
        engine._zero_pending -= 1
        now = self.queue.now
        self.last_grant = now  # the scheduler refreshes its queue's priorities at each batch
        n = self.size[slot]
        if not n:  # an empty batch, as the scheduler's
            engine._release0()
            engine._wait_change(slot)
            return
        step = self.step[slot]
        self.kv_free -= self.blocks_needed[slot](step)
        ctx = self.ctx0[slot] + n * (step - self.step0[slot])
        stage_s = self.step_cost[slot](ctx) / self.num_stages
        run = self.new_run(slot, step, now, stage_s)
        queue = self.queue
        heappush(queue.heap, (now + (stage_s + 0.0), LATE, next(queue.env._eid), self.h_left0, run))

    def left_stage0(self, run: Step) -> None:
        engine = self.engine
        engine._release0()
        engine.stage_busy_s[0] += run.stage_s + 0.0
        if engine.chunk_pipelining:
            engine.notify()
        run.done_at = pass_stages(engine._stage_free, engine.stage_busy_s, self.queue.now, self.act[run.slot],
                                  run.stage_s, self.num_stages)
        queue = self.queue
        heappush(queue.heap, (run.done_at, LATE, next(queue.env._eid), self.h_done, run))

    def done(self, run) -> None:
        """A batch left the last stage (``on_batch`` has nothing to do for a decode batch that
        preempted nobody: it releases the embeddings chunks consumed)."""
        engine = self.engine
        slot = run.slot
        engine.num_steps += 1
        self.ends[slot].append(self.queue.now)
        self.step[slot] += 1
        engine.notify()
        engine._ask(slot)

    def close(self) -> None:
        """Drop the handlers kept as attributes: each holds this object, a cycle that only the
        cyclic collector would free (thousands of run-aheads' worth, traversed by every young
        collection, were most of a pipeline run's collector time)."""
        del self.h_granted, self.h_left0, self.h_done
        self.queue.heap.clear()  # entries put back (their handlers hold this object too)

    def commit(self) -> None:
        """The scheduler takes the steps run ahead (no request finishes in them)."""
        sched = self.sched
        for slot, ends in enumerate(self.ends):
            if ends and sched.cohorts[slot].advance_many(ends):
                raise AssertionError("a step run ahead finished a request")
        sched.pool.allocate(self.kv_start - self.kv_free)
        if self.last_grant is not None:
            sched.queue.refresh(self.last_grant)


def quiet_point(engine) -> bool:
    """May ``engine`` run ahead from the batch leaving stage 0 now? Nothing can join, and
    no grant or change event is waiting at this instant (only completions are queued, and
    those can be taken out and put back under their keys)."""
    sched = engine.scheduler
    return not (engine._zero_pending or sched.prefilling or sched.prefilled or len(sched.queue)) and all(
        len(c) <= sched.token_budget for c in sched.cohorts)  # a priority walk may evict decodes beyond it


def run_ahead(engine, batch) -> None:
    """Run ``batch`` leaving stage 0 now and the engine's events after it, ahead of the clock."""
    env = engine.env
    queue = AheadQueue(env, [])
    ahead = Ahead(engine, queue)
    queued, barrier = _take_in_flight(engine, queue, ahead.h_done)
    engine._q, engine._ahead = queue, ahead
    engine._h_granted, engine._h_left0, engine._h_done = ahead.h_granted, ahead.h_left0, ahead.h_done
    try:
        engine._left_stage0(batch)
        _loop(engine, queue, ahead, barrier)
    finally:
        engine._q, engine._ahead = env, None
        engine._h_granted, engine._h_left0, engine._h_done = engine._granted, engine._left_stage0, engine._done
    ahead.commit()
    _put_back(engine, queue, {ahead.h_granted: engine._h_granted, ahead.h_left0: engine._h_left0,
                              ahead.h_done: engine._h_done}, queued)
    ahead.close()


def run_private(engine, handle, batch) -> None:
    """Where something can still join (a request is waiting or mid-prefill): run ``handle(batch)``
    (``batch`` leaving stage 0 or the last stage now; no zero-time event of the engine's waiting
    at this instant) and the engine's events after it with the engine's own handlers, the
    scheduler's walk included, in the private queue instead of the simulation's -- the same
    events, under the same keys, only without SimPy's machinery. It stops before an outside
    event may come (``barrier``), before a completion that reaches outside (:func:`reaches_outside`)
    and before a batch leaving stage 0 at a quiet point, where :func:`run_ahead` takes over."""
    env = engine.env
    queue = AheadQueue(env, [])
    queued, barrier = _take_in_flight(engine, queue, engine._h_done)
    engine._q = queue
    try:
        handle(batch)
        heap, done, left0 = queue.heap, engine._h_done, engine._h_left0
        while heap:
            when, _, _, fn, value = heap[0]
            if when >= barrier or (fn is done and reaches_outside(engine, value)) or (
                    fn is left0 and quiet_point(engine)):
                break
            heappop(heap)
            queue.now = when
            fn(value)
    finally:
        engine._q = env
    _put_back(engine, queue, {}, queued)
    queue.heap.clear()


def reaches_outside(engine, batch) -> bool:
    """Would completing ``batch`` reach outside the engine: finish a request (``on_finish``),
    hand one off (a prefill-only engine) or give ``on_batch`` something to do (chunks consumed,
    requests preempted)?"""
    plan, sched = batch.plan, engine.scheduler
    if engine.on_batch is not None and (plan.chunks or plan.preempted):
        return True
    if sched.cohorts[plan.slot].steps_to_next_finish() == 1:  # a member's last token
        return True
    for seq, n, _ in plan.chunks:  # a prefill's last chunk samples the first token
        if seq.num_computed + n == seq.num_tokens and (
                sched.prefill_only or seq.num_generated + 1 >= seq.request.num_output_tokens):
            return True
    return False


def _take_in_flight(engine, queue: AheadQueue, done) -> tuple[dict, float]:
    """Move the completions already in the simulation's queue into ``queue`` (handled by
    ``done``), and the batch in stage 0's leaving it (by the engine's handler: a run from a
    completion); returns them by event id (with their callbacks) and the barrier."""
    env = engine.env
    queued = {}  # event id -> (event already in the simulation's queue, its callbacks)
    moved = [(done, b, e) for b, e in engine._in_flight.values()]
    if engine._leaving0 is not None:
        moved.append((engine._h_left0, *engine._leaving0))
    for fn, batch, event in moved:
        queued[event.key[2]] = (event, event.callbacks)
        event.callbacks = []  # it runs in the private queue instead (unless it is still there at the end)
        queue.heap.append((*event.key, fn, batch))
    heapify(queue.heap)
    barrier = engine.barrier_at()
    if engine.outside_events_stop:
        barrier = min(barrier, first_outside_event(env, queued))
    return queued, barrier


def first_outside_event(env, own: dict) -> float:
    """When the simulation's next event that is not one of the engine's own (``own``: their event
    ids) is due: any event may route work to the engine, so a run ahead stops before it. A
    best-first walk down the queue's heap from its root, past the engine's own entries only:
    a few steps, whatever the queue's length."""
    queue = env._queue
    frontier = [(queue[0], 0)] if queue else []
    while frontier:
        entry, i = heappop(frontier)
        if entry[2] not in own:
            return entry[0]
        for child in (2 * i + 1, 2 * i + 2):
            if child < len(queue):
                heappush(frontier, (queue[child], child))
    return float("inf")


def _put_back(engine, queue: AheadQueue, real: dict, queued: dict) -> None:
    """The events still queued go back to the simulation's queue under their keys (``real``:
    the engine's handler for each run-ahead one)."""
    env = engine.env
    engine._in_flight.clear()  # the batches past stage 0 are those whose completion is still queued
    engine._leaving0 = None
    for when, priority, eid, fn, value in queue.heap:
        fn = real.get(fn, fn)
        if eid in queued:  # never left the simulation's queue: it runs there after all
            event, callbacks = queued[eid]
            event.callbacks = callbacks
        else:
            if isinstance(value, Step):
                value = value.batch(Batch)
            event = env.call_keyed((when, priority, eid), fn, value)
        if fn is engine._h_done:
            engine._in_flight[value.slot] = (value, event)
        elif fn is engine._h_left0:
            engine._leaving0 = (value, event)


def _loop(engine, queue: AheadQueue, ahead: Ahead, barrier: float) -> None:
    heap = queue.heap
    done, granted = ahead.h_done, ahead.h_granted
    finish_step = ahead.finish_step
    steady_ok = ahead.any_decode
    while heap:
        if steady_ok and steady(engine, ahead):
            run_steady(engine, ahead, queue, barrier)
            steady_ok = False  # the handlers take the next event
            if not heap:
                return
        entry = heappop(heap)
        when, fn, value = entry[0], entry[3], entry[4]
        if when >= barrier or (fn is done and value.step == finish_step[value.slot]) or (
                fn is granted and not ahead.fits(value)):
            # an outside event may come first; the completion finishes a request; the
            # scheduler would preempt: stepping takes over from this event
            heappush(heap, entry)
            return
        queue.now = when
        fn(value)
        steady_ok = ahead.any_decode

"""Fast-forward of a pipeline engine: its own queue, merged with the simulation's.

A fast-forwarding engine keeps its events -- stage 0 granted to a slot, a batch
leaving stage 0, a batch leaving the last stage, the change signal idle slots
wait on -- in a queue of its own (:class:`EngineQueue`), under the keys (time,
priority, event id) the simulation would give them, drawn from its counter in
the same order. The simulation sees one event per stretch of them: a wake at
the first one's key. The wake runs the engine's events in key order, setting the
clock to each, for as long as each comes before the simulation's next event (and
before the barrier: the next arrival or the horizon) -- the very order of one
queue, without SimPy's machinery per event. Anything outside that reaches the
engine does so in an event of its own, which the merge puts in its place.

Running ahead. While every batch is decode-only and nothing can join (no waiting,
prefilling or prefilled request), nothing outside the engine can change what it
does until the next arrival: its events only feed each other. :func:`run_ahead`
(from a batch leaving stage 0) or :func:`run_ahead_from_grant` (from a grant of
stage 0, the first after the engine turned quiet) then runs them with handlers of
their own (:class:`Ahead`) past the simulation's other events, up to ``barrier``
(the next arrival or the horizon; for a pipeline fed by other events too, an e_pd
one's embeddings, also the simulation's next event: :func:`next_outside_event`).
Two things differ from stepping, both exact while the conditions hold:

* a decode batch is built from its cohort's counters (:meth:`Ahead.granted`: the
  whole cohort, its KV blocks and attended context) and completed by noting
  its end (:meth:`Ahead.done`), instead of the scheduler's walk;
* the scheduler takes all those steps at once when the loop ends
  (:meth:`Ahead.commit`: each cohort advances over its step ends, the KV pool
  gives the blocks), before anything outside can look.

A completion that finishes a request reaches outside (``on_finish``): when nothing
else in the simulation comes before it, the run commits its steps, completes that
batch with the engine's own code at its time, reads the new state and goes on
while nothing can join (:func:`_finish_inline`). It stops before the first event it
may not run this way: one at or after the barrier, such a completion with another
event before it, or a grant whose batch's KV blocks do not fit (the scheduler
preempts); the events left go back to the engine's handlers under their keys. With every slot decoding
or empty, :mod:`lmmsim.engine.pipeline_steady` takes the steps without events.
Tests compare runs with and without fast-forward bit for bit.
"""

from __future__ import annotations

from heapq import heappop, heappush

from lmmsim.engine.clock import LATE
from lmmsim.engine.decode_cohort import decode_step_cost
from lmmsim.engine.pipeline_batch import Batch, pass_stages
from lmmsim.engine.pipeline_steady import run_steady, steady
from lmmsim.engine.scheduler import StepPlan

NONE = ()  # a decode batch's chunks, encodes, cache hits and preemptions (read, never grown)


class EngineQueue:
    """A fast-forwarding engine's events, merged with the simulation's by key (module docstring).

    ``call_at`` / ``call_keyed`` are the simulation's; ``heap`` holds (when, priority, event id,
    fn, value). Outside a run of its events (``busy``), a new first entry gets a wake: a
    simulation event at its key (a superseded wake does nothing when it comes)."""

    __slots__ = ("env", "now", "heap", "busy", "barrier_at", "_wake_key", "_wakes")

    def __init__(self, env, barrier_at):
        self.env = env
        self.now = env.now
        self.heap: list = []
        self.busy = False
        self.barrier_at = barrier_at  # the next arrival or the horizon (the simulation's)
        self._wake_key = None  # key of the current wake, if one is queued in the simulation
        self._wakes: set = set()  # keys of the wakes queued there, superseded ones included

    def call_at(self, when: float, fn, value, priority: int = LATE):
        heappush(self.heap, (when, priority, next(self.env._eid), fn, value))
        if not self.busy:
            self._arm()

    def call_keyed(self, key: tuple, fn, value):
        heappush(self.heap, (*key, fn, value))
        if not self.busy:
            self._arm()

    def _arm(self) -> None:
        """The simulation holds a wake at the first entry's key (or an earlier one's). A wake has
        its entry's key, so one for the same entry is never queued twice."""
        key = self.heap[0][:3]
        if self._wake_key is None or key < self._wake_key:
            self._wake_key = key
            if key not in self._wakes:
                self._wakes.add(key)
                self.env.call_keyed(key, self._wake, key)

    def _wake(self, key: tuple) -> None:
        self._wakes.discard(key)
        if key != self._wake_key:
            return  # superseded by an earlier wake, which ran this entry
        self._wake_key = None
        self.run()

    def run(self) -> None:
        """Run the entries in key order: the first (its wake's), then each that comes before the
        simulation's next event and the barrier; then wake again at the next."""
        env, heap, queue = self.env, self.heap, self.env._queue
        limit = self.barrier_at()
        self.busy = True
        try:
            while heap:
                when, priority, eid, fn, value = heappop(heap)
                self.now = env._now = when
                fn(value)
                if not heap:
                    break
                nxt = heap[0]
                if nxt[0] >= limit:
                    break
                if queue:  # (times first: a tie needs the whole key)
                    first = queue[0]
                    if first[0] < nxt[0] or (first[0] == nxt[0] and first[:3] < nxt[:3]):
                        break
        finally:
            self.busy = False
        if heap:
            self._arm()


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

    def __init__(self, engine, queue: EngineQueue):
        sched = engine.scheduler
        self.engine = engine
        self.sched = sched
        self.queue = queue
        self.cohorts = cohorts = sched.cohorts
        self.num_stages = engine.num_stages
        self.blocks_needed = [c.blocks_needed for c in cohorts]
        self.phase, self.block_size = [c.phase_counts for c in cohorts], sched.block_size  # blocks_needed, inline
        self.runs = [Step(s, 0, 0, 0, 0.0, 0.0) for s in range(len(cohorts))]  # one batch per slot at a time
        # members are fixed while running ahead, so per slot: its size, its step's cost by context, its
        # activation send, its next finishing step -- kept from one run ahead to the next while the
        # cohort's members stay the same (DecodeCohort.version)
        self.size, self.step_cost, self.act, self.finish_step = ([0] * len(cohorts), [None] * len(cohorts),
                                                                 [0.0] * len(cohorts), [-1] * len(cohorts))
        self._versions = [-1] * len(cohorts)
        self._ctx_base = [0] * len(cohorts)  # each slot's attended context is this + size x (step + 1)
        # handlers as attributes, so a queued event's function can be told by identity
        self.h_granted, self.h_left0, self.h_done = self.granted, self.left_stage0, self.done

    def read(self) -> None:
        """Take the scheduler's state as it is now (as a run ahead starts, and after a completion
        that finished a request: :func:`_finish_inline`)."""
        engine, sched, cohorts = self.engine, self.sched, self.cohorts
        self.step = [c.step_no for c in cohorts]
        self.kv_free = self.kv_start = sched.pool.num_free
        self.ends: list[list] = [[] for _ in cohorts]  # per slot: when each step run ahead ended
        self.last_grant = None
        versions = self._versions
        for slot, c in enumerate(cohorts):
            if c.version != versions[slot]:  # members joined or left since the last look
                versions[slot] = c.version
                n = self.size[slot] = len(c.members)
                self.step_cost[slot] = decode_step_cost(engine.cost, n) if n else None  # by context
                self.act[slot] = engine._activation_of(n) if n else 0.0
                self.finish_step[slot] = c.step_no + c.steps_to_next_finish() - 1 if n else -1
                self._ctx_base[slot] = c.context_sum(-1)
        # each slot's context at the first step (it grows by the size each step)
        self.step0 = list(self.step)
        self.ctx0 = [b + n * (k + 1) for b, n, k in zip(self._ctx_base, self.size, self.step)]
        self.any_decode = any(self.size)  # a slot decodes: lmmsim.engine.pipeline_steady may take over

    def new_run(self, slot: int, step: int, start: float, stage_s: float) -> Step:
        """``slot``'s batch of cohort step ``step``, granted stage 0 at ``start``."""
        run = self.runs[slot]
        run.step, run.start, run.stage_s, run.done_at = step, start, stage_s, None
        run.num_decodes = self.size[slot]
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

    def commit(self) -> None:
        """The scheduler takes the steps run ahead (no request finishes in them)."""
        sched = self.sched
        for slot, ends in enumerate(self.ends):
            if ends and sched.cohorts[slot].advance_many(ends):
                raise AssertionError("a step run ahead finished a request")
        sched.pool.allocate(self.kv_start - self.kv_free)
        if self.last_grant is not None:
            sched.queue.refresh(self.last_grant)


def quiet_point(engine, pending: int = 0) -> bool:
    """May ``engine`` run ahead from the batch leaving stage 0 now (or the grant now running,
    ``pending=1``)? Nothing can join, and no other grant or change event is waiting at this
    instant (only completions are queued: the run ahead handles them under their keys)."""
    return engine._zero_pending == pending and engine.scheduler.can_fast_forward_slots()


def run_ahead(engine, batch) -> None:
    """Run ``batch`` leaving stage 0 now and the engine's events after it, ahead of the clock."""
    _run(engine, _runner(engine), engine._left_stage0, batch)


def run_ahead_from_grant(engine, slot: int) -> bool:
    """Run ``slot``'s grant of stage 0 now (a quiet one: :func:`quiet_point` with it pending)
    and the engine's events after it ahead of the clock; False, running nothing, if its batch's
    KV blocks do not fit (the scheduler would preempt: stepping builds it). The first grant
    after the engine turns quiet -- after a prefill's last token, or an outside event that
    stopped a run ahead -- then costs what a decode batch run ahead does."""
    ahead = _runner(engine)
    if not ahead.fits(slot):
        return False
    _run(engine, ahead, ahead.granted, slot)
    return True


def _runner(engine) -> Ahead:
    """The engine's run-ahead handlers, reading the scheduler's state as it is now."""
    ahead = engine._runner  # one per engine, kept: a run ahead's objects are not garbage for the collector
    if ahead is None:
        ahead = engine._runner = Ahead(engine, engine._q)
    ahead.read()
    return ahead


def _run(engine, ahead: Ahead, first, value) -> None:
    """``first(value)`` -- the event now running -- and the engine's events after it, ahead of the clock."""
    queue = engine._q
    _rehandle(queue, {engine._h_done: ahead.h_done})  # the completions queued (the only entries at a quiet point)
    barrier = _barrier(engine)
    engine._ahead = ahead
    engine._h_granted, engine._h_left0, engine._h_done = ahead.h_granted, ahead.h_left0, ahead.h_done
    try:
        first(value)
        _loop(engine, queue, ahead, barrier)
    finally:
        engine._ahead = None
        engine._h_granted, engine._h_left0, engine._h_done = engine._granted, engine._left_stage0, engine._done
    ahead.commit()
    _rehandle(queue, {ahead.h_granted: engine._h_granted, ahead.h_left0: engine._h_left0,
                      ahead.h_done: engine._h_done})


def _rehandle(queue: EngineQueue, real: dict) -> None:
    """The queued entries under their keys, with the handler ``real`` maps theirs to (a batch run
    ahead as the engine's own): the keys do not change, so neither does the heap's order."""
    queue.heap[:] = [(when, priority, eid, real[fn], value.batch(Batch) if isinstance(value, Step) else value)
                     if fn in real else (when, priority, eid, fn, value)
                     for when, priority, eid, fn, value in queue.heap]


def next_outside_event(env) -> float:
    """When the simulation's next event is due: a pipeline fed by other events too (e_pd) runs
    ahead only before it, as any event may route work to it. The engine's own events are not
    there (its queue's wake was taken off to run them; a superseded wake only stops it early)."""
    return env.peek()


def _loop(engine, queue: EngineQueue, ahead: Ahead, barrier: float) -> None:
    heap = queue.heap
    done, granted = ahead.h_done, ahead.h_granted
    steady_ok = ahead.any_decode
    while heap:
        if steady_ok and steady(engine, ahead):
            run_steady(engine, ahead, queue, barrier)
            steady_ok = False  # the handlers take the next event
            if not heap:
                return
        entry = heappop(heap)
        when, fn, value = entry[0], entry[3], entry[4]
        if when >= barrier or (fn is granted and not ahead.fits(value)):
            # an outside event may come first; the scheduler would preempt: stepping takes over
            heappush(heap, entry)
            return
        if fn is done and value.step == ahead.finish_step[value.slot]:  # the completion finishes a request
            carry_on = _finish_inline(engine, queue, ahead, entry)
            if carry_on is None:
                heappush(heap, entry)
            if not carry_on:
                return
            barrier = min(barrier, _barrier(engine))
        else:
            queue.now = when
            fn(value)
        steady_ok = ahead.any_decode


def _barrier(engine) -> float:
    """The next arrival or the horizon; for a pipeline fed by other events too (e_pd), also the
    simulation's next event (any may route work to it)."""
    barrier = engine.barrier_at()
    if engine.outside_events_stop:
        barrier = min(barrier, next_outside_event(engine.env))
    return barrier


def _finish_inline(engine, queue: EngineQueue, ahead: Ahead, entry: tuple) -> bool | None:
    """A completion that finishes a request, within a run ahead: if the simulation has no event
    before it, commit the steps run ahead and complete the batch with the engine's own code, as
    stepping would at this point -- the clock set to it, ``on_finish`` reaching outside -- then
    read the new state and go on if nothing can join. None: not run (something comes first);
    True: run, go on; False: run, stop."""
    env = engine.env
    if env._queue and env._queue[0][:3] < entry[:3]:
        return None
    ahead.commit()
    when, run = entry[0], entry[4]
    queue.now = env._now = when
    batch = run.batch(Batch) if isinstance(run, Step) else run  # (a completion queued before the run ahead)
    engine._complete(batch.plan, batch.start, batch.encode_s)
    engine._ask(batch.slot)
    ahead.read()
    return engine.scheduler.can_fast_forward_slots()

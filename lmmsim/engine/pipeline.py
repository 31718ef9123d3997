"""A pipeline-parallel LLM engine: each PP stage is its own server.

``num_stages`` stages, each a FIFO server holding one micro-batch at a time
(on its own TP group of GPUs), connected by activation sends (p2p). Several
micro-batches are in flight: one per batch slot (vLLM's virtual engines), each
slot with its own decoding cohort in the shared
:class:`~lmmsim.engine.scheduler.ContinuousBatchingScheduler`.

A slot loops: take stage 0 when it is free, build its next batch, push it
through the stages, apply its outcome when it leaves the last stage. So a
request's next decode token waits for the previous one to leave the pipeline.
Prefill chunks follow one of two rules:

* **vanilla PP**: a request's next chunk waits until its previous chunk left
  the last stage (the request stays busy until its batch completes);
* **chunked pipeline parallelism** (CPP, Mooncake; used by gLLM and RServe):
  the next chunk may enter stage ``s`` as soon as the previous one has left it
  -- the request is released when its chunk leaves stage 0, and FIFO stages
  keep chunk ``k+1`` behind chunk ``k`` at every later stage.

Stage time: the model's layers are split evenly, so a stage runs
``step_time / num_stages`` (embedding and LM head spread with them; a
simplification). Encoder work of the batch (monolithic deployments, vLLM runs
it on the first PP rank) is added to stage 0. Between stages the batch's
activations (tokens x hidden x 2 bytes) are sent point to point; the send
does not occupy either stage.

How it runs: the engine is a state machine with SimPy events only where the
rest of the simulation can see it -- stage 0 granted to a slot (the batch is
built then), stage 0 released (the next chunk may enter; the next slot is
granted), the batch's last stage done (its tokens are out). Stages 1 and on
are computed as the batch leaves stage 0: it enters stage ``s`` when its
activations arrive or when the batch ahead of it leaves, whichever is later.
Batches keep their pipeline order at every stage (activations travel over one
ordered channel per stage pair, as NCCL's p2p sends do). Stage 0's grant and
release follow a FIFO SimPy resource's event order exactly (a grant is an
ordinary event at the instant the stage frees, after the release's own
event), so the timeline is the one a resource per stage gave. When a stage
shares its GPUs with another worker its run time is only known once run, and
the engine falls back to one process per slot
(:mod:`lmmsim.engine.pipeline_shared`).

Fast-forward (:mod:`lmmsim.engine.pipeline_ff`): the engine's events go to a
queue of its own, run in key order merged with the simulation's (one SimPy
event, a wake, per stretch of them). While every batch is decode-only with
nothing that could join, the engine runs its events ahead of the simulation
clock, in a plain loop, up to the next arrival, the next completion that
finishes a request, or a batch whose KV blocks do not fit; decode batches are
then built and completed from the cohorts' counters without the scheduler, which
takes the stretch's steps in one go.
"""

from __future__ import annotations

from collections import deque
from typing import Callable

from simpy.events import NORMAL, URGENT

from lmmsim.engine.clock import LATE
from lmmsim.engine.decode_cohort import plan_step_s
from lmmsim.engine.pipeline_batch import Batch, pass_stages, plan_kind, plan_request_ids
from lmmsim.engine.pipeline_ff import Ahead, EngineQueue, quiet_point, run_ahead, run_ahead_from_grant
from lmmsim.engine.pipeline_shared import start_shared_slots
from lmmsim.engine.scheduler import ContinuousBatchingScheduler, SeqState, StepPlan
from lmmsim.engine.steplog import StepRecord, engine_counters

__all__ = ["Batch", "PipelineEngine", "plan_kind", "plan_request_ids"]


class Change:
    """The "something changed" signal idle slots wait on. Like a SimPy event it is
    triggered once and processed by an event at that instant, after the ordinary ones,
    which wakes its waiters in the order they began to wait. That event's key is drawn
    when it is triggered, but it is only queued if someone waits: a signal nobody waits
    on counts as processed from the next instant on (waits happen in grants, ordinary
    events, which run before the processing event of their own instant)."""

    __slots__ = ("triggered", "queued", "key", "waiters")

    def __init__(self):
        self.triggered = False
        self.queued = False
        self.key = None  # (when, priority, event id) of its processing event, once triggered
        self.waiters: list = []


class PipelineEngine:
    def __init__(
        self,
        env,
        index: int,
        name: str,
        scheduler: ContinuousBatchingScheduler,
        cost,
        num_stages: int,
        stage_gpu_ids: list[tuple[int, ...]],
        activation_s: Callable[[int], float],
        on_finish: Callable[[SeqState], None],
        *,
        chunk_pipelining: bool = True,
        on_handoff: Callable[[SeqState], None] | None = None,
        step_log: list | None = None,
        on_batch: Callable | None = None,
        stage_runs: list | None = None,
        barrier_at: Callable[[], float] | None = None,
        fast_forward: bool = False,
        outside_events_stop: bool = False,
    ):
        if num_stages < 1 or len(stage_gpu_ids) != num_stages:
            raise ValueError("one GPU group per stage")
        self.env = env
        self.index = index
        self.name = name
        self.scheduler = scheduler
        self.cost = cost
        self.num_stages = num_stages
        self.stage_gpu_ids = stage_gpu_ids
        self.activation_s = activation_s  # p2p time of activations for a batch of n tokens
        self.on_finish = on_finish
        self.on_handoff = on_handoff
        self.on_batch = on_batch
        # per stage: run(compute_s, memory_s) -> Event on a shared GPU, or None
        self.stage_runs = stage_runs or [None] * num_stages
        self.chunk_pipelining = chunk_pipelining
        self.step_log = step_log
        self.stage_busy_s = [0.0] * num_stages
        self.num_steps = 0
        self._shared = any(self.stage_runs)
        if self._shared:
            self._changed = env.event()
            start_shared_slots(self)
            return
        num_slots = len(scheduler.cohorts)
        self._q = env  # where the engine's events go: the simulation, or its own queue (fast-forward)
        self._ahead: Ahead | None = None  # while running ahead
        self._runner: Ahead | None = None  # the run-ahead handlers, made at the first
        self._changed = Change()
        self._holder = None  # the slot stage 0 is granted to
        self._waiting0: deque = deque()  # slots that asked for stage 0, in order
        self._stage_free = [0.0] * num_stages  # when each later stage's last batch leaves it
        self._slot_changed = [None] * num_slots  # the change signal each slot saw when it asked
        self._zero_pending = 0  # grant, release and change events not yet run (all at their instant)
        # decode-only stretches run ahead (lmmsim.engine.pipeline_ff); not while logging steps
        self._fast_forward = fast_forward and barrier_at is not None and step_log is None and num_stages > 1
        if self._fast_forward:  # its events in a queue of its own, merged with the simulation's
            self._q = EngineQueue(env, barrier_at)
        self.barrier_at = barrier_at
        # work reaches the engine from other events than arrivals (an e_pd pipeline's embeddings):
        # a run ahead then also stops before the simulation's next event that is not its own
        self.outside_events_stop = outside_events_stop
        # handlers as attributes, so a queued event's function can be told by identity
        self._h_granted, self._h_left0, self._h_done = self._granted, self._left_stage0, self._done
        self._h_fire = self._fire
        self._activation: dict = {}  # activation send time by batch tokens
        env.call_at(env.now, self._boot, num_slots, URGENT)  # as each slot's process would start

    # ------------------------------------------------------------ engine API
    @property
    def load(self) -> int:
        return self.scheduler.num_outstanding

    @property
    def gpu_ids(self) -> tuple[int, ...]:
        return tuple(g for ids in self.stage_gpu_ids for g in ids)

    def gpu_busy_s(self) -> dict[int, float]:
        busy: dict[int, float] = {}
        for ids, b in zip(self.stage_gpu_ids, self.stage_busy_s):
            for g in ids:
                busy[g] = busy.get(g, 0.0) + b
        return busy

    def submit(self, seq: SeqState) -> None:
        seq.replica = self.index
        self.scheduler.add(seq)
        self.notify()

    def notify(self) -> None:
        """Something changed that may make a batch schedulable: wake idle slots."""
        if self._shared:
            if not self._changed.triggered:
                self.env.succeed_late(self._changed)
            return
        q = self._q
        if q is not self.env and not q.busy:
            q.now = self.env._now  # (called from outside the engine's events: at the simulation's time)
        change = self._changed
        if not change.triggered:
            change.triggered = True
            change.key = (q.now, LATE, next(self.env._eid))
            if change.waiters:
                self._queue_fire(change)

    def _queue_fire(self, change: Change) -> None:
        change.queued = True
        self._zero_pending += 1
        self._q.call_keyed(change.key, self._h_fire, change)

    # ------------------------------------------------------------- stage 0
    def _boot(self, num_slots: int) -> None:
        for slot in range(num_slots):
            self._ask(slot)

    def _fire(self, change: Change) -> None:
        self._zero_pending -= 1
        waiters, change.waiters = change.waiters, None  # processed
        for slot in waiters:
            self._ask(slot)

    def _ask(self, slot: int) -> None:
        """``slot`` asks for stage 0 (a batch slot's loop starts over)."""
        change = self._changed
        if change.triggered:
            change = self._changed = Change()
        self._slot_changed[slot] = change
        self._waiting0.append(slot)
        self._give0()

    def _give0(self, key: tuple | None = None) -> None:
        """A free stage 0 goes to the slot that asked first; it builds its batch in an
        ordinary event at this instant, as a resource's granted request would (``key``:
        that event's place, if already drawn)."""
        if self._holder is None and self._waiting0:
            slot = self._holder = self._waiting0.popleft()
            self._zero_pending += 1
            q = self._q
            if key is None:
                q.call_at(q.now, self._h_granted, slot, NORMAL)
            else:
                q.call_keyed(key, self._h_granted, slot)

    def _release0(self) -> None:
        """Stage 0 is free. A FIFO resource grants the next asker when the release's own
        event runs, right after this one's; the grant event takes that event's place (the
        asker first in line then is the one first in line now: later askers queue behind)."""
        self._holder = None
        if self._waiting0:
            self._give0((self._q.now, NORMAL, next(self.env._eid)))

    def _wait_change(self, slot: int) -> None:
        change = self._slot_changed[slot]
        if change.waiters is None or (change.triggered and change.key[0] < self._q.now):
            self._ask(slot)  # already processed: ask again at once
            return
        change.waiters.append(slot)
        if change.triggered and not change.queued:
            self._queue_fire(change)

    # --------------------------------------------------------------- a batch
    def _granted(self, slot: int) -> None:
        if self._fast_forward and self._ahead is None and quiet_point(self, 1) and run_ahead_from_grant(self, slot):
            return  # this grant and the engine's next events, ahead of the clock
        self._zero_pending -= 1
        sched = self.scheduler
        cost = self.cost
        start = self._q.now
        plan = sched.schedule(start, slot)
        if plan.is_empty:
            self._release0()
            if plan.preempted:  # after an evict-only batch, retry at once
                self._ask(slot)
            else:
                self._wait_change(slot)
            return
        encode_s = cost.encode_call_s([seg.item.encoder for _, seg in plan.encodes]) if plan.encodes else 0.0
        stage_s = plan_step_s(cost, plan) / self.num_stages
        if self.step_log is None:
            batch = Batch(slot, plan, start, encode_s, stage_s, "", (), None)
        else:
            batch = Batch(slot, plan, start, encode_s, stage_s, plan_kind(plan), plan_request_ids(plan, sched),
                          engine_counters(sched))
        self._q.call_at(start + (stage_s + encode_s), self._h_left0, batch)

    def _left_stage0(self, batch: Batch) -> None:
        if self._fast_forward and self._ahead is None and quiet_point(self):
            run_ahead(self, batch)  # this event and the engine's next ones, ahead of the clock
            return
        q = self._q
        now = q.now
        self._release0()
        self.stage_busy_s[0] += batch.stage_s + batch.encode_s
        if self.step_log is not None:
            self._log(batch, 0, batch.start, now)
        if self.num_stages == 1:
            self._complete(batch.plan, batch.start, batch.encode_s)
            self._ask(batch.slot)
            return
        if self.chunk_pipelining:
            self.scheduler.release_chunks(batch.plan)
            self.notify()
        log = (lambda s, begin, end: self._log(batch, s, begin, end)) if self.step_log is not None else None
        act = self._activation.get(batch.plan.num_tokens)  # (the memo's hit inline: every batch asks)
        if act is None:
            act = self._activation_of(batch.plan.num_tokens)
        batch.done_at = pass_stages(self._stage_free, self.stage_busy_s, now, act, batch.stage_s, self.num_stages, log)
        q.call_at(batch.done_at, self._h_done, batch)

    def _done(self, batch: Batch) -> None:
        self._complete(batch.plan, batch.start, batch.encode_s)
        self._ask(batch.slot)

    def _activation_of(self, tokens: int) -> float:
        """The activation send of a batch of ``tokens`` (memoised by count)."""
        act = self._activation.get(tokens)
        if act is None:
            act = self._activation[tokens] = self.activation_s(tokens)
        return act

    def _log(self, batch: Batch, stage: int, begin: float, end: float) -> None:
        if self.step_log is not None:
            self.step_log.append(StepRecord(f"{self.name}/stage{stage}", begin, end, batch.kind, batch.ids,
                                            batch.plan.num_tokens, len(batch.ids),
                                            **(batch.counters if stage == 0 else {})))

    def _complete(self, plan: StepPlan, start: float, encode_s: float) -> None:
        """The batch left the last stage: apply it, then hand on what it finished."""
        self.num_steps += 1
        handoffs: list = []
        finished = self.scheduler.complete(plan, start, start + encode_s, self._q.now, handoffs)
        if self.on_batch is not None:
            self.on_batch(plan)
        self.notify()
        for seq in finished:
            self.on_finish(seq)
        for seq in handoffs:
            self.on_handoff(seq)

"""A monolithic engine replica: encoder + LLM on one TP group, stepping batches.

One SimPy event per engine step. Each step runs the encoder over the media
items its chunks need (vLLM v1 runs them before the LLM forward, on the same
GPUs) and then the LLM forward over the batch. Step durations come from the
:class:`~lmmsim.costmodel.base.StepCostModel`.

Fast-forward: while the batch is decode-only and nothing can join it, the
replica computes a stretch of steps in a plain loop and yields one event at
its end. The stretch stops before the next decode completion step ends past
it, before KV blocks would run out, and before any step that would end at or
after the next arrival anywhere (``barrier_at``), so every request sees the
same timeline as stepping one by one (tests compare the two bit for bit).
"""

from __future__ import annotations

from typing import Callable

from lmmsim.engine.clock import SimEnvironment
from lmmsim.engine.pipeline import plan_kind, plan_request_ids
from lmmsim.engine.scheduler import ContinuousBatchingScheduler, SeqState
from lmmsim.engine.steplog import StepRecord, engine_counters


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
        self.process = env.process(self._run())

    @property
    def load(self) -> int:
        return self.scheduler.num_outstanding

    def gpu_busy_s(self) -> dict[int, float]:
        return {g: self.busy_s for g in self.gpu_ids}

    def submit(self, seq: SeqState) -> None:
        seq.replica = self.index
        self.scheduler.add(seq)
        self.notify()

    def notify(self) -> None:
        """New work may be schedulable (an arrival, a hand-off, freed KV): wake if idle."""
        if self._wakeup is not None and not self._wakeup.triggered:
            self.env.succeed_late(self._wakeup)

    def _finish_all(self, finished: list) -> None:
        for seq in finished:
            self.on_finish(seq)

    def _run(self):
        env = self.env
        sched = self.scheduler
        cost = self.cost
        while True:
            if not sched.has_work():
                self._wakeup = env.event()
                yield self._wakeup
                self._wakeup = None
            now = env.now
            if self.fast_forward and sched.can_fast_forward():
                steps, end_at, ends, blocks = self._plan_stretch(now)
                if steps > 1:
                    counters = engine_counters(sched) if self.step_log is not None else None
                    yield env.timeout_at(end_at)
                    self.num_steps += steps
                    if self.step_log is not None:
                        self.step_log.append(StepRecord(self.name, now, end_at, "decode_run",
                                                        tuple(sched.decoding), len(sched.decoding) * steps, steps,
                                                        **counters))
                    self._finish_all(sched.advance_decodes(ends, blocks))
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
                self._wakeup = env.event()
                yield self._wakeup
                self._wakeup = None
                continue
            counters = engine_counters(sched) if self.step_log is not None else None  # as the step starts
            if self.run is None:
                encode_s = cost.encode_call_s([seg.item.encoder for _, seg in plan.encodes]) if plan.encodes else 0.0
                step_s = encode_s + cost.llm_step_s(
                    plan.chunk_shapes, plan.num_decodes, plan.decode_context_sum, plan.num_sampled
                )
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

    def _plan_stretch(self, now: float) -> tuple[int, float, list, int]:
        """How many decode-only steps can be applied as one event, their end,
        each step's end (the token times of the stretch), and the KV blocks they take.

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
        while steps < max_steps:
            need = sched.decode_blocks_needed(first + steps)
            if need > free:
                break
            dt = cost.llm_step_s((), num_decodes, sched.decode_context_sum(first + steps), num_decodes)
            if t + dt >= barrier:
                break
            free -= need
            t = t + dt
            ends.append(t)
            busy += dt
            steps += 1
        if steps > 1:
            self.busy_s = busy
        return steps, t, ends, sched.pool.num_free - free

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
"""

from __future__ import annotations

from typing import Callable

import simpy

from lmmsim.engine.scheduler import ContinuousBatchingScheduler, SeqState, StepPlan
from lmmsim.engine.steplog import StepRecord, engine_counters


def plan_kind(plan: StepPlan) -> str:
    if plan.chunks and plan.num_decodes:
        return "mixed"
    return "prefill" if plan.chunks else "decode"


def plan_request_ids(plan: StepPlan, scheduler: ContinuousBatchingScheduler) -> tuple[int, ...]:
    ids = [s.request.request_id for s, _, _ in plan.chunks]
    if plan.num_decodes:
        ids.extend(scheduler.cohorts[plan.slot].members)
    return tuple(ids)


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
        self._stages = [simpy.Resource(env, capacity=1) for _ in range(num_stages)]
        self._changed = env.event()
        for slot in range(len(scheduler.cohorts)):
            env.process(self._run_slot(slot))

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
        if not self._changed.triggered:
            self.env.succeed_late(self._changed)

    def _wait_for_change(self):
        if self._changed.triggered:
            self._changed = self.env.event()
        return self._changed

    # --------------------------------------------------------------- the loop
    def _run_slot(self, slot: int):
        env = self.env
        sched = self.scheduler
        cost = self.cost
        stages = self._stages
        last = self.num_stages - 1
        while True:
            changed = self._wait_for_change()
            hold = stages[0].request()
            yield hold
            start = env.now
            plan = sched.schedule(start, slot)
            if plan.is_empty:
                stages[0].release(hold)
                if not plan.preempted:  # after an evict-only batch, retry at once
                    yield changed
                continue
            encode_s = cost.encode_call_s([seg.item.encoder for _, seg in plan.encodes]) if plan.encodes else 0.0
            shapes = (plan.chunk_shapes, plan.num_decodes, plan.decode_context_sum, plan.num_sampled)
            stage_s = cost.llm_step_s(*shapes) / self.num_stages
            parts = cost.llm_step_parts(*shapes) if any(self.stage_runs) else None
            ids = plan_request_ids(plan, sched) if self.step_log is not None else ()
            counters = engine_counters(sched) if self.step_log is not None else {}
            kind = plan_kind(plan)
            for s in range(self.num_stages):
                if s:
                    yield env.timeout_at(env.now + self.activation_s(plan.num_tokens))
                    hold = stages[s].request()
                    yield hold
                t0 = env.now
                if self.stage_runs[s] is None:
                    run_s = stage_s + (encode_s if s == 0 else 0.0)
                    yield env.timeout_at(t0 + run_s)
                else:
                    yield self.stage_runs[s](parts[0] / self.num_stages, parts[1] / self.num_stages)
                    run_s = env.now - t0
                stages[s].release(hold)
                self.stage_busy_s[s] += run_s
                if self.step_log is not None:
                    self.step_log.append(StepRecord(f"{self.name}/stage{s}", t0, env.now, kind, ids,
                                                    plan.num_tokens, len(ids), **(counters if s == 0 else {})))
                if s == 0 and self.chunk_pipelining and s != last:
                    sched.release_chunks(plan)
                    self.notify()
            self.num_steps += 1
            handoffs: list = []
            finished = sched.complete(plan, start, start + encode_s, env.now, handoffs)
            if self.on_batch is not None:
                self.on_batch(plan)
            self.notify()
            for seq in finished:
                self.on_finish(seq)
            for seq in handoffs:
                self.on_handoff(seq)

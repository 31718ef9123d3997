"""The pipeline engine's batch loop when a stage shares its GPUs with another worker.

A shared stage's run time is known only when the GPU arbiter
(:mod:`lmmsim.engine.gpu_share`) has run it, so each slot is a SimPy process
that takes the stages in turn (a resource per stage, FIFO) and waits on each
run. The engine's own state machine (:mod:`lmmsim.engine.pipeline`) computes
stage times instead and is used whenever every stage has its GPUs to itself.
"""

from __future__ import annotations

import simpy

from lmmsim.engine.pipeline_batch import plan_kind, plan_request_ids
from lmmsim.engine.steplog import StepRecord, engine_counters


def start_shared_slots(engine) -> None:
    """One process per batch slot of ``engine`` (a PipelineEngine with ``stage_runs``)."""
    engine._stages = [simpy.Resource(engine.env, capacity=1) for _ in range(engine.num_stages)]
    for slot in range(len(engine.scheduler.cohorts)):
        engine.env.process(_run_slot(engine, slot))


def _wait_for_change(engine):
    if engine._changed.triggered:
        engine._changed = engine.env.event()
    return engine._changed


def _run_slot(engine, slot: int):
    env = engine.env
    sched = engine.scheduler
    cost = engine.cost
    stages = engine._stages
    num_stages = engine.num_stages
    last = num_stages - 1
    while True:
        changed = _wait_for_change(engine)
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
        stage_s = cost.llm_step_s(*shapes) / num_stages
        parts = cost.llm_step_parts(*shapes)
        ids = plan_request_ids(plan, sched) if engine.step_log is not None else ()
        counters = engine_counters(sched) if engine.step_log is not None else {}
        kind = plan_kind(plan)
        for s in range(num_stages):
            if s:
                yield env.timeout_at(env.now + engine.activation_s(plan.num_tokens))
                hold = stages[s].request()
                yield hold
            t0 = env.now
            if engine.stage_runs[s] is None:
                run_s = stage_s + (encode_s if s == 0 else 0.0)
                yield env.timeout_at(t0 + run_s)
            else:
                yield engine.stage_runs[s](parts[0] / num_stages, parts[1] / num_stages)
                run_s = env.now - t0
            stages[s].release(hold)
            engine.stage_busy_s[s] += run_s
            if engine.step_log is not None:
                engine.step_log.append(StepRecord(f"{engine.name}/stage{s}", t0, env.now, kind, ids,
                                                  plan.num_tokens, len(ids), **(counters if s == 0 else {})))
            if s == 0 and engine.chunk_pipelining and s != last:
                sched.release_chunks(plan)
                engine.notify()
        engine._complete(plan, start, encode_s)

"""A pipeline engine's micro-batch: how its plan reads in a step log, how it passes the stages."""

from __future__ import annotations

from lmmsim.engine.scheduler import ContinuousBatchingScheduler, StepPlan


def plan_kind(plan: StepPlan) -> str:
    if plan.chunks and plan.num_decodes:
        return "mixed"
    return "prefill" if plan.chunks else "decode"


def plan_request_ids(plan: StepPlan, scheduler: ContinuousBatchingScheduler) -> tuple[int, ...]:
    ids = [s.request.request_id for s, _, _ in plan.chunks]
    if plan.num_decodes:
        ids.extend(scheduler.cohorts[plan.slot].members)
    return tuple(ids)


class Batch:
    """A micro-batch on its way through the stages."""

    __slots__ = ("slot", "plan", "start", "encode_s", "stage_s", "kind", "ids", "counters", "done_at")

    def __init__(self, slot, plan, start, encode_s, stage_s, kind, ids, counters):
        self.slot = slot
        self.plan = plan
        self.start = start
        self.encode_s = encode_s
        self.stage_s = stage_s
        self.kind = kind
        self.ids = ids
        self.counters = counters
        self.done_at = None  # when it leaves the last stage (known once it left stage 0)

    @property
    def step(self) -> int:
        return self.plan.step_no


def pass_stages(free: list, busy: list, t: float, act: float, stage_s: float, num_stages: int, log=None) -> float:
    """Stages 1 and on for a batch that left stage 0 at ``t``: it enters stage ``s`` when its
    activations arrive (``act`` after it left ``s - 1``) or when the batch ahead leaves,
    whichever is later. Updates ``free`` / ``busy`` per stage; returns when it leaves the last."""
    for s in range(1, num_stages):
        arrive = t + act
        begin = free[s] if free[s] > arrive else arrive
        t = begin + stage_s
        free[s] = t
        busy[s] += stage_s
        if log is not None:
            log(s, begin, t)
    return t

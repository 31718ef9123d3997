"""Batching schedulers, selected by ``policy.batching.kind``.

Each kind is a config (its ``kind`` literal is the name) registered under the
``batching`` role with a factory ``(config, queue) -> SchedulerChoice``: the
engine scheduler class, its extra arguments, and whether micro-batches are
throttled to gLLM's even share. A scheduler declares what it needs of the
queue policy: the continuous-batching schedulers take a queue that scores
requests (``sort_key``) as a request for priority order and preemption
(:class:`~lmmsim.engine.priority_scheduler.PriorityScheduler`); RServe's
schedulable-token scheduler orders by arrival and refuses a scoring queue in
one line. A plugin registers a new kind the same way (``lmmsim.policies``
entry points or :func:`lmmsim.policies.register`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, PositiveInt, StrictBool, model_validator

from lmmsim.errors import UserError
from lmmsim.policies.registry import register


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ChunkedPrefillConfig(_Strict):
    """Continuous batching with chunked prefill (vLLM v1 / Sarathi-Serve)."""

    kind: Literal["chunked_prefill"] = "chunked_prefill"
    token_budget: PositiveInt = 2048
    max_running: PositiveInt = 256
    # Per-step encoder budget in LLM tokens; default = token_budget, and never
    # below the largest media item (as vLLM raises it).
    encoder_budget_tokens: PositiveInt | None = None
    # True: all of a request's media are encoded before its first prefill chunk (the
    # strictly sequential encode -> prefill of vLLM v0 / gLLM as RServe describes them);
    # false: vLLM v1's encoder cache, items encoded with the chunk that reaches them
    # (lmmsim.engine.scheduler).
    encode_before_prefill: StrictBool = False

    @model_validator(mode="after")
    def _running_fits_budget(self):
        if self.max_running > self.token_budget:
            raise ValueError(
                f"max_running ({self.max_running}) must be <= token_budget ({self.token_budget}): "
                "every running request must get its decode token each step"
            )
        return self


class TokenThrottlingConfig(ChunkedPrefillConfig):
    """gLLM's Token Throttling (Guo et al., 2025): with pipeline parallelism, each
    micro-batch takes an even share of the pending prefill tokens, between
    ``min_prefill_tokens`` and ``token_budget``, so stages stay balanced."""

    kind: Literal["token_throttling"] = "token_throttling"
    min_prefill_tokens: PositiveInt = 256


class SchedulableTokensConfig(TokenThrottlingConfig):
    """RServe's token scheduling (rserve.txt Algorithm 2): each micro-batch takes
    the schedulable tokens (embedding ready, all earlier tokens scheduled) of
    the queued requests in order, up to ``token_budget``; a request whose next
    embedding is missing is passed over instead of blocking the queue.
    ``inter_request: false`` is RServe-intra: one request's prefill per batch.
    ``token_throttling: true`` caps each micro-batch at gLLM's Token Throttling
    share (RServe is built on gLLM; the paper's Algorithm 2 uses a fixed B, our
    default)."""

    kind: Literal["schedulable_tokens"] = "schedulable_tokens"
    inter_request: bool = True
    token_throttling: bool = False



@dataclass(frozen=True)
class SchedulerChoice:
    cls: type  # a ContinuousBatchingScheduler subclass
    extra: dict = field(default_factory=dict)  # its own constructor arguments
    throttled: bool = False  # micro-batches take an even share of the pending prefill tokens


def scores(queue) -> bool:
    """Does the queue policy score requests (priority order, priority preemption)?"""
    return hasattr(queue, "sort_key")


def _continuous(config, queue) -> SchedulerChoice:
    from lmmsim.engine.priority_scheduler import PriorityScheduler
    from lmmsim.engine.scheduler import ContinuousBatchingScheduler

    cls = PriorityScheduler if scores(queue) else ContinuousBatchingScheduler
    return SchedulerChoice(cls, {}, throttled=config.kind == "token_throttling")


@register("batching", ChunkedPrefillConfig, "continuous batching with chunked prefill (vLLM v1, Sarathi-Serve)")
def _chunked_prefill(config: ChunkedPrefillConfig, queue=None) -> SchedulerChoice:
    return _continuous(config, queue)


@register("batching", TokenThrottlingConfig, "gLLM's Token Throttling: an even share of pending prefill per micro-batch")
def _token_throttling(config: TokenThrottlingConfig, queue=None) -> SchedulerChoice:
    return _continuous(config, queue)


@register("batching", SchedulableTokensConfig, "RServe's schedulable tokens (Algorithm 2), in arrival order")
def _schedulable_tokens(config: SchedulableTokensConfig, queue=None) -> SchedulerChoice:
    from lmmsim.engine.schedulable_tokens import SchedulableTokenScheduler

    if scores(queue):
        raise UserError("policy.batching.kind", "schedulable_tokens takes queued requests in arrival order; a "
                        "queue policy that scores requests needs chunked_prefill or token_throttling")
    return SchedulerChoice(SchedulableTokenScheduler, {"inter_request": config.inter_request},
                           throttled=config.token_throttling)

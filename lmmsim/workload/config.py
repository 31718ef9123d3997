"""The scenario's ``workload:`` section: how many requests, when, and what they carry.

Plain validated data (pydantic, unknown keys rejected, immutable);
:func:`lmmsim.workload.generator.generate_requests` turns it into requests.
Error messages are written to follow their key, e.g.
``workload.mix.2.weight: must be > 0``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from lmmsim.workload.arrivals import (
    ArrivalProcess,
    ClosedLoopArrival,
    DeterministicArrival,
    GammaArrival,
    PoissonArrival,
    TraceArrival,
)
from lmmsim.workload.distributions import (
    EmpiricalDist,
    FixedDist,
    LengthDist,
    LognormalDist,
    NormalDist,
    PositiveCount,
    PositiveNumber,
    StrictModel,
    UniformDist,
)
from lmmsim.workload.conversation import ConversationSpec
from lmmsim.workload.reuse import ReuseConfig
from lmmsim.workload.shared_prefix import SystemPromptSpec, pool_name

__all__ = [
    "ArrivalProcess",
    "AudioSpec",
    "ClosedLoopArrival",
    "ConversationSpec",
    "DeterministicArrival",
    "EmpiricalDist",
    "FixedDist",
    "GammaArrival",
    "ImageSpec",
    "LengthDist",
    "LognormalDist",
    "MixClass",
    "NormalDist",
    "PoissonArrival",
    "ReuseConfig",
    "SystemPromptSpec",
    "TraceArrival",
    "UniformDist",
    "VideoSpec",
    "WorkloadConfig",
]


def _error(message: str) -> PydanticCustomError:
    # No context given, so pydantic leaves braces in the message alone.
    return PydanticCustomError("value_error", message)


class ImageSpec(StrictModel):
    """``count`` images of ``width`` x ``height`` pixels in each request."""

    count: PositiveCount = 1
    width: PositiveCount
    height: PositiveCount


class VideoSpec(StrictModel):
    """One video of ``frames`` sampled frames, each ``width`` x ``height`` pixels."""

    frames: PositiveCount
    width: PositiveCount
    height: PositiveCount


class AudioSpec(StrictModel):
    """One audio clip; ``seconds`` is a number or a length distribution (drawn as floats)."""

    seconds: LengthDist

    @field_validator("seconds", mode="before")
    @classmethod
    def _number_is_fixed(cls, v):
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return {"kind": "fixed", "value": v}
        return v


class MixClass(StrictModel):
    """One request class of the mix, drawn with probability ``weight / sum(weights)``.

    ``layout`` orders the prompt: ``media_first`` puts every media item before
    the text run, ``text_first`` the text run before the media, ``interleaved``
    splits the text into one run more than there are items and puts an item
    between each pair (text, item, text, item, ..., text).
    ``output_tokens`` overrides the workload-wide default for this class, and
    ``reuse`` the workload's repeated-media settings (:mod:`lmmsim.workload.reuse`).
    ``system_prompt`` starts each prompt with one of a few shared system prompts
    (:mod:`lmmsim.workload.shared_prefix`); ``conversation`` makes each request the first
    turn of a multi-turn chat whose later turns resend the history
    (:mod:`lmmsim.workload.conversation`). Both off by default.
    """

    name: str = Field(min_length=1)
    weight: PositiveNumber
    text_tokens: LengthDist
    images: ImageSpec | None = None
    video: VideoSpec | None = None
    audio: AudioSpec | None = None
    output_tokens: LengthDist | None = None
    layout: Literal["media_first", "text_first", "interleaved"] = "media_first"
    reuse: ReuseConfig | None = None
    system_prompt: SystemPromptSpec | None = None
    conversation: ConversationSpec | None = None


def _check_shared_content(mix: list[MixClass], arrival) -> None:
    """System-prompt pools named alike must agree; conversations need open-loop arrivals."""
    pools: dict[str, SystemPromptSpec] = {}
    for k, c in enumerate(mix):
        if c.conversation is not None and isinstance(arrival, ClosedLoopArrival):
            raise _error(f"{k}.conversation: not available with a closed_loop arrival (a conversation's turns "
                         "arrive a turn_gap_s apart; use poisson, gamma or deterministic)")
        if c.system_prompt is None:
            continue
        name = pool_name(c.system_prompt, c.name)
        other = pools.setdefault(name, c.system_prompt)
        if (other.tokens, other.variants) != (c.system_prompt.tokens, c.system_prompt.variants):
            raise _error(f"{k}.system_prompt: classes sharing the system prompts {name!r} must give the same "
                         f"tokens and variants (here {c.system_prompt.tokens} and {c.system_prompt.variants}, "
                         f"elsewhere {other.tokens} and {other.variants})")


# Requests are generated up front (about 0.5 KB each, and as much again in engine
# state and result rows), so a run's size is bounded before anything is allocated:
# 10 million requests fit this project's 24 GB reference machine.
MAX_REQUESTS = 10_000_000


class WorkloadConfig(StrictModel):
    """Request count or duration, arrival process, request mix and default output length.

    Synthetic arrivals need exactly one of ``num_requests`` (generate that many)
    and ``duration_s`` (generate arrivals before that time). A ``trace``
    arrival takes the requests from its file: ``mix`` stays empty, and
    ``num_requests`` / ``duration_s`` optionally cap how much of it is replayed.
    A ``closed_loop`` arrival needs ``num_requests``; its times come from the run.
    ``reuse`` repeats media items (:mod:`lmmsim.workload.reuse`) in every class that
    sets none of its own; off by default. With a ``conversation`` class the arrival
    process gives conversations' first turns, and ``num_requests`` counts turns
    (:mod:`lmmsim.workload.conversation`).
    """

    num_requests: PositiveCount | None = None
    duration_s: PositiveNumber | None = None
    # ``arrival`` is declared before ``mix`` so the mix validator can see it.
    arrival: ArrivalProcess
    mix: list[MixClass] = Field(default_factory=list, validate_default=True)
    output_tokens: LengthDist = FixedDist(value=128)
    reuse: ReuseConfig | None = None

    @field_validator("mix")
    @classmethod
    def _check_mix(cls, mix: list[MixClass], info: ValidationInfo) -> list[MixClass]:
        arrival = info.data.get("arrival")  # absent when arrival itself failed
        if isinstance(arrival, TraceArrival):
            if mix:
                raise _error("must be empty with a trace arrival (the trace file gives each request's contents)")
            return mix
        if arrival is not None and not mix:
            raise _error("must list at least one request class")
        seen: set[str] = set()
        for cls_ in mix:
            if cls_.name in seen:
                raise _error(f"class names must be unique; {cls_.name!r} appears more than once")
            seen.add(cls_.name)
        _check_shared_content(mix, arrival)
        return mix

    # Runs only when the key is given (pydantic does not validate defaults), so it
    # flags an explicit output_tokens or reuse that a trace would silently ignore.
    @field_validator("output_tokens", "reuse")
    @classmethod
    def _unused_with_trace(cls, v, info: ValidationInfo):
        if isinstance(info.data.get("arrival"), TraceArrival):
            instead = {"output_tokens": "the trace file gives each request's output_tokens",
                       "reuse": 'give repeated media the same "id" in the trace'}[info.field_name]
            raise _error(f"not used with a trace arrival ({instead})")
        return v

    @field_validator("num_requests")
    @classmethod
    def _bounded_count(cls, n):
        if n is not None and n > MAX_REQUESTS:
            raise _error(f"{n:,} requests exceed the limit of {MAX_REQUESTS:,} per run (requests are generated "
                         "up front); split the run or lower it")
        return n

    @model_validator(mode="after")
    def _check_size(self):
        if isinstance(self.arrival, TraceArrival):
            return self
        if isinstance(self.arrival, ClosedLoopArrival):
            if self.num_requests is None or self.duration_s is not None:
                raise _error("a closed_loop arrival needs num_requests (and no duration_s): its users stop "
                             "after that many requests")
            return self
        if self.num_requests is None and self.duration_s is None:
            raise _error("give one of num_requests or duration_s")
        if self.num_requests is not None and self.duration_s is not None:
            raise _error("give num_requests or duration_s, not both")
        expected = (self.duration_s or 0) * self.arrival.rate
        if expected > MAX_REQUESTS:
            raise _error(f"duration_s {self.duration_s:g} at {self.arrival.rate:g} req/s is about {expected:,.0f} "
                         f"requests, over the limit of {MAX_REQUESTS:,} per run (requests are generated up front)")
        return self

"""Routers: which replica an arriving request goes to.

A router sees only a load figure per replica (outstanding requests), so it is
testable without an engine. Ties go to the lowest replica index.
"""

from __future__ import annotations

from typing import Literal, Sequence

from pydantic import BaseModel, ConfigDict

from lmmsim.policies.registry import register


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RoundRobinConfig(_Config):
    kind: Literal["round_robin"] = "round_robin"


class LeastLoadedConfig(_Config):
    kind: Literal["least_loaded"] = "least_loaded"


@register("router", RoundRobinConfig, "replicas in turn, regardless of load")
class RoundRobinRouter:
    """Replicas in turn."""

    def __init__(self, config: RoundRobinConfig | None = None):
        self._next = 0

    def route(self, request, loads: Sequence[int]) -> int:
        idx = self._next % len(loads)
        self._next += 1
        return idx


@register("router", LeastLoadedConfig, "replica with the fewest outstanding requests")
class LeastLoadedRouter:
    """Replica with the fewest outstanding (waiting + running) requests."""

    def __init__(self, config: LeastLoadedConfig | None = None):
        pass

    def route(self, request, loads: Sequence[int]) -> int:
        return min(range(len(loads)), key=loads.__getitem__)

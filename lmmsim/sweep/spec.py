"""Sweep YAML -> :class:`SweepSpec` -> list of :class:`Point`.

::

    base: quickstart.yaml            # relative to this file; or inline `scenario: {...}`
    set: {workload.num_requests: 300}        # fixed overrides, every run
    axes:                                    # combined as a product, first axis outermost
      - {kind: grid, params: {workload.arrival.rate: [1, 2, 3], system: [vllm, gllm]}}
      - {kind: zip, params: {policy.batching.token_budget: [2048, 8192],
                             policy.batching.max_running: [128, 256]}}
      - kind: random
        n: 10
        seed: 0
        params:
          deployment.gpu_memory_utilization: {low: 0.8, high: 0.95}
          policy.batching.token_budget: {low: 512, high: 8192, log: true, integer: true}
          policy.router.kind: {choices: [round_robin, least_loaded]}
    repeats: 1                               # run r of a point gets seed = scenario seed + r

Inside an axis, ``grid`` is the product of its params in the order written (first
param outermost), ``zip`` pairs equal-length lists, ``random`` draws ``n``
points (params drawn in the order written, from ``random.Random(seed)``):
uniform on ``[low, high]``, log-uniform with ``log: true``, integers in
``[low, high]`` inclusive with ``integer: true``, or a uniform pick among
``choices``. Values are YAML values (a mapping replaces the key's mapping, like
``--set``; ``null`` removes the key so its default applies).
"""

from __future__ import annotations

import itertools
import math
import random
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveInt, ValidationError, model_validator

from lmmsim.errors import UserError


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_keys(params: dict) -> None:
    for key in params:
        if not key or not all(key.split(".")):
            raise ValueError(f"bad dotted key {key!r}")


class _ListAxis(_Strict):
    """An axis listing values per key; every list needs at least one value."""

    params: dict[str, list[Any]]

    @model_validator(mode="after")
    def _check(self):
        _check_keys(self.params)
        if not self.params:
            raise ValueError("params must name at least one key")
        for key, values in self.params.items():
            if not values:
                raise ValueError(f"{key}: needs at least one value")
        return self


class GridAxis(_ListAxis):
    kind: Literal["grid"] = "grid"

    def values(self) -> list[dict]:
        keys = list(self.params)
        return [dict(zip(keys, combo)) for combo in itertools.product(*self.params.values())]


class ZipAxis(_ListAxis):
    kind: Literal["zip"] = "zip"

    @model_validator(mode="after")
    def _equal_lengths(self):
        lengths = {key: len(v) for key, v in self.params.items()}
        if len(set(lengths.values())) != 1:
            raise ValueError(f"zip lists must have equal lengths, got {lengths}")
        return self

    def values(self) -> list[dict]:
        keys = list(self.params)
        return [dict(zip(keys, combo)) for combo in zip(*self.params.values())]


class RangeParam(_Strict):
    low: float
    high: float
    log: bool = False
    integer: bool = False

    @model_validator(mode="after")
    def _check(self):
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) must be >= low ({self.low})")
        if self.log and self.low <= 0:
            raise ValueError("log: true needs low > 0")
        if self.integer and (self.low != int(self.low) or self.high != int(self.high)):
            raise ValueError("integer: true needs integer low and high")
        return self

    def draw(self, rng: random.Random):
        u = rng.random()  # [0, 1)
        if self.integer:
            lo, hi = int(self.low), int(self.high)
            if self.log:
                value = round(math.exp(math.log(lo) + u * (math.log(hi) - math.log(lo))))
            else:
                value = lo + math.floor(u * (hi - lo + 1))
            return min(max(value, lo), hi)
        if self.log:
            return math.exp(math.log(self.low) + u * (math.log(self.high) - math.log(self.low)))
        return self.low + u * (self.high - self.low)


class ChoiceParam(_Strict):
    choices: list[Any] = Field(min_length=1)

    def draw(self, rng: random.Random):
        return self.choices[min(int(rng.random() * len(self.choices)), len(self.choices) - 1)]


class RandomAxis(_Strict):
    kind: Literal["random"] = "random"
    n: PositiveInt
    seed: NonNegativeInt = 0
    params: dict[str, Union[RangeParam, ChoiceParam]]

    @model_validator(mode="after")
    def _check(self):
        _check_keys(self.params)
        if not self.params:
            raise ValueError("params must name at least one key")
        return self

    def values(self) -> list[dict]:
        rng = random.Random(self.seed)
        return [{key: p.draw(rng) for key, p in self.params.items()} for _ in range(self.n)]


Axis = Annotated[Union[GridAxis, ZipAxis, RandomAxis], Field(discriminator="kind")]


class SweepSpec(_Strict):
    base: str | None = None
    scenario: dict[str, Any] | None = None
    set: dict[str, Any] = {}
    axes: list[Axis] = []
    repeats: PositiveInt = 1

    @model_validator(mode="after")
    def _check(self):
        if (self.base is None) == (self.scenario is None):
            raise ValueError("give exactly one of 'base' (a scenario file) or 'scenario' (inline)")
        _check_keys(self.set)
        seen = {key: "set" for key in self.set}
        for i, axis in enumerate(self.axes):
            for key in axis.params:
                if key in seen:
                    raise ValueError(f"key {key!r} appears twice (axes.{i} and {seen[key]})")
                seen[key] = f"axes.{i}"
        return self

    def swept_keys(self) -> list[str]:
        return [key for axis in self.axes for key in axis.params]


class Point(NamedTuple):
    """One run of the sweep: the axis values (dotted key -> value, axis order) and the repeat."""

    overrides: dict[str, Any]
    repeat: int


def expand(spec: SweepSpec) -> list[Point]:
    """Every run, point by point (product of the axes, first axis outermost), repeats innermost."""
    per_axis = [axis.values() for axis in spec.axes]
    points: list[Point] = []
    for combo in itertools.product(*per_axis):
        overrides: dict[str, Any] = {}
        for part in combo:
            overrides.update(part)
        for r in range(spec.repeats):
            points.append(Point(dict(overrides), r))
    return points


def _error_key(loc: tuple) -> str:
    parts = [str(p) for p in loc if p not in ("grid", "zip", "random", "RangeParam", "ChoiceParam")]
    return ".".join(parts)


def parse_sweep(raw, where: str = "sweep") -> SweepSpec:
    if not isinstance(raw, dict):
        raise UserError(where, "a sweep must be a YAML mapping of keys")
    try:
        return SweepSpec.model_validate(raw)
    except ValidationError as exc:
        err = max(exc.errors(), key=lambda e: len(e["loc"]))
        key = _error_key(err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = f"unknown key {key.rsplit('.', 1)[-1]!r}"
        raise UserError(f"{where}: {key}" if key else where, msg) from None


def load_sweep(path: str | Path) -> SweepSpec:
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise UserError(str(path), "sweep file not found") from None
    except yaml.YAMLError as exc:
        raise UserError(str(path), f"not valid YAML ({getattr(exc, 'problem', exc)})") from None
    return parse_sweep(raw, str(path))

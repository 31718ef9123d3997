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

Keys must not overlap, because a run applies ``set`` first (in the order
written), then every axis, and a later key overwrites whatever it covers
(key ``k`` covers itself and every ``k.*``):

* two swept keys (in one axis or in two) that cover each other are refused:
  every row would be labelled with both values, but only the later one ran;
* a ``set`` key covered by a swept key, or by a ``set`` key written after it,
  is refused: it would be replaced in every run;
* a ``set`` key that covers a swept key is fine: it gives the mapping the axis
  then varies one part of (``set: {workload.arrival: {kind: gamma, cv: 2}}``
  with an axis on ``workload.arrival.rate``).
"""

from __future__ import annotations

import itertools
import math
import random
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple, Union

from pydantic import (BaseModel, ConfigDict, Discriminator, Field, NonNegativeInt, PositiveInt, Tag,
                      ValidationError, field_validator, model_validator)

from lmmsim.errors import UserError, choices
from lmmsim.yamlio import read_yaml


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
    """A number drawn from ``[low, high]`` (``low < high``, both finite)."""

    low: float
    high: float
    log: bool = False
    integer: bool = False

    @model_validator(mode="after")
    def _check(self):
        low, high = self.low, self.high
        if not (math.isfinite(low) and math.isfinite(high)):
            raise ValueError(f"low and high must be finite numbers (got low={low}, high={high})")
        if high < low:
            raise ValueError(f"high ({high}) is below low ({low}); give low < high")
        if high == low:
            raise ValueError(f"low and high are both {low}: a random range needs low < high "
                             "(a fixed value belongs under 'set')")
        if self.log and low <= 0:
            raise ValueError(f"log: true needs low > 0 (got low={low})")
        if self.integer and (low != int(low) or high != int(high)):
            raise ValueError(f"integer: true needs whole-number low and high (got low={low}, high={high})")
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


def _param_kind(value) -> str | None:
    """Which random param a raw value is, so a bad one is reported against the kind
    it meant to be (not against every member of the union)."""
    if isinstance(value, (RangeParam, ChoiceParam)):
        return type(value).__name__
    if isinstance(value, dict):
        return "ChoiceParam" if "choices" in value else "RangeParam"
    return None


# The tags are the class names, which parse_sweep leaves out of error keys.
RandomParam = Annotated[
    Union[Annotated[RangeParam, Tag("RangeParam")], Annotated[ChoiceParam, Tag("ChoiceParam")]],
    Discriminator(_param_kind, custom_error_type="random_param",
                  custom_error_message="give a range {low: .., high: ..} (optional log, integer) "
                                       "or {choices: [...]}"),
]


class RandomAxis(_Strict):
    kind: Literal["random"] = "random"
    n: int
    seed: NonNegativeInt = 0
    params: dict[str, RandomParam]

    @field_validator("n")
    @classmethod
    def _positive(cls, n: int) -> int:
        if n < 1:
            raise ValueError(f"the number of points to draw must be at least 1 (got {n})")
        return n

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


def _covers(outer: str, inner: str) -> bool:
    """Does setting dotted key ``outer`` replace ``inner`` (the same key, or one inside it)?"""
    return inner == outer or inner.startswith(outer + ".")


def _check_overlaps(set_keys: list[str], swept: list[tuple[str, str]]) -> None:
    """Refuse keys that overwrite each other (rules in the module docstring);
    ``swept`` pairs each swept key with where it is declared (``axes.<i>``)."""
    for i, (key, where) in enumerate(swept):
        for other, other_where in swept[:i]:
            if key == other:
                raise ValueError(f"key {key!r} appears twice ({other_where} and {where})")
            if _covers(key, other) or _covers(other, key):
                raise ValueError(f"swept keys {other!r} ({other_where}) and {key!r} ({where}) overlap: "
                                 "one overwrites (part of) the other in every run, so rows would be labelled "
                                 "with values that never ran; sweep only one of them")
    for i, key in enumerate(set_keys):
        for later in set_keys[i + 1:]:
            if _covers(later, key):
                raise ValueError(f"set key {later!r} replaces set key {key!r} written before it; "
                                 "keep only one of them")
        for swept_key, where in swept:
            if key == swept_key:
                raise ValueError(f"key {key!r} appears twice (set and {where})")
            if _covers(swept_key, key):
                raise ValueError(f"set key {key!r} is inside swept key {swept_key!r} ({where}), which "
                                 "replaces it in every run; put it in that axis's values or drop it")


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
        _check_overlaps(list(self.set), [(key, f"axes.{i}") for i, axis in enumerate(self.axes)
                                         for key in axis.params])
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
    # pydantic puts the union's tags (an axis's kind, a parameter's class) in the location;
    # they are not keys of the file -- but at the top level a "grid" is the user's key
    tags = ("grid", "zip", "random", "RangeParam", "ChoiceParam")
    parts = [str(p) for i, p in enumerate(loc) if i == 0 or p not in tags]
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
            if len(err["loc"]) == 1:
                msg += f"; valid: {choices(SweepSpec.model_fields)}"
        raise UserError(f"{where}: {key}" if key else where, msg) from None


def load_sweep(path: str | Path) -> SweepSpec:
    """Read and check the sweep file at ``path`` (duplicate YAML keys refused)."""
    return parse_sweep(read_yaml(path, "sweep file"), str(path))

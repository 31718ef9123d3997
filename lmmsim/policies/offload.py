"""Prefill offload routers: does a request's prefill run remotely or locally?

EAServe (/work/shared/seeds/easerve.txt, §3.3 "Rate-Controlled Partial
Offload") co-locates a *local* prefill worker with each encode worker on the
encode GPU, next to the *remote* Prefill workers on their own GPUs. After
encode, each request's prefill goes to one of the two; the offload ratio
``s`` in [0, 1] is the target fraction sent **remote**. ``s = 1`` means no
local prefill at all (Dynamo's behaviour, and EAServe's choice for video);
``s = 0`` keeps every prefill on the encode GPU.

A router here decides one request at a time: :meth:`OffloadRouter.route`
returns ``True`` for remote, ``False`` for local. It sees nothing about the
request (the paper's routers are purely rate-based), never imports SimPy, and
keeps counts of what it decided so far (:attr:`count`,
:attr:`remote_fraction`). One router per encode worker: each worker splits its
own request stream, so the whole system's fraction converges to ``s`` as well.

Routers
-------
* :class:`DeficitRouter` -- the paper's scheme: an accumulator ``d`` (start
  0) gains ``s`` per request; the request goes remote when ``d >= 1`` (and
  ``d -= 1``), local otherwise. After ``n`` requests exactly ``floor(n * s)``
  went remote, and runs of equal decisions are as short as possible.
* :class:`RandomRouter` -- the first baseline the paper rejects: remote with
  probability ``s``, independently per request. Right on average, but noisy
  over short horizons and with unbounded runs.
* :class:`WindowedRouter` -- the second baseline: exactly ``floor(s * W)`` of
  every ``W`` consecutive requests go remote. Exact only at window boundaries
  (and only when ``s * W`` is an integer), and ``W`` is a new tuning knob.

Exact arithmetic (choice)
-------------------------
Adding a float ``s`` to a float accumulator drifts: ``0.1`` added ten times is
``0.9999999999999999 < 1``, so the tenth request would wrongly stay local. The
deficit and windowed routers therefore work on a rational ``ratio`` (a
:class:`fractions.Fraction`) and keep the accumulator as an integer numerator:

* an exact rational (``int``, ``Fraction``) is used as is;
* a float (as read from YAML/JSON) is replaced by the closest fraction with
  denominator at most ``max_denominator`` (default ``10**6``),
  ``Fraction(s).limit_denominator(10**6)``: ``0.1 -> 1/10``, ``0.55 ->
  11/20``, ``1/3 -> 1/3``. That is what a user typing ``0.55`` means; the
  float's exact binary value (``0.55000000000000004...``) is not.

Because ``ratio`` is the *closest* fraction with denominator <= ``N =
max_denominator``, no fraction ``m/n`` with ``n <= N`` lies strictly between
the float ``s`` and ``ratio``. Hence for every prefix of ``n <= N`` requests
the paper's guarantees hold for the float ``s`` itself, not just for
``ratio``: the remote count ``floor(n * ratio)`` is within ``(n*s - 1, n*s +
1/2]``, remote runs are at most ``ceil(1/(1 - s))`` long and local runs at most
``ceil(1/s)``. The one visible rounding: ``0 < s <= 1/(2N)`` becomes ratio 0
(never remote) and ``s >= 1 - 1/(2N)`` becomes 1 (always remote); both agree
with ``floor(n * s)`` to within the bound above for the first ``N`` requests.
The long-run fraction converges to ``ratio`` exactly, which differs from ``s``
by less than ``1/(2N)`` (for typical floats by about ``1e-12``).
"""

from __future__ import annotations

import math
import numbers
import random
from abc import ABC, abstractmethod
from fractions import Fraction
from typing import Literal, NamedTuple, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, PositiveInt

from lmmsim.policies.registry import register

#: Largest denominator used to turn a float offload ratio into an exact fraction.
DEFAULT_MAX_DENOMINATOR = 10**6


class RouteCount(NamedTuple):
    """Decisions made so far by one router."""

    remote: int
    local: int

    @property
    def total(self) -> int:
        return self.remote + self.local


@runtime_checkable
class OffloadRouter(Protocol):
    """Where the next request's prefill runs: ``route(request, workers) -> True`` =
    remote Prefill worker, ``False`` = the local prefill worker on the encode GPU.

    ``workers`` is a read-only view of the prefill workers' state at the decision
    (:class:`lmmsim.engine.disaggregation.PrefillLoads`: ``remote_loads``, one
    outstanding-work count per remote worker, and ``local_load``); EAServe's routers
    decide by count alone and ignore both."""

    def route(self, request=None, workers=None) -> bool: ...

    @property
    def remote_fraction(self) -> float:
        """Fraction of the requests routed so far that went remote (NaN before the first)."""
        ...

    @property
    def count(self) -> RouteCount: ...


def exact_fraction(s, max_denominator: int = DEFAULT_MAX_DENOMINATOR) -> Fraction:
    """The offload ratio ``s`` (in [0, 1]) as an exact :class:`Fraction`.

    Rationals (``int``, ``Fraction``) are exact already; anything else is taken
    as a float and replaced by the closest fraction with denominator at most
    ``max_denominator`` (see the module docstring)."""
    if isinstance(s, bool):
        raise TypeError("offload ratio must be a number, not a bool")
    if isinstance(s, numbers.Rational):
        value = Fraction(s)
    else:
        f = float(s)
        if not math.isfinite(f):
            raise ValueError(f"offload ratio must be finite, got {s!r}")
        if not (0.0 <= f <= 1.0):
            raise ValueError(f"offload ratio must be in [0, 1], got {s!r}")
        value = Fraction(f).limit_denominator(max_denominator)
    if not (0 <= value <= 1):
        raise ValueError(f"offload ratio must be in [0, 1], got {s!r}")
    return value


class _CountingRouter(ABC):
    """Keeps the counts; subclasses decide."""

    def __init__(self, s):
        self._target = s
        self._remote = 0
        self._local = 0

    @abstractmethod
    def _decide(self) -> bool:
        """The next decision (True = remote)."""

    def route(self, request=None, workers=None) -> bool:
        remote = self._decide()
        if remote:
            self._remote += 1
        else:
            self._local += 1
        return remote

    @property
    def target_fraction(self) -> float:
        """The configured offload ratio ``s`` (as given)."""
        return float(self._target)

    @property
    def remote_fraction(self) -> float:
        """Observed: remote / routed so far; NaN before the first request."""
        total = self._remote + self._local
        return self._remote / total if total else math.nan

    @property
    def count(self) -> RouteCount:
        return RouteCount(self._remote, self._local)


class DeficitRouter(_CountingRouter):
    """EAServe's deficit-controlled offload (§3.3), after Deficit Round Robin.

    ``DeficitRouter(s, max_denominator=10**6)``. Per request: ``d += s``; if
    ``d >= 1`` the request goes remote and ``d -= 1``, else local; ``d`` starts
    at 0. Implemented on integers: with ``ratio = p/q`` the state is ``acc =
    d * q``, so every step is exact and O(1).

    Guarantees (for the exact ``ratio``; for a float ``s`` see the module
    docstring): after ``n`` requests ``floor(n * ratio)`` went remote (the
    paper's ``floor(n*s + d0)`` with ``d0 = 0``); a run of ``L`` consecutive
    remote decisions has ``L * (1 - ratio) < 1`` and a run of ``L`` local
    decisions has ``L * ratio < 1``, so runs never exceed ``ceil(1/(1-s))``
    resp. ``ceil(1/s)``. ``s = 1``: always remote; ``s = 0``: always local.
    """

    def __init__(self, s, max_denominator: int = DEFAULT_MAX_DENOMINATOR):
        super().__init__(s)
        self.ratio = exact_fraction(s, max_denominator)
        self._p = self.ratio.numerator
        self._q = self.ratio.denominator
        self._acc = 0  # d * q, always in [0, q)

    @property
    def deficit(self) -> Fraction:
        """The accumulator ``d`` (in [0, 1)) between requests."""
        return Fraction(self._acc, self._q)

    def _decide(self) -> bool:
        acc = self._acc + self._p
        if acc >= self._q:
            self._acc = acc - self._q
            return True
        self._acc = acc
        return False


class RandomRouter(_CountingRouter):
    """Baseline: each request goes remote with probability ``s``, independently.

    ``RandomRouter(s, seed=0)``; a private :class:`random.Random` seeded with
    ``seed`` (the standard library's Mersenne Twister: the same sequence on
    every platform and numpy version). Remote iff ``rng.random() < s``, so
    ``s = 0`` is never and ``s = 1`` always remote. Give each encode worker its
    own seed, or their decisions are identical.
    """

    def __init__(self, s, seed: int = 0):
        super().__init__(s)
        f = float(s)
        if not (0.0 <= f <= 1.0):
            raise ValueError(f"offload ratio must be in [0, 1], got {s!r}")
        self._s = f
        self.seed = seed
        self._rng = random.Random(seed)

    def _decide(self) -> bool:
        return self._rng.random() < self._s


class WindowedRouter(_CountingRouter):
    """Baseline: exactly ``floor(s * W)`` remote of every ``W`` consecutive requests.

    ``WindowedRouter(s, window=W, max_denominator=10**6)``. Windows are
    consecutive blocks of ``W`` requests starting with the first; within a
    window the ``k = floor(ratio * W)`` remote decisions come **first**, then
    ``W - k`` local ones. Remote-first is the literal reading of the baseline
    (a quota per window, filled as requests arrive) and shows its weakness:
    between boundaries the count runs ahead of ``n * s`` by up to about
    ``k * (1 - s)`` (e.g. ``s = 1/2, W = 10``: 5 remote after 5 requests, 2.5
    more than ``n * s``) and runs are as long as ``k`` and ``W - k``. At every boundary
    the count is exactly ``m * k`` -- equal to ``n * s`` only when ``s * W``
    is an integer. ``k`` uses the same exact ``ratio`` as :class:`DeficitRouter`,
    so ``0.29 * 100`` gives 29, not ``floor(28.999999999999996) = 28``.
    """

    def __init__(self, s, window: int = 10, max_denominator: int = DEFAULT_MAX_DENOMINATOR):
        super().__init__(s)
        if isinstance(window, bool) or not isinstance(window, numbers.Integral) or window < 1:
            raise ValueError(f"window must be a positive integer, got {window!r}")
        self.ratio = exact_fraction(s, max_denominator)
        self.window = int(window)
        self.remote_per_window = math.floor(self.ratio * self.window)
        self._pos = 0  # index of the next request within its window

    def _decide(self) -> bool:
        remote = self._pos < self.remote_per_window
        self._pos += 1
        if self._pos == self.window:
            self._pos = 0
        return remote


# --------------------------------------------------------------------- configs
class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # Offload ratio s: target fraction of requests whose prefill runs on a remote
    # Prefill worker. Default 1: everything remote, no local prefill.
    remote_fraction: float = Field(1.0, ge=0, le=1)


class DeficitOffloadConfig(_Config):
    kind: Literal["deficit"] = "deficit"


class RandomOffloadConfig(_Config):
    kind: Literal["random"] = "random"
    seed: int = 0


class WindowedOffloadConfig(_Config):
    kind: Literal["windowed"] = "windowed"
    window: PositiveInt = 10


@register("offload", DeficitOffloadConfig,
          "EAServe deficit counter: exactly floor(n*s) of n requests remote, bounded runs")
def _deficit(config: DeficitOffloadConfig) -> DeficitRouter:
    return DeficitRouter(config.remote_fraction)


@register("offload", RandomOffloadConfig, "remote with probability s per request (seeded)")
def _random(config: RandomOffloadConfig) -> RandomRouter:
    return RandomRouter(config.remote_fraction, seed=config.seed)


@register("offload", WindowedOffloadConfig, "floor(s*W) remote first in every window of W requests")
def _windowed(config: WindowedOffloadConfig) -> WindowedRouter:
    return WindowedRouter(config.remote_fraction, window=config.window)

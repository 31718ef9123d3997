"""Arrival processes: when requests reach the system.

:data:`ArrivalProcess` is the discriminated union behind the scenario's
``workload.arrival`` key. The synthetic kinds are renewal processes (independent
inter-arrival gaps); :meth:`times` returns absolute arrival times in seconds
with the first arrival one gap after t = 0 (not at t = 0), so a process's rate
is the same over every window, including the first. ``trace`` replays
timestamps from a file and is handled by the generator via
:func:`lmmsim.workload.trace_formats.read_any_trace`; ``closed_loop`` sends
each request when a user's previous one ends, so its times come from the run.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal, Union

import numpy as np
from pydantic import Field

from lmmsim.workload.distributions import NonNegativeNumber, PositiveCount, PositiveNumber, StrictModel


class _Renewal(StrictModel):
    """A renewal process at ``rate`` requests/s; subclasses draw the gaps."""

    rate: PositiveNumber

    def _gaps(self, rng: np.random.Generator, n: int) -> np.ndarray:
        raise NotImplementedError

    def times(
        self,
        rng: np.random.Generator,
        num_requests: int | None = None,
        duration_s: float | None = None,
    ) -> np.ndarray:
        """Arrival times (float64 seconds, non-decreasing).

        With ``num_requests``, exactly that many; with ``duration_s``, every
        arrival strictly before ``duration_s``; with both, whichever stops first.
        """
        if num_requests is None and duration_s is None:
            raise ValueError("times() needs num_requests or duration_s")
        if duration_s is None:
            return np.cumsum(self._gaps(rng, int(num_requests)))
        limit = num_requests if num_requests is not None else math.inf
        # Draw gaps in blocks sized to the expected count; one block nearly always
        # suffices. Blocks are consumed in order, so the draw is reproducible.
        chunks: list[np.ndarray] = []
        last, count = 0.0, 0
        while last < duration_s and count < limit:
            block = int(min(limit - count, 1.1 * self.rate * (duration_s - last) + 64))
            t = last + np.cumsum(self._gaps(rng, block))
            chunks.append(t)
            last, count = float(t[-1]), count + block
        out = np.concatenate(chunks) if chunks else np.empty(0)
        out = out[out < duration_s]
        return out[: int(min(limit, len(out)))]


class PoissonArrival(_Renewal):
    """Poisson arrivals: exponential gaps with mean ``1 / rate``."""

    kind: Literal["poisson"] = "poisson"

    def _gaps(self, rng, n):
        return rng.exponential(1.0 / self.rate, size=n)


class GammaArrival(_Renewal):
    """Gamma-distributed gaps with mean ``1 / rate`` and coefficient of variation ``cv``.

    ``shape = 1 / cv**2``, ``scale = cv**2 / rate``. ``cv = 1`` is Poisson;
    ``cv > 1`` gives burstier traffic, ``cv < 1`` smoother.
    """

    kind: Literal["gamma"] = "gamma"
    cv: PositiveNumber

    def _gaps(self, rng, n):
        return rng.gamma(1.0 / self.cv**2, self.cv**2 / self.rate, size=n)


class DeterministicArrival(_Renewal):
    """One request every ``1 / rate`` seconds: at ``1/rate, 2/rate, ...``."""

    kind: Literal["deterministic"] = "deterministic"

    def _gaps(self, rng, n):
        return np.full(n, 1.0 / self.rate)

    def times(self, rng, num_requests=None, duration_s=None):
        if num_requests is None and duration_s is None:
            raise ValueError("times() needs num_requests or duration_s")
        # k / rate rather than a cumulative sum, so times carry no rounding drift.
        n = num_requests if num_requests is not None else math.ceil(duration_s * self.rate) + 1
        out = np.arange(1, n + 1, dtype=np.float64) / self.rate
        if duration_s is not None:
            out = out[out < duration_s]
        return out


class TraceImage(StrictModel):
    """The resolution each image of an Azure multimodal trace row (``NumImages``) gets."""

    width: PositiveCount
    height: PositiveCount


class TraceArrival(StrictModel):
    """Replay a trace file (``.jsonl`` or ``.csv``, optionally ``.gz``): timestamps and request contents.

    ``path`` is relative to the scenario's folder. ``format``: ``lmmsim``,
    ``azure``, ``mooncake`` or ``burstgpt`` (omitted: detected from the file).
    Rows with trace time in ``[start_s, start_s + duration_s)`` are kept and
    arrive at ``(time - start_s) / speedup`` (2.0 replays twice as fast);
    ``image`` sizes Azure's ``NumImages``. See :mod:`lmmsim.workload.trace_formats`.
    """

    kind: Literal["trace"] = "trace"
    path: str = Field(min_length=1)
    format: Literal["lmmsim", "azure", "mooncake", "burstgpt"] | None = None
    speedup: PositiveNumber = 1.0
    start_s: NonNegativeNumber = 0.0
    duration_s: PositiveNumber | None = None
    image: TraceImage | None = None


class ClosedLoopArrival(StrictModel):
    """Closed-loop load: ``concurrency`` users, each sending its next request
    ``think_time_s`` after its previous one ended (finished or refused).

    vLLM's ``--max-concurrency`` and GuideLLM's ``concurrent`` profile with
    ``think_time_s: 0``. All users send their first request at t = 0.
    ``think_time: exponential`` draws each pause with mean ``think_time_s`` from
    the scenario seed. Arrival times are decided during the run
    (:mod:`lmmsim.engine.closed_loop`); the run stops after ``num_requests``.
    """

    kind: Literal["closed_loop"] = "closed_loop"
    concurrency: PositiveCount
    think_time_s: NonNegativeNumber = 0.0
    think_time: Literal["fixed", "exponential"] = "fixed"

    def think_times(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` pauses, in the order users take them."""
        if self.think_time == "fixed" or self.think_time_s == 0:
            return np.full(n, float(self.think_time_s))
        return rng.exponential(self.think_time_s, size=n)


ArrivalProcess = Annotated[
    Union[PoissonArrival, GammaArrival, DeterministicArrival, TraceArrival, ClosedLoopArrival],
    Field(discriminator="kind"),
]

"""Closed-loop arrivals: ``concurrency`` users, each sending its next request a
think time after its previous one ended (vLLM's ``--max-concurrency``, GuideLLM's
``concurrent`` profile).

Requests are sent in index order, so ids stay in arrival order: every user
sends its first request at t = 0; when a request ends (finishes, or is refused
at arrival) its user pauses for the next think time and then sends the next
unsent request. A pause is one scheduled callback and a send is one call into
the simulation: one event per arrival, nothing per token.

Fast-forwarding engines need a barrier no arrival can precede. A request
ending at ``t >= now`` sends its successor at ``t + think >= now + min_think``,
so :meth:`ClosedLoop.next_arrival_bound` is the earliest pending send, or
``now + min_think`` while a request is in flight. With zero think time that
bound is ``now`` and engines step one by one (each step may end a request
whose successor joins the next step).
"""

from __future__ import annotations

import heapq
import math
from typing import Callable, Sequence


class ClosedLoop:
    """``think_s[k]``: the k-th pause any user takes (drawn up front from the seed, so runs are
    deterministic). ``send(i)`` is the simulation's entry for request ``i`` at ``env.now``."""

    def __init__(self, concurrency: int, think_s: Sequence[float]):
        if concurrency < 1:
            raise ValueError("closed-loop load needs at least one user")
        self.concurrency = concurrency
        self.think_s = list(think_s)
        self.min_think = min(self.think_s, default=0.0)
        self.env = None
        self._send: Callable[[int], None] | None = None
        self._n = 0
        self._scheduled = 0  # sends scheduled so far (pending or done)
        self._pauses = 0  # think times taken
        self._pending: list[float] = []  # times of scheduled, not yet done sends (heap)
        self._next = 0  # next request index to send
        self.in_flight = 0  # sent and not ended
        self.max_in_flight = 0

    def start(self, env, num_requests: int, send: Callable[[int], None]) -> None:
        self.env, self._n, self._send = env, num_requests, send
        for _ in range(min(self.concurrency, num_requests)):
            self._schedule(env.now)

    def _schedule(self, at: float) -> None:
        self._scheduled += 1
        heapq.heappush(self._pending, at)
        self.env.timeout_at(at, late=False).callbacks.append(self._fire)

    def _fire(self, _event) -> None:
        heapq.heappop(self._pending)
        i = self._next
        self._next += 1
        self.in_flight += 1
        if self.in_flight > self.max_in_flight:
            self.max_in_flight = self.in_flight
        self._send(i)

    def ended(self) -> None:
        """A sent request ended (finished or refused): its user thinks, then sends the next one."""
        self.in_flight -= 1
        if self._scheduled < self._n:
            think = self.think_s[self._pauses] if self._pauses < len(self.think_s) else self.min_think
            self._pauses += 1
            self._schedule(self.env.now + think)

    def next_arrival_bound(self) -> float:
        """No send happens before this (see the module docstring)."""
        first = self._pending[0] if self._pending else math.inf
        if self.in_flight and self._scheduled < self._n:
            return min(first, self.env.now + self.min_think)
        return first

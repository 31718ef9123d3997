"""Point-to-point links shared by concurrent transfers.

What is modelled
----------------
One *direction* of a point-to-point link (NVLink, PCIe, a NIC), as described by a
:class:`~lmmsim.catalog.LinkSpec` (per-direction bandwidth in 1e9 B/s, one-way
latency in microseconds). Disaggregated deployments send multimodal embeddings
encoder -> prefill and KV caches prefill -> decode over such links.

A transfer has two phases:

1. **latency** (``spec.latency_us``): a fixed one-way delay, paid by every
   transfer on its own; it is not shared (it stands for the software / DMA
   set-up and propagation delay, which concurrent transfers overlap freely);
2. **bytes**: the payload flows under **processor sharing**: the ``n``
   transfers in their byte phase each get ``bandwidth / n``, recomputed
   whenever one enters or leaves the byte phase. Processor sharing is the
   fluid model of several DMA streams / NCCL channels / RDMA queue pairs
   driving one NIC or NVLink port: the hardware arbitrates between them
   round-robin at a granularity (packets, flits) far below the transfer
   sizes we care about, so each gets a fair share and the link is never idle
   while any has bytes left (work-conserving).

An uncontended transfer therefore takes exactly
:func:`lmmsim.costmodel.transfer.transfer_s` -- the same float: its end is
computed as ``start + transfer_s(num_bytes, spec)`` when it has the byte phase
to itself -- and contention only changes the bandwidth a transfer sees, never
the formula.

What is not modelled
--------------------
* per-packet / per-flit effects (header overhead, MTU, credit stalls,
  congestion control, incast): the byte phase is a fluid;
* interference between the two directions of a link (a :class:`Link` is one
  direction; build two for a duplex link -- they do not slow each other);
* latency that grows with load (queueing in switches), multi-hop routes and
  shared switch fabrics: a link is one dedicated pipe;
* unequal shares (priorities, weighted fair queueing).

Implementation
--------------
Event driven, O(log n) per transfer start or finish: a *virtual time* ``V``
counts the bytes each active transfer has received since the link was last
idle (``dV/dt = bandwidth / n``). A transfer entering the byte phase at
virtual time ``V0`` with ``B`` bytes finishes when ``V`` reaches ``V0 + B``,
so transfers finish in order of ``V0 + B`` (ties in insertion order) and only
the next completion is ever scheduled (one SimPy timer; a superseded timer is
ignored when it fires). When the link goes idle ``V`` is reset to 0, which
keeps float error bounded by the bytes in flight rather than by the run
length. Results depend only on the sequence of calls: same inputs, identical
floats.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from heapq import heappop, heappush
from typing import Any

from simpy.events import NORMAL, Event

from lmmsim.catalog import LinkSpec
from lmmsim.costmodel.transfer import transfer_s
from lmmsim.engine.clock import SimEnvironment

#: ``record(name, start_at, end_at, num_bytes, tag)``, called once per completed transfer.
TransferHook = Callable[[str, float, float, float, Any], None]


class _Transfer:
    """One transfer: what was asked (bytes, tag, when, who hears of the end) and, once a link
    started it, its place there."""

    __slots__ = ("done", "finish_v", "num_bytes", "queued_at", "sender", "seq", "solo_end_at", "start_at",
                 "tag", "then")

    def __init__(self, num_bytes: float, tag: Any, queued_at: float, done: Event | None,
                 then: Callable[[float], None] | None = None, sender: "Sender | None" = None):
        self.num_bytes = num_bytes
        self.tag = tag
        self.queued_at = queued_at  # when it was asked for (a Sender may hold it back)
        self.done = done  # succeeds with the finish time (the event API), or None
        self.then = then  # called with the finish time (a Sender's callback API), or None
        self.sender = sender  # the Sender that handed it to the link, or None
        self.start_at = 0.0  # set when the link starts it
        self.solo_end_at = 0.0  # start + transfer_s: the end if never contended
        self.finish_v = 0.0
        self.seq = 0


class Link:
    """One direction of a point-to-point link, shared by concurrent transfers.

    ``Link(env, spec, name, on_transfer=None)``.

    :meth:`send` returns an event that succeeds, with the finish time (float
    seconds) as its value, when the transfer completes. Invariants:

    * a transfer that has the byte phase to itself ends at exactly
      ``start_at + transfer_s(num_bytes, spec)``;
    * ``n`` transfers in the byte phase each progress at ``bandwidth / n``
      bytes/s; while any is in the byte phase the link moves bytes at its full
      bandwidth (so ``bytes_sent <= busy_s * bandwidth``, with equality for a
      run whose transfers all completed, up to float rounding);
    * a zero-byte transfer, or any transfer on an infinite-bandwidth link
      (``spec.bandwidth_gbs == inf``), takes the latency only and never
      occupies the byte phase; with zero latency too its event is triggered
      within :meth:`send`, at the same simulated instant.

    ``on_transfer(name, start_at, end_at, num_bytes, tag)`` (optional) is called
    at each completion (for timeline exporters); the link's state is already
    consistent when it is called. Hooks record; they schedule nothing.

    Internal timers run at the engine priority (``late=True``, after ordinary
    events of the same instant); a transfer sent at the very instant another
    finishes sees the same times whichever runs first. They are
    :meth:`~lmmsim.engine.clock.SimEnvironment.call_at` events, keyed as the
    timeouts they stand for.

    Completion of a :class:`Sender`'s transfers without events of their own. As
    events, the transfers one link timer completes are, in order, the link's done
    events (each handing the sender the freed slot), then the sender's done events
    (each running its owner's callback), all ordinary events of this instant. At
    the end of a (late) timer nothing can come between them: an ordinary event of
    this instant queued before the timer has already run, the timer's own work
    queues none, and a sender's slot handling queues only the next transfer's
    latency timer, at a later time (latency > 0); what a callback queues at this
    instant runs after the callbacks still to come, as it would after their
    events. So on a link with latency the timer runs the slot handling of each,
    then the callback of each: the same work in the same order, two events fewer
    per transfer. A zero-latency link also completes transfers inside
    :meth:`send` (in the middle of its caller), and a plain :meth:`send`'s
    completion is an event its waiter resumes on: there, and where one of those
    is among the transfers completed, the events are kept (same keys,
    :meth:`~lmmsim.engine.clock.SimEnvironment.call_at`).
    """

    def __init__(self, env: SimEnvironment, spec: LinkSpec, name: str, on_transfer: TransferHook | None = None):
        self.env = env
        self.spec = spec
        self.name = name
        self.on_transfer = on_transfer
        self.latency_s: float = spec.latency_us / 1e6  # same term as transfer_s
        self.bandwidth_bytes_per_s: float = spec.bandwidth_gbs * 1e9
        self.bytes_sent: float = 0  # payload bytes of completed transfers
        self.num_transfers: int = 0  # completed transfers
        self._busy_s = 0.0
        self._num_started = 0
        self._heap: list[tuple[float, int, _Transfer]] = []  # byte phase, by (finish_v, seq)
        self._v = 0.0  # virtual time: bytes received by each active transfer since idle
        self._t_last = env.now  # time _v and _busy_s were last brought up to date
        self._solo: _Transfer | None = None  # entered an empty byte phase and is still alone
        self._next_at: float | None = None  # time of the scheduled next completion
        self._gen = 0  # generation of the scheduled completion timer

    # ------------------------------------------------------------------ public
    def send(self, num_bytes: float, tag: Any = None) -> Event:
        """Start sending ``num_bytes`` (>= 0) now; the event succeeds with the finish time."""
        if not (num_bytes >= 0 and math.isfinite(num_bytes)):
            raise ValueError(f"link {self.name}: num_bytes must be finite and >= 0, got {num_bytes!r}")
        done = self.env.event()
        self._start(_Transfer(num_bytes, tag, self.env.now, done))
        return done

    @property
    def busy_s(self) -> float:
        """Seconds so far with at least one transfer in its byte phase."""
        if self._heap:
            return self._busy_s + (self.env.now - self._t_last)
        return self._busy_s

    @property
    def num_in_flight(self) -> int:
        """Transfers sent and not yet completed (latency or byte phase)."""
        return self._num_started - self.num_transfers

    @property
    def num_active(self) -> int:
        """Transfers in their byte phase now (sharing the bandwidth)."""
        return len(self._heap)

    def __repr__(self) -> str:
        return f"Link({self.name!r}, {self.spec.bandwidth_gbs} GB/s, {self.spec.latency_us} us)"

    # ---------------------------------------------------------------- internal
    def _start(self, tr: _Transfer) -> None:
        env = self.env
        now = env.now
        tr.start_at = now
        tr.solo_end_at = now + transfer_s(tr.num_bytes, self.spec)
        tr.seq = self._num_started
        self._num_started += 1
        if self.latency_s > 0:
            env.call_at(now + self.latency_s, self._enter_bytes, tr)
        else:
            self._enter_bytes(tr)

    def _enter_bytes(self, tr: _Transfer) -> None:
        if tr.num_bytes == 0 or math.isinf(self.bandwidth_bytes_per_s):
            # No byte phase: ends at start + latency == start + transfer_s (same float).
            self._complete([tr])
            return
        finished = self._advance()
        if self._heap:
            self._solo = None
        else:
            self._v = 0.0
            self._solo = tr
        tr.finish_v = self._v + tr.num_bytes
        heappush(self._heap, (tr.finish_v, tr.seq, tr))
        self._reschedule()
        if finished:
            self._complete(finished)

    def _advance(self) -> list[_Transfer]:
        """Bring virtual time and busy time up to now; pop the transfers that are done."""
        now = self.env.now
        heap = self._heap
        finished: list[_Transfer] = []
        if heap:
            dt = now - self._t_last
            self._busy_s += dt
            if self._next_at is not None and now >= self._next_at:
                self._v = heap[0][0]  # the scheduled completion is due: land on it exactly
            else:
                self._v += dt * self.bandwidth_bytes_per_s / len(heap)
            while heap and heap[0][0] <= self._v:
                finished.append(heappop(heap)[2])
            if not heap:
                self._v = 0.0
                self._solo = None
            elif self._solo is not None and self._solo is not heap[0][2]:
                self._solo = None
        self._t_last = now
        return finished

    def _reschedule(self) -> None:
        self._gen += 1
        heap = self._heap
        if not heap:
            self._next_at = None
            return
        now = self.env.now
        head = heap[0][2]
        if len(heap) == 1 and self._solo is head:
            at = head.solo_end_at
        else:
            at = now + (head.finish_v - self._v) * len(heap) / self.bandwidth_bytes_per_s
        at = max(at, now)  # float residue: the head is due now
        self._next_at = at
        self.env.call_at(at, self._on_timer, self._gen)

    def _on_timer(self, gen: int) -> None:
        if gen != self._gen:
            return  # superseded by a later start or finish
        finished = self._advance()
        self._reschedule()
        if finished:
            self._complete(finished)

    def _complete(self, finished: list[_Transfer]) -> None:
        """Book ``finished`` and tell their waiters; last thing a link timer does (or,
        zero latency, :meth:`send`)."""
        now = self.env.now
        for tr in finished:
            self.bytes_sent += tr.num_bytes
            self.num_transfers += 1
        if self.on_transfer is not None:
            for tr in finished:
                self.on_transfer(self.name, tr.start_at, now, tr.num_bytes, tr.tag)
        if self.latency_s > 0 and _all_senders(finished):
            # at the end of a link timer: the events' work, in their order (class docstring)
            if len(finished) == 1:
                tr = finished[0]
                tr.sender._finished(tr, now)
                if tr.then is not None:
                    tr.then(now)
                return
            for tr in finished:
                tr.sender._finished(tr, now)
            for tr in finished:
                if tr.then is not None:
                    tr.then(now)
            return
        call_at = self.env.call_at
        for tr in finished:
            if tr.sender is None:
                tr.done.succeed(now)
            else:
                call_at(now, tr.sender._finished_event, tr, NORMAL)


def _all_senders(finished: list[_Transfer]) -> bool:
    for tr in finished:
        if tr.sender is None:
            return False
    return True


class Sender:
    """Caps the transfers one sender has in flight on a link (backpressure).

    ``Sender(env, link, max_in_flight, on_transfer=None)``; ``max_in_flight``
    is a positive int, or ``None`` for no cap (then :meth:`send` behaves like
    ``link.send``). Transfers beyond the cap wait in FIFO order and are handed
    to the link when a slot frees, at the instant the earlier transfer
    completes. The event from :meth:`send` succeeds (value: finish time) when
    the transfer *completes*, so the wait counts in its total time;
    :meth:`submit` calls a function instead, at the same point (without an
    event of its own where the link can do without, see :class:`Link`).

    ``on_transfer(name, queued_at, end_at, num_bytes, tag)`` (optional) is
    called at each completion with the time :meth:`send` was called (the
    link's own hook sees the time the link started it).
    """

    def __init__(
        self,
        env: SimEnvironment,
        link: Link,
        max_in_flight: int | None,
        on_transfer: TransferHook | None = None,
    ):
        if max_in_flight is not None and (not isinstance(max_in_flight, int) or max_in_flight < 1):
            raise ValueError(f"max_in_flight must be a positive int or None, got {max_in_flight!r}")
        self.env = env
        self.link = link
        self.max_in_flight = max_in_flight
        self.on_transfer = on_transfer
        self.num_in_flight = 0  # handed to the link, not yet completed
        self._waiting: deque[_Transfer] = deque()

    @property
    def num_waiting(self) -> int:
        """Transfers queued behind the cap."""
        return len(self._waiting)

    def send(self, num_bytes: float, tag: Any = None) -> Event:
        """Queue ``num_bytes`` for the link; the event succeeds with the finish time."""
        done = self.env.event()
        self._queue(_Transfer(num_bytes, tag, self.env.now, done, sender=self))
        return done

    def submit(self, num_bytes: float, tag: Any, then: Callable[[float], None]) -> None:
        """Queue ``num_bytes`` for the link; ``then(finish time)`` runs where the event
        from :meth:`send` would have succeeded and its waiter resumed."""
        self._queue(_Transfer(num_bytes, tag, self.env.now, None, then, self))

    def _queue(self, tr: _Transfer) -> None:
        num_bytes = tr.num_bytes
        if not (num_bytes >= 0 and math.isfinite(num_bytes)):
            raise ValueError(f"link {self.link.name}: num_bytes must be finite and >= 0, got {num_bytes!r}")
        if self.max_in_flight is None or (self.num_in_flight < self.max_in_flight and not self._waiting):
            self.num_in_flight += 1
            self.link._start(tr)
        else:
            self._waiting.append(tr)

    def _finished(self, tr: _Transfer, end_at: float) -> None:
        """The link completed ``tr``: its slot goes to the next waiting transfer."""
        self.num_in_flight -= 1
        if self._waiting:
            self.num_in_flight += 1
            self.link._start(self._waiting.popleft())
        if self.on_transfer is not None:
            self.on_transfer(self.link.name, tr.queued_at, end_at, tr.num_bytes, tr.tag)
        if tr.done is not None:
            tr.done.succeed(end_at)

    def _finished_event(self, tr: _Transfer) -> None:
        """:meth:`_finished` as the link's done event, and the callback as the sender's."""
        end_at = self.env.now
        self._finished(tr, end_at)
        if tr.then is not None:
            self.env.call_at(end_at, tr.then, end_at, NORMAL)

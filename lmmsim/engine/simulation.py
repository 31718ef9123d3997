"""The run loop: arrivals feed replicas through a router until all requests end.

Runtime objects only (no scenario config): :mod:`lmmsim.build` wires them.

How a request ends (its ``status``):

* ``finished`` -- its last output token was sampled;
* ``rejected`` -- refused at arrival, never run; ``reject_reason`` says why
  (longer than the max model length, embeddings larger than the receiver's
  embedding buffer, ...), as vLLM refuses an over-long prompt;
* ``unfinished`` -- it arrived before ``sim.horizon_s`` and was still queued,
  encoding, transferring or running when the clock stopped there;
* ``not_arrived`` -- its arrival time is at or past the horizon: it never
  entered the system and counts in no metric.

Liveness: a run ends when no event is left. If requests that arrived are
still in the system then, nothing can ever move them (a deadlock between
resources, or a policy that never schedules them): :meth:`Simulation.run`
raises :class:`StuckRunError` naming what they wait for, instead of reporting
them as ``unfinished``.

Bounded memory (``sink``, ``sim.keep_requests: false``): a request's engine state is
made when it arrives and handed to the sink (:class:`lmmsim.metrics.stream.RequestSink`)
when it ends, then dropped; ``requests`` may build each request on demand
(:class:`lmmsim.workload.generator.RequestDraws`), and the cohorts drop step ends no
request can still read (:meth:`DecodeCohort.bound_ends`). Only the requests in the
system are held; the results are those of the in-memory run.
"""

from __future__ import annotations

import contextlib
import gc
import heapq
import math
import time
from dataclasses import dataclass, replace
from typing import Callable, Sequence

from array import array

from lmmsim.engine.clock import SimEnvironment
from lmmsim.engine.closed_loop import ClosedLoop
from lmmsim.errors import StuckRunError
from lmmsim.engine.scheduler import SeqState
from lmmsim.workload.request import Request


# Young-generation collections per run: CPython collects every 700 net allocations by default,
# and each full collection walks every live object -- a prefix cache's millions of block records
# made them most of a run's time (a Mooncake hour: 25 s, 11 s with the collector off). The run
# allocates few reference cycles (requests, steps and blocks are freed by reference counts), so
# a rarer collection costs little memory. Results do not depend on it.
GC_YOUNG_THRESHOLD = 100_000


@contextlib.contextmanager
def quiet_collector():
    """During the event loop: objects made before it (requests, cost memos) are frozen out of
    collections, and young collections are rarer; both restored after."""
    old = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(max(old[0], GC_YOUNG_THRESHOLD), old[1], old[2])
    try:
        yield
    finally:
        # what the loop made and kept (tens of thousands of records and token-time lists) joins
        # the old generation directly: with the default threshold back, the next allocation would
        # otherwise run a young collection over all of it (50-90 ms after a 3,000-request run)
        gc.freeze()
        gc.unfreeze()
        gc.set_threshold(*old)


@dataclass
class SimulationResult:
    seqs: list[SeqState]  # one per request, in request order
    frontend: object  # its ``workers`` and ``llm_engines`` hold the run's statistics
    end_at: float  # simulated time of the last event
    num_events: int
    wall_s: float

    @property
    def replicas(self) -> list:
        """The LLM engines (workers with a KV cache)."""
        return self.frontend.llm_engines


ENDED = ("finished", "rejected")


def waiting_on(seq, remote_media: bool) -> str:
    """What a request still in the system waits for, in words (from its engine state;
    ``remote_media``: its embeddings come from encoder workers)."""
    status = seq.status
    media = seq.request.media_segments
    if status == "transferring":
        return "a KV transfer to decode (or a decode worker's KV reservation)"
    if remote_media and seq.media_ready < len(media):
        return "embeddings (encoder, embedding buffer or link)"
    if status == "waiting":
        return "admission to an LLM batch (KV blocks, max_running or the queue policy)"
    return "its next prefill or decode step"


def stuck_message(seqs, num_requests: int, now: float, remote_media: bool) -> str:
    """One line: how many requests are stuck, grouped by what they wait for, with a few ids."""
    groups: dict[str, list[int]] = {}
    for seq in seqs:
        groups.setdefault(waiting_on(seq, remote_media), []).append(seq.request.request_id)
    parts = [f"{len(ids)} waiting for {what} (ids {', '.join(map(str, ids[:5]))}{', ...' if len(ids) > 5 else ''})"
             for what, ids in sorted(groups.items(), key=lambda kv: -len(kv[1]))]
    return (f"{len(seqs)} of {num_requests} requests can never finish: no event is left at t = {now:.3f} s; "
            + "; ".join(parts))


class Simulation:
    """Replays ``requests`` against the deployment ``make_frontend`` builds.

    ``make_frontend(env, on_finish, barrier_at)`` returns a front end (see
    :mod:`lmmsim.engine.frontends`): ``arrive(seq)`` routes a request,
    ``workers`` / ``llm_engines`` list what it runs. Engines call
    ``on_finish(seq)`` once per completed request and may ask ``barrier_at()``
    for the next instant anything external can change (the next arrival or
    the horizon). ``rejected`` maps the ids of requests refused at arrival to
    the reason (see the module docstring); they are reported, never run.
    """

    def __init__(
        self,
        requests: Sequence[Request],
        make_frontend: Callable,
        rejected: dict[int, str] | None = None,
        horizon_s: float | None = None,
        progress: Callable[[int, int], None] | None = None,
        make_host: Callable | None = None,
        closed_loop: ClosedLoop | None = None,
        sink=None,
    ):
        self.requests = requests
        self.num_requests = len(requests)
        self.sink = sink  # bounded memory (module docstring), else None
        self.live: dict[int, SeqState] = {}  # bounded memory: request id -> state, arrived and not ended
        self._entered = 0  # bounded memory: requests handed to the deployment (or refused) so far
        self._plan = None  # bounded memory with a host stage: (ids read and not entered, [requests read])
        self.rejected = rejected or {}
        self.horizon_s = horizon_s
        self.progress = progress
        self.env = SimEnvironment()
        # closed loop (lmmsim.engine.closed_loop): arrival times are set as requests are sent, on
        # copies, so the request list itself stays static; NaN until then (never sent: not_arrived)
        self.closed_loop = closed_loop
        if closed_loop is not None and sink is None:
            requests = [replace(r, arrived_at=math.nan) for r in requests]
        self.seqs = [SeqState(r) for r in requests] if sink is None else []
        self._next_arrival_at = requests[0].arrived_at if requests else math.inf  # (or first delivery)
        self._horizon = math.inf if horizon_s is None else horizon_s
        self.num_done = 0
        # ``make_host(env, deliver)``: the front end's host preprocessing pool, or None. Fed by
        # arrivals alone, its schedule is planned up front (HostPool.plan) and each request
        # enters the deployment at its delivery: ``_next_arrival_at`` is the next delivery.
        self.host = None
        # the open-loop path keeps its callbacks free of closed-loop checks
        if closed_loop is not None:
            self._on_finish, self._barrier_at = self._closed_on_finish, self._closed_barrier_at
        self.frontend = make_frontend(self.env, self._on_finish, self._barrier_at)
        if make_host is not None:
            self.host = make_host(self.env, self.frontend.arrive)
        if sink is not None:
            self._bound_memory()

    def _barrier_at(self, arrivals: bool = True) -> float:
        """The next instant anything external can change; ``arrivals=False``: anything but
        an arrival, for engines that sync when one reaches them (lmmsim.engine.replica)."""
        return min(self._next_arrival_at, self._horizon) if arrivals else self._horizon

    def _closed_barrier_at(self, arrivals: bool = True) -> float:
        # Always with arrivals: closed-loop sends happen inside engine events, where a sync
        # could not keep the order of same-instant events (see lmmsim.engine.replica).
        delivery = self.host.next_delivery_at() if self.host is not None else math.inf
        return min(self.closed_loop.next_arrival_bound(), delivery, self._horizon)

    def _closed_on_finish(self, seq: SeqState) -> None:
        Simulation._on_finish(self, seq)
        self.closed_loop.ended()

    def _on_finish(self, seq: SeqState) -> None:
        self.num_done += 1
        if self.sink is not None:
            del self.live[seq.request.request_id]
            self.sink.add(seq)
        if self.progress is not None and not self.num_done & 255:
            self.progress(self.num_done, self.num_requests)

    def _bound_memory(self) -> None:
        """Bounded memory: cohorts drop unneeded step ends; the host pool keeps its waits compactly."""
        for engine in self.frontend.llm_engines:
            for cohort in getattr(engine.scheduler, "cohorts", ()):
                cohort.bound_ends(self.sink.itl.on_trim)
        if self.host is not None and isinstance(getattr(self.host, "wait_s", None), list):
            self.host.wait_s = array("d", self.host.wait_s)  # 8 bytes a request, not 32

    def _arrive(self, request: Request) -> SeqState:
        """Bounded memory: the engine state of a request reaching the system now."""
        seq = self.live[request.request_id] = SeqState(request)
        self._entered += 1
        return seq

    def _stream_arrivals(self):
        """:meth:`_arrivals` with each request built as it is due (bounded memory)."""
        env, enter, requests = self.env, self.frontend.arrive, iter(self.requests)
        nxt = next(requests, None)
        while nxt is not None:
            request, nxt = nxt, next(requests, None)
            yield env.timeout_at(request.arrived_at, late=False)
            self._next_arrival_at = nxt.arrived_at if nxt is not None else math.inf
            seq = self._arrive(request)
            reason = self.rejected.get(request.request_id)
            if reason is not None:
                self._reject(seq, reason)
                continue
            enter(seq)

    def _stream_entries(self):
        """:meth:`_entries` as a stream (bounded memory): each request's host job is planned as
        by ``HostPool.plan``'s planner and an entry is given out once no later request can reach
        the deployment before it."""
        take = self.host.planner()
        heap: list = []
        held: set[int] = set()
        planned = [0]
        self._plan = (held, planned)
        for request in self.requests:
            at, i = request.arrived_at, request.request_id
            planned[0] = i + 1
            held.add(i)
            while heap and heap[0][0] <= at:
                yield heapq.heappop(heap)
            if i in self.rejected:
                heapq.heappush(heap, (at, at, i, request, None))
                continue
            seq = SeqState(request)
            start, end, worker = job = take(seq, at)
            heapq.heappush(heap, (end, start, i, seq, job))
        while heap:
            yield heapq.heappop(heap)

    def _stream_planned_arrivals(self):
        env, host = self.env, self.host
        entries = self._entries_left = self._stream_entries()
        entry = next(entries, None)
        self._next_arrival_at = entry[0] if entry is not None else math.inf
        while entry is not None:
            (at, _, i, item, job), entry = entry, next(entries, None)
            yield env.timeout_at(at, late=False)
            self._next_arrival_at = entry[0] if entry is not None else math.inf
            self._plan[0].discard(i)
            if job is None:
                self._reject(self._arrive(item), self.rejected[i])
                continue
            self.live[i] = item
            self._entered += 1
            host.record(item, item.request.arrived_at, *job)
            self.frontend.arrive(item)

    def _entries(self) -> list[tuple[float, int, tuple | None]]:
        """(time, request index, planned host job or None) in the order requests reach the deployment:
        refused ones at arrival, the others when host preprocessing hands them on."""
        admitted = [i for i, s in enumerate(self.seqs) if s.request.request_id not in self.rejected]
        seqs = self.seqs
        plan = self.host.plan([seqs[i] for i in admitted], [seqs[i].request.arrived_at for i in admitted])
        entries = [(seqs[i].request.arrived_at, i, None) for i, s in enumerate(seqs)
                   if s.request.request_id in self.rejected]
        entries += [(job[1], i, job) for i, job in zip(admitted, plan)]
        entries.sort(key=lambda e: (e[0], e[2][0] if e[2] else e[0], e[1]))  # ties: earlier start first
        return entries

    def _planned_arrivals(self):
        env, host, seqs = self.env, self.host, self.seqs
        entries = self._entries()
        self._next_arrival_at = entries[0][0] if entries else math.inf
        for k, (at, i, job) in enumerate(entries):
            yield env.timeout_at(at, late=False)
            self._next_arrival_at = entries[k + 1][0] if k + 1 < len(entries) else math.inf
            seq = seqs[i]
            if job is None:
                self._reject(seq, self.rejected[seq.request.request_id])
                continue
            host.record(seq, seq.request.arrived_at, *job)
            self.frontend.arrive(seq)

    def _arrivals(self):
        if self.host is not None:
            yield from (self._planned_arrivals() if self.sink is None else self._stream_planned_arrivals())
            return
        if self.sink is not None:
            yield from self._stream_arrivals()
            return
        env = self.env
        enter = self.frontend.arrive
        seqs = self.seqs
        requests = self.requests
        n = len(requests)
        for i, seq in enumerate(seqs):
            yield env.timeout_at(seq.request.arrived_at, late=False)
            self._next_arrival_at = requests[i + 1].arrived_at if i + 1 < n else math.inf
            reason = self.rejected.get(seq.request.request_id)
            if reason is not None:
                self._reject(seq, reason)
                continue
            enter(seq)

    def _send(self, i: int) -> None:
        """Closed loop: request ``i`` arrives now (refused, through host preprocessing, or straight in)."""
        if self.sink is None:
            seq = self.seqs[i]
            seq.request.arrived_at = self.env.now
        else:
            seq = self._arrive(replace(self.requests[i], arrived_at=self.env.now))
        reason = self.rejected.get(seq.request.request_id)
        if reason is not None:
            self._reject(seq, reason)
        elif self.host is not None:
            self.host.submit(seq)
        else:
            self.frontend.arrive(seq)

    def _reject(self, seq, reason: str) -> None:
        """Refused at arrival (lmmsim.build.refusals): ends at once, never enters the deployment."""
        seq.status = "rejected"
        seq.reject_reason = reason
        self._on_finish(seq)

    def _close_sink(self, held: list) -> None:
        """Bounded memory: the requests still in the system, then those that never entered it."""
        for seq in held:
            self.sink.add(seq)
        self.live.clear()
        # arrivals come in id order: those never entered are the ones from _entered on, or with a
        # host stage, the ones its plan holds back and those it has not read yet
        if self._plan is None:
            ids = range(self._entered, self.num_requests)
        else:
            # the in-memory run plans (and prices: the processor cache counts) every request
            for _ in self._entries_left:
                pass
            held, planned = self._plan
            ids = [*sorted(held), *range(planned[0], self.num_requests)]
        for i in ids:
            request = self.requests[i]
            if self.closed_loop is not None:
                request = replace(request, arrived_at=math.nan)
            seq = SeqState(request)
            seq.status = "unfinished" if request.arrived_at < self._horizon else "not_arrived"
            self.sink.add(seq)
        self.sink.itl.finish()
        self.sink.close()

    def run(self) -> SimulationResult:
        wall0 = time.perf_counter()
        if self.closed_loop is not None:
            self.closed_loop.start(self.env, self.num_requests, self._send)
        else:
            self.env.process(self._arrivals())
        env = self.env
        horizon = self._horizon
        with quiet_collector():
            if self.horizon_s is None:
                env.run()
            else:  # env.run(until) would leave its own marker event queued, hiding an empty queue
                queue = env._queue
                while queue and queue[0][0] < horizon:  # as run(until): nothing at the horizon itself
                    env.step()
        held = self.seqs if self.sink is None else sorted(self.live.values(), key=lambda s: s.request.request_id)
        in_system = [s for s in held if s.status not in ENDED and s.request.arrived_at < horizon]
        if in_system and not env._queue:  # nothing left that could ever move them
            remote = bool(getattr(self.frontend, "encoders", None))  # p_d encodes at the prefill worker
            raise StuckRunError(stuck_message(in_system, self.num_requests, env.now, remote))
        if self.horizon_s is not None:
            env._now = max(env.now, horizon)  # the clock stopped at the horizon
        for seq in held:
            if seq.status not in ENDED:
                seq.status = "unfinished" if seq.request.arrived_at < horizon else "not_arrived"
        if self.sink is not None:
            self._close_sink(held)
        if self.progress is not None:
            self.progress(self.num_done, self.num_requests)
        return SimulationResult(
            seqs=self.seqs,
            frontend=self.frontend,
            end_at=env.now,
            num_events=self.env.num_events,
            wall_s=time.perf_counter() - wall0,
        )

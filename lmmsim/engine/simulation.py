"""The run loop: arrivals feed replicas through a router until all requests end.

Runtime objects only (no scenario config): :mod:`lmmsim.build` wires them.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from lmmsim.engine.clock import SimEnvironment
from lmmsim.engine.scheduler import SeqState
from lmmsim.workload.request import Request


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


class Simulation:
    """Replays ``requests`` against the deployment ``make_frontend`` builds.

    ``make_frontend(env, on_finish, barrier_at)`` returns a front end (see
    :mod:`lmmsim.engine.frontends`): ``arrive(seq)`` routes a request,
    ``workers`` / ``llm_engines`` list what it runs. Engines call
    ``on_finish(seq)`` once per completed request and may ask ``barrier_at()``
    for the next instant anything external can change (the next arrival or
    the horizon). ``rejected`` holds request ids refused at arrival (longer
    than the deployment's max model length); they are reported, never run.
    """

    def __init__(
        self,
        requests: Sequence[Request],
        make_frontend: Callable,
        rejected: frozenset[int] = frozenset(),
        horizon_s: float | None = None,
        progress: Callable[[int, int], None] | None = None,
    ):
        self.requests = requests
        self.rejected = rejected
        self.horizon_s = horizon_s
        self.progress = progress
        self.env = SimEnvironment()
        self.seqs = [SeqState(r) for r in requests]
        self._next_arrival_at = requests[0].arrived_at if requests else math.inf
        self._horizon = math.inf if horizon_s is None else horizon_s
        self.num_done = 0
        self.frontend = make_frontend(self.env, self._on_finish, self._barrier_at)

    def _barrier_at(self) -> float:
        return min(self._next_arrival_at, self._horizon)

    def _on_finish(self, seq: SeqState) -> None:
        self.num_done += 1
        if self.progress is not None and not self.num_done & 255:
            self.progress(self.num_done, len(self.seqs))

    def _arrivals(self):
        env = self.env
        frontend = self.frontend
        seqs = self.seqs
        requests = self.requests
        n = len(requests)
        for i, seq in enumerate(seqs):
            yield env.timeout_at(seq.request.arrived_at, late=False)
            self._next_arrival_at = requests[i + 1].arrived_at if i + 1 < n else math.inf
            if seq.request.request_id in self.rejected:
                seq.status = "rejected"
                self._on_finish(seq)
                continue
            frontend.arrive(seq)

    def run(self) -> SimulationResult:
        wall0 = time.perf_counter()
        self.env.process(self._arrivals())
        if self.horizon_s is None:
            self.env.run()
        else:
            self.env.run(until=self.horizon_s)
        for seq in self.seqs:
            if seq.status not in ("finished", "rejected"):
                seq.status = "unfinished"
        if self.progress is not None:
            self.progress(self.num_done, len(self.seqs))
        return SimulationResult(
            seqs=self.seqs,
            frontend=self.frontend,
            end_at=self.env.now,
            num_events=self.env.num_events,
            wall_s=time.perf_counter() - wall0,
        )

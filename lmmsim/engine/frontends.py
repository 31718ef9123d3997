"""Front ends: what happens to a request when it arrives.

A front end owns the workers of a deployment and routes each arrival. The
:class:`~lmmsim.engine.simulation.Simulation` only feeds arrivals to it and
reads its workers afterwards (``workers``: everything that holds GPUs;
``llm_engines``: the workers with a KV cache).
"""

from __future__ import annotations


class MonolithicFrontend:
    """Replicas that each encode, prefill and decode; a router picks one per request.

    The router sees each replica's ``load`` (outstanding requests). A replica's load
    changes only when a request is submitted to it or finishes there, so the front end
    keeps the list as they happen (``loads``) instead of asking every replica at every
    arrival -- in a fleet that was most of the cost of routing."""

    def __init__(self, engines: list, router):
        self.engines = engines
        self.router = router
        self.loads = [e.load for e in engines]
        for idx, engine in enumerate(engines):
            engine.on_finish = self._counting(idx, engine.on_finish)

    def _counting(self, idx: int, on_finish):
        loads = self.loads

        def finished(seq) -> None:
            loads[idx] -= 1
            on_finish(seq)
        return finished

    @property
    def workers(self) -> list:
        return self.engines

    @property
    def llm_engines(self) -> list:
        return self.engines

    def arrive(self, seq) -> None:
        engines = self.engines
        idx = self.router.route(seq.request, self.loads) if len(engines) > 1 else 0
        self.loads[idx] += 1
        engines[idx].submit(seq)

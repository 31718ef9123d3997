"""Front ends: what happens to a request when it arrives.

A front end owns the workers of a deployment and routes each arrival. The
:class:`~lmmsim.engine.simulation.Simulation` only feeds arrivals to it and
reads its workers afterwards (``workers``: everything that holds GPUs;
``llm_engines``: the workers with a KV cache).
"""

from __future__ import annotations


class MonolithicFrontend:
    """Replicas that each encode, prefill and decode; a router picks one per request."""

    def __init__(self, engines: list, router):
        self.engines = engines
        self.router = router

    @property
    def workers(self) -> list:
        return self.engines

    @property
    def llm_engines(self) -> list:
        return self.engines

    def arrive(self, seq) -> None:
        engines = self.engines
        idx = self.router.route(seq.request, [e.load for e in engines]) if len(engines) > 1 else 0
        engines[idx].submit(seq)

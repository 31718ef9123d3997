"""Host preprocessing: the CPU work between a request's arrival and its first GPU stage.

A real multimodal server decodes a request's media and runs the model's
processor (resize, tiling, normalisation, patchify, mel features) on CPU
processes before anything reaches a GPU -- vLLM's API-server processes
(``api_server_count``, serial within each), a Dynamo-style encode worker's
own process. :class:`HostPool` is that stage placed in front of the
deployment: ``workers`` identical CPU workers serving arrivals first come,
first served, each request holding one worker for ``cost_s(request)``
seconds, then handed to the deployment. Text-only requests pass through
it too (tokenisation). It costs two scheduled callbacks per request (start,
end), no SimPy process.

Engines that fast-forward decode-only stretches must not skip a delivery:
:meth:`HostPool.next_delivery_at` is the earliest moment a request leaves the
stage, which the simulation folds into the engines' barrier.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Callable


class HostPool:
    def __init__(self, env, workers: int, cost_s: Callable, deliver: Callable):
        if workers < 1:
            raise ValueError("a host pool needs at least one worker")
        self.env = env
        self.workers = workers
        self.cost_s = cost_s  # request -> seconds of one worker's time
        self.deliver = deliver  # seq -> None: hand the preprocessed request to the deployment
        self.waiting: deque = deque()
        self.in_service: dict[int, float] = {}  # request id -> when its preprocessing ends
        self.busy_s = 0.0
        self.wait_s: list[float] = []  # per request: time queued for a worker

    def submit(self, seq) -> None:
        if len(self.in_service) < self.workers:
            self._start(seq)
        else:
            self.waiting.append(seq)

    def next_delivery_at(self) -> float:
        return min(self.in_service.values(), default=math.inf)

    def _start(self, seq) -> None:
        env = self.env
        now = env.now
        seq.preprocess_started_at = now
        self.wait_s.append(now - seq.request.arrived_at)
        cost = self.cost_s(seq.request)
        end = now + cost
        self.busy_s += cost
        self.in_service[seq.request.request_id] = end
        # ordinary priority, as an arrival: the engines of this instant see the request
        env.timeout_at(end, late=False).callbacks.append(lambda _event, seq=seq: self._finish(seq))

    def _finish(self, seq) -> None:
        del self.in_service[seq.request.request_id]
        seq.preprocess_finished_at = self.env.now
        if self.waiting:  # the freed worker takes the next request before this one moves on
            self._start(self.waiting.popleft())
        self.deliver(seq)

"""An encoder worker: a queue of media items, encoded in batches its dispatcher picks.

The worker runs one batch at a time on its GPUs; a batch's time is the cost
model's ``encode_s`` over the batch's items. When a batch ends it hands the
items to ``on_encoded`` (the deployment sends their embeddings on) and asks
the dispatcher for the next batch. ``submit`` (one call per request) tells
the dispatcher of the arrival (``on_arrival``) before waking the worker.
Encode times of a request are recorded on its state: ``encode_started_at``
when its first item's batch starts, ``encode_finished_at`` when its last
item's batch ends.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from lmmsim.engine.steplog import StepRecord
from lmmsim.policies.encode_dispatch import EncodeDispatcher, EncodeItem


class EncoderWorker:
    def __init__(
        self,
        env,
        index: int,
        name: str,
        cost,
        dispatcher: EncodeDispatcher,
        gpu_ids: tuple[int, ...],
        on_encoded: Callable[[list[EncodeItem], float, float], None],
        *,
        step_log: list | None = None,
        run=None,
        split=None,
        call_overhead_s: float = 0.0,
    ):
        self.env = env
        self.index = index
        self.name = name
        self.cost = cost
        self.dispatcher = dispatcher
        # Tell the dispatcher of each request's arrival (EAServe's rate estimate);
        # a duck-typed dispatcher without the hook is told nothing.
        self._on_arrival = getattr(dispatcher, "on_arrival", None) or (lambda items, now: None)
        self.gpu_ids = gpu_ids
        self.on_encoded = on_encoded
        self.step_log = step_log
        # ``run(compute_s, memory_s) -> Event``: the batch on a GPU shared with
        # another worker (lmmsim.engine.gpu_share); None: exactly encode_s.
        self._run = run
        # ``split(batch)`` before a batch and ``split(None)`` after it: EAServe's
        # dynamic SM partitioning re-divides the GPU per micro-batch (None: fixed).
        self._split = split
        # Host-side time per encoder call (scheduling, launches, input staging):
        # part of the call, before its GPU work, with no SM busy. The call's SM split
        # (``split``) is installed first and held throughout, as a TPC mask set per
        # micro-batch is. On a time-sliced GPU the other tenant runs meanwhile (the
        # launch gaps leave the GPU to it); only the GPU pass waits its turn. 0: not
        # modelled.
        self.call_overhead_s = call_overhead_s
        self.queue: deque[EncodeItem] = deque()
        self.busy_s = 0.0
        self.num_batches = 0
        self.num_items = 0
        self._in_progress = 0
        self._wakeup = env.event()
        env.process(self._loop())

    @property
    def load(self) -> int:
        """Items queued or being encoded."""
        return len(self.queue) + self._in_progress

    def gpu_busy_s(self) -> dict[int, float]:
        return {g: self.busy_s for g in self.gpu_ids}

    def submit(self, items: list[EncodeItem]) -> None:
        self.queue.extend(items)
        self._on_arrival(items, self.env.now)
        if not self._wakeup.triggered:
            self.env.succeed_late(self._wakeup)

    def _loop(self):
        env = self.env
        while True:
            if not self.queue:
                yield self._wakeup
                self._wakeup = env.event()
                continue
            batch, wake_at = self.dispatcher.select(self.queue, env.now)
            if batch is None:
                yield self._wakeup | env.timeout_at(wake_at)
                if self._wakeup.triggered:
                    self._wakeup = env.event()
                continue
            start = env.now
            self._in_progress = len(batch)
            works = [it.segment.item.encoder for it in batch]
            if self._split is not None:
                self._split(batch)
            if self.call_overhead_s:
                yield env.timeout_at(start + self.call_overhead_s)
            gpu_start = env.now
            if self._run is None:
                dur = self.cost.encode_s(works)
                yield env.timeout_at(gpu_start + dur)
            else:
                yield self._run(*self.cost.encode_parts(works))
                if self._split is not None:
                    self._split(None)
                dur = env.now - gpu_start
            end = env.now
            self.busy_s += dur
            self.num_batches += 1
            self.num_items += len(batch)
            self._in_progress = 0
            for it in batch:
                seq = it.seq
                if seq.encode_started_at != seq.encode_started_at:  # NaN: its first item
                    seq.encode_started_at = start
                seq.encode_finished_at = end
            if self.step_log is not None:
                ids = tuple(dict.fromkeys(it.seq.request.request_id for it in batch))
                self.step_log.append(StepRecord(self.name, gpu_start, end, "encode", ids,
                                                sum(it.num_llm_tokens for it in batch), len(batch)))
            self.on_encoded(batch, start, end)

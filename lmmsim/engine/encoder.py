"""An encoder worker: a queue of media items, encoded in batches its dispatcher picks.

The worker runs one batch at a time on its GPUs; a batch's time is the cost
model's ``encode_s`` over the batch's items. When a batch ends it hands the
items to ``on_encoded`` (the deployment sends their embeddings on) and asks
the dispatcher for the next batch. ``submit`` (one call per request) tells
the dispatcher of the arrival (``on_arrival``) before waking the worker.
Encode times of a request are recorded on its state: ``encode_started_at``
when its first item's batch starts, ``encode_finished_at`` when its last
item's batch ends.

Encoder cache (``encoder_cache``, a :class:`~lmmsim.engine.media_cache.MediaCache`
in LLM tokens, one per worker: which worker a request goes to decides what it
finds). An item is looked up when it reaches the worker's queue and again when a
batch takes it; one whose ``media_id`` the cache holds goes on at once, encode
time zero, its embeddings sent as any others. Items are stored when their batch
ends; a later item of the same batch with an id already in it is encoded once,
with the first (a hit). Counters: the cache's ``hits`` / ``misses``.
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
        encoder_cache=None,
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
        # Host-side time per encoder call -- the cost model's ``encode_host_s`` (PCIe
        # copies, kernel issue beyond the kernels) plus the ``call_overhead_s`` what-if:
        # part of the call, before its GPU work, with no SM busy. The call's SM split
        # (``split``) is installed first and held throughout, as a TPC mask set per
        # micro-batch is. On a time-sliced GPU the other tenant runs meanwhile (the
        # launch gaps leave the GPU to it); only the GPU pass waits its turn. 0: not
        # modelled.
        self.call_overhead_s = call_overhead_s
        self.queue: deque[EncodeItem] = deque()
        self.encoder_cache = encoder_cache
        self.busy_s = 0.0
        self.num_batches = 0
        self.num_items = 0
        self._in_progress = 0
        # Host preprocessing inside this worker (lmmsim.assembly.host_stage, placement
        # encode_worker): a pool whose deliveries :meth:`enqueue` takes; None: items queue at once.
        self.preprocess = None
        self._at_host = 0  # items submitted and still being preprocessed
        self._wakeup = env.event()
        env.process(self._loop())

    @property
    def load(self) -> int:
        """Items preprocessing, queued or being encoded."""
        return self._at_host + len(self.queue) + self._in_progress

    def gpu_busy_s(self) -> dict[int, float]:
        return {g: self.busy_s for g in self.gpu_ids}

    def submit(self, items: list[EncodeItem]) -> None:
        if self.preprocess is None:
            self.enqueue(items)
        else:
            self._at_host += len(items)
            self.preprocess.submit(items)

    def enqueue(self, items: list[EncodeItem]) -> None:
        """Items ready for the GPU (preprocessed): the dispatcher sees them arrive now."""
        if self.preprocess is not None:
            self._at_host -= len(items)
        items = self._serve_cached(items)
        if not items:
            return
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
            batch = self._serve_cached(batch)
            if not batch:
                continue
            encode = self._first_copies(batch)
            start = env.now
            self._in_progress = len(batch)
            works = [it.segment.item.encoder for it in encode]
            if self._split is not None:
                self._split(encode)
            host_s = self.call_overhead_s + self.cost.encode_host_s(works)
            if host_s:
                yield env.timeout_at(start + host_s)
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
            self.num_items += len(encode)
            self._in_progress = 0
            if self.encoder_cache is not None:
                for it in encode:
                    self.encoder_cache.insert(it.segment.item.media_id, it.num_llm_tokens)
            for it in batch:
                seq = it.seq
                if seq.encode_started_at != seq.encode_started_at:  # NaN: its first item
                    seq.encode_started_at = start
                seq.encode_finished_at = end
            if self.step_log is not None:
                ids = tuple(dict.fromkeys(it.seq.request.request_id for it in batch))
                self.step_log.append(StepRecord(self.name, gpu_start, end, "encode", ids,
                                                sum(it.num_llm_tokens for it in encode), len(encode)))
            self.on_encoded(batch, start, end)

    def _serve_cached(self, items: list) -> list:
        """Hand on at once, encode time zero, the items whose embeddings the encoder
        cache holds (counted hits); return the others."""
        cache = self.encoder_cache
        if cache is None:
            return items
        held, rest = [], []
        for it in items:
            (held if it.segment.item.media_id in cache else rest).append(it)
        if held:
            now = self.env.now
            for it in held:
                cache.hit(it.segment.item.media_id)
                seq = it.seq
                if seq.encode_started_at != seq.encode_started_at:  # NaN: its first item
                    seq.encode_started_at = now
                if not seq.encode_finished_at >= now:
                    seq.encode_finished_at = now
            self.on_encoded(held, now, now)
        return rest

    def _first_copies(self, batch: list) -> list:
        """The items of ``batch`` to encode, counted misses; one whose id an earlier
        item of the batch carries rides along with it (a hit), if the cache could hold it
        (as the scheduler decides; capacity 0 is no reuse at all)."""
        cache = self.encoder_cache
        if cache is None:
            return batch
        taken: set = set()
        encode = []
        for it in batch:
            key = it.segment.item.media_id
            if key is not None and key in taken:
                cache.hit(key)
                continue
            cache.lookup(key)  # not held (_serve_cached took those): a miss
            if key is not None and it.num_llm_tokens <= cache.capacity:
                taken.add(key)
            encode.append(it)
        return encode

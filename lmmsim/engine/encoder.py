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

The worker's loop is a state machine on :meth:`~lmmsim.engine.clock.SimEnvironment.call_at`
events, not a SimPy process: each of its waits is one event with the key (time,
priority, event id) the process's wait would have had, drawn at the same point, so
everything happens in the order it did with the process. The waits: the wake-up signal
(after the ordinary events of the instant items arrive; while busy the signal still
runs, and the loop, back, goes on at once); a dispatcher's wait, for that signal or the
dispatcher's time, whichever runs first, then one ordinary event at that instant to go
on (what the condition event of ``signal | timeout`` was; the timer stays queued
either way); the host time and the GPU pass of a batch (a shared GPU's run: its event).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from simpy.events import NORMAL

from lmmsim.engine.steplog import StepRecord
from lmmsim.policies.encode_dispatch import EncodeDispatcher, EncodeItem

# Where the worker's loop waits: for the wake-up signal alone (no items), for it or the
# dispatcher's time, for the ordinary event that carries on after that wait, on a batch.
_IDLE, _WAITING, _RESUMING, _BUSY = range(4)


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
        # The worker's loop is a state machine on scheduled calls (no SimPy process): each
        # wait is the event the loop used to wait on, under the same key (module docstring).
        self._state = _IDLE
        self._woken = False  # the wake-up signal is triggered (queued or already run) ...
        self._wake_ran = False  # ... and its event has run
        self._wake_no = 0  # the current signal (a queued one the loop gave up on is stale)
        self._wait_no = 0  # the dispatcher's current wait (a timer of an earlier one is stale)
        self._batch: list = []  # the batch being encoded, its items to encode, their works
        self._encode: list = []
        self._works: list = []
        self._start = self._gpu_start = self._dur = 0.0

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
        if not self._woken:  # the wake-up signal, after the ordinary events of this instant
            self._woken = True
            self.env.call_at(self.env.now, self._wake_ran_now, self._wake_no)

    # ------------------------------------------------------------------ the loop
    def _wake_ran_now(self, wake_no: int) -> None:
        if wake_no != self._wake_no:
            return  # replaced while queued: nothing waits on it
        self._wake_ran = True
        if self._state == _IDLE:  # waiting for it alone: carry on at once
            self._rearm()
            self._next()
        elif self._state == _WAITING:  # one of the two things the wait waits for
            self._wait_over()

    def _rearm(self) -> None:
        """A fresh wake-up signal (the one triggered is used up)."""
        self._woken = self._wake_ran = False
        self._wake_no += 1

    def _next(self) -> None:
        """Go on from a wait: start the next batch, or wait for items or the dispatcher."""
        env = self.env
        while True:
            if not self.queue:
                if self._wake_ran:  # the signal ran while the worker was busy: used up at once
                    self._rearm()
                    continue
                self._state = _IDLE
                return
            batch, wake_at = self.dispatcher.select(self.queue, env.now)
            if batch is None:  # items arriving, or the dispatcher's time, whichever comes first
                self._state = _WAITING
                self._wait_no += 1
                env.call_at(wake_at, self._wait_timer, self._wait_no)
                if self._wake_ran:
                    self._wait_over()
                return
            batch = self._serve_cached(batch)
            if batch:
                self._begin(batch)
                return

    def _wait_timer(self, wait_no: int) -> None:
        if self._state == _WAITING and wait_no == self._wait_no:
            self._wait_over()

    def _wait_over(self) -> None:
        """The wait is met: the loop goes on in an ordinary event of this instant."""
        self._state = _RESUMING
        self.env.call_at(self.env.now, self._resume, None, NORMAL)

    def _resume(self, _value) -> None:
        if self._woken:
            self._rearm()
        self._next()

    def _begin(self, batch: list) -> None:
        """Start ``batch``: its host time (if any), then its GPU pass."""
        env = self.env
        self._state = _BUSY
        self._batch = batch
        self._encode = encode = self._first_copies(batch)
        self._start = start = env.now
        self._in_progress = len(batch)
        self._works = works = [it.segment.item.encoder for it in encode]
        if self._split is not None:
            self._split(encode)
        host_s = self.call_overhead_s + self.cost.encode_host_s(works)
        if host_s:
            env.call_at(start + host_s, self._gpu_pass, None)
        else:
            self._gpu_pass(None)

    def _gpu_pass(self, _value) -> None:
        env = self.env
        self._gpu_start = env.now
        if self._run is None:
            self._dur = self.cost.encode_s(self._works)
            env.call_at(self._gpu_start + self._dur, self._encoded, None)
            return
        done = self._run(*self.cost.encode_parts(self._works))
        if done.callbacks is None:  # already over
            self._shared_pass_over(done)
        else:
            done.callbacks.append(self._shared_pass_over)

    def _shared_pass_over(self, _event) -> None:
        if self._split is not None:
            self._split(None)
        self._dur = self.env.now - self._gpu_start
        self._encoded(None)

    def _encoded(self, _value) -> None:
        """The batch is done: book it, hand its items on, go on."""
        end = self.env.now
        batch, encode, start = self._batch, self._encode, self._start
        self.busy_s += self._dur
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
            self.step_log.append(StepRecord(self.name, self._gpu_start, end, "encode", ids,
                                            sum(it.num_llm_tokens for it in encode), len(encode)))
        self._batch = self._encode = self._works = []
        self.on_encoded(batch, start, end)
        self._next()

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

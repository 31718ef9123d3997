"""The encoder worker's loop (scheduled calls) does what the SimPy process it replaced did,
in the same order, at equal times included."""

from __future__ import annotations

import math
import random
from types import SimpleNamespace

import pytest

from lmmsim.engine.clock import SimEnvironment
from lmmsim.engine.encoder import EncoderWorker
from lmmsim.policies.encode_dispatch import (
    EncodeItem,
    FixedBatchConfig,
    FixedBatchDispatcher,
    PerRequestDispatcher,
    PoissonGapConfig,
    PoissonGapDispatcher,
)

STEP = 0.125  # times on a binary grid: arrivals, host times and batch ends meet exactly


class Cost:
    def __init__(self, host_s: float):
        self.host_s = host_s

    def encode_s(self, works):
        return STEP / 2 + STEP / 4 * (len(works) > 2)

    def encode_parts(self, works):
        return STEP / 4, STEP / 4 + STEP / 4 * (len(works) > 2)

    def encode_host_s(self, works):
        return self.host_s


class ProcessEncoder(EncoderWorker):
    """The worker as it was: a SimPy process waiting on a wake-up event (reference)."""

    def __init__(self, env, *args, **kwargs):
        super().__init__(env, *args, **kwargs)
        self._wakeup = env.event()
        env.process(self._loop())

    def enqueue(self, items):
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
            self._batch = batch
            self._encode = encode = self._first_copies(batch)
            self._start = start = env.now
            self._in_progress = len(batch)
            self._works = works = [it.segment.item.encoder for it in encode]
            if self._split is not None:
                self._split(encode)
            host_s = self.call_overhead_s + self.cost.encode_host_s(works)
            if host_s:
                yield env.timeout_at(start + host_s)
            self._gpu_start = env.now
            if self._run is None:
                self._dur = self.cost.encode_s(works)
                yield env.timeout_at(self._gpu_start + self._dur)
            else:
                yield self._run(*self.cost.encode_parts(works))
                if self._split is not None:
                    self._split(None)
                self._dur = env.now - self._gpu_start
            self._encoded_only()

    def _encoded_only(self):
        self._next = lambda: None  # the process goes on by itself
        self._encoded(None)


def world(worker_cls, dispatcher, host_s: float, shared: bool, seed: int) -> list:
    env = SimEnvironment()
    log = []
    rng = random.Random(seed)

    def on_encoded(batch, start, end):
        log.append(("encoded", env.now, [it.seq.request.request_id for it in batch], start, end))
        ev = env.event()
        ev.callbacks.append(lambda _e: log.append(("ordinary after", env.now, w.load, w.num_batches)))
        ev.succeed()
        env.call_at(env.now, lambda _v: log.append(("late after", env.now, w.load, w.num_batches)), None)

    run = (lambda c, m: env.timeout(c + m)) if shared else None
    split = (lambda b: log.append(("split", env.now, None if b is None else len(b)))) if shared else None
    w = worker_cls(env, 0, "encoder0", Cost(host_s), dispatcher, (0,), on_encoded, run=run, split=split)
    for rid in range(40):
        at = STEP * rng.randrange(0, 80)
        seq = SimpleNamespace(request=SimpleNamespace(request_id=rid), encode_started_at=math.nan,
                              encode_finished_at=math.nan)
        items = [EncodeItem(seq, SimpleNamespace(length=10, item=SimpleNamespace(encoder=None)), at, 0, i)
                 for i in range(rng.randrange(1, 4))]
        late = rng.random() < 0.3  # some arrive after the engine events of their instant

        def arrive(items=items, probe_at=STEP * rng.randrange(0, 4)):
            log.append(("arrive", env.now, items[0].seq.request.request_id, w.load))
            w.submit(items)
            # a look at the worker, scheduled now for a later instant of the grid, before or after
            # the ordinary events there: its place among the worker's own events shows
            env.call_at(env.now + probe_at, lambda _v: log.append(("probe", env.now, w.load, w.num_batches)),
                        None, priority=rng.choice((1, 2)))

        env.call_at(at, lambda _v, f=arrive: f(), None, priority=2 if late else 1)
    env.run()
    log.append(("end", env.now, w.busy_s, w.num_batches, w.num_items))
    return log


@pytest.mark.parametrize("make", [
    lambda: PerRequestDispatcher(),
    lambda: FixedBatchDispatcher(FixedBatchConfig(max_items=4, timeout_s=2 * STEP)),
    lambda: FixedBatchDispatcher(FixedBatchConfig(max_items=3, timeout_s=0.0)),
    lambda: PoissonGapDispatcher(PoissonGapConfig(max_batch=6, max_age_s=3 * STEP)),
])
@pytest.mark.parametrize("host_s", [0.0, STEP / 2])
@pytest.mark.parametrize("shared", [False, True])
def test_loop_matches_the_process(make, host_s, shared):
    for seed in range(3):
        want = world(ProcessEncoder, make(), host_s, shared, seed)
        got = world(EncoderWorker, make(), host_s, shared, seed)
        assert got == want
        assert sum(1 for e in got if e[0] == "encoded") >= 5

"""EAServe's load-adaptive micro-batching (Poisson-gap dispatch) and the queue-length baseline."""

from __future__ import annotations

import itertools
import math
import random
from collections import deque
from pathlib import Path
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from lmmsim.engine.clock import SimEnvironment
from lmmsim.engine.encoder import EncoderWorker
from lmmsim.policies import registry
from lmmsim.policies.encode_dispatch import (
    EmbeddingBatchDispatcher,
    EncodeItem,
    FixedBatchConfig,
    FixedBatchDispatcher,
    PerRequestDispatcher,
    PoissonGapConfig,
    PoissonGapDispatcher,
    QueueLengthConfig,
    QueueLengthDispatcher,
)
from lmmsim.results import run_scenario
from lmmsim.scenario import load_scenario

LN5 = -math.log(0.2)  # -ln(1 - p) at the default p = 0.8


def request(rid: int):
    return SimpleNamespace(request=SimpleNamespace(request_id=rid), encode_started_at=math.nan,
                           encode_finished_at=math.nan)


def items_of(seq, at: float, num_items: int = 1) -> list[EncodeItem]:
    seg = SimpleNamespace(length=10, item=SimpleNamespace(encoder=None))
    return [EncodeItem(seq, seg, at) for _ in range(num_items)]


class Feed:
    """A hand-built encoder queue: requests arrive, the dispatcher is told."""

    def __init__(self, dispatcher):
        self.d = dispatcher
        self.queue: deque = deque()
        self.n = 0

    def arrive(self, at: float, num_items: int = 1):
        seq = request(self.n)
        self.n += 1
        its = items_of(seq, at, num_items)
        self.queue.extend(its)
        self.d.on_arrival(its, at)
        return seq

    def select(self, now: float):
        return self.d.select(self.queue, now)


def rids(batch) -> list[int]:
    return [it.seq.request.request_id for it in batch]


# ------------------------------------------------------------------ poisson_gap
def test_configs_are_registered():
    assert {"poisson_gap", "queue_length", "fixed", "per_request", "embedding_batch"} <= set(
        registry.names("encode_dispatch"))
    cfg = PoissonGapConfig(max_batch=8)
    assert (cfg.quantile, cfg.ewma_weight) == (0.8, 0.2)
    assert isinstance(registry.create("encode_dispatch", cfg), PoissonGapDispatcher)
    assert isinstance(registry.create("encode_dispatch", QueueLengthConfig()), QueueLengthDispatcher)
    with pytest.raises(ValidationError):
        PoissonGapConfig(quantile=1.0)
    with pytest.raises(ValidationError):
        QueueLengthConfig(min_requests=4, max_batch=2)


def test_gap_trigger_fires_at_last_arrival_plus_poisson_gap():
    f = Feed(PoissonGapDispatcher(PoissonGapConfig(max_batch=8, max_age_s=1.0)))
    f.arrive(0.0)
    assert f.d.rate is None
    assert f.select(0.0) == (None, 1.0)  # one arrival: g = max_age_s
    f.arrive(0.1)
    assert f.d.rate == pytest.approx(10.0)
    assert f.select(0.1)[1] == pytest.approx(0.1 + LN5 / 10)
    f.arrive(0.3)  # gaps 0.1, 0.2: mean gap 0.1 + 0.2 * (0.2 - 0.1) = 0.12
    assert f.d.mean_gap == pytest.approx(0.12)
    assert f.d.rate == pytest.approx(1 / 0.12)
    batch, wake = f.select(0.3)
    assert batch is None and wake == pytest.approx(0.3 + LN5 * 0.12)  # 0.4931
    assert f.select(wake - 1e-9)[0] is None
    batch, wake = f.select(wake)
    assert rids(batch) == [0, 1, 2] and wake is None and not f.queue


def test_gap_trigger_with_equal_gaps():
    f = Feed(PoissonGapDispatcher(PoissonGapConfig(max_batch=8, max_age_s=1.0)))
    for t in (0.0, 0.1, 0.2):
        f.arrive(t, num_items=2)
    _, wake = f.select(0.2)
    assert wake == pytest.approx(0.2 + LN5 / 10)  # rate 10/s, g = 0.1609 s
    batch, _ = f.select(wake)
    assert rids(batch) == [0, 0, 1, 1, 2, 2]


def test_full_batch_trigger_dispatches_at_once_and_never_exceeds_b():
    f = Feed(PoissonGapDispatcher(PoissonGapConfig(max_batch=3, max_age_s=1.0)))
    f.arrive(0.0, 2)
    f.arrive(0.01, 1)
    assert f.select(0.01)[0] is None
    f.arrive(0.02, 3)
    f.arrive(0.02, 1)
    batch, wake = f.select(0.02)  # 4 requests queued >= B = 3: no waiting
    assert rids(batch) == [0, 0, 1, 2, 2, 2] and wake is None
    assert rids(f.queue) == [3]
    batch, wake = f.select(0.02)  # one request left, arrivals still coming: wait
    assert batch is None and wake > 0.02


def test_max_age_trigger_fires_while_arrivals_keep_coming():
    f = Feed(PoissonGapDispatcher(PoissonGapConfig(max_batch=8, max_age_s=0.045)))
    for k in range(5):  # every 10 ms: rate 100/s, g = 16.1 ms, never reached
        f.arrive(k * 0.01)
        batch, wake = f.select(k * 0.01)
        assert batch is None
    assert f.d.rate == pytest.approx(100.0)
    assert wake == 0.045  # oldest (t = 0) + max_age, before 0.04 + g = 0.0561
    batch, _ = f.select(0.045)
    assert rids(batch) == [0, 1, 2, 3, 4]


def drive(dispatcher, arrivals):
    """An always-free worker over ``arrivals`` [(time, num_items)]: dispatch what
    is due, sleep until the returned wake time or the next arrival. Returns the
    batches and their dispatch times."""
    f = Feed(dispatcher)
    out, times = [], []
    now = 0.0

    def drain(until: float):
        nonlocal now
        while f.queue:
            batch, wake = f.select(now)
            if batch is not None:
                out.append(batch)
                times.append(now)
            elif wake <= until:
                assert wake > now
                now = wake
            else:
                return

    for t, k in arrivals:
        drain(t)
        now = t
        f.arrive(t, k)
    drain(math.inf)
    return out, times


def poisson_arrivals(seed: int, rate: float, n: int, max_items: int = 5):
    rng = random.Random(seed)
    t = 0.0
    arrivals = []
    for _ in range(n):
        t += rng.expovariate(rate)
        arrivals.append((t, rng.randint(1, max_items)))
    return arrivals


def test_batches_keep_requests_whole_fifo_and_bounded():
    out, _ = drive(PoissonGapDispatcher(PoissonGapConfig(max_batch=4, max_age_s=0.02)),
                   poisson_arrivals(7, 200.0, 400))
    seen = [r for b in out for r in rids(b)]
    assert seen == sorted(seen) and set(seen) == set(range(400))  # FIFO, nothing lost
    owner = {}
    for i, b in enumerate(out):
        assert 1 <= len(set(rids(b))) <= 4  # at most B requests
        for r in rids(b):
            assert owner.setdefault(r, i) == i  # a request's items in one batch
    assert max(len(set(rids(b))) for b in out) == 4


def test_rate_estimate_converges_on_poisson_arrivals():
    lam = 5.0
    rng = random.Random(3)
    arrivals = []
    t = 0.0
    for _ in range(20_000):
        t += rng.expovariate(lam)
        arrivals.append(t)
    slow = PoissonGapDispatcher(PoissonGapConfig(ewma_weight=0.002))
    default = PoissonGapDispatcher(PoissonGapConfig())
    gaps = []
    for i, t in enumerate(arrivals):
        for d in (slow, default):
            d.on_arrival(items_of(request(i), t), t)
        if i >= 100:
            gaps.append(default.mean_gap)
    assert slow.rate == pytest.approx(lam, rel=0.10)
    # the default (weight 0.2) estimate is noisy but unbiased in the mean gap
    assert 1 / (sum(gaps) / len(gaps)) == pytest.approx(lam, rel=0.10)
    assert default.num_arrivals == 20_000


def test_gap_shrinks_as_rate_grows():
    d = PoissonGapDispatcher(PoissonGapConfig(quantile=0.8, max_age_s=0.3))
    gaps = [d.gap_s(r) for r in (0.5, 1, 5, 20, 100, 1000)]
    assert all(a > b for a, b in itertools.pairwise(gaps))
    assert d.gap_s(10.0) == pytest.approx(LN5 / 10)
    assert d.gap_s(None) == 0.3 and d.gap_s(math.inf) == 0.0
    # estimated online: steady arrivals at a higher rate give a tighter gap
    est = []
    for step in (0.5, 0.05, 0.005):
        f = Feed(PoissonGapDispatcher(PoissonGapConfig()))
        for k in range(20):
            f.arrive(k * step)
        est.append(f.d.gap_s(f.d.rate))
    assert est[0] > est[1] > est[2]
    assert est[1] == pytest.approx(LN5 * 0.05)


def test_simultaneous_arrivals_give_zero_gap():
    f = Feed(PoissonGapDispatcher(PoissonGapConfig(max_batch=8, max_age_s=1.0)))
    f.arrive(0.0)
    f.arrive(0.0)
    assert f.d.rate == math.inf
    batch, _ = f.select(0.0)  # no arrival "within" a zero gap: dispatch now
    assert rids(batch) == [0, 1]


def test_select_is_deterministic():
    def trace():
        out, times = drive(PoissonGapDispatcher(PoissonGapConfig(max_batch=4, max_age_s=0.02)),
                           poisson_arrivals(11, 100.0, 300))
        return [tuple(rids(b)) for b in out], times

    first = trace()
    assert first == trace()
    assert len(set(first[1])) > 20


# ----------------------------------------------------------------- queue_length
def test_queue_length_triggers():
    d = QueueLengthDispatcher(QueueLengthConfig(min_requests=3, max_age_s=0.1))
    f = Feed(d)
    f.arrive(0.0, 2)
    f.arrive(0.01)
    assert f.select(0.01) == (None, 0.1)
    f.arrive(0.02, 2)  # third request: dispatch all three
    batch, _ = f.select(0.02)
    assert rids(batch) == [0, 0, 1, 2, 2]
    f.arrive(0.5)
    assert f.select(0.55) == (None, 0.6)
    batch, _ = f.select(0.6)  # the safety valve
    assert rids(batch) == [3]
    # max_batch above min_requests: a longer queue goes out up to max_batch requests
    f = Feed(QueueLengthDispatcher(QueueLengthConfig(min_requests=2, max_batch=3, max_age_s=0.1)))
    f.arrive(0.0)
    for k in range(4):
        f.arrive(0.0)
    assert rids(f.select(0.0)[0]) == [0, 1, 2]
    assert rids(f.select(0.0)[0]) == [3, 4]


def test_existing_dispatchers_ignore_arrivals():
    for d in (PerRequestDispatcher(), FixedBatchDispatcher(FixedBatchConfig()), EmbeddingBatchDispatcher()):
        assert d.on_arrival(items_of(request(0), 0.0), 0.0) is None


# ------------------------------------------------------------ encoder worker
class _Cost:
    def encode_s(self, works):
        return 0.05

    def encode_host_s(self, works):
        return 0.0


def test_encoder_worker_tells_the_dispatcher_and_sleeps_until_the_gap():
    env = SimEnvironment()
    done = []
    d = PoissonGapDispatcher(PoissonGapConfig(max_batch=8, max_age_s=1.0))
    w = EncoderWorker(env, 0, "encoder0", _Cost(), d, (0,), lambda batch, s, t: done.append((rids(batch), s, t)))
    seqs = [request(i) for i in range(3)]

    def feed():
        for i, t in enumerate((0.0, 0.1, 0.2)):
            yield env.timeout(t - env.now)
            w.submit(items_of(seqs[i], env.now))

    env.process(feed())
    env.run(until=2.0)
    assert d.num_arrivals == 3
    start = 0.2 + LN5 / 10
    assert done == [([0, 1, 2], pytest.approx(start), pytest.approx(start + 0.05))]
    assert all(s.encode_started_at == pytest.approx(start) for s in seqs)


# ---------------------------------------------------------------- end to end
DYNAMO = Path(__file__).resolve().parent.parent / "scenarios" / "baselines" / "rps-mix-internvl38b-dynamo.yaml"


def _run(rate: float, dispatch: str = "{kind: poisson_gap, max_batch: 8, max_age_s: 0.05}"):
    scn, base = load_scenario(DYNAMO, [f"deployment.encoder.dispatch={dispatch}", "workload.num_requests=200",
                                       f"workload.arrival.rate={rate}"])
    run = run_scenario(scn, base)
    seqs = run.built.simulation.seqs
    media = [s for s in seqs if s.request.media_segments]
    assert all(s.status == "finished" for s in seqs)
    assert all(s.encode_finished_at <= s.first_token_at for s in media)
    # one encoder worker: a batch's requests share their encode start
    sizes: dict = {}
    for s in media:
        sizes[s.encode_started_at] = sizes.get(s.encode_started_at, 0) + 1
    batches = run.summary["deployment"]["pools"]["encoder"]["batches"]
    assert sum(batches) == len(sizes)
    return len(media), sum(batches), sorted(sizes.values())


def test_end_to_end_on_dynamo_batches_adapt_to_load():
    n_low, b_low, sizes_low = _run(0.5)
    n_high, b_high, sizes_high = _run(20.0)
    assert max(sizes_low + sizes_high) <= 8
    # low load: a short (50 ms) safety valve dispatches almost every request alone
    assert sizes_low.count(1) >= 0.9 * len(sizes_low) and b_low <= n_low
    # high load: several requests per encoder batch
    assert b_high < n_high
    assert n_high / b_high >= 2.0
    # the pass-through baseline encodes one request per batch
    n_pr, b_pr, _ = _run(20.0, "{kind: per_request}")
    assert b_pr == n_pr == n_high

"""EAServe's Poisson-gap dispatch decides batches: its gap rule, not the safety valve,
dispatches at the rates batching is for, and so differs from a fixed timeout (issue 17)."""

from __future__ import annotations

import math
import random
from collections import deque
from types import SimpleNamespace

import pytest

from lmmsim.policies.encode_dispatch import (
    VALVE_S,
    EncodeItem,
    FixedBatchConfig,
    FixedBatchDispatcher,
    PoissonGapConfig,
    PoissonGapDispatcher,
)

LN5 = -math.log(0.2)  # -ln(1 - p) at the default p = 0.8


def _items(rid: int, at: float) -> list[EncodeItem]:
    seq = SimpleNamespace(request=SimpleNamespace(request_id=rid))
    return [EncodeItem(seq, SimpleNamespace(length=10, item=None), at)]


def drive(dispatcher, arrivals: list[float]) -> list[tuple[float, list[int]]]:
    """An always-free encoder over single-item requests arriving at ``arrivals``: at
    each arrival and each wake time it asks the dispatcher; returns (dispatch time,
    request ids) per batch."""
    queue: deque = deque()
    out, wake, i = [], None, 0
    while i < len(arrivals) or queue:
        nxt = arrivals[i] if i < len(arrivals) else math.inf
        now = min(nxt, wake if wake is not None else math.inf)
        if now == nxt:
            its = _items(i, now)
            queue.extend(its)
            dispatcher.on_arrival(its, now)
            i += 1
        wake = None
        while queue:
            batch, wake = dispatcher.select(queue, now)
            if batch is None:
                break
            out.append((now, [it.seq.request.request_id for it in batch]))
    return out


def test_gap_dispatch_differs_from_a_fixed_timeout():
    # a burst of four requests 100 ms apart (rate 10/s: g = 0.161 s), then a lull
    arrivals = [0.0, 0.1, 0.2, 0.3]
    gap = drive(PoissonGapDispatcher(PoissonGapConfig(max_batch=8)), arrivals)
    # the gap rule holds the batch open across the burst and closes it g after its last arrival
    assert gap == [(pytest.approx(0.3 + LN5 * 0.1), [0, 1, 2, 3])]
    # a fixed 50 ms timeout (the old valve) sends each request alone
    fixed = drive(FixedBatchDispatcher(FixedBatchConfig(max_items=8, timeout_s=0.05)), arrivals)
    assert [ids for _, ids in fixed] == [[0], [1], [2], [3]]
    # and a fixed timeout as long as the gap dispatch's wait splits the burst differently
    fixed_long = drive(FixedBatchDispatcher(FixedBatchConfig(max_items=8, timeout_s=0.461)), arrivals)
    assert [ids for _, ids in fixed_long] == [[0, 1, 2, 3]] and fixed_long[0][0] == pytest.approx(0.461)


def test_the_gap_adapts_to_load_where_a_fixed_timeout_does_not():
    # slower arrivals 0.5 s apart (g = 0.80 s): the batch closes 0.80 s after the last arrival,
    # not 0.16 s as in the burst above; a fixed timeout waits the same whatever the load
    slow = drive(PoissonGapDispatcher(PoissonGapConfig(max_batch=8)), [0.0, 0.5])
    assert [ids for _, ids in slow] == [[0, 1]] and slow[0][0] == pytest.approx(0.5 + LN5 * 0.5)
    # arrivals that keep coming for longer than the valve are cut by it (oldest waited 2 s)
    chain = drive(PoissonGapDispatcher(PoissonGapConfig(max_batch=8)), [0.0, 1.0, 2.5])
    assert chain[0] == (VALVE_S, [0, 1])
    # the same dispatcher lets a lone request go at the valve, not at g of an unknown rate
    lone = drive(PoissonGapDispatcher(PoissonGapConfig(max_batch=8)), [0.0])
    assert lone == [(VALVE_S, [0])]


def test_the_valve_bounds_the_wait_at_low_load():
    # 0.05 req/s: g ~ 32 s, the 2 s valve decides; no request waits longer than the valve
    rng = random.Random(1)
    t, arrivals = 0.0, []
    for _ in range(200):
        t += rng.expovariate(0.05)
        arrivals.append(t)
    d = PoissonGapDispatcher(PoissonGapConfig(max_batch=8))
    out = drive(d, arrivals)
    waits = [at - arrivals[ids[0]] for at, ids in out]
    assert max(waits) <= VALVE_S + 1e-9
    assert d.triggers["valve"] > 0.9 * len(out)


@pytest.mark.parametrize("rate", [2.0, 5.0])
def test_the_gap_rule_decides_at_the_reproduction_rates(rate):
    # one encoder's share of the paper's rates over 2 encoders (1 and 2.5 req/s): the gap or a
    # full batch dispatches nearly every batch, the valve few
    rng = random.Random(0)
    t, arrivals = 0.0, []
    for _ in range(2000):
        t += rng.expovariate(rate / 2)
        arrivals.append(t)
    d = PoissonGapDispatcher(PoissonGapConfig(max_batch=3))
    out = drive(d, arrivals)
    assert sum(d.triggers.values()) == len(out)
    assert d.triggers["gap"] + d.triggers["full"] >= 0.8 * len(out)
    # with the old 50 ms valve the valve decides every partial batch
    old = PoissonGapDispatcher(PoissonGapConfig(max_batch=3, max_age_s=0.05))
    drive(old, arrivals)
    assert old.triggers["gap"] == 0


def test_the_valve_is_replaceable():
    class TwoGaps(PoissonGapDispatcher):
        """Valve at twice the gap (no absolute bound)."""

        def valve_s(self, rate):
            return math.inf if rate is None else 2 * self.gap_s(rate)

    d = TwoGaps(PoissonGapConfig(max_batch=8))
    # arrivals every 0.1 s keep the gap from firing; the valve fires at 2 g = 0.32 s of age
    out = drive(d, [0.0, 0.1, 0.2, 0.3, 0.4, 0.5])
    assert out[0][1] == [0, 1, 2, 3] and out[0][0] == pytest.approx(2 * LN5 * 0.1)
    assert d.triggers["valve"] >= 1

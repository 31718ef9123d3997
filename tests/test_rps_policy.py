"""RPS-Serve's Priority Regulator, Queue Manager and priority scheduler on hand-built requests (no SimPy)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lmmsim.engine.kv_cache import BlockPool
from lmmsim.engine.priority_scheduler import PriorityScheduler
from lmmsim.engine.scheduler import SeqState
from lmmsim.policies.rps_queue import RpsQueue, RpsQueueConfig
from lmmsim.rps.priority import (
    PAPER_CLASSES, ClassParams, PriorityRegulator, default_classes, exponential_aging,
)

from conftest import text_request

SAND, PEBBLES, ROCKS = 0, 1, 2


# ------------------------------------------------------------------ regulator
@settings(max_examples=200, deadline=None)
@given(w=st.floats(0, 1e5), q=st.integers(0, 10_000), cls=st.sampled_from(PAPER_CLASSES))
def test_aging_is_bounded_in_zero_one(w, q, cls):
    a = exponential_aging(w, q, cls)
    assert 0.0 <= a < 1.0


@settings(max_examples=200, deadline=None)
@given(w=st.floats(0.01, 500), dw=st.floats(0.01, 50), q=st.integers(0, 100), dq=st.integers(1, 100),
       cls=st.sampled_from(PAPER_CLASSES))
def test_aging_increases_in_wait_and_queue_length(w, dw, q, dq, cls):
    a = exponential_aging(w, q, cls)
    if a > 1 - 1e-12:  # saturated in floating point (capped just below 1)
        assert exponential_aging(w + dw, q, cls) >= a
        return
    assert exponential_aging(w + dw, q, cls) > a
    assert exponential_aging(w, q + dq, cls) > a


def test_aging_is_zero_without_waiting_and_new_requests_keep_static_order():
    reg = PriorityRegulator(PAPER_CLASSES)
    scores = [reg.score(c, 0.0, 5) for c in (SAND, PEBBLES, ROCKS)]
    assert scores[0] < scores[1] < scores[2] == math.inf  # rocks start at priority 0
    assert reg.priority(SAND, 0.0, 0) == pytest.approx(0.1)


def test_variants():
    static = PriorityRegulator(PAPER_CLASSES, "static-only")
    aging = PriorityRegulator(PAPER_CLASSES, "aging-only")
    assert static.priority(ROCKS, 1e4, 100) == 0.0  # rocks never age without the aging term
    assert aging.priority(SAND, 0.0, 0) == 0.0
    assert aging.priority(ROCKS, 60.0, 0) == pytest.approx(exponential_aging(60.0, 0, PAPER_CLASSES[2]))
    with pytest.raises(ValueError):
        PriorityRegulator(PAPER_CLASSES, "fifo")


def test_default_classes_keep_the_paper_table_and_interpolate_for_other_k():
    assert default_classes(3) == PAPER_CLASSES
    for k in (2, 4, 5):
        cls = default_classes(k)
        assert cls[0] == pytest.approx(PAPER_CLASSES[0]) and cls[-1].static == 0.0
        assert all(a.static >= b.static and a.k >= b.k for a, b in zip(cls, cls[1:]))


@pytest.mark.parametrize("queue_len", [0, 1, 10])
def test_overtake_bound_is_exact(queue_len):
    """A rock overtakes a new sand request exactly at the computed waiting time."""
    reg = PriorityRegulator(PAPER_CLASSES)
    bound = reg.overtake_wait_s(ROCKS, SAND, queue_len)
    # by hand for the default aging: (ln(1/0.9) / (0.00075 (1 + ln(1 + q)))) ** (1 / 1.1)
    assert bound == pytest.approx((math.log(1 / 0.9) / (0.00075 * (1 + math.log1p(queue_len)))) ** (1 / 1.1))
    new_sand = reg.priority(SAND, 0.0, 0)
    assert reg.priority(ROCKS, bound * 0.999, queue_len) < new_sand < reg.priority(ROCKS, bound * 1.001, queue_len)
    # a replaced aging rule is bisected to the same point
    slow = PriorityRegulator(PAPER_CLASSES, aging=lambda w, q, p: exponential_aging(w, q, p))
    assert slow.overtake_wait_s(ROCKS, SAND, queue_len) == pytest.approx(bound, rel=1e-9)
    assert PriorityRegulator(PAPER_CLASSES, "static-only").overtake_wait_s(ROCKS, SAND) == math.inf


# ---------------------------------------------------------------- the queue
def rps_queue(classes: dict[int, int], **cfg) -> RpsQueue:
    return RpsQueue(RpsQueueConfig(**cfg), classify=lambda request: classes[request.request_id])


def seq(rid, at, prompt=100, output=10):
    return SeqState(text_request(rid, at, prompt, output))


def test_head_follows_global_priority_and_class_order_is_arrival():
    q = rps_queue({0: ROCKS, 1: PEBBLES, 2: SAND, 3: SAND})
    for s in (seq(0, 0.0), seq(1, 0.1), seq(2, 0.2), seq(3, 0.3)):
        q.add(s)
    q.refresh(0.3)
    assert [q.pop().request.request_id for _ in range(4)] == [2, 3, 1, 0]


def test_a_waiting_rock_eventually_overtakes_new_sand():
    """No starvation: with a fresh sand request arriving (and served) every 0.5 s, the rock
    that arrived at 0 leaves the queue at the first instant past the computed bound."""
    classes = {0: ROCKS}
    q = rps_queue(classes)
    rock = seq(0, 0.0)
    q.add(rock)
    reg = q.regulator
    bound = reg.overtake_wait_s(ROCKS, SAND, queue_len=1)
    t, rid = 0.0, 1
    while True:
        t += 0.5
        classes[rid] = SAND
        q.add(seq(rid, t))
        rid += 1
        q.refresh(t)
        head = q.pop()
        if head is rock:
            break
        assert head.request.request_id == rid - 1
    # the sand class holds one request when the rock is compared; the rock's class holds the rock
    assert bound - 0.5 < t <= bound + 0.5
    assert t < 200  # bound ~ 67 s with one rock queued


def test_new_sand_raises_the_urgency_of_waiting_sand():
    """Figure 8: new sand arrivals push a waiting sand request ahead of an aged pebble."""
    classes = {0: PEBBLES, 1: SAND}
    q = rps_queue(classes)
    pebble, sand = seq(0, 0.0), seq(1, 3.8)
    q.add(pebble)
    q.add(sand)
    q.refresh(5.0)
    # by hand: pebble 0.05 + aging(5 s, q=1) = 0.297; sand 0.1 + aging(1.2 s, q=1) = 0.248
    assert q.peek() is pebble
    for rid in range(2, 40):  # a burst of new sand: sand queue 39 -> sand 0.1 + 0.358
        classes[rid] = SAND
        q.add(seq(rid, 5.0))
    assert q.peek() is sand


def test_edf_orders_by_arrival_plus_slo():
    slo = {"text": 1.0, "image": 5.0}
    q = RpsQueue(RpsQueueConfig(priority="edf"), deadline=lambda r: r.arrived_at + slo[r.modality])
    a, b = seq(0, 0.0), seq(1, 0.5)
    q.add(b)
    q.add(a)
    assert q.pop() is a and q.pop() is b


def test_config_checks():
    with pytest.raises(ValueError):
        RpsQueueConfig(num_classes=4, classes=[{"static": 0.1, "p": 1, "k": 1}] * 3)
    with pytest.raises(ValueError):
        RpsQueueConfig(num_classes=2, classifier="naive")
    assert RpsQueueConfig(classes=[{"static": 0.2, "p": 2, "k": 0.1}] * 3).class_params()[0] == ClassParams(0.2, 2, 0.1)


# ------------------------------------------------------------- the scheduler
def scheduler(classes, num_blocks=1000, budget=64, max_running=16, preemption=True):
    q = rps_queue(classes, preemption=preemption)
    return PriorityScheduler(q, BlockPool(num_blocks, 16), budget, max_running, 10**9)


def run_step(sched, now):
    plan = sched.schedule(now)
    sched.complete(plan, now, now, now + 0.01)
    return plan


def test_sand_interleaves_with_a_rock_prefill_at_chunk_boundaries():
    sched = scheduler({0: ROCKS, 1: SAND})
    rock, sand = seq(0, 0.0, prompt=1000), seq(1, 0.05, prompt=40)
    sched.add(rock)
    plan = run_step(sched, 0.0)
    assert [(s.request.request_id, n) for s, n, _ in plan.chunks] == [(0, 64)]
    sched.add(sand)
    plan = run_step(sched, 0.1)
    # the sand request goes first although the rock is mid-prefill; the rock takes the rest
    assert [(s.request.request_id, n) for s, n, _ in plan.chunks] == [(1, 40), (0, 24)]
    assert rock.status == "running" and rock.num_preemptions == 0


def test_higher_priority_request_preempts_the_lowest_priority_running_one():
    # KV for 10 blocks of 16 tokens; the rock decodes holding 6 blocks, a pebble holds 3.
    classes = {0: ROCKS, 1: PEBBLES, 2: SAND}
    sched = scheduler(classes, num_blocks=10, budget=256)
    rock, pebble = seq(0, 0.0, prompt=90, output=100), seq(1, 0.0, prompt=40, output=100)
    sched.add(rock)
    sched.add(pebble)
    run_step(sched, 0.0)  # both prefilled, now decoding
    assert rock.in_decode and pebble.in_decode
    sand = seq(2, 0.1, prompt=60, output=5)  # needs 4 blocks, 10 - 6 - 3 = 1 free after decodes
    sched.add(sand)
    plan = run_step(sched, 0.1)
    assert plan.preempted == [rock]  # the lowest priority goes, not the pebble
    assert sand.status == "running" and pebble.status == "running"
    assert rock.status == "waiting" and rock.num_preemptions == 1
    assert plan.num_decodes == 1  # the evicted rock left this batch
    assert sched.pool.num_free + sum(s.num_blocks for s in (sand, pebble)) == 10


def test_preemption_never_evicts_a_higher_priority_request():
    classes = {0: SAND, 1: ROCKS}
    sched = scheduler(classes, num_blocks=6, budget=256)
    sand = seq(0, 0.0, prompt=90, output=100)
    sched.add(sand)
    run_step(sched, 0.0)
    rock = seq(1, 0.1, prompt=60, output=5)  # does not fit next to the sand
    sched.add(rock)
    for t in (0.1, 0.11, 0.12):
        plan = run_step(sched, t)
        assert not plan.preempted
    assert rock.status == "waiting" and sand.status == "running"


def test_without_preemption_the_sand_waits():
    classes = {0: ROCKS, 1: SAND}
    sched = scheduler(classes, num_blocks=8, budget=256, preemption=False)
    rock = seq(0, 0.0, prompt=90, output=100)
    sched.add(rock)
    run_step(sched, 0.0)
    sand = seq(1, 0.1, prompt=60, output=5)
    sched.add(sand)
    plan = run_step(sched, 0.1)
    assert not plan.preempted and sand.status == "waiting"


def test_max_running_slot_is_freed_by_evicting_lower_priority():
    classes = {0: ROCKS, 1: SAND}
    sched = scheduler(classes, budget=256, max_running=1)
    rock = seq(0, 0.0, prompt=30, output=100)
    sched.add(rock)
    run_step(sched, 0.0)
    sand = seq(1, 0.1, prompt=30, output=5)
    sched.add(sand)
    plan = run_step(sched, 0.1)
    assert plan.preempted == [rock] and sand.status == "running"

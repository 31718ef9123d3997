"""BlockedOrder (lmmsim.engine.blocked_order) finds the blocked embedding reservation the
engine consumes first -- the one the full scan over every blocked reservation finds."""

from __future__ import annotations

import random
from types import SimpleNamespace

from lmmsim.engine.blocked_order import BlockedOrder, static_order
from lmmsim.policies.queueing import FcfsQueue


def _seq(rid: int, arrived: float):
    return SimpleNamespace(request=SimpleNamespace(request_id=rid, arrived_at=arrived), status="waiting",
                           admit_order=-1)


class _Scheduler:
    """The two things the order reads: the queue's order key and the running prefills."""

    def __init__(self):
        self.queue = FcfsQueue()
        self.prefilling: list = []

    def consumption_rank(self, seq) -> tuple:
        if seq.status == "running":
            return (0, seq.admit_order)
        return (1, *self.queue.order_key(seq))


def test_fcfs_order_is_static():
    assert static_order(FcfsQueue())


def test_first_equals_the_scan_under_admissions_preemptions_and_grants():
    rng = random.Random(7)
    sched = _Scheduler()
    order = BlockedOrder(sched)
    seqs = [_seq(i, rng.uniform(0, 50)) for i in range(40)]
    waiting: list = []  # the buffer's reservations, oldest first
    admitted = 0
    for _ in range(3000):
        action = rng.random()
        if action < 0.4:  # a reservation for an item of some request (a request's part may repeat)
            seq = rng.choice(seqs)
            entry = (rng.uniform(1, 10), object(), (seq, rng.randrange(4)))
            waiting.append(entry)
            order.added(entry)
        elif action < 0.6 and waiting:  # granted: the oldest, or one out of order
            entry = waiting[0] if rng.random() < 0.7 else rng.choice(waiting)
            waiting.remove(entry)
            order.removed(entry)
        elif action < 0.75:  # admitted: running, in admission order
            seq = rng.choice(seqs)
            if seq.status == "waiting":
                seq.status, seq.admit_order = "running", admitted
                admitted += 1
                sched.prefilling.append(seq)
        elif action < 0.85:  # preempted back to waiting
            running = [s for s in seqs if s.status == "running"]
            if running:
                seq = rng.choice(running)
                seq.status = "waiting"
                sched.prefilling.remove(seq)
        if waiting:
            rank = sched.consumption_rank
            expected = min(waiting, key=lambda e: (rank(e[2][0]), e[2][1]))
            assert order.first() is expected


def test_a_running_owner_that_is_not_prefilling_is_an_error():
    """The order finds running owners through the running prefills; one it meets in the heap
    instead would be answered out of order, so it raises."""
    import pytest

    sched = _Scheduler()
    order = BlockedOrder(sched)
    seq = _seq(1, 0.0)
    order.added((1.0, object(), (seq, 0)))
    seq.status = "running"  # running, yet not in sched.prefilling
    with pytest.raises(AssertionError, match="not prefilling"):
        order.first()

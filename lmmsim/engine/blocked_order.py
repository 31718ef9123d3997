"""The blocked embedding reservation first in an engine's consumption order, found without
scanning every blocked reservation.

Under overload an LLM worker's embedding buffer (:class:`~lmmsim.engine.disaggregation.ByteBudget`)
holds thousands of blocked reservations, one per media item of each queued request, and each
time the buffer cannot grant its oldest one it looks for the one the engine will consume first
(:meth:`ContinuousBatchingScheduler.consumption_rank`: running prefills by admission, then
waiting requests in queue order; then the item's place in its prompt; ties by age). Scanning
them all each time made that search grow with the queue.

With a queue whose order key of a waiting request never changes (FCFS: arrival time, id),
:class:`BlockedOrder` keeps the waiting owners' reservations in a heap keyed by that order, and
finds running owners' reservations through the engine's running prefills (a request that
still waits for embeddings is not decoding: a running owner found in the heap instead is an
error, raised). The first of the two is the scan's answer: a running owner's reservations
always come first. Other queues (priorities that age) keep the scan.
"""

from __future__ import annotations

from heapq import heappop, heappush

from lmmsim.policies.queueing import QueuePolicy


def static_order(queue) -> bool:
    """Does a waiting request's place in ``queue``'s order never change while it waits?"""
    return type(queue).order_key is QueuePolicy.order_key and type(queue).refresh is QueuePolicy.refresh


class BlockedOrder:
    def __init__(self, scheduler):
        self.scheduler = scheduler
        self._heap: list = []  # ((1, *order key), item index, age, entry) of blocked reservations
        self._age: dict[int, int] = {}  # id(entry) -> age, for the reservations still blocked
        self._by_request: dict[int, list] = {}  # request id -> [(age, entry)] still blocked
        self._count = 0

    def added(self, entry) -> None:
        seq, index = entry[2]
        age = self._count
        self._count += 1
        self._age[id(entry)] = age
        self._by_request.setdefault(seq.request.request_id, []).append((age, entry))
        heappush(self._heap, ((1, *self.scheduler.queue.order_key(seq)), index, age, entry))

    def removed(self, entry) -> None:
        del self._age[id(entry)]
        rid = entry[2][0].request.request_id
        left = [(a, e) for a, e in self._by_request[rid] if e is not entry]
        if left:
            self._by_request[rid] = left
        else:
            del self._by_request[rid]

    def first(self):
        """The blocked reservation the engine will consume first."""
        best = None
        by_request = self._by_request
        for seq in self.scheduler.prefilling:  # running owners: (0, admission order) comes first
            for age, entry in by_request.get(seq.request.request_id, ()):
                key = ((0, seq.admit_order), entry[2][1], age)
                if best is None or key < best[0]:
                    best = (key, entry)
        if best is not None:
            return best[1]
        heap, alive = self._heap, self._age
        while heap:
            top = heap[0]
            entry = top[3]
            if alive.get(id(entry)) != top[2]:
                heappop(heap)  # granted meanwhile
                continue
            owner = entry[2][0]
            if owner.status == "running":  # the prefills above would have found it
                raise AssertionError(f"request {owner.request.request_id} runs and holds a blocked "
                                     "embedding reservation but is not prefilling")
            return entry
        return None

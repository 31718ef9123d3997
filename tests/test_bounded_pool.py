"""A caller's job count holds inside a larger shared pool (lmmsim.sweep.executors)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from lmmsim.sweep.executors import bounded_completions, bounded_map


class _Gate:
    """Tasks that wait (up to a bound) until ``crowd`` of them run at once, recording the most seen."""

    def __init__(self, crowd: int):
        self.crowd, self.running, self.most = crowd, 0, 0
        self.lock = threading.Lock()
        self.enough = threading.Event()

    def task(self, x):
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
            if self.running >= self.crowd:
                self.enough.set()
        self.enough.wait(0.3)  # with a limit below the crowd this waits out its bound
        with self.lock:
            self.running -= 1
        return x * x


def test_no_more_than_the_limit_run_at_once_in_a_wider_pool():
    gate = _Gate(crowd=3)
    with ThreadPoolExecutor(max_workers=8) as pool:
        assert bounded_map(pool, gate.task, list(range(7)), 2) == [x * x for x in range(7)]
    assert gate.most == 2


def test_the_pool_is_used_up_to_the_limit():
    gate = _Gate(crowd=3)
    with ThreadPoolExecutor(max_workers=8) as pool:
        assert bounded_map(pool, gate.task, list(range(6)), 3) == [x * x for x in range(6)]
    assert gate.most == 3  # the crowd of 3 was reached (so the first test's 2 is the limit's doing)


def test_the_first_tasks_are_submitted_before_the_completions_are_read():
    submitted = []

    class Pool(ThreadPoolExecutor):
        def submit(self, fn, *args):
            submitted.append(args[0])
            return super().submit(fn, *args)

    with Pool(max_workers=4) as pool:
        pairs = bounded_completions(pool, abs, [-1, -2, -3, -4, -5], 2)
        assert submitted == [-1, -2]  # before any next(): workers exist when the caller's on_start runs
        assert sorted(i for i, _ in pairs) == [0, 1, 2, 3, 4]
    assert submitted == [-1, -2, -3, -4, -5]

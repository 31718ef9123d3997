"""The SimPy environment lmmsim runs on.

Additions to :class:`simpy.Environment`:

* :meth:`SimEnvironment.timeout_at` schedules an event at an absolute time.
  Engines compute step end times themselves (``start + duration``), and a
  fast-forwarded stretch of steps must land on exactly the same float as
  stepping one by one; ``timeout(end - now)`` could be off by one ulp.
* engine events run *after* every ordinary event at the same time
  (priority ``LATE``): a step that ends, or an idle engine that wakes, at the
  instant requests arrive sees all of them, not only those whose arrival event
  happened to be scheduled first;
* :meth:`SimEnvironment.call_at` runs ``fn(value)`` at an absolute time, one
  event and no process: engines that keep their own state machine (the
  pipeline engine) step without a generator resume per event;
* an event counter (``num_events``) for the run summary;
* :meth:`SimEnvironment.run` without ``until`` steps in one loop, each event
  processed as :meth:`simpy.Environment.step` does (the same order, the same
  handling of a failed event), without two method calls per event.

Same-time events keep SimPy's insertion order, so runs are deterministic.
"""

from __future__ import annotations

from heapq import heappop, heappush

import simpy
from simpy.core import StopSimulation
from simpy.events import NORMAL, URGENT, Event


LATE = NORMAL + 1


class _AbsoluteTimeout(Event):
    def __init__(self, env: "SimEnvironment", when: float, priority: int):
        self.env = env
        self.callbacks = []
        self._value = None
        self._ok = True
        heappush(env._queue, (when, priority, next(env._eid), self))


def _invoke(event: "_Call") -> None:
    event.fn(event._value)


class _Call:
    """A queued call ``fn(value)`` (:meth:`SimEnvironment.call_at`). Not a SimPy event: nothing
    waits on one, so it carries no dict and no callback list of its own -- a fifth of an event's
    cost, most of a run's events being calls. It reads as a processed-on-its-own triggered event to
    SimPy's ``step`` (``callbacks``, ``_ok``, ``_value``); :meth:`SimEnvironment.run` calls ``fn``
    directly, the same call."""

    __slots__ = ("fn", "_value", "callbacks")
    _ok = True

    def __init__(self, fn, value):
        self.fn = fn
        self._value = value
        self.callbacks = _CALL


_CALL = (_invoke,)  # every call's callbacks (one tuple, never grown)


class SimEnvironment(simpy.Environment):
    def __init__(self, initial_time: float = 0.0):
        super().__init__(initial_time)
        self.num_events = 0

    def timeout_at(self, when: float, late: bool = True) -> Event:
        """An event at absolute time ``when``; engines use ``late`` (the
        default), arrivals and other ordinary events ``late=False``."""
        if when < self._now:
            raise ValueError(f"timeout_at({when}) is in the past (now={self._now})")
        return _AbsoluteTimeout(self, when, LATE if late else NORMAL)

    def call_at(self, when: float, fn, value, priority: int = LATE) -> _Call:
        """Run ``fn(value)`` at absolute time ``when``. Same-time order as any event: by
        ``priority``, then by when it was scheduled."""
        if when < self._now:
            raise ValueError(f"call_at({when}) is in the past (now={self._now})")
        call = _Call(fn, value)
        heappush(self._queue, (when, priority, next(self._eid), call))
        return call

    def call_keyed(self, key: tuple, fn, value) -> _Call:
        """:meth:`call_at` with the queue key ``(when, priority, event id)`` already drawn (an
        event planned ahead of time keeps the place it was given)."""
        call = _Call(fn, value)
        heappush(self._queue, (*key, call))
        return call

    def succeed_late(self, event: Event) -> None:
        """Trigger ``event`` now, after the ordinary events of this instant."""
        event._ok = True
        event._value = None
        heappush(self._queue, (self._now, LATE, next(self._eid), event))

    def step(self) -> None:
        super().step()
        self.num_events += 1

    def run(self, until=None):
        """:meth:`simpy.Environment.run`; with no ``until``, every event until the queue is
        empty, processed in place as :meth:`step` would (``num_events`` is up to date when
        it returns)."""
        if until is not None:
            return super().run(until)
        queue = self._queue
        done = 0
        try:
            while queue:
                self._now, _, _, event = heappop(queue)
                callbacks, event.callbacks = event.callbacks, None
                try:
                    if callbacks is _CALL:  # a call_at's call: its one callback (_invoke) inline
                        event.fn(event._value)
                        done += 1
                        continue
                    for callback in callbacks:
                        callback(event)
                except StopSimulation as stop:  # as step(): the rest runs when the simulation resumes
                    event.callbacks = () if callbacks is _CALL else callbacks[callbacks.index(callback) + 1:]
                    self.schedule(event, URGENT - 1)
                    return stop.args[0]
                if not event._ok and not hasattr(event, "_defused"):
                    exc = type(event._value)(*event._value.args)  # as step(): crash the environment
                    exc.__cause__ = event._value
                    raise exc
                done += 1
        finally:
            self.num_events += done
        return None

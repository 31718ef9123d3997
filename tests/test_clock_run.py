"""SimEnvironment.run's own loop: the same events, in the same order, as stepping."""

from __future__ import annotations

import random

import pytest
import simpy

from lmmsim.engine.clock import SimEnvironment


def busy_world(env: SimEnvironment, log: list) -> None:
    """Processes, timeouts at equal times, late and ordinary events, calls, a condition."""
    rng = random.Random(7)
    wake = env.event()

    def worker(name):
        for _ in range(20):
            yield env.timeout_at(env.now + rng.choice((0.0, 0.5, 1.0)), late=rng.random() < 0.5)
            log.append((env.now, name))
            if rng.random() < 0.3 and not wake.triggered:
                env.succeed_late(wake)

    def waiter():
        value = yield wake | env.timeout(7.0)
        log.append((env.now, "waiter", len(value.todict())))

    for name in "abc":
        env.process(worker(name))
    env.process(waiter())
    for i in range(10):
        env.call_at(rng.choice((1.0, 2.0, 3.0)), lambda v: log.append((env.now, "call", v)), i,
                    priority=rng.choice((0, 1, 2)))


def test_run_matches_stepping():
    stepped, looped = [], []
    env1 = SimEnvironment()
    busy_world(env1, stepped)
    while env1._queue:
        env1.step()
    env2 = SimEnvironment()
    busy_world(env2, looped)
    env2.run()
    assert looped == stepped and len(looped) > 60
    assert env2.num_events == env1.num_events and env2.now == env1.now


def test_run_until_still_works():
    env = SimEnvironment()
    log = []
    busy_world(env, log)
    env.run(until=2.5)
    assert env.now == 2.5 and log and all(t <= 2.5 for t, *_ in log)
    env.run()
    assert not env._queue


def test_failed_event_crashes_the_run():
    env = SimEnvironment()
    env.event().fail(RuntimeError("boom"))
    with pytest.raises(RuntimeError, match="boom"):
        env.run()


def test_error_in_a_process_propagates_and_counts_what_ran():
    env = SimEnvironment()

    def broken():
        yield env.timeout(1.0)
        raise ValueError("bad step")

    env.process(broken())
    with pytest.raises(ValueError, match="bad step"):
        env.run()
    assert env.num_events == 2  # the process's start and its timeout (the crashing one is not counted)


def test_stop_simulation_from_a_callback_returns_its_value():
    env = SimEnvironment()
    ev = env.timeout(1.0, value="stop")
    ev.callbacks.append(simpy.core.StopSimulation.callback)
    env.timeout(2.0)
    assert env.run() == "stop"
    assert env.now == 1.0 and [e[0] for e in sorted(env._queue)] == [1.0, 2.0]  # as step(): requeued
    env.run()
    assert env.now == 2.0


def test_stop_simulation_from_a_call_returns_its_value():
    """A call_at call (run inline, no callback list of its own) stops the loop as a callback does."""
    env = SimEnvironment()
    log = []

    def stop(value):
        log.append(("stop", env.now))
        raise simpy.core.StopSimulation(value)

    env.call_at(1.0, stop, "halt")
    env.call_at(2.0, lambda v: log.append((v, env.now)), "later")
    assert env.run() == "halt"
    assert env.now == 1.0 and len(env._queue) == 2  # the call requeued, its work done
    env.run()
    assert log == [("stop", 1.0), ("later", 2.0)] and env.num_events == 2  # the stopping run counts no event

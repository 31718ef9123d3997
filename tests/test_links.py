"""Links shared by concurrent transfers (processor sharing) and capped senders."""

from __future__ import annotations

import random

import pytest

from lmmsim.catalog import LinkSpec
from lmmsim.costmodel.transfer import transfer_s
from lmmsim.engine.clock import SimEnvironment
from lmmsim.engine.links import Link, Sender

# 1 GB/s and 10 us: B/bw is B * 1e-9 s.
SPEC = LinkSpec(bandwidth_gbs=1.0, latency_us=10.0)
L = 1e-5
BW = 1e9
MB = 1e6  # 1 MB takes 1 ms on SPEC


def approx(x):
    return pytest.approx(x, rel=1e-12, abs=1e-15)


def run_sends(spec, sends, link_kwargs=None, sender_cap="none"):
    """``sends``: list of (send_at, num_bytes). Returns (env, link, finish times in send order)."""
    env = SimEnvironment()
    link = Link(env, spec, "l", **(link_kwargs or {}))
    target = link if sender_cap == "none" else Sender(env, link, sender_cap)
    ends = [None] * len(sends)

    def one(i, at, nbytes):
        if at > env.now:
            yield env.timeout_at(at, late=False)
        ends[i] = yield target.send(nbytes, tag=i)

    for i, (at, nbytes) in enumerate(sends):
        env.process(one(i, at, nbytes))
    env.run()
    return env, link, ends


def test_single_transfer_is_exactly_transfer_s():
    for nbytes in (1, 12345, 3.7e6, 1e9):
        for spec in (SPEC, LinkSpec(bandwidth_gbs=450, latency_us=2.0), LinkSpec(bandwidth_gbs=50, latency_us=5.0)):
            _, _, (end,) = run_sends(spec, [(0.0, nbytes)])
            assert end == transfer_s(nbytes, spec)


def test_single_transfer_late_start_is_start_plus_transfer_s():
    start = 0.123456789
    spec = LinkSpec(bandwidth_gbs=450, latency_us=2.0)
    _, _, (end,) = run_sends(spec, [(start, 7.77e6)])
    assert end == start + transfer_s(7.77e6, spec)


def test_two_equal_concurrent_transfers_share_bandwidth():
    _, link, ends = run_sends(SPEC, [(0.0, MB), (0.0, MB)])
    assert ends[0] == ends[1]
    assert ends[0] == approx(L + 2 * MB / BW)
    assert link.busy_s == approx(2 * MB / BW)


def test_second_transfer_starting_halfway():
    # A alone for 0.5 ms (0.5 MB left), then A and B share 0.5 GB/s each:
    # A ends after 1 ms more (L + 1.5 ms); B has 0.5 MB left, alone: L + 2 ms.
    _, _, (a, b) = run_sends(SPEC, [(0.0, MB), (0.5e-3, MB)])
    assert a == approx(L + 1.5e-3)
    assert b == approx(L + 2.0e-3)


def test_three_staggered_transfers():
    # Byte phases start at L, L+0.5ms, L+1ms.
    # [L, L+0.5]: A alone -> A 1.5 MB left.   [L+0.5, L+1]: A, B at 0.5 GB/s -> A 1.25, B 0.75 left.
    # 3 share (1/3 GB/s): C (0.5 MB) done after 1.5 ms -> L+2.5; A 0.75, B 0.25 left.
    # 2 share: B done after 0.5 ms -> L+3; A 0.5 left, alone -> L+3.5.
    _, link, (a, b, c) = run_sends(SPEC, [(0.0, 2 * MB), (0.5e-3, MB), (1e-3, 0.5 * MB)])
    assert c == approx(L + 2.5e-3)
    assert b == approx(L + 3.0e-3)
    assert a == approx(L + 3.5e-3)
    assert link.busy_s == approx(3.5e-3)
    assert link.bytes_sent == 3.5 * MB
    assert link.num_transfers == 3


def test_latency_is_not_shared():
    # B is sent while A is in its byte phase, but A is done before B's latency
    # ends: neither sees contention, both take exactly transfer_s.
    spec = LinkSpec(bandwidth_gbs=1.0, latency_us=1000.0)  # 1 ms latency
    t_b = 1.5e-3  # A's bytes run [1 ms, 1.1 ms]; B's bytes start at 2.5 ms
    _, _, (a, b) = run_sends(spec, [(0.0, 0.1 * MB), (t_b, 0.1 * MB)])
    assert a == transfer_s(0.1 * MB, spec)
    assert b == t_b + transfer_s(0.1 * MB, spec)
    # Two transfers sent together overlap their latencies and then share bytes.
    _, _, (a, b) = run_sends(spec, [(0.0, MB), (0.0, MB)])
    assert a == b == approx(1e-3 + 2e-3)


@pytest.mark.parametrize("latency_us", [0.0, 10.0])
def test_send_at_the_instant_another_finishes_is_uncontended(latency_us):
    spec = LinkSpec(bandwidth_gbs=1.0, latency_us=latency_us)
    t_a = transfer_s(MB, spec)
    t_b = t_a if latency_us == 0 else t_a - spec.latency_us / 1e6  # B's bytes start as A's end
    _, link, (a, b) = run_sends(spec, [(0.0, MB), (t_b, MB)])
    assert a == t_a
    assert b == approx(t_b + transfer_s(MB, spec))
    assert link.busy_s == approx(2 * MB / BW)


def test_sender_cap_one_serialises():
    _, link, (a, b) = run_sends(SPEC, [(0.0, MB), (0.0, MB)], sender_cap=1)
    assert a == transfer_s(MB, SPEC)
    assert b == 2 * (L + MB / BW)
    assert b == 2 * transfer_s(MB, SPEC)
    assert link.busy_s == approx(2 * MB / BW)


def test_sender_cap_fifo_and_counts():
    env = SimEnvironment()
    link = Link(env, SPEC, "l")
    sender = Sender(env, link, 2)
    evs = [sender.send(MB, tag=i) for i in range(5)]
    assert sender.num_in_flight == 2 and sender.num_waiting == 3
    env.run()
    ends = [ev.value for ev in evs]
    # pairs share: 0,1 end together; 2,3 start then and end together; 4 alone
    assert ends[0] == ends[1] and ends[2] == ends[3]
    assert ends[0] < ends[2] < ends[4]
    assert ends[0] == approx(L + 2e-3)
    assert ends[2] == approx(2 * (L + 2e-3))
    assert ends[4] == approx(ends[2] + L + 1e-3)
    assert sender.num_in_flight == 0 and sender.num_waiting == 0


def test_unlimited_sender_is_plain_link():
    sends = [(0.0, 2 * MB), (0.5e-3, MB), (1e-3, 0.5 * MB), (1e-3, 0), (4e-3, 3 * MB)]
    _, _, direct = run_sends(SPEC, sends)
    _, _, via = run_sends(SPEC, sends, sender_cap=None)
    assert direct == via


def test_zero_bytes_is_latency_only():
    _, link, (end,) = run_sends(SPEC, [(0.0, 0)])
    assert end == L == transfer_s(0, SPEC)
    assert link.busy_s == 0.0 and link.bytes_sent == 0 and link.num_transfers == 1
    # a zero-byte message does not slow a concurrent transfer
    _, _, (a, z) = run_sends(SPEC, [(0.0, MB), (0.5e-3, 0)])
    assert a == transfer_s(MB, SPEC)
    assert z == 0.5e-3 + L


def test_infinite_bandwidth():
    inf = LinkSpec(bandwidth_gbs=float("inf"), latency_us=10.0)
    _, link, ends = run_sends(inf, [(0.0, 1e12), (0.0, 5.0)])
    assert ends == [L, L]
    assert link.busy_s == 0.0 and link.bytes_sent == 1e12 + 5
    # zero latency too: the event succeeds at the same simulated instant
    env = SimEnvironment()
    link = Link(env, LinkSpec(bandwidth_gbs=float("inf"), latency_us=0.0), "free")
    seen = []

    def proc():
        yield env.timeout(2.5)
        end = yield link.send(1e9)
        seen.append((env.now, end))

    env.process(proc())
    env.run()
    assert seen == [(2.5, 2.5)]


def test_zero_latency_zero_bytes_triggers_immediately():
    env = SimEnvironment()
    link = Link(env, LinkSpec(bandwidth_gbs=1.0, latency_us=0.0), "l")
    ev = link.send(0)
    assert ev.triggered and ev.value == 0.0


def test_bookkeeping_and_hook():
    records = []
    env = SimEnvironment()
    link = Link(env, SPEC, "enc0->pre0", on_transfer=lambda *r: records.append(r))
    link.send(MB, tag="a")

    def later():
        yield env.timeout(5e-3)
        assert link.busy_s == approx(1e-3)  # idle gap not counted
        assert link.num_in_flight == 0
        link.send(2 * MB, tag="b")
        assert link.num_in_flight == 1 and link.num_active == 0  # still in latency
        yield env.timeout(L + 1e-3)
        assert link.num_active == 1
        assert link.busy_s == approx(2e-3)  # mid-transfer: partial busy time counted

    env.process(later())
    env.run()
    assert link.bytes_sent == 3 * MB
    assert link.num_transfers == 2
    assert link.busy_s == approx(3e-3)
    assert records == [
        ("enc0->pre0", 0.0, transfer_s(MB, SPEC), MB, "a"),
        ("enc0->pre0", 5e-3, 5e-3 + transfer_s(2 * MB, SPEC), 2 * MB, "b"),
    ]


def test_sender_hook_sees_queue_time():
    env = SimEnvironment()
    link_rec, send_rec = [], []
    link = Link(env, SPEC, "l", on_transfer=lambda *r: link_rec.append(r))
    sender = Sender(env, link, 1, on_transfer=lambda *r: send_rec.append(r))
    sender.send(MB, "x")
    sender.send(MB, "y")
    env.run()
    t1 = transfer_s(MB, SPEC)
    assert link_rec[1][1:3] == (t1, 2 * t1)
    assert send_rec[1][1:3] == (0.0, 2 * t1)


def test_invalid_arguments():
    env = SimEnvironment()
    link = Link(env, SPEC, "l")
    for bad in (-1, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            link.send(bad)
    for cap in (0, -2, 1.5):
        with pytest.raises(ValueError):
            Sender(env, link, cap)


def _random_workload(seed, n=300):
    rng = random.Random(seed)
    t, sends = 0.0, []
    for _ in range(n):
        t += rng.expovariate(2000.0)
        nbytes = 0 if rng.random() < 0.05 else rng.choice([MB, 0.3 * MB, rng.uniform(1, 4 * MB)])
        sends.append((t, nbytes))
    return sends


def test_determinism_and_conservation():
    spec = LinkSpec(bandwidth_gbs=1.0, latency_us=7.0)
    sends = _random_workload(1)
    env1, link1, ends1 = run_sends(spec, sends)
    env2, link2, ends2 = run_sends(spec, sends)
    assert ends1 == ends2  # identical floats
    assert link1.busy_s == link2.busy_s and env1.num_events == env2.num_events
    total = sum(b for _, b in sends)
    assert link1.bytes_sent == pytest.approx(total, rel=1e-12)
    # work conserving: the link moves bytes at full bandwidth whenever busy
    assert link1.busy_s * spec.bandwidth_gbs * 1e9 == pytest.approx(total, rel=1e-9)
    for (at, b), end in zip(sends, ends1):
        assert end >= at + transfer_s(b, spec) * (1 - 1e-12)  # contention only slows
    # a capped sender is deterministic too, and never faster than the shared link overall
    _, _, capped1 = run_sends(spec, sends, sender_cap=3)
    _, _, capped2 = run_sends(spec, sends, sender_cap=3)
    assert capped1 == capped2
    assert max(capped1) >= max(ends1) * (1 - 1e-12)


def test_event_count_is_per_transfer_not_per_byte():
    spec = LinkSpec(bandwidth_gbs=1.0, latency_us=7.0)
    sends = _random_workload(2, n=200)
    env, _, _ = run_sends(spec, sends)
    # per transfer: its process start + wait, latency timer, done event, and at
    # most a couple of completion timers per start/finish
    assert env.num_events < 12 * len(sends)


@pytest.mark.parametrize("latency_us", [0.0, 10.0])
def test_submit_callbacks_run_where_send_events_resume(latency_us):
    """``Sender.submit``'s callbacks run where the waiters of ``Sender.send``'s events would
    (a link with latency runs them without events of their own): what they do -- ordinary
    and late events, more transfers, at the instant transfers end together -- happens in
    the same order, at the same times."""
    spec = LinkSpec(bandwidth_gbs=1.0, latency_us=latency_us)

    def world(use_submit: bool) -> list:
        env = SimEnvironment()
        log = []
        link = Link(env, spec, "l", on_transfer=lambda *r: log.append(("link", r[-1], r[2])))
        sender = Sender(env, link, 2, on_transfer=lambda *r: log.append(("sender", r[-1], r[2])))

        def then(i, end_at):
            log.append(("end", i, end_at, env.now))
            ev = env.event()
            ev.callbacks.append(lambda _e: log.append(("ordinary", i, env.now)))
            ev.succeed()
            env.call_at(env.now, lambda v: log.append(("late", v, env.now)), i)
            if i < 20:
                go(i + 10, MB if i % 3 else 0)

        def go(i, nbytes):
            if use_submit:
                sender.submit(nbytes, i, lambda end_at: then(i, end_at))
            else:
                sender.send(nbytes, i).callbacks.append(lambda ev: then(i, ev.value))

        for i in range(5):  # equal sizes sent together: two end at once, three wait
            go(i, MB)
        env.call_at(0.0, lambda v: go(9, 0.5 * MB), None)
        env.run()
        return log

    via_events, via_submit = world(False), world(True)
    assert via_submit == via_events
    assert sum(1 for e in via_events if e[0] == "end") > 15

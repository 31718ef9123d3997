"""Fast-forward in a fleet: each replica's stretch ignores arrivals elsewhere and syncs
when a request reaches it mid-stretch (lmmsim.engine.replica); the timeline must
still equal stepping bit for bit."""

from __future__ import annotations

import functools

import pytest

from lmmsim.costmodel.constant import ConstantStepCost
from lmmsim.engine.frontends import MonolithicFrontend
from lmmsim.engine.kv_cache import BlockPool
from lmmsim.engine.replica import Replica
from lmmsim.engine.scheduler import ContinuousBatchingScheduler
from lmmsim.engine.simulation import Simulation
from lmmsim.policies.queueing import FcfsQueue
from lmmsim.policies.routing import LeastLoadedRouter, RoundRobinRouter

from conftest import text_request
from test_invariants import DecodeAwareCost, random_requests, timeline


class CountingReplica(Replica):
    """Counts syncs that cut a stretch, so a test can tell the sync path ran."""

    num_syncs = 0

    def sync(self) -> None:
        self.num_syncs += 1
        super().sync()


class CheckedRouter:
    """The router under test, first checking that the front end's kept loads are the replicas' own."""

    def __init__(self, router, engines):
        self.router, self.engines = router, engines

    def route(self, request, loads):
        assert list(loads) == [e.load for e in self.engines]
        return self.router.route(request, loads)


def fleet(requests, cost, *, fast_forward, router, replicas=4, num_blocks=100_000, max_running=32,
          horizon_s=None, own_barrier=True, step_log=False):
    log = [] if step_log else None

    def make_frontend(env, on_finish, barrier_at):
        barrier = functools.partial(barrier_at, False) if own_barrier else barrier_at
        engines = [CountingReplica(env, k, ContinuousBatchingScheduler(FcfsQueue(), BlockPool(num_blocks, 16), 1024,
                                                                       max_running, 1500),
                                   cost, (k,), on_finish, barrier, fast_forward=fast_forward, step_log=log)
                   for k in range(replicas)]
        return MonolithicFrontend(engines, CheckedRouter(router(), engines))

    result = Simulation(requests, make_frontend, horizon_s=horizon_s).run()
    return result, sum(r.num_syncs for r in result.replicas), log


def token_times(result):
    """Every request's token times, fast-forwarded spans expanded."""
    out = []
    for s in result.seqs:
        times = []
        for span in s.token_spans:
            times.extend([span] if isinstance(span, float) else span[0][span[1]:span[2]])
        out.append((s.status, times, s.num_generated))
    return out


def assert_same(stepped, jumped):
    assert timeline(stepped) == timeline(jumped)  # exact float equality
    assert token_times(stepped) == token_times(jumped)
    assert [r.busy_s for r in stepped.replicas] == [r.busy_s for r in jumped.replicas]
    assert [r.num_steps for r in stepped.replicas] == [r.num_steps for r in jumped.replicas]
    assert stepped.end_at == jumped.end_at


@pytest.mark.parametrize("router", [LeastLoadedRouter, RoundRobinRouter])
@pytest.mark.parametrize("seed,num_blocks", [(1, 100_000), (2, 100_000), (3, 400), (4, 250)])
def test_fleet_fast_forward_equals_stepping_with_arrivals_mid_stretch(router, seed, num_blocks):
    # long decodes, a few replicas: most arrivals land inside another replica's stretch
    reqs = random_requests(seed, 120, rate=20.0, max_prompt=1200, max_out=300)
    cost = DecodeAwareCost(step_s=0.004, per_token_s=1e-6, encode_item_s=0.01)
    kw = dict(router=router, num_blocks=num_blocks)
    stepped, _, _ = fleet(reqs, cost, fast_forward=False, **kw)
    jumped, syncs, _ = fleet(reqs, cost, fast_forward=True, **kw)
    assert_same(stepped, jumped)
    assert syncs > 20  # the sync path ran, so a wrong sync would have shown
    assert jumped.num_events < stepped.num_events / 2


def test_own_barrier_makes_longer_stretches_than_the_fleet_wide_one():
    reqs = random_requests(5, 120, rate=20.0, max_prompt=1200, max_out=300)
    cost = DecodeAwareCost(step_s=0.004, per_token_s=1e-6, encode_item_s=0.01)
    own, _, _ = fleet(reqs, cost, fast_forward=True, router=LeastLoadedRouter, replicas=8)
    wide, syncs, _ = fleet(reqs, cost, fast_forward=True, router=LeastLoadedRouter, replicas=8, own_barrier=False)
    assert_same(wide, own)
    assert syncs == 0  # the fleet-wide barrier never lets an arrival land mid-stretch
    assert own.num_events < wide.num_events


@pytest.mark.parametrize("router", [LeastLoadedRouter, RoundRobinRouter])
def test_arrivals_exactly_at_step_ends_are_seen_by_the_next_step(router):
    # Steps of exactly 0.25 s (no context term): every arrival at a multiple of 0.25 s
    # lands on a step end, where stepping runs the arrival first (engine events are late).
    cost = ConstantStepCost(step_s=0.25)
    reqs = [text_request(i, 0.25 * (3 * i + i % 4), 40 + 7 * i, 30 + 11 * (i % 5)) for i in range(40)]
    stepped, _, _ = fleet(reqs, cost, fast_forward=False, router=router, replicas=3)
    jumped, syncs, _ = fleet(reqs, cost, fast_forward=True, router=router, replicas=3)
    assert_same(stepped, jumped)
    assert syncs > 5


def test_horizon_and_step_log_with_syncs():
    reqs = random_requests(6, 150, rate=25.0, max_prompt=1500, max_out=300)
    cost = DecodeAwareCost(step_s=0.004, per_token_s=1e-6, encode_item_s=0.01)
    kw = dict(router=LeastLoadedRouter, replicas=3, num_blocks=600, horizon_s=4.0, step_log=True)
    stepped, _, slog = fleet(reqs, cost, fast_forward=False, **kw)
    jumped, syncs, jlog = fleet(reqs, cost, fast_forward=True, **kw)
    assert_same(stepped, jumped)
    assert syncs > 0 and {s.status for s in jumped.seqs} >= {"finished", "unfinished"}

    def work(log):  # tokens and steps each worker ran: a sync must count each step once
        out: dict = {}
        for r in log:
            tokens, steps = out.get(r.worker, (0, 0))
            out[r.worker] = (tokens + r.num_tokens, steps + (r.batch_size if r.kind == "decode_run" else 1))
        return out

    assert work(slog) == work(jlog)
    assert any(r.kind == "decode_run" for r in jlog)


def test_a_built_fleet_behind_least_loaded_matches_stepping(monkeypatch):
    # the assembly's wiring (each replica's own barrier) and the host stage, through run_scenario
    from pathlib import Path

    from lmmsim.results import run_scenario
    from lmmsim.scenario import load_scenario

    syncs = []
    real_sync = Replica.sync
    monkeypatch.setattr(Replica, "sync", lambda self: (syncs.append(self.index), real_sync(self))[-1])
    path = Path(__file__).resolve().parent.parent / "bench" / "rps_mix_llava7b.yaml"
    common = ["deployment.replicas=4", "hardware.count=4", "host.workers=4", "policy.router.kind=least_loaded",
              "workload.num_requests=200", "workload.arrival.rate=30.0"]
    frames = []
    for ff in ("false", "true"):
        scn, base = load_scenario(str(path), common + [f"sim.fast_forward={ff}"])
        frames.append(run_scenario(scn, base).requests)
    assert frames[0].equals(frames[1])
    assert len(set(syncs)) == 4  # every replica was reached mid-stretch

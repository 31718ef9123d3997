"""Closed-loop load (workload.arrival.kind: closed_loop): users send on completion."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from lmmsim.costmodel.constant import ConstantStepCost
from lmmsim.engine.closed_loop import ClosedLoop
from lmmsim.engine.frontends import MonolithicFrontend
from lmmsim.engine.kv_cache import BlockPool
from lmmsim.engine.replica import Replica
from lmmsim.engine.scheduler import ContinuousBatchingScheduler
from lmmsim.engine.simulation import Simulation
from lmmsim.policies.queueing import FcfsQueue
from lmmsim.policies.routing import RoundRobinRouter
from lmmsim.scenario import load_scenario
from lmmsim.workload.config import WorkloadConfig

from conftest import text_request

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "closed-loop.yaml"


class DecodeAwareCost(ConstantStepCost):
    def llm_step_s(self, prefill_chunks, num_decodes, decode_context_sum, num_sampled):
        return super().llm_step_s(prefill_chunks, num_decodes, decode_context_sum, num_sampled) + 1e-7 * decode_context_sum


def requests(n, seed=0):
    rng = np.random.default_rng(seed)
    return [text_request(i, 0.0, int(rng.integers(1, 3000)), int(rng.integers(1, 300))) for i in range(n)]


def run(reqs, concurrency, think, *, replicas=1, fast_forward=True, rejected=None, horizon_s=None):
    cost = DecodeAwareCost(step_s=0.01, per_token_s=2e-5)

    def make_frontend(env, on_finish, barrier_at):
        engines = [Replica(env, k, ContinuousBatchingScheduler(FcfsQueue(), BlockPool(100_000, 16), 2048, 256, 2048),
                           cost, (k,), on_finish, barrier_at, fast_forward=fast_forward) for k in range(replicas)]
        return MonolithicFrontend(engines, RoundRobinRouter())

    loop = ClosedLoop(concurrency, think if isinstance(think, list) else [think] * len(reqs))
    sim = Simulation(reqs, make_frontend, rejected=rejected, horizon_s=horizon_s, closed_loop=loop)
    return sim.run(), loop


def timeline(result):
    return [(s.request.arrived_at, s.first_token_at, s.finished_at, s.status) for s in result.seqs]


def test_one_user_zero_think_sends_on_completion():
    result, _ = run(requests(40), 1, 0.0)
    seqs = result.seqs
    assert seqs[0].request.arrived_at == 0.0
    for prev, nxt in zip(seqs, seqs[1:]):
        assert nxt.request.arrived_at == prev.finished_at  # exactly, not approximately
    assert all(s.status == "finished" for s in seqs)


def test_fixed_think_time_gap():
    result, _ = run(requests(20), 1, 0.25)
    seqs = result.seqs
    for prev, nxt in zip(seqs, seqs[1:]):
        assert nxt.request.arrived_at == prev.finished_at + 0.25


@pytest.mark.parametrize("concurrency", [1, 3, 8])
def test_never_more_than_concurrency_in_flight(concurrency):
    reqs = requests(60)
    result, loop = run(reqs, concurrency, 0.05, replicas=2)
    assert loop.max_in_flight == concurrency
    events = sorted([(s.request.arrived_at, 1) for s in result.seqs] + [(s.finished_at, -1) for s in result.seqs])
    live = peak = 0
    for _t, d in events:  # ends sort before sends at the same instant
        live += d
        peak = max(peak, live)
    assert peak <= concurrency
    arrivals = [s.request.arrived_at for s in result.seqs]
    assert arrivals[:concurrency] == [0.0] * concurrency
    assert arrivals == sorted(arrivals)  # ids in arrival order


def test_deterministic_and_leaves_requests_static():
    reqs = requests(50)
    think = list(np.random.default_rng(3).exponential(0.1, size=50))
    a, _ = run(reqs, 4, think, replicas=2)
    b, _ = run(reqs, 4, think, replicas=2)
    assert timeline(a) == timeline(b)
    assert all(r.arrived_at == 0.0 for r in reqs)  # the simulation timed copies


@pytest.mark.parametrize("think", [0.0, 0.02, 0.3])
def test_fast_forward_matches_stepping(think):
    """The closed-loop barrier keeps fast-forward exact across replicas."""
    reqs = requests(80, seed=1)
    fast, _ = run(reqs, 6, think, replicas=3)
    slow, _ = run(reqs, 6, think, replicas=3, fast_forward=False)
    assert timeline(fast) == timeline(slow)


def test_refused_request_frees_its_user():
    reqs = requests(10)
    result, _ = run(reqs, 1, 0.0, rejected={3: "too long"})
    seqs = result.seqs
    assert seqs[3].status == "rejected"
    assert seqs[3].request.arrived_at == seqs[2].finished_at
    assert seqs[4].request.arrived_at == seqs[3].request.arrived_at


def test_horizon_leaves_unsent_requests_not_arrived():
    result, _ = run(requests(200), 2, 0.0, horizon_s=1.0)
    statuses = {s.status for s in result.seqs}
    assert "not_arrived" in statuses
    for s in result.seqs:
        if s.status == "not_arrived":
            assert math.isnan(s.request.arrived_at)


def test_config_needs_num_requests():
    base = {"arrival": {"kind": "closed_loop", "concurrency": 4},
            "mix": [{"name": "t", "weight": 1, "text_tokens": {"kind": "fixed", "value": 10}}]}
    assert WorkloadConfig.model_validate({**base, "num_requests": 5}).arrival.think_time_s == 0
    with pytest.raises(Exception, match="num_requests"):
        WorkloadConfig.model_validate({**base, "duration_s": 5})
    with pytest.raises(Exception):
        WorkloadConfig.model_validate({**base, "num_requests": 5, "arrival": {"kind": "closed_loop", "concurrency": 0}})


def test_scenario_run_and_concurrency_override(tmp_path):
    from lmmsim.build import build

    overrides = ["workload.num_requests=60", "workload.arrival.concurrency=3",
                 "workload.arrival.think_time=exponential", "workload.arrival.think_time_s=0.2"]
    scn, base = load_scenario(SCENARIO, overrides)
    assert scn.workload.arrival.concurrency == 3
    runs = [build(scn, base).simulation for _ in range(2)]
    results = [sim.run() for sim in runs]
    assert timeline(results[0]) == timeline(results[1])
    assert runs[0].closed_loop.max_in_flight == 3
    assert all(s.status == "finished" for s in results[0].seqs)


def test_concurrency_sweep_axis(tmp_path):
    import shutil

    import yaml

    from lmmsim.sweep import run_sweep

    scn = yaml.safe_load(SCENARIO.read_text())
    scn["workload"]["num_requests"] = 40
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(scn, sort_keys=False))
    sweep = {"base": "base.yaml", "axes": [{"kind": "grid", "params": {"workload.arrival.concurrency": [1, 8]}}]}
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(sweep, sort_keys=False))
    df = run_sweep(tmp_path / "sweep.yaml", tmp_path / "out", jobs=1, progress=False)
    shutil.rmtree(tmp_path / "out")
    assert df["workload.arrival.concurrency"].tolist() == [1, 8]
    assert df["status"].tolist() == ["ok", "ok"]
    assert (df["num_finished"] == 40).all()
    # more users: more throughput, more queueing
    assert df["throughput.requests_per_s"].iloc[1] > df["throughput.requests_per_s"].iloc[0]


@pytest.mark.parametrize("think", ["0", "0.05"])
def test_scenario_fast_forward_exact_with_host_stage(think):
    """Host preprocessing sits between a send and the engines: the barrier still holds."""
    from lmmsim.build import build

    base_overrides = ["workload.num_requests=40", "workload.arrival.concurrency=5", f"workload.arrival.think_time_s={think}"]
    runs = []
    for ff in ("true", "false"):
        scn, base = load_scenario(SCENARIO, base_overrides + [f"sim.fast_forward={ff}"])
        sim = build(scn, base).simulation
        assert sim.host is not None
        runs.append(timeline(sim.run()))
    assert runs[0] == runs[1]

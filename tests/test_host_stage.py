"""Host preprocessing stage (lmmsim.engine.host): hand timelines, M/D/1 waits, the run contract."""

from __future__ import annotations

import math

import numpy as np
import pytest
import yaml

from lmmsim.engine.clock import SimEnvironment
from lmmsim.engine.host import HostPool
from lmmsim.results import run_scenario
from lmmsim.scenario import validate_scenario

from conftest import text_request


class _Seq:
    def __init__(self, request):
        self.request = request
        self.preprocess_started_at = math.nan
        self.preprocess_finished_at = math.nan


def _run_pool(arrivals, workers, cost):
    env = SimEnvironment()
    delivered = []
    pool = HostPool(env, workers, lambda r: cost, lambda seq: delivered.append((env.now, seq.request.request_id)))
    seqs = [_Seq(text_request(i, t, 10, 1)) for i, t in enumerate(arrivals)]

    def arrive():
        for seq in seqs:
            yield env.timeout_at(seq.request.arrived_at, late=False)
            pool.submit(seq)

    env.process(arrive())
    env.run()
    return seqs, delivered, pool


def test_one_worker_serves_in_arrival_order():
    seqs, delivered, pool = _run_pool([0.0, 0.0, 0.0, 5.0], workers=1, cost=1.0)
    assert [s.preprocess_started_at for s in seqs] == [0.0, 1.0, 2.0, 5.0]
    assert delivered == [(1.0, 0), (2.0, 1), (3.0, 2), (6.0, 3)]
    assert pool.wait_s == [0.0, 1.0, 2.0, 0.0] and pool.busy_s == 4.0


def test_two_workers_take_two_at_once():
    seqs, delivered, _ = _run_pool([0.0, 0.0, 0.0], workers=2, cost=1.0)
    assert [s.preprocess_started_at for s in seqs] == [0.0, 0.0, 1.0]
    assert [t for t, _ in delivered] == [1.0, 1.0, 2.0]


def test_md1_waits_match_pollaczek_khinchine():
    # M/D/1 at load rho: mean wait = rho * D / (2 (1 - rho)).
    rng = np.random.default_rng(3)
    for rho in (0.5, 0.8):
        cost = 1.0
        arrivals = np.cumsum(rng.exponential(cost / rho, 40_000)).tolist()
        _, _, pool = _run_pool(arrivals, workers=1, cost=cost)
        expected = rho * cost / (2 * (1 - rho))
        assert np.mean(pool.wait_s[2000:]) == pytest.approx(expected, rel=0.05)


SCENARIO = """
name: host
model: qwen2.5-vl-7b
hardware: {gpu: h100-sxm-80gb, count: 1, cost_model: roofline}
deployment: {max_model_len: 8192}
workload:
  num_requests: 40
  arrival: {kind: poisson, rate: 20}
  mix:
  - {name: t, weight: 1, text_tokens: {kind: fixed, value: 200}}
  - {name: i, weight: 1, text_tokens: {kind: fixed, value: 20}, images: {count: 2, width: 448, height: 448}}
  output_tokens: {kind: fixed, value: 30}
host: {workers: 2, per_request_s: 0.002, per_item_s: 0.03}
"""


def _run(text: str, **overrides):
    raw = yaml.safe_load(text)
    for key, value in overrides.items():
        raw.setdefault(key.split(".")[0], {})[key.split(".")[1]] = value
    return run_scenario(validate_scenario(raw))


def test_text_pays_request_handling_and_media_its_items():
    run = _run(SCENARIO)
    df = run.requests
    took = df["preprocess_finished_at"] - df["preprocess_started_at"]
    items = df["num_media_items"]
    assert np.allclose(took, 0.002 + 0.03 * items)
    assert (df["preprocess_started_at"] >= df["arrived_at"]).all()
    assert (df["prefill_started_at"] >= df["preprocess_finished_at"]).all()
    assert run.summary["host"]["workers"] == 2 and 0 < run.summary["host"]["busy_share"] < 1


def test_fast_forward_never_skips_a_request_leaving_the_host_stage():
    on = _run(SCENARIO).requests
    off = _run(SCENARIO, **{"sim.fast_forward": False}).requests
    cols = ["preprocess_finished_at", "prefill_started_at", "first_token_at", "finished_at"]
    assert np.allclose(on[cols].to_numpy(float), off[cols].to_numpy(float), rtol=0, atol=1e-9)


def test_without_a_host_stage_nothing_changes_but_the_empty_columns():
    raw = yaml.safe_load(SCENARIO)
    raw.pop("host")
    run = run_scenario(validate_scenario(raw))
    assert run.requests["preprocess_started_at"].isna().all() and "host" not in run.summary
    with_zero = _run(SCENARIO, **{"host.per_request_s": 0.0, "host.per_item_s": 0.0}).requests
    assert np.allclose(with_zero["first_token_at"], run.requests["first_token_at"], rtol=0, atol=1e-12)

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
    """An event-driven pool over ``arrivals``; ``cost``: seconds, or seq -> seconds."""
    env = SimEnvironment()
    delivered = []
    cost_s = cost if callable(cost) else (lambda seq: cost)
    pool = HostPool(env, workers, cost_s, lambda seq: delivered.append((env.now, seq.request.request_id)))
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
host: {placement: api_server, workers: 2, per_request_s: 0.002, per_item_s: 0.03}
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
    front = run.summary["host"]["api_server"]
    assert run.summary["host"]["placement"] == "api_server"
    assert front["workers"] == 2 and 0 < front["busy_share"] < 1


def test_fast_forward_never_skips_a_request_leaving_the_host_stage():
    on = _run(SCENARIO).requests
    off = _run(SCENARIO, **{"sim.fast_forward": False}).requests
    cols = ["preprocess_finished_at", "prefill_started_at", "first_token_at", "finished_at"]
    assert np.allclose(on[cols].to_numpy(float), off[cols].to_numpy(float), rtol=0, atol=1e-9)


def test_without_a_host_stage_nothing_changes_but_the_empty_columns():
    raw = yaml.safe_load(SCENARIO)
    raw["host"] = {"placement": "none"}
    run = run_scenario(validate_scenario(raw))
    assert run.requests["preprocess_started_at"].isna().all() and "host" not in run.summary
    with_zero = _run(SCENARIO, **{"host.per_request_s": 0.0, "host.per_item_s": 0.0}).requests
    assert np.allclose(with_zero["first_token_at"], run.requests["first_token_at"], rtol=0, atol=1e-12)


def test_md_c_waits_match_the_cosmetatos_closed_form():
    # M/D/c: Wq = 1/2 [1 + (1 - rho)(c - 1)(sqrt(4 + 5c) - 2) / (16 rho c)] Wq(M/M/c) (Cosmetatos 1975),
    # with Wq(M/M/c) from the Erlang C formula.
    rng = np.random.default_rng(5)
    c, rho, cost = 4, 0.8, 1.0
    lam = rho * c / cost
    a = lam * cost
    head = sum(a**k / math.factorial(k) for k in range(c))
    tail = a**c / math.factorial(c) / (1 - rho)
    mmc = tail / (head + tail) * cost / (c * (1 - rho))
    expected = 0.5 * (1 + (1 - rho) * (c - 1) * (math.sqrt(4 + 5 * c) - 2) / (16 * rho * c)) * mmc
    arrivals = np.cumsum(rng.exponential(1 / lam, 80_000)).tolist()
    _, _, pool = _run_pool(arrivals, workers=c, cost=cost)
    assert np.mean(pool.wait_s[4000:]) == pytest.approx(expected, rel=0.05)


def _epd() -> str:
    """SCENARIO as Dynamo's E + P + D on three GPUs, mostly images, a slow host per image."""
    raw = yaml.safe_load(SCENARIO)
    raw.update(name="host-epd", system="dynamo", host={"per_request_s": 0.001, "per_item_s": 0.2})
    raw["hardware"]["count"] = 3
    raw["workload"].update(num_requests=30, arrival={"kind": "poisson", "rate": 6})
    raw["workload"]["mix"][1].update(weight=2, images={"count": 1, "width": 448, "height": 448})
    raw["workload"]["output_tokens"]["value"] = 10
    return yaml.safe_dump(raw)


EPD = _epd()


def test_encode_worker_placement_preprocesses_media_inside_the_encoder():
    run = _run(EPD)
    df, host = run.requests, run.summary["host"]
    assert host["placement"] == "encode_worker"  # auto, with an encoder pool
    media = df["num_media_items"] > 0
    took = df["preprocess_finished_at"] - df["preprocess_started_at"]
    # text: tokenisation at the front end only; media: then one encode-worker process, serially
    assert np.allclose(took[~media], 0.001)
    assert (took[media] >= 0.2 - 1e-12).all() and (df.loc[media, "encode_started_at"]
                                                   >= df.loc[media, "preprocess_finished_at"] - 1e-12).all()
    enc = host["encode_worker"]
    assert enc["workers"] == 1 and enc["wait_s"]["mean"] > 0  # 0.2 s per image at 4 images/s: a queue
    busy = enc["busy_share"] * run.summary["sim_end_at_s"]
    assert busy == pytest.approx(0.2 * media.sum(), rel=1e-9)
    assert 0.5 < enc["share_of_encode_worker_time"] < 1
    front = run.summary["host"]["api_server"]
    assert front["busy_share"] * run.summary["sim_end_at_s"] == pytest.approx(0.001 * len(df), rel=1e-9)


def test_more_encode_worker_processes_cut_the_host_queue():
    one = _run(EPD).summary["host"]["encode_worker"]["wait_s"]["mean"]
    four = _run(EPD, **{"host.encode_worker_processes": 4}).summary["host"]["encode_worker"]["wait_s"]["mean"]
    assert four < one / 2


def test_encode_worker_placement_needs_an_encoder_pool():
    from lmmsim.errors import UserError

    with pytest.raises(UserError, match="host.placement.*'api_server'"):
        _run(SCENARIO, **{"host.placement": "encode_worker"})


def test_host_pools_get_their_own_trace_tracks():
    raw = yaml.safe_load(EPD)
    run = run_scenario(validate_scenario(raw), trace=True)
    workers = {r.worker for r in run.built.step_log if r.kind == "preprocess"}
    assert workers == {"api_server0", "encoder0/host0"}


def test_a_processor_cache_hit_skips_the_processor():
    raw = yaml.safe_load(SCENARIO)
    raw["workload"]["mix"] = [{"name": "i", "weight": 1, "text_tokens": {"kind": "fixed", "value": 20},
                               "images": {"count": 1, "width": 448, "height": 448}}]
    raw["workload"]["reuse"] = {"probability": 1.0}  # every image after the first repeats one seen before
    df = run_scenario(validate_scenario(raw)).requests
    took = (df["preprocess_finished_at"] - df["preprocess_started_at"]).to_numpy()
    assert took[0] == pytest.approx(0.002 + 0.03) and np.allclose(took[1:], 0.002)
    raw["host"]["processor_cache"] = {"capacity_gib": 0}
    run = run_scenario(validate_scenario(raw))
    took = run.requests["preprocess_finished_at"] - run.requests["preprocess_started_at"]
    assert np.allclose(took, 0.032) and "processor_cache" not in run.summary["host"]


def test_the_planned_schedule_is_the_event_driven_one():
    """The front end's pool is planned before the run (HostPool.plan); it must give the timeline the
    event-driven pool gives: same starts, ends and workers, FIFO over c workers, costs in start order."""
    rng = np.random.default_rng(11)
    arrivals = np.cumsum(rng.exponential(0.4, 300)).tolist()
    costs = rng.choice([0.1, 0.5, 1.5], 300).tolist()

    def cost(seq):
        return costs[seq.request.request_id]

    seqs, delivered, _ = _run_pool(arrivals, 3, cost)
    ends = dict((rid, t) for t, rid in delivered)
    planned = HostPool(None, 3, cost, None).plan(seqs, arrivals)
    assert [p[0] for p in planned] == [s.preprocess_started_at for s in seqs]
    assert [p[1] for p in planned] == [ends[i] for i in range(len(seqs))]
    assert max(p[0] - a for p, a in zip(planned, arrivals)) > 1.0  # the pool did queue


def test_validate_says_where_the_host_stage_runs_and_warns_past_the_servers_cores(tmp_path, capsys):
    from conftest import assert_user_error, run_cli

    path = tmp_path / "s.yaml"
    path.write_text(EPD)
    code, out, _ = run_cli(capsys, "validate", path)
    assert code == 0 and "host: encode_worker: tokenisation in 1 front-end process(es), media in 1" in out
    assert "warning" not in out
    code, out, _ = run_cli(capsys, "validate", path, "--set", "host.workers=200")
    assert code == 0 and "warning: 201 host processes exceed the 112 cores of 1 NVIDIA DGX H100 node(s)" in out
    assert_user_error(capsys, ["validate", path, "--set", "host.profile=nope"], "host.profile", "'cpu'")
    assert_user_error(capsys, ["validate", path, "--set", "host.placement=gpu"], "host.placement", "encode_worker")

"""EAServe's Hybrid Auto Selection (lmmsim.search, `lmmsim search`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import assert_user_error, run_cli

from lmmsim.errors import UserError
from lmmsim.outputs import MANIFEST
from lmmsim.search import capacity, mapping, outputs, profiling, runner, trials
from lmmsim.search.capacity import Allocation, Capacities, LocalSettings

EXAMPLE = {
    "name": "easerve-llava34b-small",
    "seed": 0,
    "system": "dynamo",
    "model": "llava-v1.6-34b",
    "hardware": {"gpu": "rtx-6000-ada", "count": 8, "interconnect": "pcie"},
    "deployment": {
        "kind": "e_p_d",
        "encoder": {"workers": 2, "tp": 1, "dispatch": {"kind": "poisson_gap", "max_batch": 8},
                    "envelope_transfer": True},
        "prefill": {"workers": 1, "tp": 2},
        "decode": {"workers": 1, "tp": 4},
        "max_model_len": 8192,
        "local_prefill": {"tp": 2, "offload": {"kind": "deficit", "remote_fraction": 0.55},
                          "sm_partitioning": "dynamic"},
    },
    "workload": {
        "num_requests": 200,
        "arrival": {"kind": "poisson", "rate": 4},
        "mix": [{"name": "image", "weight": 1.0, "text_tokens": {"kind": "fixed", "value": 100},
                 "images": {"count": 1, "width": 1024, "height": 1024}}],
        "output_tokens": {"kind": "fixed", "value": 128},
    },
}


@pytest.fixture
def scenario(tmp_path):
    path = tmp_path / "easerve.yaml"
    path.write_text(yaml.safe_dump(EXAMPLE, sort_keys=False))
    return path


def problem(path, **kw):
    raw, scn, base = mapping.read_raw(path)
    return mapping.Problem(raw, scn, base, **{"trial_requests": 40, **kw})


# ------------------------------------------------------------------ Stage 1 (pure)
CAPS = Capacities(encode=10.0, prefill={2: 1.0, 4: 1.5}, decode={2: 1.0, 4: 2.5})


def test_loads_and_balance_score_by_hand():
    a = Allocation(n_e=1, n_p=2, tp_p=2, n_d=1, tp_d=4)
    loads = capacity.stage_loads(a, CAPS, rate=2.0)
    assert loads == pytest.approx({"encode": 0.2, "prefill": 1.0, "decode": 0.8})
    assert capacity.balance_score(loads) == pytest.approx(5.0)
    assert capacity.balance_score({"encode": 0.0, "prefill": 0.5, "decode": 0.25}) == 2.0  # no-load stage left out


def test_local_alpha_and_prefill_capacity():
    # dynamic: alpha = 1 - rate / (n_E C_E) = 1 - 2 / 20
    assert capacity.local_alpha(2.0, 20.0) == pytest.approx(0.9)
    assert capacity.local_alpha(50.0, 20.0) == 0.0
    assert capacity.local_alpha(2.0, 20.0, LocalSettings("static", 0.3)) == pytest.approx(0.7)
    a = Allocation(n_e=2, n_p=1, tp_p=2, n_d=1, tp_d=4, local_tp=2)  # one local TP2 worker
    remote, local = capacity.prefill_capacities(a, CAPS, 2.0)
    assert (remote, local) == pytest.approx((1.0, 0.9))


def test_a_starved_allocation_is_pruned():
    # At 2 req/s a single TP2 decode worker (1 req/s) is starved (load 2); TP4 (2.5 req/s) is not.
    starved = Allocation(n_e=1, n_p=3, tp_p=2, n_d=1, tp_d=2)
    healthy = Allocation(n_e=1, n_p=2, tp_p=2, n_d=1, tp_d=4)  # prefill load 1.0, decode 0.8
    pr = capacity.prune([starved, healthy], CAPS, 2.0, drop_dominated=False)
    assert {c.alloc for c in pr.within_capacity} == {healthy}
    assert not pr.capacity_fallback
    assert [c.alloc for c in pr.kept] == [healthy]


def test_over_capacity_everywhere_keeps_the_least_loaded():
    a = Allocation(1, 1, 2, 1, 2)  # max load 4 (prefill, decode)
    b = Allocation(1, 2, 2, 1, 4)  # prefill 2, decode 1.6 -> max 2
    c = Allocation(1, 1, 4, 1, 4)  # prefill 4 / 1.5 = 2.67
    pr = capacity.prune([a, b, c], CAPS, 4.0, drop_dominated=False)
    assert pr.capacity_fallback
    assert {x.alloc for x in pr.within_capacity} == {b}  # 2.67 > 1.2 x 2


def test_score_factor_and_top_k():
    caps = Capacities(encode=1.0, prefill={1: 1.0}, decode={1: 1.0})
    # loads at rate 0.5: encode 0.5/n_e, prefill 0.5/n_p, decode 0.5/n_d
    allocs = [Allocation(1, 1, 1, 1, 1),  # 0.5 / 0.5 / 0.5 -> score 1
              Allocation(1, 1, 1, 2, 1),  # 0.5 / 0.5 / 0.25 -> 2
              Allocation(2, 2, 1, 2, 1),  # all 0.25 -> 1
              Allocation(2, 2, 1, 1, 1),  # 0.25 / 0.25 / 0.5 -> 2
              Allocation(1, 2, 1, 2, 1)]  # 0.5 / 0.25 / 0.25 -> 2
    pr = capacity.prune(allocs, caps, 0.5, drop_dominated=False)
    assert [c.score for c in pr.feasible] == pytest.approx([1, 2, 1, 2, 2])
    # scores within 1.2 x 1: the two balanced ones; lower max load first; then filled to K = 3
    assert [c.alloc for c in pr.within_factor] == [allocs[2], allocs[0]]
    assert [c.alloc for c in pr.kept] == [allocs[2], allocs[0], allocs[4]] and pr.filled == 1
    loose = capacity.prune(allocs, caps, 0.5, drop_dominated=False, factor=2.0, top_k=3)
    assert len(loose.within_factor) == 5 and len(loose.kept) == 3
    # bottleneck rule: max loads within 1.2x of the best-scored allocation's (0.25): only it
    bottleneck = capacity.prune(allocs, caps, 0.5, drop_dominated=False, rule="bottleneck")
    assert [c.alloc for c in bottleneck.within_factor] == [allocs[2]]
    assert len(bottleneck.kept) == 3 and bottleneck.filled == 2
    assert len(capacity.prune(allocs, caps, 0.5, drop_dominated=False, rule="bottleneck", factor=2.0).kept) == 3


def test_dominated_allocations_are_dropped():
    small = Allocation(1, 1, 2, 1, 2)
    big = Allocation(2, 1, 2, 1, 4)  # every stage at least as strong
    pr = capacity.prune([small, big], CAPS, 0.5)
    assert [c.alloc for c in pr.undominated] == [big]


def test_seeds_by_hand():
    assert capacity.seed_batch_bound(5.0, 2) == 3
    assert capacity.seed_batch_bound(4.0, 2) == 2
    assert capacity.seed_batch_bound(0.5, 4) == 1
    assert capacity.seed_offload_window(3.0, 1.0) == pytest.approx((0.75, 0.55, 0.95))
    assert capacity.seed_offload_window(9.0, 1.0) == pytest.approx((0.9, 0.7, 1.0))  # clipped
    assert capacity.seed_offload_window(1.0, 9.0) == pytest.approx((0.1, 0.0, 0.3))
    assert capacity.seed_offload_window(2.0, 0.0) == (1.0, 1.0, 1.0)  # no local prefill: s = 1
    cand = capacity.score_allocation(Allocation(2, 1, 2, 1, 4, local_tp=2), CAPS, 2.0)
    assert cand.b_max == 1 and cand.s_star == pytest.approx(1.0 / 1.9)


def test_encode_capacity_follows_the_curve_at_the_batch_bound():
    # an encoder whose calls cost mostly host time: capacity grows ~ B per call until the GPU shows
    caps = Capacities(encode=7.0, prefill={2: 1.0}, decode={4: 2.5}, encode_batch=8,
                      encode_curve={1: 1.0, 2: 2.0, 4: 3.5, 8: 7.0, 16: 7.0},
                      encode_gpu_share={1: 0.05, 2: 0.1, 4: 0.2, 8: 0.4, 16: 0.4})
    assert caps.encode_at(1) == 1.0 and caps.encode_at(2) == 2.0
    assert caps.encode_at(3) == pytest.approx(2.75)  # linear between the profiled 2 and 4
    assert caps.encode_at(100) == 7.0  # capped at the saturating bound
    assert caps.gpu_share_at(3) == pytest.approx(0.15)
    assert Capacities(encode=5.0, prefill={}, decode={}).encode_at(3) == 5.0  # no curve: the saturated C_E
    assert Capacities(encode=5.0, prefill={}, decode={}).gpu_share_at(3) == 1.0
    a = Allocation(n_e=2, n_p=1, tp_p=2, n_d=1, tp_d=4, local_tp=2)
    # 5 req/s over 2 encoders: B_max = 3, so the pool serves 2 x 2.75, not 2 x 7
    assert capacity.stage_capacities(a, caps, 5.0)["encode"] == pytest.approx(5.5)
    rho = 5.0 / 5.5
    # local prefill loses the GPU only while an encoder pass runs (15% of a busy encoder's time) ...
    assert capacity.local_alpha(5.0, 5.5, gpu_share=0.15) == pytest.approx(1 - rho * 0.15)
    assert capacity.prefill_capacities(a, caps, 5.0)[1] == pytest.approx(1 - rho * 0.15)
    # ... or at least the smallest SM level a call holds; time slicing: the passes only
    assert capacity.local_alpha(5.0, 5.5, LocalSettings("dynamic", min_sm_share=0.2), gpu_share=0.15) == \
        pytest.approx(1 - rho * 0.2)
    assert capacity.local_alpha(5.0, 5.5, LocalSettings("none"), gpu_share=0.15) == pytest.approx(1 - rho * 0.15)


def test_stage1_cost_counts_deployments_and_parallel_stages():
    run = profiling.ProfileRun
    runs = [run("encode", 1, "x", 10, 1.0, 30.0, 0.0), run("encode", 2, "x", 10, 2.0, 20.0, 0.0, starts_at_s=30.0),
            run("prefill", 2, "x", 10, 1.0, 50.0, 0.0), run("prefill", 4, "x", 10, 1.0, 40.0, 0.0),
            run("decode", 4, "x", 10, 1.0, 60.0, 0.0, starts_at_s=1.0),
            run("decode", 4, "x", 10, 1.0, 30.0, 0.0, starts_at_s=1.0)]
    assert profiling.stage1_cost(runs) == 61.0  # every worker in parallel: the last run ends at 61 s
    # one deployment: every profiling worker starts at once on its own GPUs
    assert profiling.stage1_cost(runs, deploy_s=100.0) == 161.0


def test_enumerate_allocations():
    assert capacity.enumerate_allocations(5, [2], [2]) == [Allocation(1, 1, 2, 1, 2)]
    got = capacity.enumerate_allocations(6, [2], [2], local_tps=[2])
    assert got == [Allocation(1, 1, 2, 1, 2), Allocation(2, 1, 2, 1, 2), Allocation(2, 1, 2, 1, 2, local_tp=2)]
    assert all(a.gpus <= 8 for a in capacity.enumerate_allocations(8, [2, 4], [2, 4], [2, 4]))


def test_ranking_and_stopping_rules():
    rows = [{"status": "ok", "throughput_rps": t, "ttft_mean_s": f, "tpot_mean_s": 0.03} for t, f in
            [(3.0, 5.0), (3.02, 2.0), (2.0, 0.5)]]
    assert trials.best_index(rows) == 1  # within 1% of the best throughput: lower TTFT wins
    q = 0.04
    assert trials.objective_value(3.02, 2.0, 0.03, q) > trials.objective_value(3.02, 3.0, 0.03, q)
    assert trials.objective_value(3.10, 9.0, 0.03, q) > trials.objective_value(3.02, 0.1, 0.01, q)
    flat = [{"status": "ok", "throughput_rps": 2.0, "ttft_mean_s": 1.0 + i, "tpot_mean_s": 0.03} for i in range(10)]
    assert "spread" in trials.stop_reason(flat, min_trials=3)
    assert trials.stop_reason(flat[:2], min_trials=0) is None
    rising = [{"status": "ok", "throughput_rps": 1.0 + i, "ttft_mean_s": 1.0, "tpot_mean_s": 0.03} for i in range(4)]
    stale = rising + [{"status": "ok", "throughput_rps": 0.5, "ttft_mean_s": 1.0, "tpot_mean_s": 0.03}] * 5
    assert trials.stop_reason(rising, min_trials=3) is None
    assert "without improvement" in trials.stop_reason(stale, min_trials=3)


# ------------------------------------------------------------------ search (simulated)
def _history(result):
    return [{k: v for k, v in row.items() if k != "wall_s"} for row in result.history]


def test_tiny_search_is_reproducible(scenario):
    a = runner.search(problem(scenario), method="has", budget=5, seed=7)
    b = runner.search(problem(scenario), method="has", budget=5, seed=7)
    assert len(a.history) == 5
    assert _history(a) == _history(b)
    assert a.summary["capacities"] == b.summary["capacities"]
    caps = a.summary["capacities"]
    assert caps["encode_rps"] > 0 and set(caps["prefill_rps"]) == {"2", "4"}  # TP1 does not fit 48 GB
    kept = {c["alloc"] for c in a.summary["pruning"]["kept_allocations"]}
    assert {r["alloc"] for r in a.history} <= kept
    for row in a.history:  # seeds and TPE stay inside each allocation's window
        cand = next(c for c in a.summary["pruning"]["kept_allocations"] if c["alloc"] == row["alloc"])
        assert 1 <= row["batch_bound"] <= cand["b_max"]
        lo, hi = cand["s_window"]
        assert lo - 1e-4 <= row["offload_s"] <= hi + 1e-4
    costs = [r["cum_sim_cost_s"] for r in a.history]
    assert costs == sorted(costs) and costs[0] > a.summary["profiling"]["sim_cost_s"] > 0


def test_baselines_run_the_same_trial_function(scenario):
    pb = problem(scenario)
    r = runner.search(pb, method="random", budget=4, seed=1)
    c = runner.search(pb, method="coordinate", budget=4)
    assert len(r.history) == 4 and len(c.history) == 4
    assert "capacities" not in r.summary
    assert c.history[0]["alloc"] == "E2-P1x2-D1x4-L1x2"  # starts at the scenario's own configuration
    # B = 8 clipped to the full space's bound ceil(rate / min n_E) = 4
    assert c.history[0]["batch_bound"] == 4 and c.history[0]["offload_s"] == 0.55
    assert _history(runner.search(pb, method="random", budget=4, seed=1)) == _history(r)
    # an uninformed start: the middle of the allocation order, B = 1, s = 1
    center = runner.search(pb, method="coordinate", budget=2, coordinate_start="center")
    assert (center.history[0]["batch_bound"], center.history[0]["offload_s"]) == (1, 1.0)
    with pytest.raises(UserError, match="--start"):
        runner.search(pb, method="coordinate", budget=1, coordinate_start="nowhere")


def test_each_trial_pays_a_deployment(scenario):
    plain = runner.search(problem(scenario, deploy_s=0.0), method="random", budget=4, seed=1)
    paid = runner.search(problem(scenario, deploy_s=100.0), method="random", budget=4, seed=1)
    for a, b in zip(plain.history, paid.history):
        assert b["cum_sim_cost_s"] - a["cum_sim_cost_s"] == pytest.approx(
            100.0 * sum(not r["cached"] for r in paid.history[: b["trial"] + 1]))
    with pytest.raises(UserError, match="--deploy-cost"):
        problem(scenario, deploy_s=-1.0)


def test_parallel_trials_are_deterministic(scenario):
    a = runner.search(problem(scenario), method="has", budget=4, seed=2, jobs=2)
    b = runner.search(problem(scenario), method="has", budget=4, seed=2, jobs=2)
    assert _history(a) == _history(b)


def test_dask_executor_gives_the_local_history(scenario):
    pytest.importorskip("dask.distributed")
    local = runner.search(problem(scenario), method="random", budget=3, seed=3, jobs=2)
    dask = runner.search(problem(scenario), method="random", budget=3, seed=3, jobs=2, executor="dask")
    strip = lambda rows: [{k: v for k, v in r.items() if k not in ("wall_s", "cum_sim_cost_s")}  # noqa: E731
                          for r in rows]
    assert strip(dask.history) == strip(local.history)
    with pytest.raises(UserError, match="executor"):
        runner.search(problem(scenario), method="random", budget=1, executor="ray")


def test_best_yaml_loads_and_runs(scenario, tmp_path):
    from lmmsim.results import run_scenario
    from lmmsim.scenario import load_scenario

    result = runner.search(problem(scenario), method="has", budget=3, seed=0)
    paths = outputs.write_outputs(result, tmp_path / "out")
    best = yaml.safe_load(paths["best_yaml"].read_text())
    assert set(best) == set(EXAMPLE)  # the original keys, deployment replaced
    assert best["workload"] == EXAMPLE["workload"]
    scn, base = load_scenario(paths["best_yaml"], ["workload.num_requests=20"])
    b = result.best
    assert scn.deployment.encoder.workers == b["n_e"] and scn.deployment.decode.tp == b["tp_d"]
    assert scn.deployment.encoder.dispatch.max_batch == b["batch_bound"]
    if b["local_tp"]:
        assert scn.deployment.local_prefill.offload.remote_fraction == pytest.approx(b["offload_s"])
    assert run_scenario(scn, base).summary["num_finished"] == 20
    history = pd.read_csv(paths["trials_csv"])
    assert list(history.columns) == trials.HISTORY_COLUMNS and len(history) == 3
    assert pd.read_parquet(paths["trials_parquet"]).shape == history.shape
    summary = json.loads(paths["summary_json"].read_text())
    assert summary["best"]["trial"] == b["trial"]
    assert summary["pruning"]["feasible"] >= summary["pruning"]["kept"] >= 1


def test_preset_local_prefill_can_be_switched_off(tmp_path):
    # system easerve brings local_prefill; an allocation without one must say null, not inherit it
    raw = {k: v for k, v in EXAMPLE.items() if k != "deployment"}
    raw.update(system="easerve", deployment={"max_model_len": 8192})
    path = tmp_path / "preset.yaml"
    path.write_text(yaml.safe_dump(raw))
    pb = problem(path)
    assert pb.has_local
    dep = pb.deployment(mapping.Config(Allocation(1, 1, 2, 1, 4), 2, 1.0))
    assert dep["local_prefill"] is None
    assert pb.validated(pb.scenario_raw(mapping.Config(Allocation(1, 1, 2, 1, 4), 2, 1.0))).deployment.local_prefill is None


# ------------------------------------------------------------------ CLI
def test_cli_search_writes_outputs(capsys, scenario, tmp_path):
    out = tmp_path / "search"
    code, stdout, err = run_cli(capsys, "search", scenario, "-o", out, "--budget", "3", "--trial-requests", "30",
                                "--rate", "3")
    assert code == 0, err
    assert "capacities" in stdout and "best" in stdout and "kept" in stdout
    assert {p.name for p in out.iterdir()} == {"best.yaml", "trials.csv", "trials.parquet", "summary.json", MANIFEST}
    assert json.loads((out / "summary.json").read_text())["rate_rps"] == 3.0
    # never overwrite without --force
    assert_user_error(capsys, ["search", scenario, "-o", out, "--budget", "2"], "--force")
    code, _, err = run_cli(capsys, "search", scenario, "-o", out, "--budget", "2", "--trial-requests", "30",
                           "--method", "random", "--force", "-q")
    assert code == 0, err
    assert len(pd.read_csv(out / "trials.csv")) == 2


def test_cli_search_without_optuna(capsys, scenario, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "optuna", None)  # import optuna -> ImportError
    assert_user_error(capsys, ["search", scenario, "-o", tmp_path / "x"], 'pip install "lmmsim[search]"')
    assert not (tmp_path / "x").exists()


def test_cli_search_user_errors(capsys, scenario, tmp_path):
    quickstart = Path(__file__).resolve().parent.parent / "scenarios" / "quickstart.yaml"  # monolithic
    assert_user_error(capsys, ["search", quickstart, "-o", tmp_path / "a"], "deployment.kind", "e_p_d")
    assert_user_error(capsys, ["search", scenario, "-o", tmp_path / "b", "--budget", "0"], "--budget")
    assert_user_error(capsys, ["search", scenario, "-o", tmp_path / "c", "--rate", "-1"], "--rate")
    assert_user_error(capsys, ["search", scenario, "-o", tmp_path / "e", "--deploy-cost", "-5"], "--deploy-cost")
    assert_user_error(capsys, ["search", tmp_path / "missing.yaml", "-o", tmp_path / "d"], "not found")

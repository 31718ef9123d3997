"""HAS as of issue 17: co-location on/off in the allocation space, top-K filled, Stage 1 cheaper
than a trial, and tuning per platform (easerve.txt §3.1, §4.2 Table 5, §4.3)."""

from __future__ import annotations

import pytest
import yaml
from test_has import EXAMPLE

from lmmsim.search import capacity, mapping, profiling, runner
from lmmsim.search.capacity import Allocation, Capacities


# ------------------------------------------------------------------ co-location on and off
def test_no_colocation_is_offered_where_a_local_tp_divides_the_encoders():
    got = capacity.enumerate_allocations(8, [2], [2, 4], local_tps=[1, 2])
    e2 = [a for a in got if (a.n_e, a.n_p, a.tp_p, a.n_d, a.tp_d) == (2, 1, 2, 1, 4)]
    assert {a.local_tp for a in e2} == {None, 1, 2}
    # without local prefill in the scenario, only co-location off
    assert all(a.local_tp is None for a in capacity.enumerate_allocations(8, [2], [2, 4]))


def test_colocation_on_does_not_prune_colocation_off():
    caps = Capacities(encode=10.0, prefill={2: 1.0}, decode={4: 3.0})
    off, on = Allocation(2, 1, 2, 1, 4), Allocation(2, 1, 2, 1, 4, local_tp=2)
    pr = capacity.prune([off, on], caps, 1.5)
    # "on" has more prefill capacity in the analytic model, yet both stay: Stage 2 measures co-location
    assert {c.alloc for c in pr.undominated} == {off, on}
    # within one co-location choice dominance still prunes
    smaller = Allocation(1, 1, 2, 1, 4)
    assert smaller not in {c.alloc for c in capacity.prune([off, smaller], caps, 1.5).undominated}


# ------------------------------------------------------------------ top-K filled
def test_top_k_is_filled_when_k_allocations_survive_over_capacity():
    caps = Capacities(encode=100.0, prefill={2: 1.0}, decode={2: 1.0, 4: 2.0})
    allocs = [Allocation(1, 3, 2, 1, 2), Allocation(1, 2, 2, 1, 4), Allocation(1, 1, 2, 1, 4),
              Allocation(1, 1, 2, 2, 2)]
    pr = capacity.prune(allocs, caps, 5.0, drop_dominated=False)  # every allocation over capacity
    assert pr.capacity_fallback and len(pr.within_factor) < 3
    assert len(pr.kept) == 3 and pr.filled == 3 - len(pr.within_factor)
    # the fill takes the least loaded first
    rest = [c for c in pr.kept[len(pr.within_factor):]]
    assert [c.max_load for c in rest] == sorted(c.max_load for c in rest)


def test_a_starved_allocation_is_not_filled_back_when_others_fit():
    caps = Capacities(encode=10.0, prefill={2: 1.0, 4: 1.5}, decode={2: 1.0, 4: 2.5})
    starved, healthy = Allocation(1, 3, 2, 1, 2), Allocation(1, 2, 2, 1, 4)
    pr = capacity.prune([starved, healthy], caps, 2.0, drop_dominated=False)
    assert [c.alloc for c in pr.kept] == [healthy] and pr.filled == 0


# ------------------------------------------------------------------ Stage 1 cost
@pytest.fixture
def scenario(tmp_path):
    path = tmp_path / "easerve.yaml"
    path.write_text(yaml.safe_dump(EXAMPLE, sort_keys=False))
    return path


def test_stage1_costs_less_than_one_trial(scenario):
    raw, scn, base = mapping.read_raw(scenario)
    problem = mapping.Problem(raw, scn, base, rate=4, trial_requests=200)
    result = runner.search(problem, method="has", budget=3, seed=0)
    stage1 = result.summary["profiling"]["sim_cost_s"]
    trial = result.history[0]["sim_duration_s"] + problem.deploy_s
    assert 0 < stage1 < trial
    # one deployment: every profiling worker starts at once on its own GPUs
    runs = [profiling.ProfileRun(**r) for r in result.summary["profiling"]["runs"]]
    assert stage1 == pytest.approx(problem.deploy_s + max(r.starts_at_s + r.sim_duration_s for r in runs))
    # the decode streams run at once, after the step probe
    decode = [r for r in runs if r.stage == "decode"]
    assert len({(r.setting, r.starts_at_s) for r in decode}) == len({r.setting for r in decode})


# ------------------------------------------------------------------ per platform
def test_each_platform_searches_its_own_space(scenario):
    """Per-platform tuning (Table 5): an A100's 80 GB fits a TP1 prefill worker of the 34B
    model, a 48 GB RTX 6000 Ada does not, so their allocation spaces differ."""
    spaces = {}
    for gpu, link in (("rtx-6000-ada", "pcie"), ("a100-sxm-80gb", "nvlink")):
        raw, scn, base = mapping.read_raw(scenario, [f"hardware.gpu={gpu}", f"hardware.interconnect={link}"])
        spaces[gpu] = profiling.usable_tps(mapping.Problem(raw, scn, base, rate=5))
    assert 1 not in spaces["rtx-6000-ada"]["prefill"] and 1 in spaces["a100-sxm-80gb"]["prefill"]
    table5 = yaml.safe_load(open(profiling.__file__.replace("lmmsim/search/profiling.py",
                                                            "scenarios/reproduce/easerve/table5.yaml")))
    params = table5["axes"][0]["params"]
    has = [(g, d) for g, n, d in zip(params["hardware.gpu"], params["name"], params["deployment"]) if n == "easerve-has"]
    assert {g for g, _ in has} == {"rtx-6000-ada", "a100-sxm-80gb"} and has[0][1] != has[1][1]


def test_profiling_keeps_its_rows_when_the_scenario_streams_them(tmp_path):
    """Stage 1 reads its stress runs' request rows: a scenario with ``sim.keep_requests: false``
    (requests streamed to disk) still profiles, with the same capacities."""
    def search(keep: bool):
        raw = {**EXAMPLE, "sim": {**(EXAMPLE.get("sim") or {}), "keep_requests": keep}}
        path = tmp_path / f"keep-{keep}.yaml"
        path.write_text(yaml.safe_dump(raw, sort_keys=False))
        raw, scn, base = mapping.read_raw(path)
        problem = mapping.Problem(raw, scn, base, rate=4, trial_requests=200)
        runs = runner.search(problem, method="has", budget=2, seed=0).summary["profiling"]["runs"]
        return [(r["stage"], r["setting"], r["capacity_rps"]) for r in runs]

    profiling._CAPACITY_CACHE.clear()  # each search measures its own runs
    streamed = search(False)
    profiling._CAPACITY_CACHE.clear()
    assert streamed and streamed == search(True)

"""EAServe's local prefill workers on the encoder GPUs: routing, SM partitioning, memory, validation."""

from __future__ import annotations

import pytest

from lmmsim.engine.gpu_share import SharedGpu
from lmmsim.results import run_scenario
from lmmsim.scenario import load_scenario

from conftest import assert_user_error

SCENARIO = """
name: easerve-small
seed: 0
system: easerve
model: llava-v1.6-34b
hardware: {gpu: rtx-6000-ada, count: 8, interconnect: pcie}
deployment: {max_model_len: 8192}
workload:
  num_requests: 120
  arrival: {kind: poisson, rate: 2.5}
  mix:
  - {name: image, weight: 1, text_tokens: {kind: fixed, value: 100}, images: {count: 1, width: 1024, height: 1024}}
  output_tokens: {kind: fixed, value: 32}
"""


@pytest.fixture
def scenario_file(tmp_path):
    path = tmp_path / "easerve.yaml"
    path.write_text(SCENARIO)
    return path


@pytest.fixture
def share_calls(monkeypatch):
    """Every SharedGpu.set_shares call as (gpu id, time, shares), in order."""
    calls = []
    orig = SharedGpu.set_shares

    def record(self, shares):
        calls.append((self.gpu_id, self.env.now, dict(shares)))
        return orig(self, shares)

    monkeypatch.setattr(SharedGpu, "set_shares", record)
    return calls


def run(path, *overrides):
    scn, base = load_scenario(path, list(overrides))
    return run_scenario(scn, base)


def local_engines(out):
    front = out.built.simulation.frontend
    return front, front.prefill[front.num_remote:]


@pytest.mark.parametrize("s", [0.55, 0.25, 1.0, 0.0])
def test_deficit_router_splits_prefills_between_remote_and_local(scenario_file, s):
    out = run(scenario_file, f"deployment.local_prefill.offload.remote_fraction={s}")
    df = out.requests
    assert (df["status"] == "finished").all()
    front, local = local_engines(out)
    assert front.num_remote == 1 and len(local) == 1  # 2 encoder GPUs -> one TP2 local worker
    n = len(df)
    local_admits = sum(e.scheduler._admit_counter for e in local)
    remote_admits = sum(e.scheduler._admit_counter for e in front.prefill[:front.num_remote])
    assert out.summary["num_preemptions"] == 0  # so admissions count requests
    assert remote_admits + local_admits == n
    assert abs(remote_admits - n * s) <= 1  # the deficit counter's bound
    for e in front.prefill:  # every prefill worker handed its KV on and freed it
        assert e.scheduler.pool.num_free == e.scheduler.pool.num_blocks


def test_local_prefill_relieves_a_starved_remote_prefill_worker(scenario_file):
    with_local = run(scenario_file)
    remote_only = run(scenario_file, "system=easerve-s1")
    assert with_local.summary["ttft_s"]["mean"] < 0.5 * remote_only.summary["ttft_s"]["mean"]


def test_s1_with_idle_local_workers_equals_no_local_prefill(scenario_file):
    """All prefills remote and time-slicing: an idle local worker changes nothing."""
    a = run(scenario_file, "deployment.local_prefill.offload.remote_fraction=1",
            "deployment.local_prefill.sm_partitioning=none")
    b = run(scenario_file, "system=easerve-s1")
    assert a.requests["ttft_s"].tolist() == b.requests["ttft_s"].tolist()
    assert a.requests["finished_at"].tolist() == b.requests["finished_at"].tolist()


def test_sm_partitioning_modes(scenario_file, share_calls):
    results = {}
    for mode in ("none", "static", "dynamic"):
        share_calls.clear()
        # a 50 ms valve keeps encode batches small, so the SM split, not the wait for a batch, decides TTFT
        out = run(scenario_file, f"deployment.local_prefill.sm_partitioning={mode}",
                  "deployment.encoder.dispatch.max_age_s=0.05")
        assert (out.requests["status"] == "finished").all()
        results[mode] = out.summary
        arbs = out.built.simulation.frontend.arbiters
        assert sorted(arbs) == [0, 1]  # the two encoder GPUs are shared, the others are not
        if mode == "none":
            assert all(a.mode == "time_slice" for a in arbs.values()) and not share_calls
        elif mode == "static":
            assert all(a.mode == "sm_split" for a in arbs.values()) and not share_calls
            assert all(a.shares == {f"encoder{i}": 0.5, "local_prefill0": 0.5} for i, a in arbs.items())
        else:
            levels = {0.2, 0.4, 0.6, 0.8, 1.0, 0.95, 0.0}  # the SM table's levels, the floor, idle
            enc_shares = [v for _, _, c in share_calls for k, v in c.items() if k.startswith("encoder")]
            assert enc_shares and set(enc_shares) <= levels
            assert 0.0 in enc_shares  # between batches local prefill gets every SM
            for _, _, c in share_calls:
                assert sum(c.values()) == pytest.approx(1.0)
    # the paper's ordering on mean TTFT: dynamic no worse than either fixed scheme here
    assert results["dynamic"]["ttft_s"]["mean"] <= results["static"]["ttft_s"]["mean"]
    assert results["dynamic"]["ttft_s"]["mean"] <= results["none"]["ttft_s"]["mean"]


def test_local_worker_memory_leaves_room_for_the_encoder(scenario_file):
    out = run(scenario_file)
    mem = out.built.memory
    remote, local = mem["prefill"], mem["local_prefill"]
    assert local.kv_bytes < remote.kv_bytes  # encoder weights and embedding buffers live on its GPUs
    assert out.built.placement["local_prefill"] == [(0, 1)] and out.built.placement["encoder"] == [(0,), (1,)]


def test_local_prefill_errors(scenario_file, capsys, tmp_path):
    assert_user_error(capsys, ["run", scenario_file, "-o", tmp_path / "a", "--set",
                               "deployment.encoder.workers=3", "--set", "deployment.local_prefill.tp=2"],
                      "deployment", "local_prefill.tp")
    assert_user_error(capsys, ["run", scenario_file, "-o", tmp_path / "b", "--set",
                               "deployment.gpu_sharing={mode: time_slice}"], "gpu_sharing")


def test_an_encoder_call_holds_its_sm_share_through_its_host_time(scenario_file, share_calls):
    # dynamic: the split is installed when the call starts, its host time (call_overhead_s plus the
    # call's copies and kernel issue, milliseconds) before its GPU pass, and held throughout
    scn, base = load_scenario(scenario_file, ["deployment.encoder.call_overhead_s=0.5"])
    out = run_scenario(scn, base, trace=True)
    assert (out.requests["status"] == "finished").all()
    passes = [r for r in out.built.step_log if r.worker == "encoder0"]
    installs = [(t, s["encoder0"]) for g, t, s in share_calls if g == 0 and "encoder0" in s]
    assert passes
    for r in passes:
        t, share = [i for i in installs if i[0] <= r.start_at - 0.5 + 1e-9][-1]  # the call's own install
        assert share > 0 and 0.5 - 1e-9 <= r.start_at - t < 0.52


def test_local_prefill_keeps_a_sliver_when_encode_takes_every_sm(scenario_file, share_calls):
    # one SM level (1.0): every call would take the whole GPU, yet local prefill may start a step
    # during a call (its host time included); it runs on the floor share instead of failing
    out = run(scenario_file, "deployment.encoder.call_overhead_s=0.3", "deployment.local_prefill.sm_levels=[1.0]")
    assert (out.requests["status"] == "finished").all()
    assert {c["encoder0"] for _, _, c in share_calls if "encoder0" in c} == {0.0, 0.95}

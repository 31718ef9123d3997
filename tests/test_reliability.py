"""Reliability: output folders under --force, no silent deadlock, no traceback on bad input.

Each deadlock case here is a minimal scenario that used to end with exit 0 and
requests left ``unfinished`` although no horizon was set.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from lmmsim.cli import main
from lmmsim.engine.simulation import Simulation
from lmmsim.errors import StuckRunError
from lmmsim.outputs import MANIFEST
from lmmsim.results import run_scenario
from lmmsim.scenario import validate_scenario

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"


def small_quickstart(tmp_path: Path, **changes) -> Path:
    raw = yaml.safe_load(QUICKSTART.read_text())
    raw["workload"]["num_requests"] = 20
    raw.update(changes)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err  # one line, no traceback
    return err[0]


# ------------------------------------------------------------------ --force
def test_force_into_the_working_folder_keeps_the_users_files(tmp_path, monkeypatch, capsys):
    scn = small_quickstart(tmp_path)
    (tmp_path / "keep.txt").write_text("mine")
    monkeypatch.chdir(tmp_path)
    assert main(["run", "s.yaml", "-o", ".", "-q"]) == 2  # not empty, no --force
    assert "pass --force" in error_line(capsys)
    assert main(["run", "s.yaml", "-o", ".", "-q", "--force"]) == 0
    assert scn.read_text() and (tmp_path / "keep.txt").read_text() == "mine"
    assert (tmp_path / "summary.json").exists() and (tmp_path / MANIFEST).exists()


def test_force_replaces_its_own_results_and_drops_its_stale_trace(tmp_path):
    scn = small_quickstart(tmp_path)
    out = tmp_path / "out"
    assert main(["run", str(scn), "-o", str(out), "-q", "--trace"]) == 0
    (out / "keep.txt").write_text("mine")
    first = (out / "summary.json").read_text()
    assert main(["run", str(scn), "-o", str(out), "-q", "--force", "--set", "workload.num_requests=10"]) == 0
    assert json.loads((out / "summary.json").read_text())["num_requests"] == 10 != json.loads(first)["num_requests"]
    assert not (out / "trace.json").exists()  # lmmsim's own, from the earlier run: it would mislead
    assert (out / "keep.txt").read_text() == "mine"
    assert not [p for p in out.iterdir() if ".tmp-" in p.name]  # no temporary file left


def test_force_never_replaces_a_users_file_of_the_same_name(tmp_path, capsys):
    scn = small_quickstart(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.json").write_text("my notes")
    assert main(["run", str(scn), "-o", str(out), "-q", "--force"]) == 2
    line = error_line(capsys)
    assert "summary.json was not written by lmmsim" in line and line.startswith("lmmsim: error: -o:")
    assert (out / "summary.json").read_text() == "my notes"
    assert sorted(p.name for p in out.iterdir()) == ["summary.json"]  # checked before simulating


def test_search_force_keeps_a_foreign_file(tmp_path, capsys):
    pytest.importorskip("optuna")
    out = tmp_path / "search"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    (out / "best.yaml").write_text("user's")
    scn = ROOT / "scenarios" / "reproduce" / "easerve" / "image-llava34b.yaml"
    args = ["search", str(scn), "-o", str(out), "--budget", "2", "--method", "random", "--trial-requests", "20",
            "-q", "--force"]
    assert main(args) == 2
    assert "best.yaml was not written by lmmsim" in error_line(capsys)
    (out / "best.yaml").unlink()
    assert main(args) == 0
    assert (out / "keep.txt").read_text() == "mine" and (out / "trials.csv").exists()


@pytest.mark.parametrize("name", ["../escape", "a/b", "", ".", ".."])
def test_scenario_name_is_one_folder_under_results(tmp_path, capsys, name):
    scn = small_quickstart(tmp_path, name=name)
    assert main(["validate", str(scn)]) == 2
    assert error_line(capsys).startswith("lmmsim: error: name: must be a single folder name")


# ---------------------------------------------------------------- deadlocks
def _case(tmp_path, text: str):
    return validate_scenario(yaml.safe_load(text)), tmp_path


AFTER_ENCODE_TWO_ITEMS = """
name: after-encode-partial-hold
system: gllm-epd
model: qwen2.5-vl-7b
hardware: {gpu: h100-sxm-80gb, count: 2}
deployment: {kind: e_pd, admission: after_encode, embedding_buffer_gib: BUFFER,
             encoder: {dispatch: {kind: fixed, max_items: 1}}}
workload:
  num_requests: 1
  arrival: {kind: poisson, rate: 1}
  mix: [{name: img, weight: 1, text_tokens: {kind: fixed, value: 50}, images: {count: 2, width: 726, height: 2940}}]
  output_tokens: {kind: fixed, value: 10}
"""


def test_after_encode_request_larger_than_the_buffer_is_refused_with_a_reason(tmp_path, capsys):
    # Two items of ~0.018 GiB each, a 0.01 GiB buffer: the first item used to hold the
    # buffer while the second could never enter (exit 0, the request left unfinished).
    run = run_scenario(*_case(tmp_path, AFTER_ENCODE_TWO_ITEMS.replace("BUFFER", "0.01")))
    row = run.requests.iloc[0]
    assert row["status"] == "rejected"
    assert "exceed deployment.embedding_buffer_gib (0.01)" in row["reject_reason"]
    path = tmp_path / "s.yaml"
    path.write_text(AFTER_ENCODE_TWO_ITEMS.replace("BUFFER", "0.01"))
    assert main(["validate", str(path)]) == 0
    assert "will be refused at arrival (ids 0): its embeddings" in capsys.readouterr().out


def test_after_encode_request_that_fits_only_whole_completes(tmp_path):
    # 0.04 GiB holds both items (0.036) but not one item plus another request's: whole
    # reservations let it finish.
    run = run_scenario(*_case(tmp_path, AFTER_ENCODE_TWO_ITEMS.replace("BUFFER", "0.04")))
    assert run.requests["status"].tolist() == ["finished"]


# Three-image requests (0.026 GiB of embeddings each), items dispatched one batch each
# (RServe's Algorithm 1 at C = 1024 tokens) by two encoders, after_encode admission, a
# 0.03 GiB buffer: every request fits alone, but two half-delivered ones used to fill it
# with neither able to complete (11 of 71 stuck).
RSERVE_AFTER_ENCODE = """
name: rserve-after-encode
seed: 0
system: rserve
model: qwen2.5-vl-7b
hardware: {gpu: h100-sxm-80gb, count: 6, cost_model: roofline}
deployment: {admission: after_encode, embedding_buffer_gib: 0.03, encoder: {workers: 2}, llm: {pp: 4}}
workload:
  num_requests: 71
  arrival: {kind: poisson, rate: 10}
  mix:
    - {name: text, weight: 0.7, text_tokens: {kind: lognormal, mean: 300, sigma: 0.8}}
    - {name: image, weight: 0.2, text_tokens: {kind: fixed, value: 100}, images: {count: 3, width: 1024, height: 1024}}
    - {name: video, weight: 0.1, text_tokens: {kind: fixed, value: 100}, video: {frames: 32, width: 384, height: 384}}
  output_tokens: {kind: lognormal, mean: 256, sigma: 0.7, max: 2048}
"""

# Streaming admission, two encoders, a buffer of a few items: a later request's
# embeddings landed first and filled the buffer; the FCFS head waited for room that
# only requests behind it could free (60 of 60 stuck with the KV cache empty).
STREAMING_HOSTAGE = """
name: streaming-hostage
seed: 67
system: SYSTEM
model: qwen2.5-vl-7b
hardware: {gpu: h100-sxm-80gb, count: 3, cost_model: roofline}
deployment: {admission: streaming, embedding_buffer_gib: 0.05, gpu_memory_utilization: 0.215, max_model_len: 8192,
             encoder: {tp: 1, workers: 2}, llm: {tp: 1, pp: 1}}
workload:
  num_requests: 60
  arrival: {kind: poisson, rate: 4}
  mix:
    - {name: t, weight: 1, text_tokens: {kind: uniform, low: 100, high: 3000}}
    - {name: i, weight: 1, text_tokens: {kind: fixed, value: 10}, images: {count: 4, width: 1024, height: 1024}}
    - {name: v, weight: 0.5, text_tokens: {kind: fixed, value: 100}, video: {frames: 32, width: 384, height: 384}}
  output_tokens: {kind: uniform, low: 10, high: 400}
"""


@pytest.mark.parametrize("text", [
    RSERVE_AFTER_ENCODE,
    STREAMING_HOSTAGE.replace("SYSTEM", "modserve"),  # FCFS: 60 of 60 stuck before
    STREAMING_HOSTAGE.replace("SYSTEM", "modserve+rps"),  # RPS-Serve's priority order: 33 of 60 stuck before
    STREAMING_HOSTAGE.replace("SYSTEM", "rserve"),  # schedulable tokens skip the head: finished before too
    STREAMING_HOSTAGE.replace("SYSTEM", "dynamo").replace("seed: 67", "seed: 3").replace("count: 3", "count: 4")
    .replace("llm: {tp: 1, pp: 1}", "prefill: {tp: 1}, decode: {tp: 1}"),  # E + P + D: 47 of 60 stuck before
], ids=["rserve-after-encode", "fcfs-streaming", "rps-streaming", "rserve-streaming", "dynamo-streaming"])
def test_small_embedding_buffers_never_deadlock(tmp_path, text):
    scn, base = _case(tmp_path, text)
    run = run_scenario(scn, base)
    assert set(run.requests["status"]) <= {"finished", "rejected"}
    assert run.requests["status"].eq("finished").sum() > 0.9 * len(run.requests)
    peak = max(run.summary["deployment"]["peak_embedding_buffer_gib"])
    assert peak <= scn.deployment.embedding_buffer_gib * (1 + 1e-9)
    inboxes = run.built.simulation.frontend.inboxes
    assert all(box.buffer.used < 1e-6 and not box.buffer.waiting for box in inboxes)
    assert all(box.num_awaiting == 0 and not box.trackers for box in inboxes)  # router load back to zero


def test_streaming_hostage_needs_eviction(tmp_path):
    """Not vacuous: the FCFS streaming case does evict, and all of it is sent again."""
    scn, base = _case(tmp_path, STREAMING_HOSTAGE.replace("SYSTEM", "modserve"))
    run = run_scenario(scn, base)
    assert sum(box.num_evicted_items for box in run.built.simulation.frontend.inboxes) > 0
    assert run.requests["status"].eq("finished").all()


# ---------------------------------------------------------------- liveness
class _Blackhole:
    """A front end that accepts requests and never runs them."""

    workers: list = []
    llm_engines: list = []

    def arrive(self, seq) -> None:
        pass


def _req(rid: int, at: float):
    from lmmsim.workload.request import Request, build_segments

    return Request(rid, at, "text", "t", build_segments([10]), 4)


def test_a_run_whose_events_run_out_with_requests_inside_raises():
    sim = Simulation([_req(0, 0.5), _req(1, 1.0)], lambda env, fin, barrier: _Blackhole())
    with pytest.raises(StuckRunError, match=r"2 of 2 requests can never finish.*t = 1.000 s.*ids 0, 1"):
        sim.run()


def test_requests_after_the_horizon_are_not_arrived_not_unfinished():
    # A horizon with an arrival still to come: the clock stops there, request 0 is
    # unfinished (it arrived), request 1 never entered.
    sim = Simulation([_req(0, 0.5), _req(1, 5.0)], lambda env, fin, barrier: _Blackhole(), horizon_s=2.0)
    assert [s.status for s in sim.run().seqs] == ["unfinished", "not_arrived"]
    # Nothing left to come before the horizon and a request inside: stuck.
    sim = Simulation([_req(0, 0.5)], lambda env, fin, barrier: _Blackhole(), horizon_s=2.0)
    with pytest.raises(StuckRunError, match="1 of 1 requests"):
        sim.run()


def test_horizon_counts(tmp_path):
    raw = yaml.safe_load(QUICKSTART.read_text())
    raw["workload"]["num_requests"] = 200
    raw["sim"] = {"horizon_s": 10.0}
    run = run_scenario(validate_scenario(raw), ROOT)
    df, s = run.requests, run.summary
    assert (df.loc[df["status"] == "not_arrived", "arrived_at"] >= 10.0).all()
    assert (df.loc[df["status"] == "unfinished", "arrived_at"] < 10.0).all()
    assert s["num_not_arrived"] > 0 and s["num_unfinished"] > 0
    assert s["num_finished"] + s["num_rejected"] + s["num_unfinished"] + s["num_not_arrived"] == 200
    arrived = df[df["status"] != "not_arrived"]
    assert s["slo_attainment"] == pytest.approx(
        (arrived["status"].eq("finished") & (arrived["ttft_s"] <= arrived["modality"].map(
            raw["slo"]["ttft_s"])) & ~(arrived["tpot_s"] > raw["slo"]["tpot_s"])).mean())


def test_stuck_run_exits_3_with_one_line(tmp_path, monkeypatch, capsys):
    from lmmsim.engine import frontends

    monkeypatch.setattr(frontends.MonolithicFrontend, "arrive", lambda self, seq: None)
    scn = small_quickstart(tmp_path)
    assert main(["run", str(scn), "-o", str(tmp_path / "out"), "-q"]) == 3
    line = error_line(capsys)
    assert line.startswith("lmmsim: error: run stuck: 20 of 20 requests can never finish")
    assert not (tmp_path / "out").exists()  # no results for a run that did not end


# --------------------------------------------------------------- bad input
@pytest.mark.parametrize("override, key", [
    ("workload.num_requests=1000000000000", "workload.num_requests: 1,000,000,000,000 requests exceed the limit"),
    ("workload.duration_s=1.0e9", "workload: duration_s 1e+09 at 4.5 req/s is about 4,500,000,000 requests"),
    ("workload.arrival.rate=true", "workload.arrival.rate: expected a number"),
    ("workload.num_requests=true", "workload.num_requests: expected a number"),
    ("deployment.gpu_ids=[[0, 0]]", "deployment.gpu_ids.0: GPU 0 appears twice"),
    ("workload.duration_s=0.0001", "workload: generates no requests"),
])
def test_bad_values_are_one_line_exit_2(tmp_path, capsys, override, key):
    extra = ["--set", "workload.num_requests=null"] if "duration_s" in override else []
    extra += ["--set", "hardware.count=2", "--set", "deployment.tp=2"] if "gpu_ids" in override else []
    assert main(["validate", str(QUICKSTART), *extra, "--set", override]) == 2
    assert error_line(capsys).startswith(f"lmmsim: error: {key}")


def test_duplicate_yaml_keys_are_refused(tmp_path, capsys):
    text = QUICKSTART.read_text().replace("seed: 0\n", "seed: 0\nseed: 1\n")
    (tmp_path / "dup.yaml").write_text(text)
    assert main(["validate", str(tmp_path / "dup.yaml")]) == 2
    assert "dup.yaml:9: key 'seed' appears twice in one mapping" in error_line(capsys)


def test_rps_serve_with_every_request_too_long_is_one_line(capsys):
    args = ["--set", "system=rps-serve", "--set", "policy.queue.kind=rps", "--set", "deployment.max_model_len=8"]
    assert main(["validate", str(QUICKSTART), *args]) == 2
    line = error_line(capsys)
    assert "policy.queue: RPS-Serve's workload profiler has no run to fit" in line
    assert "exceed max_model_len 8" in line


def test_admission_profile_needs_a_request(capsys):
    assert main(["admission-profile", str(QUICKSTART), "--requests", "0"]) == 2
    assert error_line(capsys) == "lmmsim: error: --requests: must be at least 1 (got 0)"


def test_broken_pipe_is_quiet():
    # `lmmsim list systems -v | head -1`: the reader leaves early; no traceback, no noise.
    proc = subprocess.run(f"{sys.executable} -m lmmsim list systems -v | head -c 10", shell=True,
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.stderr == ""
    assert len(proc.stdout) == 10


def test_reject_reason_column_round_trips(tmp_path):
    scn = small_quickstart(tmp_path)
    out = tmp_path / "out"
    assert main(["run", str(scn), "-o", str(out), "-q", "--set", "deployment.max_model_len=2000"]) == 0
    df = pd.read_parquet(out / "requests.parquet")
    rejected = df[df["status"] == "rejected"]
    assert len(rejected) and rejected["reject_reason"].str.contains("exceed max_model_len 2000").all()
    assert df.loc[df["status"] != "rejected", "reject_reason"].isna().all()
    assert not math.isnan(json.loads((out / "summary.json").read_text())["num_rejected"])


DECODE_PREEMPTS = f"""
system: dynamo
model: qwen2.5-vl-7b
hardware: {{gpu: a100-sxm-80gb, count: 5, cost_model: roofline}}
deployment: {{max_model_len: 2048, embedding_buffer_gib: 0.03, activation_reserve_gib: 64.83698259353638}}
policy: {{batching: {{kind: chunked_prefill, max_running: 3}}}}
workload:
  num_requests: 28
  arrival: {{kind: trace, path: {ROOT / 'scenarios' / 'traces' / 'quickstart-100.jsonl'}, speedup: 1.0}}
"""


def test_decode_worker_readmits_within_max_running(tmp_path, monkeypatch):
    """A decode worker whose KV cache holds about one request preempts, and re-admits its
    own preempted requests: the places reserved for KV transfers under way count too."""
    from lmmsim.engine.scheduler import ContinuousBatchingScheduler

    running = []
    schedule = ContinuousBatchingScheduler.schedule

    def recording(self, now, slot=0):
        plan = schedule(self, now, slot)
        running.append(self.num_running)
        return plan

    monkeypatch.setattr(ContinuousBatchingScheduler, "schedule", recording)
    run = run_scenario(validate_scenario(yaml.safe_load(DECODE_PREEMPTS)), tmp_path)
    assert run.summary["num_preemptions"] > 0
    assert set(run.requests["status"]) <= {"finished", "rejected"}
    assert max(running) <= 3


def test_decode_worker_keeps_max_running(tmp_path, monkeypatch):
    """e_p_d: a prefilled request reserves a place among the decode worker's max_running
    with its KV blocks; before, six requests joined a batch bounded at two."""
    from lmmsim.engine.scheduler import ContinuousBatchingScheduler

    widest = []
    schedule = ContinuousBatchingScheduler.schedule

    def recording(self, now, slot=0):
        plan = schedule(self, now, slot)
        widest.append(plan.num_decodes + len({id(c[0]) for c in plan.chunks}))
        return plan

    monkeypatch.setattr(ContinuousBatchingScheduler, "schedule", recording)
    scn = validate_scenario(yaml.safe_load("""
system: dynamo
model: qwen2.5-vl-7b
hardware: {gpu: h100-sxm-80gb, count: 3, cost_model: roofline}
deployment: {max_model_len: 4096}
policy: {batching: {kind: chunked_prefill, token_budget: 2048, max_running: 2}}
workload:
  num_requests: 6
  arrival: {kind: deterministic, rate: 100}
  mix: [{name: t, weight: 1, text_tokens: {kind: fixed, value: 100}}]
  output_tokens: {kind: fixed, value: 64}
"""))
    run = run_scenario(scn, tmp_path)
    assert run.requests["status"].eq("finished").all()
    assert max(widest) == 2


def test_encoder_tp_is_not_checked_against_the_llm_heads(tmp_path):
    """An encoder pool's tp splits the vision encoder (SigLIP: 16 heads), not the LLM
    (28 heads): tp = 8 used to be refused under deployment.tp."""
    scn = validate_scenario(yaml.safe_load("""
system: modserve
model: llava-onevision-qwen2-7b
hardware: {gpu: h100-sxm-80gb, count: 9, cost_model: roofline}
deployment: {kind: e_pd, encoder: {workers: 1, tp: 8}, llm: {workers: 1, tp: 1}, max_model_len: 4096}
workload:
  num_requests: 2
  arrival: {kind: poisson, rate: 1}
  mix: [{name: i, weight: 1, text_tokens: {kind: fixed, value: 30}, images: {count: 1, width: 448, height: 448}}]
  output_tokens: {kind: fixed, value: 4}
"""))
    assert run_scenario(scn, tmp_path).requests["status"].eq("finished").all()


def test_rps_without_priority_preemption_still_relieves_a_full_kv_cache(tmp_path):
    """RPS queue with preemption off on a 4-stage pipeline and a KV cache of about one
    max_model_len: four partial prefills each held blocks and none could grow (stuck at
    t = 0.057 s). A full cache is now relieved by recompute, as vLLM does."""
    scn = validate_scenario(yaml.safe_load("""
system: rps-serve
model: qwen2.5-vl-7b
hardware: {gpu: h100-sxm-80gb, count: 4, cost_model: roofline}
deployment: {max_model_len: 4096, kind: monolithic, tp: 1, pp: 4, chunk_pipelining: false,
             activation_reserve_gib: 67.14193367958069}
policy:
  queue: {kind: rps, classifier: naive, preemption: false, profile_requests: 6}
  batching: {kind: chunked_prefill, token_budget: 256, max_running: 16}
workload:
  num_requests: 4
  arrival: {kind: deterministic, rate: 100}
  mix: [{name: t, weight: 1, text_tokens: {kind: fixed, value: 3000}}]
  output_tokens: {kind: fixed, value: 1}
"""))
    run = run_scenario(scn, tmp_path)
    assert run.requests["status"].eq("finished").all()
    assert run.summary["num_preemptions"] > 0


def test_pipeline_slots_do_not_recompute_each_others_oldest_request_forever(tmp_path):
    """Monolithic PP4 without chunk pipelining, a KV cache of about one max_model_len:
    the oldest prefill used to preempt itself whenever the newer ones were in flight,
    and the run never ended (no request finished in 1,000 simulated seconds). The
    horizon only keeps a regression from hanging the suite."""
    scn = validate_scenario(yaml.safe_load("""
system: gllm
model: qwen2.5-vl-32b
hardware: {gpu: a100-40gb, count: 4, cost_model: roofline}
deployment: {kind: monolithic, tp: 1, pp: 4, chunk_pipelining: false, max_model_len: 8192,
             activation_reserve_gib: 18.96178960800171}
policy: {queue: {kind: fcfs}, batching: {kind: chunked_prefill, token_budget: 2048, max_running: 256}}
workload:
  num_requests: 40
  arrival: {kind: gamma, rate: 32.0, cv: 0.5}
  mix: [{name: v, weight: 1, text_tokens: {kind: uniform, low: 300, high: 2500},
         video: {frames: 16, width: 384, height: 224}}]
  output_tokens: {kind: fixed, value: 200}
sim: {horizon_s: 5000}
"""))
    run = run_scenario(scn, tmp_path)
    assert run.requests["status"].eq("finished").all()

"""The command line: smoke run, results contract, and one test per kind of bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import assert_user_error, run_cli

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"
SMALL = ["--set", "workload.num_requests=60"]


# ------------------------------------------------------------------ happy path
def test_run_writes_the_results_contract(capsys, tmp_path):
    out = tmp_path / "out"
    code, stdout, _ = run_cli(capsys, "run", QUICKSTART, "-o", out, *SMALL, "--format", "csv")
    assert code == 0
    assert "TTFT" in stdout
    df = pd.read_parquet(out / "requests.parquet")
    for col in ("request_id", "modality", "arrived_at", "prefill_started_at", "first_token_at", "finished_at",
                "num_prompt_tokens", "num_mm_tokens", "num_output_tokens", "num_preemptions", "replica",
                "encode_started_at", "encode_finished_at"):
        assert col in df.columns
    assert len(df) == 60 and (out / "requests.csv").exists()
    summary = json.loads((out / "summary.json").read_text())
    for key in ("num_requests", "num_finished", "ttft_s", "tpot_s", "e2e_s", "normalized_latency_s_per_token",
                "throughput", "goodput_requests_per_s", "slo_attainment", "gpu_utilization", "num_preemptions",
                "by_modality", "sim_wall_time_s", "sim_events"):
        assert key in summary
    assert set(summary["ttft_s"]) >= {"mean", "p50", "p90", "p95", "p99"}
    assert set(summary["by_modality"]) == set(df["modality"])
    resolved = yaml.safe_load((out / "scenario.resolved.yaml").read_text())
    assert resolved["workload"]["num_requests"] == 60
    assert resolved["deployment"]["block_size"] == 16  # defaults are written out


def test_resolved_scenario_reruns_to_identical_results(capsys, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    assert run_cli(capsys, "run", QUICKSTART, "-o", a, *SMALL)[0] == 0
    assert run_cli(capsys, "run", a / "scenario.resolved.yaml", "-o", b)[0] == 0
    pd.testing.assert_frame_equal(pd.read_parquet(a / "requests.parquet"), pd.read_parquet(b / "requests.parquet"))


def test_same_seed_identical_parquet_other_seed_differs(capsys, tmp_path):
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        assert run_cli(capsys, "run", QUICKSTART, "-o", tmp_path / name, *SMALL, "--set", f"seed={seed}")[0] == 0
    a, b, c = (pd.read_parquet(tmp_path / n / "requests.parquet") for n in "abc")
    pd.testing.assert_frame_equal(a, b)
    assert (tmp_path / "a" / "requests.parquet").read_bytes() == (tmp_path / "b" / "requests.parquet").read_bytes()
    assert not a["arrived_at"].equals(c["arrived_at"])


def test_exported_trace_replays_identical_requests(capsys, tmp_path):
    trace = tmp_path / "trace.jsonl"
    assert run_cli(capsys, "workload", QUICKSTART, "-o", trace, *SMALL)[0] == 0
    assert run_cli(capsys, "run", QUICKSTART, "-o", tmp_path / "gen", *SMALL)[0] == 0
    replay = ["--set", f"workload.arrival={{kind: trace, path: {trace}}}", "--set", "workload.mix=[]",
              "--set", "workload.num_requests=null", "--set", "workload.output_tokens=null"]
    code, _, err = run_cli(capsys, "run", QUICKSTART, "-o", tmp_path / "replay", *replay)
    assert code == 0, err
    gen = pd.read_parquet(tmp_path / "gen" / "requests.parquet")
    rep = pd.read_parquet(tmp_path / "replay" / "requests.parquet")
    cols = ["arrived_at", "num_prompt_tokens", "num_mm_tokens", "num_output_tokens", "first_token_at", "finished_at"]
    pd.testing.assert_frame_equal(gen[cols], rep[cols])


def test_validate_and_list(capsys):
    code, out, _ = run_cli(capsys, "validate", QUICKSTART)
    assert code == 0 and "valid" in out and "KV" in out
    for what, needle in (("models", "qwen2.5-vl-72b"), ("gpus", "h100-sxm-80gb"), ("systems", "vllm"),
                         ("policies", "fcfs")):
        code, out, _ = run_cli(capsys, "list", what)
        assert code == 0 and needle in out


def test_console_script_help_and_run(tmp_path):
    exe = [sys.executable, "-m", "lmmsim"]
    for sub in ([], ["run"], ["validate"], ["workload"], ["list"]):
        res = subprocess.run(exe + sub + ["--help"], capture_output=True, text=True)
        assert res.returncode == 0 and "usage" in res.stdout
    res = subprocess.run(exe + ["run", str(QUICKSTART), "-o", str(tmp_path / "o"), *SMALL, "-q"],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "o" / "summary.json").exists()


# ------------------------------------------------------------------ bad input
def test_never_overwrites_results_without_force(capsys, tmp_path):
    out = tmp_path / "out"
    assert run_cli(capsys, "run", QUICKSTART, "-o", out, *SMALL)[0] == 0
    before = (out / "summary.json").read_text()
    assert_user_error(capsys, ["run", QUICKSTART, "-o", out, *SMALL, "--set", "seed=5"], "--force")
    assert (out / "summary.json").read_text() == before
    assert run_cli(capsys, "run", QUICKSTART, "-o", out, *SMALL, "--set", "seed=5", "--force")[0] == 0
    assert (out / "summary.json").read_text() != before


def test_workload_export_never_overwrites(capsys, tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text("keep me\n")
    assert_user_error(capsys, ["workload", QUICKSTART, "-o", trace], "--force")
    assert trace.read_text() == "keep me\n"


@pytest.mark.parametrize(
    "override,needles",
    [
        ("deployment.colour=red", ["deployment.colour", "unknown key", "valid keys", "'tp'"]),
        ("workload.mix.0.text_tokens.bar=1", ["workload.mix.0.text_tokens.bar", "valid keys", "'sigma'"]),
        ("workload.arrival.cv=2", ["workload.arrival.cv", "valid keys: 'kind', 'rate'"]),
        ("workload.num_requests=lots", ["workload.num_requests"]),
        ("workload.arrival.rate=-2", ["workload.arrival.rate", "> 0"]),
        ("workload.arrival.rate=0", ["workload.arrival.rate", "> 0"]),
        ("workload.mix=[]", ["workload.mix"]),
        ("workload.mix.1.weight=0", ["workload.mix.1.weight", "> 0"]),
        ("workload.mix.0.weight=-1", ["workload.mix.0.weight", "> 0"]),
        ("workload.arrival.kind=bursty", ["workload.arrival.kind", "'poisson'", "'gamma'"]),
        ("model=gpt-9", ["model", "gpt-9", "'qwen2.5-vl-7b'", "'llama-2-7b'"]),
        ("hardware.gpu=tpu-v9", ["hardware.gpu", "'h100-sxm-80gb'", "'a100-40gb'"]),
        ("system=magic", ["system", "'vllm'"]),
        ("policy.queue.kind=lifo", ["policy.queue.kind", "'fcfs'"]),
        ("policy.router.kind=random", ["policy.router.kind", "'round_robin'"]),
        ("hardware.interconnect=infiniband", ["hardware.interconnect", "'nvlink'"]),
        ("deployment.tp=3", ["deployment"]),
        ("deployment.replicas=2", ["deployment", "hardware.count"]),
        ("policy.batching.max_running=4096", ["policy.batching", "max_running"]),
        ("seed=-1", ["seed"]),
    ],
)
def test_bad_scenario_values(capsys, tmp_path, override, needles):
    assert_user_error(capsys, ["run", QUICKSTART, "-o", tmp_path / "o", "--set", override], *needles)
    assert not (tmp_path / "o").exists()


def test_deployment_that_does_not_fit_in_memory(capsys, tmp_path):
    line = assert_user_error(
        capsys, ["run", QUICKSTART, "-o", tmp_path / "o", "--set", "model=llava-onevision-qwen2-72b"],
        "deployment", "does not fit", "GiB",
    )
    assert "weights" in line


def test_model_without_the_workload_modality(capsys, tmp_path):
    assert_user_error(capsys, ["run", QUICKSTART, "-o", tmp_path / "o", "--set", "model=llama-3-8b"],
                      "workload.mix.2.images", "llama-3-8b")


def test_malformed_trace_row_names_file_and_line(capsys, tmp_path):
    trace = tmp_path / "bad.csv"
    trace.write_text(
        "timestamp,modality,text_tokens,media,output_tokens\n"
        "0.0,text,100,,8\n"
        "0.5,text,many,,8\n"
    )
    line = assert_user_error(
        capsys,
        ["run", QUICKSTART, "-o", tmp_path / "o", "--set", f"workload.arrival={{kind: trace, path: {trace}}}",
         "--set", "workload.mix=[]", "--set", "workload.num_requests=null", "--set", "workload.output_tokens=null"],
        f"{trace}:3",
    )
    assert "text_tokens" in line


def test_yaml_syntax_error_and_missing_file(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [unclosed\n")
    assert_user_error(capsys, ["run", bad, "-o", tmp_path / "o"], str(bad), "YAML")
    assert_user_error(capsys, ["run", tmp_path / "nope.yaml", "-o", tmp_path / "o"], "nope.yaml", "not found")
    listy = tmp_path / "list.yaml"
    listy.write_text("- a\n- b\n")
    assert_user_error(capsys, ["validate", listy], "mapping")


def test_bad_set_syntax(capsys, tmp_path):
    assert_user_error(capsys, ["run", QUICKSTART, "-o", tmp_path / "o", "--set", "seed"], "--set", "key=value")


def test_unwritable_output_is_one_line(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert_user_error(capsys, ["run", QUICKSTART, "-o", blocker / "out", *SMALL], str(blocker))


def test_trace_and_timeline_plot(capsys, tmp_path):
    out = tmp_path / "run"
    scenario = ROOT / "scenarios" / "baselines" / "rps-mix-llava72b-dynamo.yaml"
    code, _, err = run_cli(capsys, "run", scenario, "-o", out, "--set", "workload.num_requests=12", "--trace", "-q")
    assert code == 0, err
    trace = json.loads((out / "trace.json").read_text())
    tracks = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"}
    assert {"encoder0", "prefill0", "decode0"} <= tracks
    assert any(t.startswith("link:") for t in tracks)
    fig = tmp_path / "timeline.png"
    assert run_cli(capsys, "plot", "timeline", out, "-o", fig, "--first", "3")[0] == 0
    assert fig.stat().st_size > 1000
    assert_user_error(capsys, ["plot", "timeline", out, "-o", fig], "--force")
    assert_user_error(capsys, ["plot", "timeline", tmp_path, "-o", tmp_path / "x.png"], "--trace")

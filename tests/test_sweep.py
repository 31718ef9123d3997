"""Sweeps: exact expansion, resume, failed points, identical results across executors."""

from __future__ import annotations

import json
import math
import random
import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from lmmsim.errors import UserError
from lmmsim.sweep import executors as sweep_executors
from lmmsim.sweep import expand, run_sweep
from lmmsim.sweep.spec import parse_sweep

ROOT = Path(__file__).resolve().parents[1]


def _spec(**kw):
    return parse_sweep({"scenario": {"model": "m"}, **kw})


# ------------------------------------------------------------------ expansion
def test_grid_zip_product_with_repeats_is_exact():
    spec = _spec(
        axes=[
            {"kind": "grid", "params": {"a": [1, 2], "b": ["x", "y", "z"]}},
            {"kind": "zip", "params": {"c": [10, 20], "d.e": [0.1, 0.2]}},
        ],
        repeats=2,
    )
    points = expand(spec)
    assert len(points) == 2 * 3 * 2 * 2
    expected = [
        ({"a": a, "b": b, "c": c, "d.e": d}, r)
        for a in (1, 2) for b in ("x", "y", "z") for c, d in ((10, 0.1), (20, 0.2)) for r in (0, 1)
    ]
    assert [(p.overrides, p.repeat) for p in points] == expected
    assert [list(p.overrides) for p in points] == [["a", "b", "c", "d.e"]] * len(points)
    assert expand(_spec()) == [({}, 0)]  # no axes: the base scenario once


def test_random_axis_is_exact_and_deterministic():
    axis = {"kind": "random", "n": 6, "seed": 3, "params": {
        "u": {"low": 1.0, "high": 3.0},
        "l": {"low": 0.01, "high": 100.0, "log": True},
        "i": {"low": 2, "high": 5, "integer": True},
        "li": {"low": 16, "high": 4096, "log": True, "integer": True},
        "c": {"choices": ["fcfs", "sjf", "edf"]},
    }}
    points = expand(_spec(axes=[axis]))
    rng = random.Random(3)
    expected = []
    for _ in range(6):
        u, l, i, li, c = (rng.random() for _ in range(5))
        expected.append({
            "u": 1.0 + u * 2.0,
            "l": math.exp(math.log(0.01) + l * (math.log(100.0) - math.log(0.01))),
            "i": 2 + math.floor(i * 4),
            "li": round(math.exp(math.log(16) + li * (math.log(4096) - math.log(16)))),
            "c": ["fcfs", "sjf", "edf"][int(c * 3)],
        })
    assert [p.overrides for p in points] == expected
    assert all(isinstance(p.overrides["i"], int) and 2 <= p.overrides["i"] <= 5 for p in points)
    assert expand(_spec(axes=[axis])) == points
    assert expand(_spec(axes=[{**axis, "seed": 4}])) != points


@pytest.mark.parametrize("bad, where", [
    ({"axes": [{"kind": "zip", "params": {"a": [1, 2], "b": [1]}}]}, "equal lengths"),
    ({"set": {"a": 1}, "axes": [{"kind": "grid", "params": {"a": [1]}}]}, "twice"),
    ({"axes": [{"kind": "grid", "params": {"a": []}}]}, "at least one"),
    ({"axes": [{"kind": "cube", "params": {}}]}, "cube"),
    ({"repeat": 2}, "unknown key 'repeat'"),
    ({"base": "x.yaml"}, "exactly one"),
])
def test_bad_sweeps_are_user_errors(bad, where):
    with pytest.raises(UserError, match=where):
        _spec(**bad)


# ---------------------------------------------------------------------- runs
@pytest.fixture(scope="module")
def sweep_file(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("sweep")
    scn = yaml.safe_load((ROOT / "scenarios" / "quickstart.yaml").read_text())
    scn["workload"]["num_requests"] = 20
    (d / "tiny.yaml").write_text(yaml.safe_dump(scn, sort_keys=False))
    sweep = {
        "base": "tiny.yaml",
        "set": {"workload.output_tokens.max": 512},
        # deployment.tp=2 needs 2 GPUs on a 1-GPU machine: those runs fail inside the run
        "axes": [{"kind": "grid", "params": {"workload.arrival.rate": [2.0, 8.0], "deployment.tp": [1, 2]}}],
        "repeats": 2,
    }
    (d / "sweep.yaml").write_text(yaml.safe_dump(sweep, sort_keys=False))
    return d / "sweep.yaml"


@pytest.fixture(scope="module")
def reference(sweep_file, tmp_path_factory):
    out = tmp_path_factory.mktemp("ref") / "out"
    df = run_sweep(sweep_file, out, jobs=1, progress=False)
    return out, df


def _read(out: Path) -> pd.DataFrame:
    return pd.read_parquet(out / "results.parquet")


def test_results_table(reference):
    out, df = reference
    assert len(df) == 8
    assert list(df.columns[:7]) == ["workload.arrival.rate", "deployment.tp", "repeat", "seed", "run_id",
                                    "status", "error"]
    assert df["workload.arrival.rate"].tolist() == [2.0] * 4 + [8.0] * 4
    assert df["deployment.tp"].tolist() == [1, 1, 2, 2] * 2
    assert df["repeat"].tolist() == [0, 1] * 4
    assert df["seed"].tolist() == [0, 1] * 4  # quickstart seed 0 + repeat
    assert df["status"].tolist() == ["ok", "ok", "failed", "failed"] * 2
    failed = df[df.status == "failed"]
    assert failed["error"].str.contains("needs 2 GPUs").all()
    ok = df[df.status == "ok"]
    assert df.run_id.nunique() == 8
    for col in ("ttft_s.p99", "throughput.requests_per_s", "by_modality.text.ttft_s.mean",
                "gpu_utilization.per_gpu.0", "num_finished"):
        assert ok[col].notna().all(), col
    assert (ok["num_finished"] == 20).all()
    assert not [c for c in df.columns if "sim_wall_time_s" in c]
    # a higher rate gives a higher throughput; repeats differ by seed
    assert ok["throughput.requests_per_s"].iloc[2] > ok["throughput.requests_per_s"].iloc[0]
    assert ok["ttft_s.p99"].iloc[0] != ok["ttft_s.p99"].iloc[1]
    pd.testing.assert_frame_equal(_read(out), df)
    for run_id in ok.run_id:
        run_dir = out / "runs" / run_id
        assert {"requests.parquet", "summary.json", "scenario.resolved.yaml", "done.json"} <= {
            p.name for p in run_dir.iterdir()}
        done = json.loads((run_dir / "done.json").read_text())
        assert done["run_id"] == run_id and "workload.arrival.rate" in done["swept"]
    for run_id in failed.run_id:
        err = json.loads((out / "runs" / run_id / "error.json").read_text())
        assert "needs 2 GPUs" in err["message"] and "Traceback" in err["traceback"]


def test_resume_reruns_only_unfinished(reference, sweep_file, tmp_path, monkeypatch):
    ref_out, ref_df = reference
    out = tmp_path / "out"
    shutil.copytree(ref_out, out)
    ok = ref_df[ref_df.status == "ok"].run_id.tolist()
    (out / "runs" / ok[0] / "done.json").unlink()  # killed after writing results, before done.json
    shutil.rmtree(out / "runs" / ok[1])  # killed before anything was written
    ran: list[str] = []
    real = sweep_executors.run_one

    def counting(task):
        ran.append(task["run_id"])
        return real(task)

    monkeypatch.setattr(sweep_executors, "run_one", counting)
    df = run_sweep(sweep_file, out, jobs=1, progress=False)
    assert sorted(ran) == sorted(ok[:2])
    pd.testing.assert_frame_equal(df, ref_df)
    pd.testing.assert_frame_equal(_read(out), ref_df)

    ran.clear()  # nothing left to do
    run_sweep(sweep_file, out, jobs=1, progress=False)
    assert ran == []

    failed = ref_df[ref_df.status == "failed"].run_id.tolist()
    df = run_sweep(sweep_file, out, jobs=1, progress=False, retry_failed=True)
    assert sorted(ran) == sorted(failed)
    pd.testing.assert_frame_equal(df, ref_df)


def test_jobs_2_gives_identical_results(reference, sweep_file, tmp_path):
    _, ref_df = reference
    df = run_sweep(sweep_file, tmp_path / "out", jobs=2, progress=True)
    pd.testing.assert_frame_equal(df, ref_df)
    pd.testing.assert_frame_equal(_read(tmp_path / "out"), ref_df)


def test_dask_gives_identical_results(reference, sweep_file, tmp_path, monkeypatch):
    distributed = pytest.importorskip("dask.distributed")
    _, ref_df = reference
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        # a relative output folder: the workers' working directory is not this one
        work = tmp_path / "elsewhere"
        work.mkdir()
        monkeypatch.chdir(work)
        df = run_sweep(sweep_file, Path("..") / "out", executor="dask", address=cluster.scheduler_address,
                       progress=False)
    pd.testing.assert_frame_equal(df, ref_df)
    pd.testing.assert_frame_equal(_read(tmp_path / "out"), ref_df)


def test_dask_missing_is_a_user_error(sweep_file, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "dask.distributed", None)
    with pytest.raises(UserError, match=r"pip install 'lmmsim\[dask\]'"):
        run_sweep(sweep_file, tmp_path / "out", executor="dask", progress=False)


def test_inline_scenario_invalid_combination_and_mapping_values(tmp_path):
    scn = yaml.safe_load((ROOT / "scenarios" / "quickstart.yaml").read_text())
    scn["workload"]["num_requests"] = 10
    sweep = {
        "scenario": scn,
        "axes": [
            {"kind": "grid", "params": {"policy.batching.max_running": [8, 4096]}},  # 4096 > token_budget
            {"kind": "grid", "params": {"policy.router": [{"kind": "round_robin"}, {"kind": "least_loaded"}]}},
        ],
    }
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep))
    df = run_sweep(path, tmp_path / "out", jobs=1, progress=False)
    assert df["status"].tolist() == ["ok", "ok", "failed", "failed"]
    assert df["policy.router"].tolist() == ['{"kind": "round_robin"}', '{"kind": "least_loaded"}'] * 2
    assert df["error"].iloc[2].startswith("invalid scenario: policy.batching")
    # every point invalid: most likely a typo, so the sweep itself is the error
    sweep["axes"] = [{"kind": "grid", "params": {"policy.batching.max_runing": [8, 16]}}]
    path.write_text(yaml.safe_dump(sweep))
    with pytest.raises(UserError, match="max_runing"):
        run_sweep(path, tmp_path / "out2", jobs=1, progress=False)

"""Sweep reliability: damaged runs are redone, failures set the exit code, overlapping
keys and bad random axes are refused, strict YAML, and the output-folder rule."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

from lmmsim.cli import main
from lmmsim.errors import UserError
from lmmsim.sweep import executors as sweep_executors
from lmmsim.sweep.runner import resolve_point
from lmmsim.sweep.spec import expand, parse_sweep

ROOT = Path(__file__).resolve().parents[1]


def _write_base(folder: Path) -> Path:
    """quickstart cut to 5 requests: one run takes well under a second."""
    scn = yaml.safe_load((ROOT / "scenarios" / "quickstart.yaml").read_text())
    scn["workload"]["num_requests"] = 5
    path = folder / "tiny.yaml"
    path.write_text(yaml.safe_dump(scn, sort_keys=False))
    return path


def _write_sweep(folder: Path, **spec) -> Path:
    path = folder / "sweep.yaml"
    path.write_text(yaml.safe_dump({"base": "tiny.yaml", **spec}, sort_keys=False))
    return path


def _sweep(sweep: Path, out: Path, *extra: str) -> int:
    return main(["sweep", str(sweep), "-o", str(out), "-q", "--jobs", "1", *extra])


# ------------------------------------------------------------- damaged runs
@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A one-run sweep, finished: (sweep file, its output folder, the run's folder)."""
    d = tmp_path_factory.mktemp("finished")
    _write_base(d)
    sweep = _write_sweep(d, axes=[{"kind": "grid", "params": {"workload.arrival.rate": [4.0]}}])
    out = d / "out"
    assert _sweep(sweep, out) == 0
    (run_dir,) = (out / "runs").iterdir()
    return sweep, out, run_dir.name


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:100])


DAMAGES = {
    "summary.json is not valid JSON": lambda d: (d / "summary.json").write_text('{"ttft_s": {'),
    "summary.json is empty": lambda d: (d / "summary.json").write_text(""),
    "summary.json is not a JSON object": lambda d: (d / "summary.json").write_text("[1, 2]"),
    "requests.parquet is missing": lambda d: (d / "requests.parquet").unlink(),
    "requests.parquet is not a readable parquet file": lambda d: _truncate(d / "requests.parquet"),
    "scenario.resolved.yaml is missing": lambda d: (d / "scenario.resolved.yaml").unlink(),
    "scenario.resolved.yaml is not a YAML mapping": lambda d: (d / "scenario.resolved.yaml").write_text("- a\n"),
    "done.json is not valid JSON": lambda d: (d / "done.json").write_text("{"),
}


@pytest.fixture
def damaged(finished, tmp_path, request):
    """A copy of the finished sweep whose run was damaged by ``request.param`` (a DAMAGES key)."""
    sweep, out, run_id = finished
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    DAMAGES[request.param](copy / "runs" / run_id)
    return sweep, copy, run_id, request.param


@pytest.mark.parametrize("damaged", list(DAMAGES), indirect=True)
def test_damaged_finished_run_is_said_and_run_again(damaged, finished, capsys):
    sweep, out, run_id, why = damaged
    capsys.readouterr()
    assert _sweep(sweep, out) == 0
    err = capsys.readouterr().err
    assert f"sweep: {out / 'runs' / run_id}: {why}; running it again" in err
    df = pd.read_parquet(out / "results.parquet")
    ref = pd.read_parquet(finished[1] / "results.parquet")
    pd.testing.assert_frame_equal(df, ref)  # the rerun gives the same row as the first run
    assert json.loads((out / "runs" / run_id / "summary.json").read_text())["num_finished"] == 5
    # repaired: the next sweep has nothing to say and nothing to do
    assert _sweep(sweep, out) == 0
    assert "running it again" not in capsys.readouterr().err


@pytest.mark.parametrize("damaged", ["summary.json is not valid JSON", "requests.parquet is missing"],
                         indirect=True)
def test_damaged_run_that_stays_damaged_is_a_failed_row(damaged, monkeypatch, capsys):
    """Rows use the same finished test as the resume: a damaged run is never 'ok'."""
    sweep, out, _, why = damaged
    monkeypatch.setattr(sweep_executors, "run_one", lambda task: {"run_id": task["run_id"], "status": "ok",
                                                                  "error": None})  # a worker that writes nothing
    assert _sweep(sweep, out) == 1
    df = pd.read_parquet(out / "results.parquet")
    assert df["status"].tolist() == ["failed"]
    assert df["error"].tolist() == [why]
    assert "1 of 1 runs failed" in capsys.readouterr().err


# --------------------------------------------------------------- exit codes
def test_failed_runs_exit_1_listing_their_error_files(tmp_path, capsys):
    _write_base(tmp_path)
    # tp=2 needs 2 GPUs on quickstart's one: those five runs fail inside the run, tp=1 is fine
    sweep = _write_sweep(tmp_path, axes=[
        {"kind": "grid", "params": {"deployment.tp": [1, 2]}},
        {"kind": "grid", "params": {"workload.arrival.rate": [1.0, 2.0, 3.0]}},
    ])
    out = tmp_path / "out"
    assert _sweep(sweep, out) == 1
    captured = capsys.readouterr()
    assert "6 runs (3 failed)" in captured.out
    (line,) = [x for x in captured.err.splitlines() if "failed" in x]
    df = pd.read_parquet(out / "results.parquet")
    assert df["status"].tolist() == ["ok"] * 3 + ["failed"] * 3  # the failures did not stop the others
    paths = [str(out / "runs" / run_id / "error.json") for run_id in df.run_id[df.status == "failed"]]
    assert line == f"lmmsim: sweep: 3 of 6 runs failed; see {', '.join(paths)}"
    assert all(Path(p).is_file() for p in paths)

    # more failed runs than are listed: the rest are counted
    sweep = _write_sweep(tmp_path, axes=[{"kind": "grid", "params": {"deployment.tp": [2],
                                                                     "workload.arrival.rate": [1.0, 2.0, 3.0,
                                                                                               4.0, 5.0]}}])
    assert _sweep(sweep, tmp_path / "out5") == 1
    err = capsys.readouterr().err
    assert "5 of 5 runs failed; see " in err and err.count("error.json") == 3 and err.rstrip().endswith(
        "and 2 more")

    # every point an invalid scenario: still the one-line user error, exit 2
    sweep = _write_sweep(tmp_path, axes=[{"kind": "grid", "params": {"policy.batching.max_runing": [8, 16]}}])
    assert _sweep(sweep, tmp_path / "out-typo") == 2
    err = capsys.readouterr().err
    assert err.startswith("lmmsim: error: ") and "max_runing" in err and len(err.splitlines()) == 1


# ------------------------------------------------------------ overlapping keys
def test_overlapping_axes_are_refused_before_anything_runs(tmp_path, capsys):
    _write_base(tmp_path)
    sweep = _write_sweep(tmp_path, axes=[
        {"kind": "grid", "params": {"workload.arrival.rate": [1, 2]}},
        {"kind": "grid", "params": {"workload.arrival": [{"kind": "poisson", "rate": 3}]}},
    ])
    assert _sweep(sweep, tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("lmmsim: error: ")
    assert "'workload.arrival.rate' (axes.0)" in err and "'workload.arrival' (axes.1)" in err
    assert not (tmp_path / "out").exists()


def _spec(**kw):
    return parse_sweep({"scenario": {"model": "m"}, **kw})


@pytest.mark.parametrize("spec, message", [
    ({"axes": [{"kind": "zip", "params": {"a": [1], "a.b": [2]}}]},
     r"swept keys 'a' \(axes.0\) and 'a.b' \(axes.0\) overlap"),
    ({"axes": [{"kind": "grid", "params": {"a.b.c": [1]}},
               {"kind": "random", "n": 1, "params": {"a.b": {"choices": [{"c": 2}]}}}]},
     r"swept keys 'a.b.c' \(axes.0\) and 'a.b' \(axes.1\) overlap"),
    ({"set": {"a.b": 1}, "axes": [{"kind": "grid", "params": {"a": [{"b": 2}]}}]},
     r"set key 'a.b' is inside swept key 'a' \(axes.0\)"),
    ({"set": {"a.b": 1, "a": {"c": 2}}}, r"set key 'a' replaces set key 'a.b'"),
])
def test_overlapping_keys_are_user_errors(spec, message):
    with pytest.raises(UserError, match=message):
        _spec(**spec)


def test_set_mapping_refined_by_an_axis_is_allowed(tmp_path):
    """The one overlap kept: set gives the mapping, the axis varies a key inside it."""
    base = yaml.safe_load(_write_base(tmp_path).read_text())
    spec = _spec(set={"workload.arrival": {"kind": "gamma", "rate": 9.0, "cv": 2.0}},
                 axes=[{"kind": "grid", "params": {"workload.arrival.rate": [1.0, 2.0]}},
                       {"kind": "grid", "params": {"workload.arrival.cv": [3.0]}}])
    runs = [resolve_point(base, spec, point).workload.arrival for point in expand(spec)]
    assert [(a.kind, a.rate, a.cv) for a in runs] == [("gamma", 1.0, 3.0), ("gamma", 2.0, 3.0)]
    # two axes inside one set mapping is fine; the same two keys, one inside the other, are not
    with pytest.raises(UserError, match="overlap"):
        _spec(axes=[{"kind": "grid", "params": {"workload.arrival": [{"kind": "poisson"}]}},
                    {"kind": "grid", "params": {"workload.arrival.rate": [1.0]}}])


# ------------------------------------------------------------- random axes
def _random(param=None, n=2):
    param = {"low": 1, "high": 2} if param is None else param
    return _spec(axes=[{"kind": "random", "n": n, "params": {"policy.batching.token_budget": param}}])


KEY = "sweep: axes.0.params.policy.batching.token_budget: "


@pytest.mark.parametrize("param, message", [
    ({"low": 3, "high": 1}, "high (1.0) is below low (3.0); give low < high"),
    ({"low": 2, "high": 2, "log": True}, "low and high are both 2.0"),
    ({"low": 0, "high": 8, "log": True}, "log: true needs low > 0 (got low=0.0)"),
    ({"low": -1, "high": 8, "log": True, "integer": True}, "log: true needs low > 0 (got low=-1.0)"),
    ({"low": 1.5, "high": 8, "integer": True}, "integer: true needs whole-number low and high (got low=1.5"),
    ({"low": 1, "high": float("inf")}, "low and high must be finite numbers"),
    ([512, 8192], "give a range {low: .., high: ..}"),
])
def test_bad_random_params_name_the_key_and_values(param, message):
    with pytest.raises(UserError) as info:
        _random(param)
    assert str(info.value).startswith(KEY + message), str(info.value)


@pytest.mark.parametrize("n", [0, -3])
def test_random_axis_needs_at_least_one_point(n):
    with pytest.raises(UserError) as info:
        _random(n=n)
    assert str(info.value) == f"sweep: axes.0.n: the number of points to draw must be at least 1 (got {n})"


def test_bad_random_axis_through_the_cli_is_one_line(tmp_path, capsys):
    _write_base(tmp_path)
    sweep = _write_sweep(tmp_path, axes=[{"kind": "random", "n": 3, "params": {
        "workload.arrival.rate": {"low": 8.0, "high": 2.0}}}])
    assert _sweep(sweep, tmp_path / "out") == 2
    assert capsys.readouterr().err == (f"lmmsim: error: {sweep}: axes.0.params.workload.arrival.rate: "
                                       "high (2.0) is below low (8.0); give low < high\n")


# -------------------------------------------------------------- strict YAML
def test_duplicate_keys_in_the_sweep_or_its_base_are_refused(tmp_path, capsys):
    base = _write_base(tmp_path)
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text("base: tiny.yaml\nrepeats: 1\nrepeats: 2\n")
    assert _sweep(sweep, tmp_path / "out") == 2
    assert capsys.readouterr().err == f"lmmsim: error: {sweep}:3: key 'repeats' appears twice in one mapping\n"

    sweep.write_text("base: tiny.yaml\n")
    base.write_text(base.read_text() + "seed: 4\n")  # quickstart sets seed already
    assert _sweep(sweep, tmp_path / "out") == 2
    err = capsys.readouterr().err
    line = len(base.read_text().splitlines())
    assert err == f"lmmsim: error: {base}:{line}: key 'seed' appears twice in one mapping\n"
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------ output folder
@pytest.mark.parametrize("theirs", ["results.parquet", "runs/notes.txt"])
def test_users_results_or_runs_stop_the_sweep_untouched(tmp_path, capsys, theirs):
    _write_base(tmp_path)
    sweep = _write_sweep(tmp_path, axes=[{"kind": "grid", "params": {"workload.arrival.rate": [4.0]}}])
    out = tmp_path / "out"
    (out / theirs).parent.mkdir(parents=True, exist_ok=True)
    (out / theirs).write_text("mine")
    (out / "notes.md").write_text("also mine")
    assert _sweep(sweep, out) == 2
    err = capsys.readouterr().err
    assert err == (f"lmmsim: error: -o: {out / theirs.split('/')[0]} was not written by lmmsim; it replaces "
                   "only its own files: move that one or choose another folder\n")
    assert (out / theirs).read_text() == "mine"
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == sorted(
        {theirs, theirs.split("/")[0], "notes.md"})  # nothing run, nothing written

    # moved away: the sweep runs, resumes into its own folder, and leaves other files alone
    if theirs.startswith("runs/"):
        shutil.rmtree(out / "runs")
    else:
        (out / theirs).unlink()
    assert _sweep(sweep, out) == 0
    assert _sweep(sweep, out) == 0
    assert (out / "notes.md").read_text() == "also mine"
    assert pd.read_parquet(out / "results.parquet")["status"].tolist() == ["ok"]

"""The Python API (lmmsim.api): load_scenario / run / sweep, and the README's example."""

from __future__ import annotations

from pathlib import Path

import subprocess
import sys

import pandas as pd
import pytest
import yaml

import lmmsim
from lmmsim import load_scenario, run, sweep
from lmmsim.engine.steplog import STEP_COLUMNS
from lmmsim.errors import UserError
from lmmsim.scenario import scenario_file

QUICKSTART = scenario_file("quickstart")  # the shipped example (a checkout's or the package's)
SMALL = {"workload.num_requests": 12}


def _raw() -> dict:
    return yaml.safe_load(QUICKSTART.read_text())


def test_import_is_cheap_and_exports_the_api():
    code = "import sys, lmmsim; print(sorted(m for m in ('pandas', 'simpy', 'pydantic', 'lmmsim.api') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"  # the API loads on first use, not with the package
    assert {"load_scenario", "run", "sweep"} <= set(dir(lmmsim))
    with pytest.raises(AttributeError):
        lmmsim.no_such_name  # noqa: B018
    # `sweep` stays the API's however lmmsim.sweep was imported first (the package is callable)
    code = ("import lmmsim.sweep.runner, lmmsim; from lmmsim import sweep; from lmmsim.api import sweep as fn; "
            "import inspect; print(callable(sweep), lmmsim.sweep is sweep, inspect.signature(fn))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("True True (spec, *, output")


def test_run_from_dict_from_path_and_from_text_give_the_same_requests():
    from_path = run(QUICKSTART, SMALL)
    raw = _raw()
    raw["workload"]["num_requests"] = 12
    from_dict = run(raw)
    from_text = run(yaml.safe_dump(raw))
    pd.testing.assert_frame_equal(from_path.requests, from_dict.requests)
    pd.testing.assert_frame_equal(from_path.requests, from_text.requests)
    assert len(from_path.requests) == 12 and from_path.summary["num_requests"] == 12
    assert from_path.steps is None and "12 requests" in repr(from_path)


def test_overrides_mean_what_set_means():
    scn = load_scenario(QUICKSTART, {"workload.num_requests": 7, "policy.batching.token_budget": 4096,
                                     "workload.arrival": {"kind": "gamma", "rate": 3.0, "cv": 2.0},
                                     "name": "1.0"})
    assert scn.workload.num_requests == 7 and scn.policy.batching.token_budget == 4096
    assert scn.workload.arrival.kind == "gamma" and scn.workload.arrival.cv == 2.0
    assert scn.name == "1.0"  # a string stays a string (not YAML-parsed to 1.0)
    # None removes the key: the default applies (as `--set key=null`)
    assert load_scenario(QUICKSTART, {"deployment.max_model_len": None}).deployment.max_model_len is None
    again = load_scenario(scn, {"seed": 5})  # a loaded scenario takes overrides too
    assert again.seed == 5 and again.workload.num_requests == 7


def test_bad_key_raises_user_error_naming_it():
    with pytest.raises(UserError, match="arival"):
        load_scenario(QUICKSTART, {"workload.arival.rate": 3})
    with pytest.raises(UserError, match="unknown model"):
        run(_raw() | {"model": "no-such-model"})
    with pytest.raises(UserError, match="axes"):
        sweep({"scenario": _raw(), "axes": [{"kind": "grid", "parms": {"seed": [1]}}]})
    with pytest.raises(UserError):
        load_scenario(42)


def test_relative_paths_resolve_against_the_file_or_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    raw = _raw() | {"hardware": {"gpu": "h100-sxm-80gb", "cost_model": "myfit"}}
    with pytest.raises(UserError, match=str(tmp_path / "myfit")):  # a dict: the working directory
        run(raw, SMALL)
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    (folder / "s.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(UserError, match=str(folder / "myfit")):  # a file: its folder
        run(folder / "s.yaml", SMALL)


def test_output_none_writes_nothing_and_output_writes_the_run_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = run(QUICKSTART, SMALL, step_log=True)
    assert list(tmp_path.iterdir()) == []
    assert list(res.steps.columns) == list(STEP_COLUMNS) and len(res.steps) > 0
    out = run(QUICKSTART, SMALL, output="out", step_log=True)
    assert {p.name for p in (tmp_path / "out").iterdir()} >= {
        "requests.parquet", "summary.json", "scenario.resolved.yaml", "trace.json"}
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "out" / "requests.parquet"), out.requests)
    with pytest.raises(UserError, match="force"):  # an existing run folder: only with force
        run(QUICKSTART, SMALL, output="out")
    run(QUICKSTART, SMALL, output="out", force=True)


def test_a_streamed_run_points_at_its_rows_instead_of_holding_them(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    streamed = {**SMALL, "sim.keep_requests": False}
    res = run(QUICKSTART, streamed)
    assert res.requests is None and res.requests_path is None and "12 requests" in repr(res)
    res = run(QUICKSTART, streamed, output="out")
    kept = run(QUICKSTART, SMALL)
    assert res.requests is None and res.requests_path == Path("out") / "requests.parquet"
    rows = pd.read_parquet(res.requests_path).sort_values("request_id").reset_index(drop=True)
    # an all-empty text column is typed string in the stream, null in memory: compare as objects
    rows, kept = rows.astype(object).where(rows.notna(), None), kept.requests.astype(object)
    pd.testing.assert_frame_equal(rows, kept.where(kept.notna(), None), check_like=True)


def test_sweep_returns_one_row_per_point(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = {"base": str(QUICKSTART), "set": SMALL,
            "axes": [{"kind": "grid", "params": {"workload.arrival.rate": [2.0, 4.0]}}], "repeats": 2}
    df = sweep(spec)
    assert list(tmp_path.iterdir()) == []  # a temporary folder, removed
    assert len(df) == 4 and set(df["status"]) == {"ok"}
    assert list(df["workload.arrival.rate"]) == [2.0, 2.0, 4.0, 4.0] and list(df["repeat"]) == [0, 1, 0, 1]
    kept = sweep(spec, output="sw")
    assert (tmp_path / "sw" / "results.parquet").is_file()
    pd.testing.assert_frame_equal(kept, df)


# The README's "Python API" example, with fewer requests (keep the two in step).
def test_readme_example_runs(tmp_path, monkeypatch):
    """The README's "Python API" example, read from README.md and run as written (with fewer
    requests), so the two cannot drift apart."""
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    section = readme.split("## Python API", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert '"workload.num_requests": 200' in code
    code = code.replace('"workload.num_requests": 200', '"workload.num_requests": 30')
    monkeypatch.chdir(tmp_path)
    names: dict = {}
    exec(compile(code, "README.md (Python API)", "exec"), names)  # noqa: S102 - our own README
    assert set(names["by_modality"].index) <= {"text", "image", "video", "audio"}
    table = names["table"]
    assert len(table) == 3 and table["ttft_s.p99"].notna().all()
    assert list(tmp_path.iterdir()) == []

"""Provenance: summary.json says what made it; a sweep's run id changes (and says why)
when the lmmsim version, a catalog entry or a fit changes, and only then."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

import lmmsim
from lmmsim import catalog, provenance
from lmmsim.scenario import scenario_file
from lmmsim.sweep import executors as sweep_executors
from lmmsim.sweep.runner import run_id_of

QUICKSTART = scenario_file("quickstart")  # llava-onevision-qwen2-7b on h100-sxm-80gb, fitted
GPU = "h100-sxm-80gb"


@pytest.fixture
def overlay(tmp_path, monkeypatch):
    """A copy of the built-in catalog as $LMMSIM_PROFILES (fits linked, not copied), for
    editing one entry; the catalog caches are emptied before and after."""
    monkeypatch.delenv("LMMSIM_PROFILES", raising=False)
    catalog.reload()
    builtin = catalog.profiles_dir()
    root = tmp_path / "profiles"
    shutil.copytree(builtin, root, ignore=shutil.ignore_patterns("ops"), symlinks=True)
    (root / "ops").symlink_to(builtin / "ops")
    monkeypatch.setenv("LMMSIM_PROFILES", str(root))
    catalog.reload()
    yield root
    catalog.reload()


def _edit_gpu(root: Path, **changes) -> None:
    path = root / "gpus" / f"{GPU}.yaml"
    data = yaml.safe_load(path.read_text())
    data.update(changes)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    catalog.reload()


def _spec() -> dict:
    return {"base": str(QUICKSTART), "set": {"workload.num_requests": 10},
            "axes": [{"kind": "grid", "params": {"workload.arrival.rate": [2.0, 4.0]}}]}


@pytest.fixture
def ran(monkeypatch) -> list[str]:
    """The run ids the sweep executes (in this process: jobs=1)."""
    ids: list[str] = []
    real = sweep_executors.run_one

    def counting(task):
        ids.append(task["run_id"])
        return real(task)

    monkeypatch.setattr(sweep_executors, "run_one", counting)
    return ids


def test_summary_records_version_revision_and_input_hashes():
    res = lmmsim.run(QUICKSTART, {"workload.num_requests": 10})
    prov = res.summary["provenance"]
    assert prov["lmmsim_version"] == provenance.version() and prov["lmmsim_version"]
    assert prov["git_revision"] is None or len(prov["git_revision"]) == 40
    inputs = prov["inputs"]
    assert set(inputs["catalog"]) == {f"gpus/{GPU}", "models/llava-onevision-qwen2-7b"}
    assert list(inputs["fits"]) == [catalog.get_gpu(GPU).fitted_profile]
    assert list(inputs["host_profiles"]) == ["cpu"]
    for group in inputs.values():
        assert all(len(h) == provenance.HASH_CHARS and int(h, 16) >= 0 for h in group.values())
    roofline = lmmsim.run(QUICKSTART, {"workload.num_requests": 10, "hardware.cost_model": "roofline"})
    assert roofline.summary["provenance"]["inputs"]["fits"] == {}


def test_same_inputs_same_run_id_and_no_machine_paths(tmp_path):
    scn = lmmsim.load_scenario(QUICKSTART)
    text = yaml.safe_dump(scn.model_dump(mode="json"), sort_keys=False)
    key = provenance.cache_key(scn, QUICKSTART.parent)
    assert key == provenance.cache_key(lmmsim.load_scenario(QUICKSTART), QUICKSTART.parent)
    assert run_id_of(text, key) == run_id_of(text, json.loads(json.dumps(key)))
    assert run_id_of(text, key) != run_id_of(text)  # the inputs are part of the id
    shown = json.dumps(key)
    assert str(Path.cwd()) not in shown and "/" + QUICKSTART.parent.name + "/" not in shown
    assert "git" not in shown  # a commit alone never reruns a sweep


def test_changed_catalog_entry_changes_the_key_and_says_why(overlay):
    scn = lmmsim.load_scenario(QUICKSTART)
    before = provenance.cache_key(scn, QUICKSTART.parent)
    _edit_gpu(overlay, peak_bf16_tflops=999.0)
    after = provenance.cache_key(scn, QUICKSTART.parent)
    assert before != after
    assert provenance.changes(before, after) == [f"catalog entry gpus/{GPU} changed"]
    assert provenance.changes(None, after) == ["it was made before runs recorded their inputs"]
    bumped = {**after, "lmmsim_version": "9.9"}
    assert provenance.changes(after, bumped) == [f"lmmsim version {after['lmmsim_version']} -> 9.9"]


def test_sweep_reuses_runs_until_a_catalog_entry_changes(overlay, tmp_path, ran, capsys):
    out = tmp_path / "sweep"
    first = lmmsim.sweep(_spec(), output=out)
    assert len(ran) == 2 and set(first["status"]) == {"ok"}
    done = json.loads((out / "runs" / first["run_id"][0] / "done.json").read_text())
    assert done["cache_key"]["inputs"]["catalog"][f"gpus/{GPU}"]
    assert first["provenance.lmmsim_version"].notna().all()

    ran.clear()  # same inputs: every run reused
    again = lmmsim.sweep(_spec(), output=out)
    assert ran == [] and list(again["run_id"]) == list(first["run_id"])

    capsys.readouterr()
    _edit_gpu(overlay, peak_bf16_tflops=999.0)
    changed = lmmsim.sweep(_spec(), output=out)
    assert sorted(ran) == sorted(changed["run_id"])
    assert set(changed["run_id"]).isdisjoint(first["run_id"])
    err = capsys.readouterr().err
    assert f"sweep: rerunning 2 runs already made: catalog entry gpus/{GPU} changed" in err


def test_a_run_from_before_provenance_is_named_when_rerun(tmp_path, ran, capsys):
    out = tmp_path / "sweep"
    first = lmmsim.sweep(_spec(), output=out)
    for run_id in first["run_id"]:  # as an older lmmsim left it: id = the scenario's hash alone
        run_dir = out / "runs" / run_id
        done = json.loads((run_dir / "done.json").read_text())
        legacy = run_id_of((run_dir / "scenario.resolved.yaml").read_text())
        assert done.pop("scenario_id") == legacy
        done.pop("cache_key")
        (run_dir / "done.json").write_text(json.dumps(done))
        run_dir.rename(out / "runs" / legacy)
    ran.clear()
    capsys.readouterr()
    lmmsim.sweep(_spec(), output=out)
    assert len(ran) == 2
    assert "rerunning 2 runs already made: it was made before runs recorded their inputs" in capsys.readouterr().err


def test_a_replayed_trace_file_is_an_input(tmp_path):
    from lmmsim.scenario import validate_scenario

    trace = tmp_path / "t.jsonl"
    shutil.copy(scenario_file("trace-replay").parent / "traces" / "quickstart-100.jsonl", trace)
    raw = yaml.safe_load(scenario_file("trace-replay").read_text())
    raw["workload"]["arrival"]["path"] = "t.jsonl"
    scn = validate_scenario(raw)
    before = provenance.cache_key(scn, tmp_path)
    assert list(before["inputs"]["traces"]) == ["t.jsonl"]
    trace.write_text(trace.read_text().replace('"output_tokens": ', '"output_tokens": 1', 1))
    after = provenance.cache_key(scn, tmp_path)
    assert provenance.changes(before, after) == ["trace t.jsonl changed"]

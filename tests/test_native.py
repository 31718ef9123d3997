"""The compiled copies of the hot modules (lmmsim/native.py): taken only while fresh, and the
same results as the Python they are compiled from."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lmmsim import native

ROOT = Path(__file__).resolve().parents[1]


def _fake_build(tmp_path: Path, modules: dict[str, str]) -> Path:
    """A native folder holding an (empty) compiled file and a manifest entry per module."""
    for module in modules:
        (tmp_path / native.binary_name(module)).write_bytes(b"")
    (tmp_path / native.MANIFEST).write_text(json.dumps(modules))
    return tmp_path


def test_a_copy_built_from_other_source_is_not_taken(tmp_path):
    fresh, edited = native.MODULES[0], native.MODULES[1]
    folder = _fake_build(tmp_path, {fresh: native.source_digest(native.source_path(fresh)), edited: "0" * 64})
    found, stale, missing = native.scan(folder)
    assert list(found) == [fresh] and stale == [edited]
    assert set(missing) == set(native.MODULES) - {fresh, edited}
    finder = native._Finder(found)
    assert finder.find_spec(edited) is None and finder.find_spec("lmmsim.results") is None
    assert finder.find_spec(fresh).origin == str(folder / native.binary_name(fresh))


def test_a_copy_of_other_types_is_not_taken(tmp_path):
    # the digest covers a module's .pxd too (C types of its compiled copy)
    m = "lmmsim.engine.pipeline_steady"
    src = native.source_path(m)
    assert src.with_suffix(".pxd").is_file()
    source_only = hashlib.sha256(src.read_bytes()).hexdigest()
    assert native.scan(_fake_build(tmp_path, {m: source_only}))[1] == [m]


def test_switched_off_takes_nothing(tmp_path, monkeypatch):
    saved = dict(native._state)
    monkeypatch.setenv(native.ENV, "0")
    m = native.MODULES[0]
    try:
        native.install(_fake_build(tmp_path, {m: native.source_digest(native.source_path(m))}))
        assert native._state["taken"] == () and native.status()["off"]
    finally:
        native._state.update(saved)


def test_no_compiled_module_defines_a_pydantic_model():
    # pydantic reads a model class's attributes, and compiled functions are not the functions it expects
    assert [m for m in native.MODULES if "BaseModel" in native.source_path(m).read_text()] == []


_RUN = """
import hashlib, json, sys
import lmmsim.native as n
from lmmsim.results import run_scenario
from lmmsim.scenario import load_scenario
out = []
for path in sys.argv[1:]:
    scn, base = load_scenario(path, ["workload.num_requests=400"])
    res = run_scenario(scn, base)
    summary = {k: v for k, v in res.summary.items() if "wall" not in k and k != "provenance"}
    out.append([hashlib.sha256(res.requests.to_csv(float_format="%.17g").encode()).hexdigest(),
                json.dumps(summary, sort_keys=True, default=str)])
loaded = sum(n.is_compiled(sys.modules[m]) for m in n.MODULES if m in sys.modules)
print(json.dumps({"status": n.status(), "loaded": loaded, "runs": out}))
"""


def test_compiled_and_python_runs_are_identical():
    """Pipeline (gLLM), monolithic (vLLM) and disaggregated (RServe) runs, compiled and as Python."""
    scenarios = [str(ROOT / p) for p in ("scenarios/baselines/rps-mix-internvl38b-gllm.yaml",
                                         "scenarios/baselines/rps-mix-internvl38b-vllm.yaml",
                                         "scenarios/baselines/rserve-mmmu-qwen72b-rserve.yaml")]

    def run(flag: str) -> dict:
        env = {**os.environ, native.ENV: flag}
        done = subprocess.run([sys.executable, "-c", _RUN, *scenarios], capture_output=True, text=True,
                              env=env, cwd=ROOT, check=True)
        return json.loads(done.stdout.strip().splitlines()[-1])

    compiled, python = run("1"), run("0")
    if compiled["status"]["compiled"] == 0:
        pytest.skip("no compiled modules in this install (no Cython or C compiler at install time)")
    assert compiled["loaded"] and python["loaded"] == 0 and python["status"]["off"]
    assert compiled["runs"] == python["runs"]

"""RPS-Serve's prepared admission model cached on disk (``LMMSIM_PREP_CACHE``, opt-in).

A run that reads its admission model back from the cache gives the same results,
byte for byte, as one that profiled and fitted it; without the variable nothing is
written; a change to what the model depends on names another entry.
"""

from __future__ import annotations

import pytest
import yaml

from lmmsim.results import run_scenario, write_results
from lmmsim.rps import admission as admission_mod
from lmmsim.rps import prep_cache
from lmmsim.scenario import load_scenario

SCENARIO = """
name: rps-cache
seed: 0
system: rps-serve
model: llava-onevision-qwen2-7b
hardware: {gpu: h100-sxm-80gb, count: 1, interconnect: nvlink}
workload:
  num_requests: 60
  arrival: {kind: poisson, rate: 6}
  mix:
  - {name: short_text, weight: 0.5, text_tokens: {kind: lognormal, mean: 300, sigma: 0.8, max: 1023}}
  - {name: long_text, weight: 0.3, text_tokens: {kind: uniform, low: 1025, high: 4096}}
  - name: image
    weight: 0.2
    text_tokens: {kind: fixed, value: 100}
    images: {count: 1, width: 768, height: 768}
  output_tokens: {kind: lognormal, mean: 64, sigma: 0.5, max: 256}
slo:
  ttft_s: {text: 0.5, image: 0.7}
"""
FAST = ["policy.queue.profile_requests=60"]


@pytest.fixture
def scenario_file(tmp_path):
    path = tmp_path / "scn" / "mix.yaml"
    path.parent.mkdir()
    path.write_text(SCENARIO)
    return path


def _written(path, out, monkeypatch, *sets):
    monkeypatch.setattr(admission_mod, "_CACHE", {})  # nothing from this process's memory
    scn, base = load_scenario(path, [*FAST, *sets])
    run = run_scenario(scn, base)
    run.summary["sim_wall_time_s"] = 0.0
    write_results(run, scn, out)
    return {f: (out / f).read_bytes() for f in ("summary.json", "requests.parquet", "admission_profile.csv")}


def test_a_run_from_the_disk_cache_writes_the_same_files(scenario_file, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.delenv(prep_cache.ENV, raising=False)
    fresh = _written(scenario_file, tmp_path / "fresh", monkeypatch)
    assert not cache.exists()

    monkeypatch.setenv(prep_cache.ENV, str(cache))
    first = _written(scenario_file, tmp_path / "first", monkeypatch)  # profiles, fits, writes the entry
    entries = sorted(p.suffix for p in cache.iterdir())
    assert entries == [".json", ".parquet"]

    def no_profiling(*args, **kwargs):
        raise AssertionError("profiled although the disk cache holds the model")

    monkeypatch.setattr("lmmsim.rps.profiler.profile_isolated", no_profiling)
    second = _written(scenario_file, tmp_path / "second", monkeypatch)  # read back from disk
    assert first == fresh
    assert second == fresh


def test_the_entry_name_follows_what_the_model_depends_on(scenario_file, tmp_path, monkeypatch):
    monkeypatch.setenv(prep_cache.ENV, str(tmp_path / "cache"))
    names = set()
    for sets in ([], ["seed=1"], ["policy.queue.num_classes=2"], ["workload.arrival.rate=9"]):
        scn, base = load_scenario(scenario_file, [*FAST, *sets])
        names.add(prep_cache.digest(admission_mod._cache_key(scn, base), base))
    assert len(names) == 3  # the arrival rate does not change the admission model; the others do
    (scenario_file.parent / "trace.csv").write_text("a local file the scenario may read\n")
    scn, base = load_scenario(scenario_file, FAST)
    assert prep_cache.digest(admission_mod._cache_key(scn, base), base) not in names


def _name(path, *sets):
    scn, base = load_scenario(path, [*FAST, *sets])
    return prep_cache.digest(admission_mod._cache_key(scn, base), base)


def test_files_the_scenario_names_elsewhere_and_library_versions_count(scenario_file, tmp_path, monkeypatch):
    """An empirical length file in a subfolder or at an absolute path, edited in place, names
    another entry; so does another library version."""
    monkeypatch.setenv(prep_cache.ENV, str(tmp_path / "cache"))
    (scenario_file.parent / "data").mkdir()
    for f in (scenario_file.parent / "data" / "lengths.txt", tmp_path / "lengths.txt"):
        f.write_text("300\n500\n")
        where = f.relative_to(scenario_file.parent) if f.parent.name == "data" else f
        lengths = f"workload.mix.0.text_tokens={{kind: empirical, path: '{where}'}}"
        before = _name(scenario_file, lengths)
        f.write_text("300\n900\n")
        assert _name(scenario_file, lengths) != before, where
    here = _name(scenario_file, lengths)
    monkeypatch.setattr(prep_cache, "library_versions", lambda: "3.11.7 numpy=another")
    assert _name(scenario_file, lengths) != here


def test_a_cache_folder_inside_the_scenario_folder_still_hits(scenario_file, monkeypatch):
    cache = scenario_file.parent / ".prep"
    monkeypatch.setenv(prep_cache.ENV, str(cache))
    before = _name(scenario_file)
    cache.mkdir()
    (cache / f"{before}.json").write_text("{}")
    monkeypatch.setenv(prep_cache.ENV, str(scenario_file.parent))  # the cache is the folder itself
    same_folder = _name(scenario_file)
    (scenario_file.parent / f"{same_folder}.json").write_text("{}")
    assert _name(scenario_file) == same_folder


def test_a_trace_workload_keys_the_model_by_the_trace(tmp_path, monkeypatch):
    """The profile of a trace workload runs the trace's first rows: two traces in one process (a
    sweep over trace files) must not share an admission model, on disk or in memory."""
    monkeypatch.delenv(prep_cache.ENV, raising=False)
    folder = tmp_path / "tr"
    folder.mkdir()
    rows = {"a": [(0.1 * i, 300 + 40 * i) for i in range(60)], "b": [(0.1 * i, 3000 + 40 * i) for i in range(60)]}
    for name, trace in rows.items():
        (folder / f"{name}.jsonl").write_text("".join(
            f'{{"timestamp": {t}, "modality": "text", "text_tokens": {n}, "media": [], "output_tokens": 20}}\n'
            for t, n in trace))
    raw = yaml.safe_load(SCENARIO)
    raw["workload"] = {"arrival": {"kind": "trace", "path": "a.jsonl"}}
    (folder / "s.yaml").write_text(yaml.safe_dump(raw))
    keys = set()
    for name in rows:
        scn, base = load_scenario(folder / "s.yaml", [*FAST, f"workload.arrival.path={name}.jsonl"])
        keys.add(admission_mod._cache_key(scn, base))
    assert len(keys) == 2
    scn, base = load_scenario(folder / "s.yaml", FAST)
    before = admission_mod._cache_key(scn, base)
    (folder / "a.jsonl").write_text((folder / "b.jsonl").read_text())  # edited in place
    assert admission_mod._cache_key(scn, base) != before

"""RPS-Serve's prepared admission model cached on disk (``LMMSIM_PREP_CACHE``, opt-in).

A run that reads its admission model back from the cache gives the same results,
byte for byte, as one that profiled and fitted it; without the variable nothing is
written; a change to what the model depends on names another entry.
"""

from __future__ import annotations

import pytest

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

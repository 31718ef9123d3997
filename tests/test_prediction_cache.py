"""The fit evaluations' disk cache (lmmsim.costmodel.prediction_cache, opt-in): a process that
reads it evaluates (almost) no forest, and every run's results are those of a run without it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import lmmsim.costmodel.npmodels as npmodels
from lmmsim.costmodel import fitcache, prediction_cache
from lmmsim.results import run_scenario
from lmmsim.scenario import load_scenario

SCENARIO = "bench/vidur_llama70b.yaml"  # the A100 forest fit


def _run():
    fitcache.clear()  # as a new process: no fit loaded, no memo
    scn, base = load_scenario(SCENARIO, ["workload.num_requests=40"])
    out = run_scenario(scn, base)
    summary = {k: v for k, v in out.summary.items() if k not in ("sim_wall_time_s", "provenance")}
    return out.requests, summary


def _walks(monkeypatch) -> list:
    calls = []
    original = npmodels.ForestModel.scalar_s

    def counted(self, row):
        calls.append(row)
        return original(self, row)

    monkeypatch.setattr(npmodels.ForestModel, "scalar_s", counted)
    return calls


def test_a_warm_cache_gives_the_same_results_without_evaluating(tmp_path, monkeypatch):
    monkeypatch.delenv(prediction_cache.ENV, raising=False)
    plain_requests, plain_summary = _run()
    assert not any(tmp_path.iterdir())
    monkeypatch.setenv(prediction_cache.ENV, str(tmp_path / "cache"))
    walks = _walks(monkeypatch)
    cold_requests, cold_summary = _run()  # fills the entry
    cold_walks = len(walks)
    entries = list((tmp_path / "cache").glob("*.marshal"))
    assert len(entries) == 1
    walks.clear()
    warm_requests, warm_summary = _run()  # reads it
    assert cold_walks > 100 and len(walks) <= cold_walks // 50
    for requests, summary in ((cold_requests, cold_summary), (warm_requests, warm_summary)):
        pd.testing.assert_frame_equal(requests, plain_requests, check_exact=True)
        assert summary == plain_summary  # the extrapolated share included: counted per run
    fitcache.clear()


def test_an_unreadable_entry_is_ignored_and_rewritten(tmp_path, monkeypatch):
    monkeypatch.setenv(prediction_cache.ENV, str(tmp_path))
    _run()
    (entry,) = tmp_path.glob("*.marshal")
    entry.write_bytes(b"not marshal data")
    walks = _walks(monkeypatch)
    _run()
    assert len(walks) > 100  # evaluated again
    assert prediction_cache.load(entry)[0]  # and written back whole
    fitcache.clear()


def test_an_entry_is_named_by_the_fit_files_and_the_devices(tmp_path, monkeypatch):
    monkeypatch.setenv(prediction_cache.ENV, str(tmp_path))
    files = (("model.json", 10, 1, 7), ("gemm.npz", 20, 2, 8))
    name = prediction_cache.entry_path(files, "gpu", "link")
    assert prediction_cache.entry_path((("model.json", 10, 1, 99), files[1]), "gpu", "link") == name  # inode
    assert prediction_cache.entry_path((("model.json", 10, 3, 7), files[1]), "gpu", "link") != name  # rewritten
    assert prediction_cache.entry_path(files, "other gpu", "link") != name
    assert prediction_cache.entry_path(files, "gpu", None) != name
    monkeypatch.delenv(prediction_cache.ENV)
    assert prediction_cache.entry_path(files, "gpu", "link") is None


def test_only_exactly_restorable_entries_are_written(tmp_path):
    path = tmp_path / "entry.marshal"
    memo = {((4, 2.0), (int, float)): (1.5e-5, 1),
            ((np.int64(4),), (np.int64,)): (1.0, 1),  # a numpy argument: left out
            ((5,), (int,)): (np.float64(2.0), 1)}  # numpy seconds: kept as such
    blocks = {(1, 64, 128, 128, int, int): ([1e-6] * 128, 1.28e-4, 0.0, 0)}
    prediction_cache.save(path, {("gemm", None): memo}, blocks)
    scalars, loaded_blocks = prediction_cache.load(path)
    assert scalars == {("gemm", None): {((4, 2.0), (int, float)): (1.5e-5, 1), ((5,), (int,)): (2.0, 1)}}
    assert [type(v[0]) for v in scalars[("gemm", None)].values()] == [float, np.float64]
    assert loaded_blocks == blocks


@pytest.fixture(autouse=True)
def _fresh_fits():
    yield
    fitcache.clear()

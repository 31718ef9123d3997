"""EAServe's Fig. 12 searches do not depend on the user's --jobs (HAS's history depends on its batch)."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd

from lmmsim import search
from lmmsim.reproduce import easerve_metrics


def test_fig12_searches_use_a_fixed_batch_whatever_jobs(tmp_path, monkeypatch):
    spec = tmp_path / "fig12.yaml"
    spec.write_text("scenario: s.yaml\nrate: 5\nbudget: 2\nmethods: [has]\n")
    seen = []
    monkeypatch.setattr(search, "read_raw", lambda scenario, sets: ({}, None, tmp_path))
    monkeypatch.setattr(search, "Problem", lambda *a, **k: None)

    def fake_search(problem, *, method, jobs, **_):
        seen.append(jobs)
        return SimpleNamespace(summary={"deploy_cost_s": 0}, history=[], best=None)

    monkeypatch.setattr(search, "search", fake_search)
    for jobs in (1, 2, 7):
        folder = tmp_path / f"j{jobs}"
        folder.mkdir()
        easerve_metrics.run_searches(spec, folder, True, jobs)
        assert pd.read_parquet(folder / "results.parquet").empty
    assert seen == [easerve_metrics.SEARCH_BATCH] * 3

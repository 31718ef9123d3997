"""Every shipped scenario validates and runs (on a shortened workload)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lmmsim.results import run_scenario
from lmmsim.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent / "scenarios"


def _is_sweep(path: Path) -> bool:
    return any(line.startswith("axes:") for line in path.read_text().splitlines())


def _is_search_spec(path: Path) -> bool:
    """A reproduction's search figure (runs `lmmsim search`, lmmsim/reproduce/easerve.py)."""
    return any(line.startswith("methods:") for line in path.read_text().splitlines())


SCENARIOS = sorted(p for p in ROOT.rglob("*.yaml") if not _is_sweep(p) and not _is_search_spec(p))
SWEEPS = sorted(p for p in ROOT.rglob("*.yaml") if _is_sweep(p))
SWEEP_SIZES = {"rate-vllm-vs-vllm-pp": 20, "fig4": 4, "fig12-1k": 54, "fig12-2k": 54, "fig16-high": 7,
               "fig16-low": 7, "fig17": 10, "fig18-1k": 18, "fig18-2k": 18, "fig20": 14, "fig21": 35,
               "fig9": 20, "fig10-7b-1gpu": 10, "fig10-7b-2gpu": 20, "fig10-7b-4gpu": 20, "fig10-72b-2gpu": 10,
               "fig10-72b-4gpu": 20, "fig11": 4, "fig13": 16, "fig14": 15, "fig15": 9, "fig16": 12,
               "fig9-image": 80, "fig9-video": 80, "fig9-audio": 80, "fig10-image": 35, "fig10-video": 35,
               "fig10-audio": 35, "table5": 8, "table6": 3, "table7": 6}


def test_scenarios_exist():
    assert any(p.name == "quickstart.yaml" for p in SCENARIOS)


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_scenario_runs(path):
    scn, base = load_scenario(path, ["workload.num_requests=40"])
    run = run_scenario(scn, base)
    df, s = run.requests, run.summary
    assert len(df) == 40
    assert s["num_finished"] + s["num_rejected"] + s["num_unfinished"] == 40
    assert s["num_finished"] > 0
    finished = df[df["status"] == "finished"]
    assert (finished["first_token_at"] >= finished["arrived_at"]).all()
    assert (finished["finished_at"] >= finished["first_token_at"]).all()
    media = finished[finished["num_mm_tokens"] > 0]
    assert media["encode_finished_at"].notna().all()
    assert 0 < s["gpu_utilization"]["mean"] <= 1
    for pool in s["deployment"]["pools"].values():
        for peak in pool.get("peak_kv_blocks_used", []):
            assert peak <= pool["kv_blocks_per_worker"]


@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: p.stem)
def test_sweep_files_expand_to_valid_scenarios(path):
    from lmmsim.sweep import expand, load_sweep

    points = expand(load_sweep(path))
    assert len(points) == SWEEP_SIZES[path.stem]

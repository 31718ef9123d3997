"""Chrome trace tracks: one lane per concurrent slot (no overlapping X slices on a thread) and counter tracks."""

from __future__ import annotations

import collections
import itertools
import json
from pathlib import Path

import pytest

from lmmsim.engine.steplog import StepLog, StepRecord
from lmmsim.results import run_scenario
from lmmsim.scenario import load_scenario
from lmmsim.tracing import (
    assign_lanes,
    lane_name,
    read_chrome_trace,
    write_chrome_trace,
)

BASE = Path(__file__).resolve().parent.parent / "scenarios" / "rps-mix-llava72b-h100x4.yaml"
BURST = ["model=qwen2.5-vl-7b", "hardware.gpu=h100-sxm-80gb", "deployment=null",
         "deployment.max_model_len=32768", "policy=null", "workload.num_requests=20",
         "workload.arrival={kind: deterministic, rate: 1000}",
         ("workload.mix=[{name: img, weight: 1, text_tokens: {kind: fixed, value: 50}, "
          "output_tokens: {kind: fixed, value: 8}, images: {count: 1, width: 448, height: 448}}]")]


def _overlaps(intervals) -> int:
    intervals = sorted(intervals)
    return sum(1 for a, b in itertools.pairwise(intervals) if b[0] < a[1])


def _traced(system: str, tmp_path: Path):
    scn, base = load_scenario(BASE, [f"system={system}", *BURST])
    run = run_scenario(scn, base, trace=True)
    path = tmp_path / f"{system}.json"
    write_chrome_trace(run.built.step_log, path, title=system)
    return run.built.step_log, path, json.loads(path.read_text())  # valid JSON


def _threads(doc) -> dict:
    return {e["tid"]: e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}


@pytest.fixture(scope="module")
def modserve(tmp_path_factory):
    return _traced("modserve", tmp_path_factory.mktemp("trace"))


def test_concurrent_transfers_get_their_own_tracks(modserve):
    log, path, doc = modserve
    per_worker = collections.defaultdict(list)
    for r in log:
        per_worker[r.worker].append((r.start_at, r.end_at))
    links = [w for w in per_worker if w.startswith("link:")]
    assert any(_overlaps(per_worker[w]) for w in links), "the scenario must have concurrent transfers"

    slices = collections.defaultdict(list)
    for e in doc["traceEvents"]:
        if e["ph"] == "X":
            slices[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    assert all(_overlaps(v) == 0 for v in slices.values())

    names = _threads(doc)
    assert len(set(names.values())) == len(names)
    lanes = [n for n in names.values() if " #" in n]
    assert lanes and all(n.split(" #")[0] in per_worker for n in lanes)  # "link:encoder0->llm #1"

    back = read_chrome_trace(path)  # lanes fold back into their worker
    assert sorted(back["worker"].unique()) == sorted(per_worker)
    assert back[["worker", "start_at", "end_at"]].values.tolist() == [[r.worker, r.start_at, r.end_at] for r in log]


def test_counter_tracks_per_engine(modserve):
    _, _, doc = modserve
    counters = [e for e in doc["traceEvents"] if e["ph"] == "C"]
    by_name = collections.defaultdict(list)
    for e in counters:
        by_name[e["name"]].append(e)
    assert {"llm0 KV", "llm0 queue"} <= set(by_name)
    for name, events in by_name.items():
        ts = [e["ts"] for e in events]
        assert ts == sorted(ts), name
    assert all(set(e["args"]) == {"blocks used"} for e in by_name["llm0 KV"])
    assert all(set(e["args"]) == {"waiting", "running"} for e in by_name["llm0 queue"])
    assert max(e["args"]["blocks used"] for e in by_name["llm0 KV"]) > 0
    assert max(e["args"]["waiting"] + e["args"]["running"] for e in by_name["llm0 queue"]) > 1


def test_pipeline_counters_use_the_engine_name(tmp_path):
    _, _, doc = _traced("rserve", tmp_path)
    names = {e["name"] for e in doc["traceEvents"] if e["ph"] == "C"}
    assert names == {"llm0 KV", "llm0 queue"}  # not one per stage


def test_lanes_are_the_lowest_free_slot(tmp_path):
    R = StepRecord
    log = StepLog([R("link:a->b", 0.0, 1.0, "transfer", (0,), 0, 1),
                   R("link:a->b", 0.5, 2.0, "transfer", (1,), 0, 1),
                   R("link:a->b", 1.0, 1.5, "transfer", (2,), 0, 1),  # lane 0 free again at 1.0
                   R("link:a->b", 1.2, 1.3, "transfer", (3,), 0, 1),  # lanes 0 and 1 busy: lane 2
                   R("replica0", 0.0, 1.0, "prefill", (0,), 5, 1, kv_blocks_used=3, num_waiting=2, num_running=1)])
    lanes, num = assign_lanes(log)
    assert lanes == [0, 1, 0, 2, 0] and num == {"link:a->b": 3, "replica0": 1}
    assert lane_name("link:a->b", 0) == "link:a->b" and lane_name("link:a->b", 2) == "link:a->b #2"
    write_chrome_trace(log, tmp_path / "t.json")
    doc = json.loads((tmp_path / "t.json").read_text())
    assert sorted(_threads(doc).values()) == ["link:a->b", "link:a->b #1", "link:a->b #2", "replica0"]
    counters = [e for e in doc["traceEvents"] if e["ph"] == "C"]
    assert [e["args"] for e in counters] == [{"blocks used": 3}, {"waiting": 2, "running": 1}]
    back = read_chrome_trace(tmp_path / "t.json")
    assert back.attrs["workers"] == ["replica0", "link:a->b"]
    assert [StepRecord(*row) for row in back.itertuples(index=False)] == list(log)

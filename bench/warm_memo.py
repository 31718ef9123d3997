"""Warm cost models: the same summaries whether a run is first or later in its process (not a test).

    python bench/warm_memo.py                       # the default scenario list
    python bench/warm_memo.py scenarios/quickstart.yaml --set workload.num_requests=300

Runs each scenario once in a fresh process (its summary.json and requests.parquet as
``lmmsim run`` writes them), then every scenario twice in turn in this one process,
whose fitted cost models (:mod:`lmmsim.costmodel.fitcache`) and RPS-Serve admission
models stay warm. Prints, per scenario, the wall seconds fresh / warm and whether
summary.json (wall-time keys blanked) and requests.parquet are byte-identical; exits 1
on any difference.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ("scenarios/quickstart.yaml", "scenarios/rps-mix-llava72b-h100x4.yaml",
           "scenarios/baselines/rps-mix-internvl38b-vllm.yaml", "scenarios/reproduce/easerve/image-llava34b.yaml",
           "scenarios/baselines/rserve-mmmu-qwen72b-rserve.yaml", "scenarios/qwen3-vl-235b-ep-h200.yaml",
           "scenarios/multi-turn-chat.yaml")
WALL_KEYS = ("sim_wall_time_s",)


def fingerprint(path: str, sets: list[str]) -> tuple[float, str, str]:
    """``(wall_s, summary.json sha256, requests.parquet sha256)`` of one run in this process."""
    from lmmsim.results import run_scenario, write_results
    from lmmsim.scenario import load_scenario

    scn, base = load_scenario(path, sets)
    t0 = time.perf_counter()
    run = run_scenario(scn, base)
    wall = time.perf_counter() - t0
    for key in WALL_KEYS:
        run.summary[key] = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        write_results(run, scn, out, force=False)
        digests = [hashlib.sha256((out / f).read_bytes()).hexdigest() for f in ("summary.json", "requests.parquet")]
    return wall, digests[0], digests[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenarios", nargs="*", default=list(DEFAULT))
    ap.add_argument("--set", action="append", default=[], dest="sets")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:  # one fresh run, printed as JSON for the parent
        print(json.dumps(fingerprint(args.scenarios[0], args.sets)))
        return 0
    fresh = {}
    for path in args.scenarios:
        cmd = [sys.executable, __file__, "--child", path, *(f"--set={s}" for s in args.sets)]
        fresh[path] = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    bad = 0
    print(f"{'scenario':55s} {'fresh s':>8s} {'1st s':>7s} {'2nd s':>7s}  same")
    warm = {p: [] for p in args.scenarios}
    for _ in range(2):
        for path in args.scenarios:
            warm[path].append(fingerprint(path, args.sets))
    for path in args.scenarios:
        same = all(w[1:] == tuple(fresh[path][1:]) for w in warm[path])
        bad += not same
        print(f"{path:55s} {fresh[path][0]:8.3f} {warm[path][0][0]:7.3f} {warm[path][1][0]:7.3f}  "
              f"{'yes' if same else 'NO'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

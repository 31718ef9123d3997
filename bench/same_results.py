"""Fingerprint every scenario's results, to show a refactor changes none of them (not a test).

Runs every scenario YAML under ``scenarios/`` (sweep specifications are skipped)
and prints one line per scenario: the SHA-256 of its ``requests.parquet`` bytes
as ``lmmsim run`` writes them. Save the output before a change and compare after:

    python bench/same_results.py > /tmp/before.txt     # on the old code
    python bench/same_results.py > /tmp/after.txt      # on the new code
    diff /tmp/before.txt /tmp/after.txt && echo identical

``--jobs N`` runs N scenarios at once (default 2).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def fingerprint(path: str) -> str:
    from lmmsim.errors import UserError
    from lmmsim.results import run_scenario, write_results
    from lmmsim.scenario import load_scenario
    from lmmsim.yamlio import read_yaml

    raw = read_yaml(Path(path))
    if not isinstance(raw, dict) or "axes" in raw or "base" in raw:
        return "sweep (skipped)"
    try:
        scn, base = load_scenario(path, [])
        run = run_scenario(scn, base)
    except UserError as err:
        return f"error: {err}"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        write_results(run, scn, out, force=False)
        return hashlib.sha256((out / "requests.parquet").read_bytes()).hexdigest()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    paths = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "scenarios").rglob("*.yaml"))
    with ProcessPoolExecutor(args.jobs) as pool:
        for path, digest in zip(paths, pool.map(fingerprint, [str(ROOT / p) for p in paths])):
            print(f"{path} {digest}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

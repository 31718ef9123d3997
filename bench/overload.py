"""Simulator speed under overload (not a test): simulated requests per wall-second as the
request count grows, at twice each system's saturation rate.

    python bench/overload.py                                   # every system, 2k-32k requests
    python bench/overload.py --systems gllm,rserve --sizes 2000,8000
    python bench/overload.py --scenarios scenarios/baselines/rserve-mmmu-qwen72b-vllm.yaml

Each system runs its own scenario (the map in ``bench/systems_speed.py``).

Saturation is measured first: the throughput of 1,000 requests all arriving at once. Each size
then runs at 2x that rate, so the waiting queue grows through the run. A simulator whose step
cost grows with the queue slows down as the size grows; a linear one keeps the same req/s
(the issue's bar: within 20% from the smallest size to the largest). Run it pinned to one core
(``taskset -c 1``) on an idle machine.
"""

from __future__ import annotations

import argparse
import sys
import time

from systems_speed import SYSTEMS

from lmmsim.results import run_scenario
from lmmsim.scenario import load_scenario


def saturation(path: str, overrides: list[str]) -> float:
    scn, base = load_scenario(path, [*overrides, "workload.num_requests=1000", "workload.arrival.rate=100000"])
    return run_scenario(scn, base).summary["throughput"]["requests_per_s"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated: " + ", ".join(SYSTEMS))
    ap.add_argument("--scenarios", help="comma-separated scenario files instead of the systems' own")
    ap.add_argument("--sizes", default="2000,4000,8000,16000,32000")
    ap.add_argument("--load", type=float, default=2.0, help="offered rate as a multiple of saturation")
    args = ap.parse_args()
    sizes = [int(n) for n in args.sizes.split(",")]
    print(f"{'system':44s} {'sat req/s':>9s} " + " ".join(f"{n:>8d}" for n in sizes) + "   (simulated req/s)")
    runs = ([(p.rsplit("/", 1)[-1].removesuffix(".yaml"), p, []) for p in args.scenarios.split(",")]
            if args.scenarios else [(name, *SYSTEMS[name]) for name in args.systems.split(",")])
    for name, path, overrides in runs:
        rate = args.load * saturation(path, overrides)
        speeds = []
        for n in sizes:
            scn, base = load_scenario(path, [*overrides, f"workload.num_requests={n}", f"workload.arrival.rate={rate!r}"])
            t0 = time.perf_counter()
            run_scenario(scn, base)
            speeds.append(n / (time.perf_counter() - t0))
        print(f"{name:44s} {rate / args.load:9.3f} " + " ".join(f"{v:8,.0f}" for v in speeds)
              + f"   last/first {speeds[-1] / speeds[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Bounded-memory benchmark (not a test): the speed benchmark's workload with
``sim.keep_requests: false`` (issue 20 item 5: 10 million requests in < 2 GB).

    python bench/huge_run.py --requests 10000000          # add --approx-summary, --keep (in-memory)
    python bench/huge_run.py --requests 1000000 --rate 6.967   # skip the capacity run

The rate defaults to 80% of the saturation throughput, measured as bench/speed.py does
(1,000 requests arriving together). Prints wall time, the summary's mean TTFT / ITL
and peak RSS; ``--out DIR`` also writes the results folder.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

from lmmsim.results import run_scenario, write_results
from lmmsim.scenario import load_scenario

HERE = Path(__file__).resolve().parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", default=str(HERE / "rps_mix_llava7b.yaml"))
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--load", type=float, default=0.8, help="fraction of measured capacity")
    ap.add_argument("--rate", type=float, default=None, help="offered rate (req/s); skips the capacity run")
    ap.add_argument("--keep", action="store_true", help="sim.keep_requests true (the in-memory run)")
    ap.add_argument("--approx-summary", action="store_true", help="sim.exact_summary false")
    ap.add_argument("--out", default=None, help="write the results folder here")
    args = ap.parse_args()
    rate = args.rate
    if rate is None:
        sat, _ = load_scenario(args.scenario, ["workload.num_requests=1000", "workload.arrival.rate=100000"])
        rate = args.load * run_scenario(sat).summary["throughput"]["requests_per_s"]
    sets = [f"workload.num_requests={args.requests}", f"workload.arrival.rate={rate!r}",
            f"sim.keep_requests={'true' if args.keep else 'false'}",
            f"sim.exact_summary={'false' if args.approx_summary else 'true'}"]
    scn, base = load_scenario(args.scenario, sets)
    t0 = time.perf_counter()
    run = run_scenario(scn, base)
    wall = time.perf_counter() - t0
    if args.out:
        write_results(run, scn, Path(args.out), force=True)
    s = run.summary
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"offered rate {rate:.3f} req/s; keep_requests={args.keep}; exact_summary={not args.approx_summary}")
    print(f"requests: {s['num_requests']} ({s['num_finished']} finished), simulated {s['sim_end_at_s']:.0f} s")
    print(f"wall: {wall:.1f} s total (simulation loop {s['sim_wall_time_s']:.1f} s); "
          f"engine steps: {s['sim_steps']:,}")
    print(f"mean TTFT {s['ttft_s']['mean']:.6f} s, p99 {s['ttft_s']['p99']:.6f} s; "
          f"ITL mean {s['itl_s']['mean'] * 1e3:.4f} ms, p99 {s['itl_s']['p99'] * 1e3:.4f} ms")
    print(f"peak RSS: {rss_mib:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())

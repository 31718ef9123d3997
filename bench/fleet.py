"""Fleet-scale simulator speed benchmark (not a test).

RPS-Serve's mix (bench/rps_mix_llava7b.yaml) on LLaVA-OneVision-Qwen2-72B, 125
replicas x TP8 H100-SXM-80GB behind a least_loaded router, Poisson arrivals at
~80% of the fleet's capacity (125 x the saturation throughput of one replica,
measured first on 1,000 requests arriving at once), one API server (host
preprocessing) per replica.

    python bench/fleet.py                       # 1M requests over 125 replicas
    python bench/fleet.py --requests 10000000   # 10M
    python bench/fleet.py --replicas 1 --requests 100000   # one replica, same per-replica load
    python bench/fleet.py --compare 100000      # then also one replica on 100k requests: the ratio

Prints wall time, simulated requests per wall-second, microseconds per request
(whole run, simulation loop alone, and process CPU time: steadier than wall time on
a shared machine) and peak RSS.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

from lmmsim.results import run_scenario
from lmmsim.scenario import load_scenario

HERE = Path(__file__).resolve().parent
MODEL = ["model=llava-onevision-qwen2-72b", "hardware.gpu=h100-sxm-80gb", "deployment.tp=8",
         "policy.router.kind=least_loaded"]


def overrides(replicas: int, requests: int, rate: float, ff: str, extra=()) -> list[str]:
    # one API server (host preprocessing, lmmsim.assembly.host_stage) per replica: a single
    # one would cap the fleet at ~56 req/s
    return MODEL + [f"hardware.count={8 * replicas}", f"deployment.replicas={replicas}", f"host.workers={replicas}",
                    f"workload.num_requests={requests}", f"workload.arrival.rate={rate!r}",
                    f"sim.fast_forward={ff}", *extra]


def timed(scenario: str, replicas: int, requests: int, rate: float, ff: str, extra) -> dict:
    scn, base = load_scenario(scenario, overrides(replicas, requests, rate, ff, extra))
    t0, c0 = time.perf_counter(), time.process_time()
    s = run_scenario(scn, base).summary
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    n = s["num_requests"]
    loop = s["sim_wall_time_s"]
    print(f"{replicas} replica(s), {n:,} requests ({s['num_finished']:,} finished), "
          f"simulated {s['sim_end_at_s']:.0f} s, GPU busy {s['gpu_utilization']['mean']:.1%}")
    print(f"  wall {wall:.2f} s (simulation loop {loop:.2f} s); {n / wall:,.0f} simulated req/s; "
          f"{wall / n * 1e6:.1f} us/request ({loop / n * 1e6:.1f} in the loop, {cpu / n * 1e6:.1f} CPU)")
    print(f"  events {s['sim_events']:,}; engine steps {s['sim_steps']:,}; preemptions {s['num_preemptions']}; "
          f"peak RSS so far {rss_mib:,.0f} MiB")
    return {"us": wall / n * 1e6, "loop_us": loop / n * 1e6, "cpu_us": cpu / n * 1e6}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", default=str(HERE / "rps_mix_llava7b.yaml"), help="the request mix")
    ap.add_argument("--replicas", type=int, default=125)
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--load", type=float, default=0.8, help="fraction of measured capacity")
    ap.add_argument("--compare", type=int, default=0, metavar="N",
                    help="afterwards, one replica at the same per-replica load on N requests, and the ratio")
    ap.add_argument("--no-fast-forward", action="store_true")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="another scenario override for the timed runs (repeatable)")
    args = ap.parse_args()
    ff = "false" if args.no_fast_forward else "true"

    # 1. capacity of one replica: 1,000 requests arriving together, throughput at saturation.
    sat, _ = load_scenario(args.scenario, overrides(1, 1000, 100_000.0, ff))
    per_replica = args.load * run_scenario(sat).summary["throughput"]["requests_per_s"]
    print(f"one replica at {args.load:.0%}: {per_replica:.3f} req/s; fleet offered rate "
          f"{per_replica * args.replicas:.3f} req/s")

    # 2. the timed runs.
    fleet = timed(args.scenario, args.replicas, args.requests, per_replica * args.replicas, ff, args.set)
    if args.compare:
        one = timed(args.scenario, 1, args.compare, per_replica, ff, args.set)
        print(f"per-request cost, {args.replicas} replicas / 1 replica: {fleet['us'] / one['us']:.2f}x "
              f"(simulation loop {fleet['loop_us'] / one['loop_us']:.2f}x, CPU time {fleet['cpu_us'] / one['cpu_us']:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

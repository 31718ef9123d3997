"""Simulator speed benchmark (not a test).

RPS-Serve's mix (40% short text, 30% long text > 1K tokens, 20% image, 10%
video) on LLaVA-OneVision-Qwen2-7B, 1x H100-SXM-80GB, mean 256 output tokens,
10,000 Poisson requests at ~80% of capacity. Capacity is measured first: the
saturation throughput of 1,000 requests all arriving at once.

    python bench/speed.py            # add --requests N, --load 0.8, --no-fast-forward
    python bench/speed.py --scenario bench/rps_mix_qwen3vl30b_moe.yaml   # the MoE variant

The MoE variant runs the mix (without video) on Qwen3-VL-30B-A3B (128 experts, 8 per token)
on one H200.

Prints simulated requests per wall-second, events, steps and peak RSS.
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", default=str(HERE / "rps_mix_llava7b.yaml"))
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--load", type=float, default=0.8, help="fraction of measured capacity")
    ap.add_argument("--no-fast-forward", action="store_true")
    ap.add_argument("--cost-model", default="auto", help="hardware.cost_model: auto (the GPU's fit) or roofline")
    args = ap.parse_args()
    ff = "false" if args.no_fast_forward else "true"
    cm = f"hardware.cost_model={args.cost_model}"

    # 1. capacity: 1,000 requests arriving together, throughput at saturation.
    sat, _ = load_scenario(args.scenario, ["workload.num_requests=1000", "workload.arrival.rate=100000",
                                           f"sim.fast_forward={ff}", cm])
    capacity = run_scenario(sat).summary["throughput"]["requests_per_s"]
    rate = args.load * capacity

    # 2. the timed run.
    scn, base = load_scenario(args.scenario, [f"workload.num_requests={args.requests}",
                                              f"workload.arrival.rate={rate!r}", f"sim.fast_forward={ff}", cm])
    t0 = time.perf_counter()
    run = run_scenario(scn, base)
    wall = time.perf_counter() - t0
    s = run.summary
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"capacity (saturation throughput): {capacity:.3f} req/s; offered rate {rate:.3f} req/s ({args.load:.0%})")
    print(f"requests: {s['num_requests']} ({s['num_finished']} finished), simulated {s['sim_end_at_s']:.0f} s")
    print(f"wall: {wall:.2f} s total (simulation loop {s['sim_wall_time_s']:.2f} s)")
    print(f"speed: {s['num_requests'] / wall:,.0f} simulated requests per wall-second")
    print(f"events: {s['sim_events']:,}; engine steps: {s['sim_steps']:,}; preemptions: {s['num_preemptions']}")
    print(f"GPU busy: {s['gpu_utilization']['mean']:.1%}; mean TTFT {s['ttft_s']['mean']:.3f} s, "
          f"mean TPOT {s['tpot_s']['mean'] * 1e3:.1f} ms")
    print(f"peak RSS: {rss_mib:.0f} MiB; cost model: {s['cost_model']['kind']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Reproduce the baseline findings of the seed papers with the shipped scenarios (not a test).

    python bench/baseline_findings.py            # all groups in scenarios/baselines/
    python bench/baseline_findings.py --rates 1.0,1.4,1.8 --group rserve-mmmu-qwen72b

Prints, per scenario and request rate: mean / P99 TTFT, mean normalized latency
(s per output token), input-token throughput and the idle GPU fraction
(1 - mean busy fraction), on identical requests per group.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from lmmsim.results import run_scenario
from lmmsim.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent / "scenarios" / "baselines"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--group", help="file-name prefix, e.g. rps-mix-llava72b")
    ap.add_argument("--rates", help="comma-separated request rates (default: each scenario's own)")
    ap.add_argument("--requests", type=int, help="override workload.num_requests")
    args = ap.parse_args()
    rates = [float(r) for r in args.rates.split(",")] if args.rates else [None]
    print(f"{'scenario':38s} {'rate':>5s} {'TTFT':>7s} {'P99':>7s} {'norm ms/tok':>11s} {'in tok/s':>9s} {'idle':>5s}")
    for path in sorted(ROOT.glob(f"{args.group or ''}*.yaml")):
        for rate in rates:
            sets = [] if rate is None else [f"workload.arrival.rate={rate}"]
            if args.requests:
                sets.append(f"workload.num_requests={args.requests}")
            scn, base = load_scenario(path, sets)
            s = run_scenario(scn, base).summary
            print(f"{path.stem:38s} {scn.workload.arrival.rate:5.2f} {s['ttft_s']['mean']:7.3f} {s['ttft_s']['p99']:7.3f} "
                  f"{s['normalized_latency_s_per_token']['mean'] * 1e3:11.1f} {s['throughput']['input_tokens_per_s']:9.0f} "
                  f"{1 - s['gpu_utilization']['mean']:5.2f}")


if __name__ == "__main__":
    main()

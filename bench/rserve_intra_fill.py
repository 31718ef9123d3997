"""Why RServe-intra loses less than the paper's 32%: how full its micro-batches are.

RServe-intra puts one request's prefill tokens in a micro-batch (rserve.txt
section 4.3.2); it loses throughput only where that request cannot fill the
budget B: its last chunk, or a chunk cut short because the next embedding has
not arrived (the paper's Fig. 10 "struggles to fully utilize the available token
budget"). This runs Fig. 17's 1K workload (PP4 + E1) past saturation with RServe
and RServe-intra, keeps every step, and prints per system the mean prefill
tokens per micro-batch over B, the share of micro-batches below B, and the
input throughput. Throughput scales with the fill when the stages are busy, so
the paper's -32% needs micro-batches about 68% full.

    python bench/rserve_intra_fill.py [--rate 2.5] [--requests 150]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from lmmsim.results import run_scenario
from lmmsim.scenario import load_scenario

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "reproduce" / "rserve" / "mmmu-1k.yaml"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=2.5)
    ap.add_argument("--requests", type=int, default=150)
    args = ap.parse_args()
    for system in ("rserve", "rserve-intra"):
        scn, base = load_scenario(SCENARIO, [f"system={system}", f"workload.arrival.rate={args.rate}",
                                             f"workload.num_requests={args.requests}"])
        out = run_scenario(scn, base, trace=True)
        budget = scn.policy.batching.token_budget
        fills = [rec.num_tokens / budget for rec in out.built.step_log
                 if rec.worker.endswith("stage0") and rec.kind in ("prefill", "mixed")]
        below = sum(f < 0.999 for f in fills) / len(fills)
        print(f"{system}: {len(fills)} micro-batches, mean fill {sum(fills) / len(fills):.1%} of B = {budget}, "
              f"{below:.0%} below B; input throughput {out.summary['throughput']['input_tokens_per_s']:.0f} "
              "tokens/s")


if __name__ == "__main__":
    main()

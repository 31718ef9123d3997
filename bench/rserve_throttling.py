"""Where gLLM and vLLM PP4 part in Fig. 12: Token Throttling's micro-batch sizes.

In lmmsim the two differ only in batching (both PP4 with CPP, both encode a
request's media before its prefill): vLLM PP4 fills each micro-batch up to the
budget B = 2048, gLLM's Token Throttling gives each the pending prefill tokens
over the pipeline depth, within [min_prefill_tokens, B]. This runs Fig. 12's
1K workload at the given rates with vLLM PP4, gLLM, and gLLM with
``min_prefill_tokens = B`` (throttling off), over seeds, and prints mean TTFT:
if the third matches vLLM PP4, the gap is the throttled micro-batch size.

    python bench/rserve_throttling.py [--rates 0.75 1.5] [--seeds 3]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from lmmsim.results import run_scenario
from lmmsim.scenario import load_scenario

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "reproduce" / "rserve" / "mmmu-1k.yaml"
VARIANTS = {
    "vLLM PP4": ["system=vllm-pp"],
    "gLLM": ["system=gllm"],
    "gLLM, min_prefill_tokens = B": ["system=gllm", "policy.batching.min_prefill_tokens=2048"],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", type=float, nargs="+", default=[0.75, 1.5])
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    for rate in args.rates:
        cells = []
        for label, sets in VARIANTS.items():
            ttfts = []
            for seed in range(args.seeds):
                scn, base = load_scenario(SCENARIO, [*sets, "hardware.count=4", f"workload.arrival.rate={rate}",
                                                     f"seed={seed}", "policy.batching.encode_before_prefill=true"])
                ttfts.append(float(run_scenario(scn, base).requests["ttft_s"].mean()))
            cells.append(f"{label} {sum(ttfts) / len(ttfts):.3f} s")
        print(f"rate {rate:g}/s: " + ", ".join(cells))


if __name__ == "__main__":
    main()

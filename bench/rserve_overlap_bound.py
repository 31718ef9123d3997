"""How much RServe's overlap can gain: lone requests of each reproduction workload.

RServe and gLLM-epd both encode on their own GPU, so overlapping encoding with
prefill does not change the LLM's load: it can only take (part of) a request's
encoding off its critical path. The saving is at most the time between the end of
host preprocessing and gLLM-epd's first prefill chunk (encoding and the
embedding transfer) -- a fixed number of seconds per request, while queueing makes TTFT
grow with the rate: RServe's relative gain is largest for a lone request and
shrinks under load, so its mean over a rate grid is below the lone-request
gain. This prints, per workload (Figs. 12 1K/2K on PP4 + E1, Fig. 18 1K on
TP4 + E1, Fig. 20 on one LLM GPU), at a near-idle rate: gLLM-epd's TTFT, the
encoder span's share of it, the bound (encoding + transfer before the first
chunk over gLLM-epd's TTFT), and the measured gain of RServe and of RServe with Token
Throttling (matched batching).

    python bench/rserve_overlap_bound.py [--requests 20]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from lmmsim.results import run_scenario
from lmmsim.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent / "scenarios" / "reproduce" / "rserve"
SETUPS = {
    "fig12-1k (PP4+E1)": ("mmmu-1k.yaml", []),
    "fig12-2k (PP4+E1)": ("mmmu-2k.yaml", []),
    "fig18-1k (TP4+E1)": ("mmmu-1k.yaml", ["deployment.llm={tp: 4, pp: 1}"]),
    "fig20 (7B, 1 LLM GPU)": ("mmmu-1k.yaml", ["model=qwen2.5-vl-7b", "hardware.count=2"]),
}


def run(path: str, sets: list[str], system: str, n: int, extra: tuple[str, ...] = ()):
    scn, base = load_scenario(ROOT / path, [f"system={system}", f"workload.num_requests={n}",
                                            "workload.arrival.rate=0.05", *sets, *extra])
    return run_scenario(scn, base).requests


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=20)
    args = ap.parse_args()
    for label, (path, sets) in SETUPS.items():
        epd = run(path, sets, "gllm-epd", args.requests)
        rserve = run(path, sets, "rserve", args.requests)
        tt = run(path, sets, "rserve", args.requests, ("policy.batching.token_throttling=true",))
        span = epd.encode_finished_at - epd.encode_started_at
        # what overlapping can take off a request's critical path: everything between the
        # end of host preprocessing and the first prefill chunk (encoding, the embedding
        # transfer); the prefill itself and the host stage stay
        before = epd.prefill_started_at - epd.preprocess_finished_at.fillna(epd.arrived_at)
        ttft = epd.ttft_s.mean()
        print(f"{label}: gLLM-epd TTFT {ttft:.3f} s; encoding {(span / epd.ttft_s).mean():.1%} of it, "
              f"encoding + transfer before the first chunk {(before / epd.ttft_s).mean():.1%} (the bound); "
              f"RServe {rserve.ttft_s.mean() / ttft - 1:+.1%}, "
              f"RServe with Token Throttling {tt.ttft_s.mean() / ttft - 1:+.1%}")

if __name__ == "__main__":
    main()

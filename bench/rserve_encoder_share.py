"""What-if: how RServe's gain over gLLM-epd depends on the encoder's share of the work.

RServe overlaps encoding with prefill, so its TTFT gain is bounded by the time
encoding takes. The paper measures encoding at up to 26% of a request's
latency (rserve.txt Fig. 2); our cost model makes Qwen2.5-VL's ViT cheaper than
that. This script scales every encoder pass by a factor (a what-if on the cost
model, not a calibration) and reruns RServe and gLLM-epd on the 2K-resolution
MMMU workload of ``lmmsim reproduce rserve``, printing the encoder's share of
an unloaded request's TTFT and RServe's mean TTFT change over gLLM-epd.

    python bench/rserve_encoder_share.py [--scales 1 2.5] [--rates 0.15 0.45 0.75]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from lmmsim.costmodel.composed import ComposedStepCostModel
from lmmsim.results import run_scenario
from lmmsim.scenario import load_scenario

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "reproduce" / "rserve" / "mmmu-2k.yaml"


def mean_ttft(system: str, rate: float) -> tuple[float, float]:
    """Mean TTFT and mean encoder share of TTFT (encode span / TTFT) of the run."""
    scn, base = load_scenario(SCENARIO, [f"system={system}", f"workload.arrival.rate={rate}"])
    df = run_scenario(scn, base).requests
    share = ((df["encode_finished_at"] - df["encode_started_at"]) / df["ttft_s"]).mean()
    return float(df["ttft_s"].mean()), float(share)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scales", type=float, nargs="+", default=[1.0, 2.5])
    ap.add_argument("--rates", type=float, nargs="+", default=[0.15, 0.45, 0.75])
    args = ap.parse_args()
    encode_s, encode_parts = ComposedStepCostModel.encode_s, ComposedStepCostModel.encode_parts
    for scale in args.scales:
        ComposedStepCostModel.encode_s = lambda self, works, k=scale: k * encode_s(self, works)
        ComposedStepCostModel.encode_parts = (
            lambda self, works, k=scale: tuple(k * x for x in encode_parts(self, works)))
        changes = []
        for rate in args.rates:
            epd, share = mean_ttft("gllm-epd", rate)
            rserve, _ = mean_ttft("rserve", rate)
            changes.append(rserve / epd - 1)
            print(f"encoder x{scale:g}  rate {rate:g}/s: gLLM-epd TTFT {epd:.3f} s (encode {share:.0%} of it), "
                  f"RServe {rserve:.3f} s ({rserve / epd - 1:+.1%})")
        print(f"encoder x{scale:g}: RServe vs gLLM-epd mean TTFT change {sum(changes) / len(changes):+.1%}")
    ComposedStepCostModel.encode_s, ComposedStepCostModel.encode_parts = encode_s, encode_parts


if __name__ == "__main__":
    main()

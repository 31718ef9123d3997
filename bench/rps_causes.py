"""Experiments behind the causes RPS-Serve's REPORT gives for its misses (not tests: numbers).

Each subcommand reruns the reproduction's own scenarios (scenarios/reproduce/rps/) with
one thing changed and prints what the cause predicts:

``modserve``
    ModServe's TP2 LLM half against vLLM's TP4 at each Fig. 9 model's rate: the
    ModServe / vLLM normalized-latency ratio for 250, 500 and 1000 requests (a ratio
    that grows with the run's length is a queue that never drains: offered load above
    capacity) and at 0.5x and 0.75x the rate (the paper gives no rates; the choice).
``idle``
    Idle GPU capacity of vLLM and RPS-Serve per Fig. 9 model with a per-step CPU gap
    (``engine.step_cpu_us``: 0; 300 us, vLLM's overlapped estimate; 5500 us, measured
    without async scheduling, vllm-project/vllm#10634) and at half the rate.
``fig14-text``
    Fig. 14's text TTFT split into short (< 1K tokens) and long text, RPS-Serve's
    k-means classes against the naive classifier, and the share of long texts the
    k-means classifier puts in the sand class.

    python bench/rps_causes.py modserve      # ~3 min on one core
    python bench/rps_causes.py idle          # ~2 min
    python bench/rps_causes.py fig14-text    # ~1 min
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
MIX = ROOT / "scenarios" / "reproduce" / "rps" / "mix-llava72b.yaml"
# Fig. 9's models and rates (scenarios/reproduce/rps/fig9.yaml), and the defaults every figure sets
FIG9 = (("llava-onevision-qwen2-7b", 40), ("llava-onevision-qwen2-72b", 4), ("internvl3.5-38b", 5),
        ("gemma-3-27b", 7), ("qwen2.5-vl-32b", 16))
COMMON = ["deployment=null", "policy=null", "deployment.max_model_len=32768",
          "policy.batching.token_budget=8192", "policy.batching.max_running=1024"]


def run(*overrides: str):
    from lmmsim.results import run_scenario
    from lmmsim.scenario import load_scenario

    scn, base = load_scenario(MIX, [*COMMON, *overrides])
    return run_scenario(scn, base)


def nl(out) -> float:
    return float(out.summary["normalized_latency_s_per_token"]["mean"])


def modserve() -> None:
    print("| model | rate | requests | ModServe / vLLM normalized latency | ModServe mean TTFT (s) | "
          "vLLM mean TTFT (s) |")
    print("|---|---:|---:|---:|---:|---:|")
    for model, rate in FIG9:
        for scale, n in ((1, 250), (1, 500), (1, 1000), (0.75, 500), (0.5, 500)):
            r = rate * scale
            common = (f"model={model}", f"workload.arrival.rate={r}", f"workload.num_requests={n}")
            ms, vl = run("system=modserve", *common), run("system=vllm", *common)
            print(f"| {model} | {r:g} | {n} | {nl(ms) / nl(vl):.2f} | {ms.summary['ttft_s']['mean']:.1f} | "
                  f"{vl.summary['ttft_s']['mean']:.1f} |")


def idle() -> None:
    print("| model | rate | step_cpu_us | vLLM idle | RPS-Serve idle |")
    print("|---|---:|---:|---:|---:|")
    for model, rate in FIG9:
        for scale, cpu in ((1, 0), (1, 300), (1, 5500), (0.5, 0)):
            r = rate * scale
            common = (f"model={model}", f"workload.arrival.rate={r}", f"engine.step_cpu_us={cpu}")
            vals = [1 - run(f"system={s}", *common).summary["gpu_utilization"]["mean"] for s in ("vllm", "rps-serve")]
            print(f"| {model} | {r:g} | {cpu} | {vals[0]:.3f} | {vals[1]:.3f} |")


def fig14_text() -> None:
    fig14 = ["model=llava-onevision-qwen2-7b", "hardware.count=1", "workload.arrival.rate=12"]
    print("| seed | system | short-text mean TTFT (s) | long-text mean TTFT (s) | text mean TTFT (s) | "
          "long texts in sand |")
    print("|---:|---|---:|---:|---:|---:|")
    for seed in range(3):
        for system in ("rps-serve", "rps-serve-naive-classes"):
            out = run(f"system={system}", f"seed={seed}", *fig14)
            df = out.requests.sort_values("request_id")
            ttft = {c: df.loc[df["class_name"] == c, "ttft_s"].mean() for c in ("short_text", "long_text")}
            text = df.loc[df["modality"] == "text", "ttft_s"].mean()
            seqs = sorted(out.built.simulation.seqs, key=lambda s: s.request.request_id)
            cls = np.array([out.built.admission.classify(s.request) for s in seqs])
            long_ = (df["class_name"] == "long_text").to_numpy()
            print(f"| {seed} | {system} | {ttft['short_text']:.3f} | {ttft['long_text']:.3f} | {text:.3f} | "
                  f"{(cls[long_] == 0).mean():.2f} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("experiment", choices=["modserve", "idle", "fig14-text"])
    {"modserve": modserve, "idle": idle, "fig14-text": fig14_text}[ap.parse_args().experiment]()
    return 0


if __name__ == "__main__":
    sys.exit(main())

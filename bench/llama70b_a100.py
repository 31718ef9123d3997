"""Llama-2-70B, TP2 on A100-SXM-80GB: KV capacity, latency and saturation (not a test).

The setting of the Vidur comparison (issue 14): one monolithic vLLM-style
replica, tp 2, ``gpu_memory_utilization`` 0.9, chunked prefill with a 512-token
budget (Sarathi-Serve's chunk) and at most 128 running requests, the fitted A100
cost model (Vidur's own A100 profiles). Workload: fixed 1,000 prompt tokens and
250 output tokens per request (a fixed workload, so the rows differ only by the
engine), Poisson arrivals; 200 requests per rate, 500 all at once for the
saturation rate.

Rows:

* ``kernels only``: every engine term off and the earlier memory reserve
  (1 GiB runtime + MLP/hidden/logits estimate, 1.16 GiB here) -- the model
  before issue 14 items 5 and 6;
* ``default``: the defaults (vLLM KV sizing, CUDA-graph padding, collective
  launch cost on eager steps only, KV write as the fit needs);
* ``eager``: ``engine.cudagraphs: false`` (vLLM ``--enforce-eager``; Vidur's
  model: 20 us per collective on every step, no padding).

    python bench/llama70b_a100.py          # add --requests N
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import yaml

from lmmsim.results import run_scenario
from lmmsim.scenario import load_scenario

SCENARIO = {
    "name": "llama70b-a100-tp2",
    "seed": 0,
    "model": "llama-2-70b",
    "hardware": {"gpu": "a100-sxm-80gb", "count": 2, "interconnect": "nvlink"},
    "deployment": {"kind": "monolithic", "replicas": 1, "tp": 2, "gpu_memory_utilization": 0.9},
    "policy": {"batching": {"kind": "chunked_prefill", "token_budget": 512, "max_running": 128}},
    "workload": {
        "num_requests": 200,
        "arrival": {"kind": "poisson", "rate": 0.5},
        "mix": [{"name": "text", "weight": 1, "text_tokens": {"kind": "fixed", "value": 1000}}],
        "output_tokens": {"kind": "fixed", "value": 250},
    },
}

# The reserve the earlier estimate gave for this setting (GiB): MLP 512 x 2 x 14336 x 2 B
# + hidden 512 x 4 x 8192 x 2 B + logits 128 x 16000 x 4 B + 1 GiB runtime.
OLD_RESERVE_GIB = (512 * 2 * 14336 * 2 + 512 * 4 * 8192 * 2 + 128 * 16000 * 4) / 2**30 + 1.0

ROWS = {
    "kernels only": ["engine.cudagraphs=false", "engine.collective_launch_us=0", "engine.kv_write=false",
                     f"deployment.activation_reserve_gib={OLD_RESERVE_GIB!r}"],
    "default": [],
    "eager": ["engine.cudagraphs=false"],
}


def run(path: Path, overrides: list[str]) -> dict:
    scn, base = load_scenario(str(path), overrides)
    return run_scenario(scn, base).summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=200)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "scenario.yaml"
        path.write_text(yaml.safe_dump(SCENARIO))
        print(f"{'row':<13} {'KV tokens':>9} {'b1 decode ms':>12} {'TTFT@0.5':>9} {'TPOT@0.5':>9} "
              f"{'TTFT@2.0':>9} {'TPOT@2.0':>9} {'sat req/s':>9}")
        for row, extra in ROWS.items():
            cells = []
            for rate in (0.5, 2.0):
                s = run(path, extra + [f"workload.arrival.rate={rate}", f"workload.num_requests={args.requests}"])
                cells += [s["ttft_s"]["mean"], s["tpot_s"]["mean"] * 1e3]
            sat = run(path, extra + ["workload.arrival.rate=100000", "workload.num_requests=500"])
            kv = sat["deployment"]["pools"]["llm"]["kv_capacity_tokens_per_worker"]
            b1 = sum(sat["engine_costs"]["decode_b1_ctx1000_ms"]["llm"].values())
            print(f"{row:<13} {kv:>9,} {b1:>12.2f} {cells[0]:>8.3f}s {cells[1]:>7.1f}ms {cells[2]:>8.3f}s "
                  f"{cells[3]:>7.1f}ms {sat['throughput']['requests_per_s']:>9.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

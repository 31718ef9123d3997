"""EAServe Table 5 per platform: HAS tuned on each GPU, and what measured AD102 kernels give on the RTX.

The paper selects each system's best configuration "separately on each platform". This runs HAS
(image workload, 5 req/s, 30 trials of 500 requests, as table5.yaml's easerve-has rows were chosen) on
8x RTX 6000 Ada (PCIe) and 8x A100 SXM4 (NVLink), then simulates the chosen configurations and the
EAServe preset at 5 req/s. The RTX 6000 Ada has no measured kernels in lmmsim: it runs on the v0
roofline of its datasheet (364 dense bf16 TFLOPS at 80% efficiency). The L40S has measured kernels
(aiconfigurator's tables, profiles/ops/l40s) and the same AD102 die (142 SMs, 362 TFLOPS, 48 GB, PCIe):
the last rows rerun the RTX configurations with the L40S's kernels (``hardware.gpu=l40s``) and with the
L40S on the roofline (the die's datasheet alone), which separates the kernel data from the chip.

    python bench/easerve_table5_platforms.py          # ~3 min on 2 cores
"""

from __future__ import annotations

import json
from pathlib import Path

from lmmsim import search
from lmmsim.results import run_scenario
from lmmsim.scenario import load_scenario

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "reproduce" / "easerve" / "image-llava34b.yaml"
PLATFORMS = {"rtx-6000-ada": "pcie", "a100-sxm-80gb": "nvlink"}


def _run(sets: list[str]) -> dict:
    scn, base = load_scenario(SCENARIO, ["workload.arrival.rate=5", *sets])
    s = run_scenario(scn, base).summary
    return {"throughput": s["throughput"]["requests_per_s"], "p99_ttft": s["ttft_s"]["p99"]}


def main() -> None:
    chosen = {}
    for gpu, link in PLATFORMS.items():
        sets = [f"hardware.gpu={gpu}", f"hardware.interconnect={link}"]
        raw, scn, base = search.read_raw(SCENARIO, sets)
        result = search.search(search.Problem(raw, scn, base, rate=5, trial_requests=500), method="has",
                               budget=30, jobs=2, seed=0)
        chosen[gpu] = result.best_scenario["deployment"]
        b = result.best
        print(f"HAS on {gpu}: {b['alloc']}, B={b['batch_bound']}, s={b['offload_s']:.4f} -> "
              f"{b['throughput_rps']:.3f} req/s in its trial; Stage 1 kept "
              f"{result.summary['pruning']['kept']} of {result.summary['allocations']['feasible']}", flush=True)
    for gpu, link in PLATFORMS.items():
        for label, dep in (("preset", ["system=easerve", "deployment={max_model_len: 8192}"]),
                           ("HAS-tuned", [f"deployment={json.dumps(chosen[gpu])}"])):
            r = _run([f"hardware.gpu={gpu}", f"hardware.interconnect={link}", *dep])
            print(f"{gpu} {label}: {r['throughput']:.3f} req/s, P99 TTFT {r['p99_ttft']:.1f} s", flush=True)
    for cost_model in ("auto", "roofline"):
        for label, dep in (("preset", ["system=easerve", "deployment={max_model_len: 8192}"]),
                           ("RTX HAS config", [f"deployment={json.dumps(chosen['rtx-6000-ada'])}"])):
            r = _run(["hardware.gpu=l40s", "hardware.interconnect=pcie", f"hardware.cost_model={cost_model}", *dep])
            kernels = "measured L40S kernels" if cost_model == "auto" else "L40S roofline"
            print(f"l40s ({kernels}) {label}: {r['throughput']:.3f} req/s, P99 TTFT {r['p99_ttft']:.1f} s",
                  flush=True)


if __name__ == "__main__":
    main()

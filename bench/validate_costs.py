"""Single-request TTFT and per-token decode time: lmmsim beside aiconfigurator's kernel sum.

For each model / GPU / tensor-parallel size, lmmsim simulates one request
(1,000 text tokens, plus one 1024x1024 image for the VL model, 128 output
tokens) on a vLLM-style monolithic engine with the GPU's default cost model
(its shipped fit where the catalog has one), and prints its TTFT and mean TPOT
next to aiconfigurator's static estimate of the same batch-1 request
(``bench/data/aiconfigurator_static.csv``, written by
``bench/aiconfigurator_static.py``: vLLM 0.24.0 operator tables).

Model pairs: lmmsim's ``llama-3-8b`` has the shapes of aiconfigurator's
Meta-Llama-3.1-8B (only the context limit differs); ``llama-3.1-70b`` and
``qwen3-vl-8b`` are the same models. The kernel sum has no engine overheads;
lmmsim's figure includes what its cost model charges per step.

    python bench/validate_costs.py            # prints a markdown table
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lmmsim.errors import UserError  # noqa: E402
from lmmsim.results import run_scenario  # noqa: E402
from lmmsim.scenario import validate_scenario  # noqa: E402

AIC_CSV = ROOT / "bench" / "data" / "aiconfigurator_static.csv"
GPUS = {"h100_sxm": "h100-sxm-80gb", "h200_sxm": "h200", "b200_sxm": "b200"}
MODELS = {"meta-llama/Meta-Llama-3.1-8B": "llama-3-8b", "meta-llama/Meta-Llama-3.1-70B": "llama-3.1-70b",
          "Qwen/Qwen3-VL-8B-Instruct": "qwen3-vl-8b"}


def scenario(model: str, gpu: str, tp: int, isl: int, osl: int, images: int) -> dict:
    cls = {"name": "one", "weight": 1, "text_tokens": {"kind": "fixed", "value": isl}}
    if images:
        cls["images"] = {"count": images, "width": 1024, "height": 1024}
    return {
        "name": "validate-costs", "seed": 0, "system": "vllm", "model": model,
        "hardware": {"gpu": gpu, "count": tp, "interconnect": "nvlink"},
        "deployment": {"kind": "monolithic", "tp": tp, "max_model_len": 8192},
        "policy": {"batching": {"kind": "chunked_prefill", "token_budget": 8192, "max_running": 256}},
        "workload": {"num_requests": 1, "arrival": {"kind": "deterministic", "rate": 1.0}, "mix": [cls],
                     "output_tokens": {"kind": "fixed", "value": osl}},
    }


def lmmsim_single(model: str, gpu: str, tp: int, isl: int, osl: int, images: int) -> tuple[float, float, str]:
    """(TTFT ms, TPOT ms, cost model) of one request alone."""
    scn = validate_scenario(scenario(model, gpu, tp, isl, osl, images))
    run = run_scenario(scn, ROOT)
    row = run.requests.iloc[0]
    cost = run.summary.get("cost_model", {})
    name = cost.get("kind", "") if isinstance(cost, dict) else str(cost)
    return row["ttft_s"] * 1e3, row["tpot_s"] * 1e3, name


def main() -> int:
    rows = [r for r in csv.DictReader(line for line in AIC_CSV.open() if not line.startswith("#"))]
    print("| model | GPU | TP | lmmsim TTFT ms | aic TTFT ms | ratio | lmmsim TPOT ms | aic TPOT ms | ratio |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        model, gpu, tp = MODELS[r["model"]], GPUS[r["system"]], int(r["tp"])
        try:
            ttft, tpot, _ = lmmsim_single(model, gpu, tp, int(r["isl"]), int(r["osl"]), int(r["images_1024"]))
        except UserError as err:
            print(f"| {model} | {gpu} | {tp} | {err} | | | | | |")
            continue
        a_ttft, a_tpot = float(r["ttft_ms"]), float(r["tpot_ms"])
        print(f"| {model} | {gpu} | {tp} | {ttft:.1f} | {a_ttft:.1f} | {ttft / a_ttft:.2f} | "
              f"{tpot:.2f} | {a_tpot:.2f} | {tpot / a_tpot:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

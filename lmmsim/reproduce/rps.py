"""RPS-Serve (rps-serve.txt): the figures the simulator reruns and the claims it checks."""

from __future__ import annotations

import pandas as pd

from lmmsim.reproduce.core import Claim, Figure


def _norm_latency(df: pd.DataFrame, model: str, system: str) -> float:
    row = df[(df["model"] == model) & (df["system"] == system)]
    return float(row["normalized_latency_s_per_token.mean"].mean())


def _idle(df: pd.DataFrame, system: str) -> float:
    return float(1 - df.loc[df["system"] == system, "gpu_utilization.mean"].mean())


LLAVA, INTERNVL = "llava-onevision-qwen2-72b", "internvl3.5-38b"

FIGURES: tuple[Figure, ...] = (
    Figure(
        name="fig4",
        sweep="fig4.yaml",
        plots=(("pareto", {"series": "system", "x": "model", "normalize": "overall", "baseline": "vllm"}),
               ("bars", {"series": "system", "metric": "normalized_latency_s_per_token.mean",
                         "group": "model"})),
        claims=(
            Claim("LLaVA-72B: vLLM normalized latency / ModServe's (vLLM ~50% lower)", 0.5,
                  lambda df: _norm_latency(df, LLAVA, "vllm") / _norm_latency(df, LLAVA, "modserve")),
            Claim("InternVL-38B: vLLM normalized latency / ModServe's (vLLM ~50% higher)", 1.5,
                  lambda df: _norm_latency(df, INTERNVL, "vllm") / _norm_latency(df, INTERNVL, "modserve")),
            Claim("ModServe idle GPU capacity (60-70%)", 0.65, lambda df: _idle(df, "modserve"), kind="level"),
            Claim("vLLM TP4 idle GPU capacity (1-2% for these models)", 0.015, lambda df: _idle(df, "vllm"),
                  kind="level"),
        ),
    ),
)

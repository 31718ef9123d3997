"""RPS-Serve (rps-serve.txt): the figures the simulator reruns and the claims it checks.

Where the paper gives a range ("5-30% better") the claim takes its middle and
the report shows whether the simulator falls inside; "consistently" /
"at every" claims are yes/no shapes.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from lmmsim.reproduce.core import Claim, Figure


def _norm_latency(df: pd.DataFrame, model: str, system: str) -> float:
    row = df[(df["model"] == model) & (df["system"] == system)]
    return float(row["normalized_latency_s_per_token.mean"].mean())


def _idle(df: pd.DataFrame, system: str) -> float:
    return float(1 - df.loc[df["system"] == system, "gpu_utilization.mean"].mean())


LLAVA, INTERNVL = "llava-onevision-qwen2-72b", "internvl3.5-38b"

def _ratio_by_model(df: pd.DataFrame, system: str, baseline: str,
                    metric: str = "normalized_latency_s_per_token.mean") -> pd.Series:
    a = df[df["system"] == system].groupby("model")[metric].mean()
    b = df[df["system"] == baseline].groupby("model")[metric].mean()
    return a / b


def _rps_on_frontier(df: pd.DataFrame) -> float:
    for _model, part in df.groupby("model"):
        lat = part.groupby("system")["normalized_latency_s_per_token.mean"].mean()
        idle = 1 - part.groupby("system")["gpu_utilization.mean"].mean()
        if lat.idxmin() != "rps-serve" or idle["rps-serve"] > idle["vllm"] + 0.05:
            return 0.0
    return 1.0


def _top_rate(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["workload.arrival.rate"] == df["workload.arrival.rate"].max()]


def _vs_best_at_top_rate(df: pd.DataFrame, metric: str = "normalized_latency_s_per_token.mean") -> float:
    top = _top_rate(df).groupby("system")[metric].mean()
    return float(top["rps-serve"] / top.drop("rps-serve").min())


def _vs_at_top_rate(df: pd.DataFrame, baseline: str, metric: str = "normalized_latency_s_per_token.mean") -> float:
    top = _top_rate(df).groupby("system")[metric].mean()
    return float(top["rps-serve"] / top[baseline])


def _at(df: pd.DataFrame, system: str, metric: str) -> float:
    return float(df.loc[df["system"] == system, metric].mean())


def _text_lowest(df: pd.DataFrame) -> float:
    ok = True
    for stat in ("mean", "p99"):
        col = f"by_modality.text.ttft_s.{stat}"
        by = df.groupby("system")[col].mean()
        ok &= by.idxmin() == "rps-serve"
    return float(ok)


def _goodput_highest(df: pd.DataFrame) -> float:
    for _scale, part in df.groupby("slo.scale"):
        by = part.groupby("system")["goodput_requests_per_s"].mean()
        if by["rps-serve"] < by.max():
            return 0.0
    return 1.0


def _mean_ratio_over_scales(df: pd.DataFrame, a: str, b: str, metric: str) -> float:
    x = df[df["system"] == a].groupby("slo.scale")[metric].mean()
    y = df[df["system"] == b].groupby("slo.scale")[metric].mean()
    return float((x / y).replace([np.inf, -np.inf], np.nan).mean())


def _violations_fall(df: pd.DataFrame) -> float:
    for _system, part in df.groupby("system"):
        att = part.sort_values("slo.scale")["slo_attainment"].to_numpy()
        if np.any(np.diff(att) < -1e-12):
            return 0.0
    return 1.0


def _named(df: pd.DataFrame, name: str, modality: str, stat: str = "mean") -> float:
    system = name if name == "rps-serve" else f"rps-serve-{name}"
    return float(df.loc[df["system"] == system, f"by_modality.{modality}.ttft_s.{stat}"].mean())


def _text_lowest_everywhere(df: pd.DataFrame) -> float:
    t = df["by_modality.text.ttft_s.mean"]
    return float(bool(((t <= df["by_modality.image.ttft_s.mean"]) & (t <= df["by_modality.video.ttft_s.mean"])).all()))


def _rises_with_share(df: pd.DataFrame) -> float:
    top = _top_rate(df).sort_values("name")  # share-10 / share-30 / share-50: % image + video
    for m in ("text", "image", "video"):
        v = top[f"by_modality.{m}.ttft_s.mean"].to_numpy()
        if np.any(np.diff(v) <= 0):
            return 0.0
    return 1.0


def _by_k(df: pd.DataFrame, modality: str) -> pd.Series:
    return df.groupby("policy.queue.num_classes")[f"by_modality.{modality}.ttft_s.p95"].mean()


# Known causes where the simulator differs (REPORT.md prints them under the table for rows that miss).
WHY_INTERNVL = ("the cost model: InternViT-6B encoding a 10-tile image takes 95 ms on TP4 against 102 ms of LLM "
                "prefill, and TP4 decode stays cheap (small all-reduces under-predicted: 12 us vs the 30-40 us "
                "Vidur measured), so vLLM's shared GPUs win.")
WHY_IDLE = "a GPU counts as busy for a whole engine step here, with no CPU gaps between steps."
WHY_MODSERVE = ("ModServe's TP2 LLM half saturates near 1.3 req/s on LLaVA-72B in our cost model, far below the "
                "rate, so its queue rather than its scheduling sets its latency.")
WHY_ABLATION = ("with no KV pressure here there is no preemption waste for aging to save; the naive classifier "
                "makes every long text sand and static priorities never let a heavy request age past sand, which "
                "favours text.")
WHY_K = ("no k is consistently best: over 5 seeds the lowest text P95 TTFT falls to k = 5, 2, 5, 4, 2 and the "
         "highest to k = 4, 5, 2, 2, 5; seed 0's P95s (2.5-4.6 s) are 2-4x the other seeds' (1.15-1.84 s), so the "
         "mean over seeds (1.95 / 1.73 / 2.03 / 1.66 s for k = 2..5) follows one seed. Long texts dominate text "
         "P95 TTFT.")

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
                  lambda df: _norm_latency(df, INTERNVL, "vllm") / _norm_latency(df, INTERNVL, "modserve"),
                  why=WHY_INTERNVL),
            Claim("ModServe idle GPU capacity (60-70%)", 0.65, lambda df: _idle(df, "modserve"), kind="level",
                  why=WHY_IDLE),
            Claim("vLLM TP4 idle GPU capacity (1-2% for these models)", 0.015, lambda df: _idle(df, "vllm"),
                  kind="level", why=WHY_IDLE),
        ),
    ),
    Figure(
        name="fig9",
        sweep="fig9.yaml",
        plots=(("pareto", {"series": "system", "x": "model", "normalize": "x", "baseline": "vllm"}),
               ("bars", {"series": "system", "metric": "normalized_latency_s_per_token.mean", "group": "model"})),
        claims=(
            Claim("RPS-Serve / vLLM normalized latency, best model (paper 0.7x)", 0.7,
                  lambda df: float(_ratio_by_model(df, "rps-serve", "vllm").min())),
            Claim("RPS-Serve / vLLM normalized latency, worst model (paper 0.95x)", 0.95,
                  lambda df: float(_ratio_by_model(df, "rps-serve", "vllm").max())),
            Claim("RPS-Serve idle GPU capacity (1-15%)", 0.08, lambda df: _idle(df, "rps-serve"), kind="level",
                  why=WHY_IDLE),
            Claim("ModServe idle GPU capacity (60-80%)", 0.7, lambda df: _idle(df, "modserve"), kind="level",
                  why=WHY_IDLE),
            # the abstract: "increases GPU utilization by 65% and reduces TTFT by up to 9.3x, on average
            # across models, compared to disaggregation-based multimodal systems"
            Claim("Abstract: RPS-Serve GPU utilisation vs ModServe's, mean over the five models (+65%)", 0.65,
                  lambda df: float(_ratio_by_model(df, "rps-serve", "modserve", "gpu_utilization.mean").mean() - 1),
                  kind="change", why=WHY_IDLE),
            Claim("Abstract: ModServe mean TTFT / RPS-Serve's, mean over the five models (up to 9.3x)", 9.3,
                  lambda df: float(_ratio_by_model(df, "modserve", "rps-serve", "ttft_s.mean").mean()),
                  why=WHY_MODSERVE),
            Claim("ModServe & RPS vs ModServe normalized latency, best model (up to -40%)", -0.4,
                  lambda df: float(_ratio_by_model(df, "modserve+rps", "modserve").min() - 1), kind="change"),
            Claim("RPS-Serve on the Pareto frontier for every model (lowest latency, idle <= vLLM's + 5%)", 1,
                  _rps_on_frontier, kind="holds"),
        ),
    ),
    *(Figure(name=f"fig10-{tag}", sweep=f"fig10-{tag}.yaml",
             plots=(("line", {"series": "system", "metric": "normalized_latency_s_per_token.mean"}),
                    ("ttft-vs-rate", {"series": "system"})),
             claims=claims)
      for tag, claims in (
          ("7b-1gpu", (Claim("LLaVA-7B, 1 GPU: RPS-Serve / best baseline normalized latency, highest rate "
                             "(up to 70% lower)", 0.3, lambda df: _vs_best_at_top_rate(df)),)),
          ("7b-2gpu", (Claim("LLaVA-7B, 2 GPUs: RPS-Serve / best baseline, highest rate", 0.3,
                             lambda df: _vs_best_at_top_rate(df)),)),
          ("7b-4gpu", (Claim("LLaVA-7B, 4 GPUs: RPS-Serve / best baseline, highest rate", 0.3,
                             lambda df: _vs_best_at_top_rate(df)),)),
          ("72b-2gpu", (Claim("LLaVA-72B, 2 GPUs: RPS-Serve / vLLM normalized latency, highest rate (-40%)", 0.6,
                              lambda df: _vs_best_at_top_rate(df)),)),
          ("72b-4gpu", (Claim("LLaVA-72B, 4 GPUs: RPS-Serve / ModServe normalized latency, highest rate (-40%)",
                              0.6, lambda df: _vs_at_top_rate(df, "modserve"), why=WHY_MODSERVE),)),
      )),
    Figure(
        name="fig11",
        sweep="fig11.yaml",
        plots=tuple(("bars", {"series": "system", "metric": m}) for m in (
            "ttft_s.mean", "ttft_s.p99", "tpot_s.mean", "tpot_s.p99", "normalized_latency_s_per_token.p99",
            "by_modality.text.ttft_s.mean", "by_modality.text.ttft_s.p99", "by_modality.image.ttft_s.p99",
            "by_modality.video.ttft_s.mean", "by_modality.video.ttft_s.p99")),
        claims=(
            Claim("72B: ModServe mean TTFT / RPS-Serve's (9.3x: 28 s vs 3 s)", 9.3,
                  lambda df: _at(df, "modserve", "ttft_s.mean") / _at(df, "rps-serve", "ttft_s.mean"),
                  why=WHY_MODSERVE),
            Claim("72B: RPS-Serve mean TTFT below vLLM's", 1,
                  lambda df: float(_at(df, "rps-serve", "ttft_s.mean") < _at(df, "vllm", "ttft_s.mean")),
                  kind="holds"),
            Claim("72B: text TTFT lowest with RPS-Serve, mean and P99", 1, _text_lowest, kind="holds"),
            Claim("72B: RPS-Serve text TTFT P99 (s) (paper 3.7 s)", 3.7,
                  lambda df: _at(df, "rps-serve", "by_modality.text.ttft_s.p99"), kind="level"),
            Claim("72B: RPS-Serve video mean TTFT / vLLM's (slightly higher; we read 1.1x)", 1.1,
                  lambda df: _at(df, "rps-serve", "by_modality.video.ttft_s.mean")
                  / _at(df, "vllm", "by_modality.video.ttft_s.mean")),
            Claim("72B: RPS-Serve mean TPOT / vLLM's (modest trade-off)", 1.05,
                  lambda df: _at(df, "rps-serve", "tpot_s.mean") / _at(df, "vllm", "tpot_s.mean")),
        ),
    ),
    Figure(
        name="fig13",
        sweep="fig13.yaml",
        plots=(("goodput-vs-slo-scale", {"series": "system"}),
               ("line", {"series": "system", "x": "slo.scale", "metric": "slo_attainment"}),
               ("line", {"series": "system", "x": "slo.scale", "metric": "slo_violation_severity"})),
        claims=(
            Claim("Goodput highest with RPS-Serve at every SLO scale", 1, _goodput_highest, kind="holds"),
            Claim("Violation severity, ModServe / RPS-Serve, mean over scales (2-3x)", 2.5,
                  lambda df: _mean_ratio_over_scales(df, "modserve", "rps-serve", "slo_violation_severity"),
                  why=WHY_MODSERVE),
            Claim("SLO violations fall as the scale grows, every system", 1, _violations_fall, kind="holds"),
        ),
    ),
    Figure(
        name="fig14",
        sweep="fig14.yaml",
        plots=tuple(("bars", {"series": "system", "metric": f"by_modality.{m}.ttft_s.{q}"})
                    for m in ("text", "image", "video") for q in ("mean", "p99")),
        claims=(
            *(Claim(f"7B, 1 GPU: RPS-Serve {m} mean TTFT below the naive classifier's", 1,
                    (lambda m: lambda df: float(_named(df, "rps-serve", m) < _named(df, "naive-classes", m)))(m),
                    kind="holds", why=WHY_ABLATION)
              for m in ("text", "image", "video")),
            *(Claim(f"7B, 1 GPU: RPS-Serve {m} mean TTFT below {v}'s", 1,
                    (lambda m, v: lambda df: float(_named(df, "rps-serve", m) < _named(df, v, m)))(m, v),
                    kind="holds", why=WHY_ABLATION)
              for v in ("static-only", "aging-only") for m in ("text", "image", "video")),
            Claim("7B, 1 GPU: RPS-Serve text and image mean TTFT below EDF's", 1,
                  lambda df: float(all(_named(df, "rps-serve", m) < _named(df, "edf", m) for m in ("text", "image"))),
                  kind="holds"),
            Claim("7B, 1 GPU: RPS-Serve image P99 TTFT below EDF's", 1,
                  lambda df: float(_named(df, "rps-serve", "image", "p99") < _named(df, "edf", "image", "p99")),
                  kind="holds"),
        ),
    ),
    Figure(
        name="fig15",
        sweep="fig15.yaml",
        plots=tuple(("ttft-vs-rate", {"series": "name", "modality": m})
                    for m in ("text", "image", "video")),
        claims=(
            Claim("Text TTFT lowest of the modalities at every mix and rate", 1, _text_lowest_everywhere,
                  kind="holds"),
            Claim("TTFT rises with the image + video share at the highest rate, every modality", 1,
                  _rises_with_share, kind="holds"),
        ),
    ),
    Figure(
        name="fig16",
        sweep="fig16.yaml",
        plots=tuple(("bars", {"series": "policy.queue.num_classes", "metric": f"by_modality.{m}.ttft_s.p95"})
                    for m in ("text", "image", "video")),
        claims=(
            Claim("k = 3 gives the lowest text P95 TTFT of k = 2..5", 1,
                  lambda df: float(_by_k(df, "text").idxmin() == 3), kind="holds", why=WHY_K),
            Claim("k = 2 gives the highest text P95 TTFT", 1,
                  lambda df: float(_by_k(df, "text").idxmax() == 2), kind="holds", why=WHY_K),
        ),
    ),
)

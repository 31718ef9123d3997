"""The quantities RPS-Serve's claims compare, computed from one seed's sweep results.

Each function takes the ``results.parquet`` rows of one seed (a figure's sweep) and
returns a float; ``holds`` shapes return 1.0 or 0.0. Systems are lmmsim's preset names
(``vllm``, ``modserve``, ``modserve+rps``, ``rps-serve``, ``rps-serve-<ablation>``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

NL = "normalized_latency_s_per_token.mean"
LLAVA7, LLAVA, INTERNVL = "llava-onevision-qwen2-7b", "llava-onevision-qwen2-72b", "internvl3.5-38b"
GEMMA, QWEN = "gemma-3-27b", "qwen2.5-vl-32b"  # standing in for the paper's Gemma4-31B and Qwen3.5-27B


def norm_latency(df: pd.DataFrame, model: str, system: str) -> float:
    row = df[(df["model"] == model) & (df["system"] == system)]
    return float(row[NL].mean())


def idle(df: pd.DataFrame, system: str, models: tuple[str, ...] | None = None) -> float:
    part = df[df["system"] == system]
    if models is not None:
        part = part[part["model"].isin(models)]
    return float(1 - part["gpu_utilization.mean"].mean())


def ratio_by_model(df: pd.DataFrame, system: str, baseline: str, metric: str = NL) -> pd.Series:
    a = df[df["system"] == system].groupby("model")[metric].mean()
    b = df[df["system"] == baseline].groupby("model")[metric].mean()
    return a / b


def rps_on_frontier(df: pd.DataFrame) -> float:
    for _model, part in df.groupby("model"):
        lat = part.groupby("system")[NL].mean()
        idle_ = 1 - part.groupby("system")["gpu_utilization.mean"].mean()
        if lat.idxmin() != "rps-serve" or idle_["rps-serve"] > idle_["vllm"] + 0.05:
            return 0.0
    return 1.0


def modserve_rps_better_everywhere(df: pd.DataFrame) -> float:
    return float(bool((ratio_by_model(df, "modserve+rps", "modserve") < 1).all()))


def modserve_rps_same_utilisation(df: pd.DataFrame, points: float = 0.05) -> float:
    """ModServe & RPS's idle capacity within ``points`` of ModServe's, every model."""
    a = df[df["system"] == "modserve+rps"].groupby("model")["gpu_utilization.mean"].mean()
    b = df[df["system"] == "modserve"].groupby("model")["gpu_utilization.mean"].mean()
    return float(bool(((a - b).abs() <= points).all()))


def top_rate(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["workload.arrival.rate"] == df["workload.arrival.rate"].max()]


def vs_best_at_top_rate(df: pd.DataFrame, metric: str = NL) -> float:
    top = top_rate(df).groupby("system")[metric].mean()
    return float(top["rps-serve"] / top.drop("rps-serve").min())


def vs_at_top_rate(df: pd.DataFrame, baseline: str, metric: str = NL) -> float:
    top = top_rate(df).groupby("system")[metric].mean()
    return float(top["rps-serve"] / top[baseline])


def comparable_at_top_rate(df: pd.DataFrame, baseline: str, within: float = 0.2) -> float:
    return float(abs(vs_at_top_rate(df, baseline) - 1) <= within)


def at(df: pd.DataFrame, system: str, metric: str) -> float:
    return float(df.loc[df["system"] == system, metric].mean())


def mod(modality: str, stat: str = "mean") -> str:
    return f"by_modality.{modality}.ttft_s.{stat}"


def text_lowest(df: pd.DataFrame) -> float:
    ok = True
    for stat in ("mean", "p99"):
        by = df.groupby("system")[mod("text", stat)].mean()
        ok &= by.idxmin() == "rps-serve"
    return float(ok)


def below_at_stats(df: pd.DataFrame, a: str, b: str, metric: str, stats: tuple[str, ...]) -> float:
    return float(all(at(df, a, f"{metric}.{s}") < at(df, b, f"{metric}.{s}") for s in stats))


def highest(df: pd.DataFrame, system: str, metric: str) -> float:
    return float(df.groupby("system")[metric].mean().idxmax() == system)


def closer_to(df: pd.DataFrame, system: str, near: str, far: str, metric: str) -> float:
    """Is ``system``'s value closer to ``near``'s than to ``far``'s, on a log scale?"""
    x, a, b = (np.log(at(df, s, metric)) for s in (system, near, far))
    return float(abs(x - a) < abs(x - b))


def disagg_slower(df: pd.DataFrame, modality: str) -> float:
    """Both disaggregated baselines' mean TTFT for ``modality`` above vLLM's and RPS-Serve's."""
    col = mod(modality)
    mono = max(at(df, "vllm", col), at(df, "rps-serve", col))
    return float(min(at(df, "modserve", col), at(df, "modserve+rps", col)) > mono)


def no_benefit_for_media(df: pd.DataFrame, slack: float = 0.1) -> float:
    """ModServe & RPS image and video mean TTFT not more than ``slack`` below ModServe's."""
    return float(all(at(df, "modserve+rps", mod(m)) >= (1 - slack) * at(df, "modserve", mod(m))
                     for m in ("image", "video")))


def goodput_highest(df: pd.DataFrame) -> float:
    for _scale, part in df.groupby("slo.scale"):
        by = part.groupby("system")["goodput_requests_per_s"].mean()
        if by["rps-serve"] < by.max():
            return 0.0
    return 1.0


def fewer_violations_than_disagg(df: pd.DataFrame) -> float:
    for _scale, part in df.groupby("slo.scale"):
        att = part.groupby("system")["slo_attainment"].mean()
        if att["rps-serve"] <= max(att["modserve"], att["modserve+rps"]):
            return 0.0
    return 1.0


def goodput_stable(df: pd.DataFrame, spread: float = 0.25) -> float:
    g = df[df["system"] == "rps-serve"].groupby("slo.scale")["goodput_requests_per_s"].mean()
    return float(g.max() <= (1 + spread) * g.min())


def mean_ratio_over_scales(df: pd.DataFrame, a: str, b: str, metric: str) -> float:
    x = df[df["system"] == a].groupby("slo.scale")[metric].mean()
    y = df[df["system"] == b].groupby("slo.scale")[metric].mean()
    return float((x / y).replace([np.inf, -np.inf], np.nan).mean())


def violations_fall(df: pd.DataFrame) -> float:
    """Violations (1 - attainment) and their severity fall as the SLO scale grows, every system."""
    for _system, part in df.groupby("system"):
        part = part.sort_values("slo.scale")
        att = part["slo_attainment"].to_numpy()
        sev = part["slo_violation_severity"].to_numpy()
        if np.any(np.diff(att) < -1e-12) or np.any(np.diff(sev) > 1e-12):
            return 0.0
    return 1.0


def named(df: pd.DataFrame, name: str, modality: str, stat: str = "mean") -> float:
    system = name if name == "rps-serve" else f"rps-serve-{name}"
    return float(df.loc[df["system"] == system, mod(modality, stat)].mean())


def text_lowest_everywhere(df: pd.DataFrame) -> float:
    t = df[mod("text")]
    return float(bool(((t <= df[mod("image")]) & (t <= df[mod("video")])).all()))


def rises_with_share(df: pd.DataFrame) -> float:
    top = top_rate(df).sort_values("name")  # share-10 / share-30 / share-50: % image + video
    for m in ("text", "image", "video"):
        v = top[mod(m)].to_numpy()
        if np.any(np.diff(v) <= 0):
            return 0.0
    return 1.0


def by_k(df: pd.DataFrame, modality: str) -> pd.Series:
    return df.groupby("policy.queue.num_classes")[mod(modality, "p95")].mean()


def no_text_gain_beyond_3(df: pd.DataFrame) -> float:
    t = by_k(df, "text")
    return float(bool((t.loc[[4, 5]] >= t.loc[3]).all()))


def media_rise_beyond_3(df: pd.DataFrame) -> float:
    return float(all(by_k(df, m).loc[5] > by_k(df, m).loc[3] for m in ("image", "video")))

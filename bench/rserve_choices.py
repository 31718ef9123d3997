"""RServe's claims against the choices the paper leaves open, read from a reproduction run.

Reads the folder of ``lmmsim reproduce rserve -o RUN`` (its figures' results and
per-request runs; no simulation) and prints:

* SLO: Fig. 14's SLO is not stated (the reproduction uses TTFT <= 10 s), and
  Fig. 19's strict 1.4 s / 2 s sit in the paper's TTFT range, not necessarily
  ours. The SLO claims recomputed from every request's TTFT for SLOs set at
  multiples of gLLM-epd's mean TTFT at the lowest rate, and at the fixed value.
* Rate grid: the rates are not stated. The "up to" and "averaged over rates"
  claims over the lowest k rates of the grid.
* gLLM-epd vs gLLM plateau throughput: moving the ViT off gLLM's first stage
  gains about the encoder's work over one stage's (when stage 0 is the
  bottleneck): the encoder GPU's busy time over an LLM GPU's in gLLM-epd at its
  top rate, against the measured plateau gain.
* RServe's plateau: the model FLOPs per second it implies over 4 H100s' dense
  BF16 peak (MFU), the simulator's and the paper's, with the GPUs' busy share.

    python bench/rserve_choices.py RUN
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from lmmsim.reproduce.rserve_metrics import (RATE, TPUT, by_rate, curve_area, label_column, max_ratio_to_best,
                                             mean_abs_change, mean_change, plateau_change)

PP_SYSTEMS = ("vllm-pp", "gllm", "gllm-epd", "rserve")
PEAK_TFLOPS = 989.4  # H100 SXM dense BF16 (profiles/gpus/h100-sxm-80gb.yaml)
LLM_PARAMS = 72.7e9  # Qwen2.5-72B (model card); 80 layers, hidden 8192 (profiles/models/qwen2.5-vl-72b.yaml)
LLM_GPUS = [f"gpu_utilization.per_gpu.{g}" for g in range(1, 5)]  # PP4 + E1: GPU 0 is the encoder's


def _requests(run: Path, figure: str) -> pd.DataFrame:
    """Every request of the figure's runs with its run's system label, rate and seed."""
    res = pd.read_parquet(run / figure / "results.parquet")
    res = res[res["status"] == "ok"]
    label = label_column(res)
    parts = []
    for _, row in res.iterrows():
        req = pd.read_parquet(run / figure / "runs" / row["run_id"] / "requests.parquet",
                              columns=["ttft_s", "status"])
        parts.append(req.assign(label=row[label], rate=row[RATE], repeat=row["repeat"]))
    return pd.concat(parts, ignore_index=True)


def _attainment(req: pd.DataFrame, slo: float) -> pd.DataFrame:
    met = (req["status"] == "finished") & (req["ttft_s"] <= slo)
    return req.assign(met=met).groupby(["label", "rate"])["met"].mean().unstack(0)


def slo_sensitivity(run: Path, figure: str, fixed: float) -> None:
    req = _requests(run, figure)
    low = req[(req["label"] == "gllm-epd") & (req["rate"] == req["rate"].min())]["ttft_s"].mean()
    for slo in sorted({fixed, *(k * low for k in (1.25, 1.5, 2.0, 3.0, 5.0))}):
        att = _attainment(req, slo)
        gap = att["rserve"].mean() - att["gllm-epd"].mean()
        area = curve_area(att["rserve"]) / curve_area(att["gllm-epd"]) - 1
        tag = " (the reproduction's)" if slo == fixed else f" ({slo / low:.2f}x gLLM-epd's lowest-rate TTFT)"
        print(f"  {figure} SLO {slo:.2f} s{tag}: mean attainment RServe - gLLM-epd {gap:+.3f}, "
              f"area {area:+.1%}")


def rate_grid(run: Path, figure: str) -> None:
    res = pd.read_parquet(run / figure / "results.parquet")
    rates = sorted(res[RATE].unique())
    for k in range(4, len(rates) + 1):
        part = res[res[RATE] <= rates[k - 1]]
        print(f"  {figure} lowest {k} rates (<= {rates[k - 1]:g}/s): TP4 up to "
              f"{max_ratio_to_best(part, 'vllm', PP_SYSTEMS):.2f}x, RServe vs gLLM-epd "
              f"{mean_change(part, 'rserve', 'gllm-epd'):+.1%}, "
              f"matched {mean_change(part, 'rserve-tt', 'gllm-epd'):+.1%}"
              f", gLLM-epd vs gLLM {mean_change(part, 'gllm-epd', 'gllm'):+.1%}, |gLLM vs vLLM PP4| "
              f"{mean_abs_change(part, 'gllm', 'vllm-pp'):.1%}")


def throughput_curves(run: Path, figure: str, systems: tuple[str, ...]) -> None:
    """Input throughput per rate: where each system's plateau begins on the grid."""
    res = pd.read_parquet(run / figure / "results.parquet")
    for system in systems:
        curve = by_rate(res, system, TPUT)
        print(f"  {figure} {system}: " + ", ".join(f"{r:g}/s {t:.0f}" for r, t in curve.items()))


def epd_throughput(run: Path, figure: str) -> None:
    res = pd.read_parquet(run / figure / "results.parquet")
    top = res[(res[RATE] == res[RATE].max()) & (res[label_column(res)] == "gllm-epd")]
    enc = top["gpu_utilization.per_gpu.0"].mean()
    llm = top[LLM_GPUS].mean(axis=1).mean()
    print(f"  {figure}: gLLM-epd at its top rate: encoder GPU busy {enc:.1%}, LLM GPUs {llm:.1%} -> predicted "
          f"gain {enc / llm:+.1%}; measured plateau gain {plateau_change(res, 'gllm-epd', 'gllm'):+.1%}")


def mfu(run: Path, figure: str, paper_tokens_s: float) -> None:
    res = pd.read_parquet(run / figure / "results.parquet")
    rows = res[res[label_column(res)] == "rserve"]
    by = by_rate(res, "rserve", TPUT)
    tokens_s = float(by.max())
    prompt = float(pd.read_parquet(run / figure / "runs" / rows["run_id"].iloc[0] / "requests.parquet")
                   ["num_prompt_tokens"].mean())
    # dense FLOPs per prompt token: 2 x parameters, plus attention over half the prompt on average
    per_token = 2 * LLM_PARAMS + 4 * 80 * 8192 * prompt / 2
    busy = rows[rows[RATE] == by.idxmax()][LLM_GPUS]
    for who, t in (("simulator", tokens_s), ("paper", paper_tokens_s)):
        print(f"  {figure} {who}: RServe plateau {t:.0f} tokens/s = {t * per_token / (4 * PEAK_TFLOPS * 1e12):.0%} "
              "MFU of 4 x H100")
    print(f"  {figure}: LLM GPUs busy {busy.mean(axis=1).mean():.1%} at the simulator's plateau")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="output folder of lmmsim reproduce rserve")
    args = ap.parse_args()
    # (heading, what prints, (figure, its further arguments) per figure)
    sections = (
        ("SLO sensitivity", slo_sensitivity,
         (("fig12-1k", 10.0), ("fig12-2k", 10.0), ("fig18-1k", 1.4), ("fig18-2k", 2.0))),
        ("Rate grid", rate_grid, (("fig12-1k",), ("fig12-2k",))),
        ("Input throughput (tokens/s) over the rate grid", throughput_curves,
         (("fig12-1k", ("rserve", "gllm-epd")), ("fig12-2k", ("rserve", "gllm-epd")),
          ("fig17", ("rserve", "rserve-intra")), ("fig18-1k", ("gllm", "gllm-epd", "rserve")))),
        ("gLLM-epd's throughput gain from the encoder's share of a stage", epd_throughput,
         (("fig12-1k",), ("fig12-2k",))),
        ("RServe's plateau as model FLOPs", mfu, (("fig12-1k", 10600), ("fig12-2k", 11100))),
    )
    for heading, show, cases in sections:
        print(heading)
        for figure, *extra in cases:
            if (args.run / figure).exists():
                show(args.run, figure, *extra)


if __name__ == "__main__":
    main()

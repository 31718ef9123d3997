"""RServe (rserve.txt section 4): the figures the simulator reruns and the claims it checks.

Where the paper gives a number averaged "over request rates" we average the
per-rate relative change over the sweep's rates; "up to" is the largest
per-rate value; a plateau throughput is the highest input-token throughput
over the rates (the sweeps run past saturation).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from lmmsim.reproduce.core import Claim, Figure

RATE = "workload.arrival.rate"
TTFT = "ttft_s.mean"
TPUT = "throughput.input_tokens_per_s"
C_KEY = "deployment.encoder.dispatch.embedding_batch_tokens"
ADMISSION = "deployment.admission"


def _by_rate(df: pd.DataFrame, system: str, metric: str) -> pd.Series:
    rows = df[df["system"] == system]
    return rows.groupby(RATE)[metric].mean()


def mean_change(df: pd.DataFrame, system: str, baseline: str, metric: str = TTFT) -> float:
    """Mean over rates of ``system / baseline - 1``."""
    a, b = _by_rate(df, system, metric), _by_rate(df, baseline, metric)
    both = a.index.intersection(b.index)
    return float((a[both] / b[both] - 1).mean()) if len(both) else math.nan


def mean_abs_change(df: pd.DataFrame, system: str, baseline: str, metric: str = TTFT) -> float:
    a, b = _by_rate(df, system, metric), _by_rate(df, baseline, metric)
    both = a.index.intersection(b.index)
    return float((a[both] / b[both] - 1).abs().mean()) if len(both) else math.nan


def max_ratio_to_best(df: pd.DataFrame, system: str, others: tuple[str, ...], metric: str = TTFT) -> float:
    """Largest per-rate ``system / min(others)``."""
    a = _by_rate(df, system, metric)
    best = pd.concat([_by_rate(df, o, metric) for o in others], axis=1).min(axis=1)
    both = a.index.intersection(best.index)
    return float((a[both] / best[both]).max()) if len(both) else math.nan


def plateau(df: pd.DataFrame, system: str) -> float:
    return float(_by_rate(df, system, TPUT).max())


def plateau_change(df: pd.DataFrame, system: str, baseline: str) -> float:
    return plateau(df, system) / plateau(df, baseline) - 1


def mean_slo(df: pd.DataFrame, system: str) -> float:
    return float(_by_rate(df, system, "slo_attainment").mean())


def slo_area_change(df: pd.DataFrame, system: str, baseline: str) -> float:
    """Area under SLO attainment vs rate (trapezoids), relative to the baseline's."""
    def area(s):
        curve = _by_rate(df, s, "slo_attainment").sort_index()
        x, y = curve.index.to_numpy(float), curve.to_numpy(float)
        return float(np.sum((y[1:] + y[:-1]) / 2 * np.diff(x)))
    return area(system) / area(baseline) - 1


def fraction_better(df: pd.DataFrame, system: str, others: tuple[str, ...]) -> float:
    """1 if ``system`` has the lowest mean TTFT at every rate, else 0."""
    a = _by_rate(df, system, TTFT)
    best = pd.concat([_by_rate(df, o, TTFT) for o in others], axis=1).min(axis=1)
    both = a.index.intersection(best.index)
    return float(bool(len(both)) and bool((a[both] < best[both]).all()))


def epd_worse_at_lowest_rate(df: pd.DataFrame) -> float:
    a, b = _by_rate(df, "gllm-epd", TTFT), _by_rate(df, "gllm", TTFT)
    low = min(a.index.intersection(b.index))
    return float(a[low] > b[low])


def advantage_shrinks(df: pd.DataFrame, system: str, baseline: str) -> float:
    """1 if the relative TTFT gain at the highest rate is smaller than at the lowest."""
    a, b = _by_rate(df, system, TTFT), _by_rate(df, baseline, TTFT)
    both = sorted(a.index.intersection(b.index))
    gain = 1 - a[both] / b[both]
    return float(gain.iloc[-1] < gain.iloc[0])


# --- Fig. 16: the embedding batch size sweep (two requests)
def _c_curve(df: pd.DataFrame, metric: str) -> pd.Series:
    rows = df[df[ADMISSION] == "streaming"]
    return rows.groupby(C_KEY)[metric].mean().sort_index()


def _epd_point(df: pd.DataFrame, metric: str) -> float:
    return float(df.loc[df[ADMISSION] == "after_encode", metric].mean())


def ttft_growth_over_c(df: pd.DataFrame) -> float:
    """TTFT with everything encoded first (gLLM-epd) / TTFT at C = one item."""
    return _epd_point(df, TTFT) / float(_c_curve(df, TTFT).iloc[0])


def throughput_drop_over_c(df: pd.DataFrame) -> float:
    return _epd_point(df, TPUT) / float(_c_curve(df, TPUT).iloc[0]) - 1


def monotone_in_c(df: pd.DataFrame) -> float:
    curve = list(_c_curve(df, TTFT)) + [_epd_point(df, TTFT)]
    return float(all(b >= a for a, b in zip(curve, curve[1:])) and curve[-1] > curve[0])


def u_shaped_in_c(df: pd.DataFrame) -> float:
    """1 if TTFT's minimum over C lies strictly inside the range (falls, then rises)."""
    curve = list(_c_curve(df, TTFT)) + [_epd_point(df, TTFT)]
    k = int(np.argmin(curve))
    return float(0 < k < len(curve) - 1 and curve[0] > curve[k] < curve[-1])


PP_SYSTEMS = ("vllm-pp", "gllm", "gllm-epd", "rserve")

# Known causes where the simulator differs (REPORT.md prints them under the table for rows that miss).
WHY_ENCODE_SHARE = ("encoding is 7-10% of gLLM-epd's TTFT in our cost model (Qwen2.5-VL's ViT on the H100 fit of "
                    "aiconfigurator's measured vLLM 0.24 kernels; ~13 ms per 1024-token item) against up to 26% "
                    "in the paper's Fig. 2, so overlapping it with "
                    "prefill gains less; `python bench/rserve_encoder_share.py` (encoder passes x2.5) gives the "
                    "paper's size.")
WHY_TP = "our NVLink all-reduce is cheaper than what the paper's TP4 paid, so TP4 loses less to PP4."
WHY_C_RISE = ("the rise needs encoding to dominate those requests' TTFT (>= 65%), which no cost model of this ViT "
              "gives here.")
WHY_U = ("the fall at small C needs a host cost per encoder call above the GPU pass of a small batch; the one "
         "modelled from mechanisms (PCIe copy, eager kernel issue: ~10 ms for Qwen2.5-VL's 32 layers on our "
         "profiled CPU, mostly hidden behind the kernels) is too small: with 20 ms more per call "
         "(deployment.encoder.call_overhead_s = 0.02) `python bench/encoder_call_overhead.py` gives the U.")


def _fig12(res: str, rserve_vs_epd: float, epd_vs_gllm: float, gllm_vs_pp: float, tp_drop: float,
           epd_tput: float, rserve_plateau: float, rserve_slo: float, epd_slo: float) -> Figure:
    return Figure(
        name=f"fig12-{res}",
        sweep=f"fig12-{res}.yaml",
        plots=(("ttft-vs-rate", {"series": "system"}),
               ("throughput-vs-rate", {"series": "system", "metric": "input_tokens"}),
               ("slo-attainment-vs-rate", {"series": "system"})),
        claims=(
            Claim(f"{res.upper()}: RServe vs gLLM-epd mean TTFT, averaged over rates", rserve_vs_epd,
                  lambda df: mean_change(df, "rserve", "gllm-epd"), kind="change", why=WHY_ENCODE_SHARE),
            Claim(f"{res.upper()}: gLLM-epd vs gLLM mean TTFT, averaged over rates", epd_vs_gllm,
                  lambda df: mean_change(df, "gllm-epd", "gllm"), kind="change"),
            Claim(f"{res.upper()}: gLLM vs vLLM PP4 mean TTFT, mean absolute difference", gllm_vs_pp,
                  lambda df: mean_abs_change(df, "gllm", "vllm-pp"), kind="level"),
            Claim(f"{res.upper()}: vLLM TP4 TTFT over the best PP system, up to (x)", 3.77,
                  lambda df: max_ratio_to_best(df, "vllm", PP_SYSTEMS)),
            Claim(f"{res.upper()}: vLLM TP4 plateau throughput vs vLLM PP4", tp_drop,
                  lambda df: plateau_change(df, "vllm", "vllm-pp"), kind="change", why=WHY_TP),
            Claim(f"{res.upper()}: gLLM-epd plateau throughput vs gLLM", epd_tput,
                  lambda df: plateau_change(df, "gllm-epd", "gllm"), kind="change"),
            Claim(f"{res.upper()}: RServe's plateau throughput is above gLLM-epd's (extends the limit)", 1,
                  lambda df: float(plateau(df, "rserve") > plateau(df, "gllm-epd")), kind="holds"),
            Claim(f"{res.upper()}: RServe plateau input throughput (tokens/s)", rserve_plateau,
                  lambda df: plateau(df, "rserve"), kind="level"),
            Claim(f"{res.upper()}: RServe mean SLO attainment (TTFT <= 10 s) minus gLLM-epd's",
                  rserve_slo - epd_slo, lambda df: mean_slo(df, "rserve") - mean_slo(df, "gllm-epd"),
                  kind="change", why=WHY_ENCODE_SHARE),
            Claim(f"{res.upper()}: RServe's TTFT gain over gLLM-epd shrinks as the rate grows", 1,
                  lambda df: advantage_shrinks(df, "rserve", "gllm-epd"), kind="holds"),
        ),
    )


def _fig18(res: str, coverage: float) -> Figure:
    return Figure(
        name=f"fig18-{res}",
        sweep=f"fig18-{res}.yaml",
        plots=(("ttft-vs-rate", {"series": "system"}), ("slo-attainment-vs-rate", {"series": "system"})),
        claims=(
            Claim(f"{res.upper()} TP4: RServe TP4+E1 has the lowest TTFT at every rate", 1,
                  lambda df: fraction_better(df, "rserve", ("gllm", "gllm-epd")), kind="holds"),
            Claim(f"{res.upper()} TP4: gLLM-epd slower than gLLM at the lowest rate (transfer overhead)", 1,
                  epd_worse_at_lowest_rate, kind="holds"),
            Claim(f"{res.upper()} TP4: RServe's gain over gLLM-epd narrows at high rates", 1,
                  lambda df: advantage_shrinks(df, "rserve", "gllm-epd"), kind="holds"),
            Claim(f"{res.upper()} TP4: strict-SLO attainment area, RServe vs gLLM-epd", coverage,
                  lambda df: slo_area_change(df, "rserve", "gllm-epd"), kind="change", why=WHY_ENCODE_SHARE),
        ),
    )


def _fig16(quality: str, claims: tuple[Claim, ...]) -> Figure:
    x = {"series": ADMISSION, "x": C_KEY}
    return Figure(name=f"fig16-{quality}", sweep=f"fig16-{quality}.yaml",
                  plots=(("ttft-vs-rate", x), ("throughput-vs-rate", {**x, "metric": "input_tokens"})),
                  claims=claims, quick_set=())


FIGURES: tuple[Figure, ...] = (
    # Paper: TTFT -18%/-19%, -16%/-20%; gLLM ~ vLLM PP4 within 1.6%/3.8%; TP4 throughput -26%/-28%;
    # gLLM-epd throughput +6%/+8.5%; RServe ~10600/11100 tokens/s; SLO 71%/70% vs 61%/59%.
    _fig12("1k", -0.18, -0.16, 0.016, -0.26, 0.06, 10600, 0.71, 0.61),
    _fig12("2k", -0.19, -0.20, 0.038, -0.28, 0.085, 11100, 0.70, 0.59),
    _fig16("high", (
        Claim("High quality: TTFT with all items encoded first / with C = one item, up to (x)", 2.91,
              ttft_growth_over_c, why=WHY_C_RISE),
        Claim("High quality: throughput change from C = one item to all items", -0.53, throughput_drop_over_c,
              kind="change", why=WHY_C_RISE),
        Claim("High quality: TTFT rises monotonically with C", 1, monotone_in_c, kind="holds", why=WHY_C_RISE),
    )),
    _fig16("low", (
        Claim("Low quality: TTFT first falls, then rises with C (U-shaped)", 1, u_shaped_in_c, kind="holds",
              why=WHY_U),
    )),
    Figure(
        name="fig17",
        sweep="fig17.yaml",
        plots=(("ttft-vs-rate", {"series": "system"}),
               ("throughput-vs-rate", {"series": "system", "metric": "input_tokens"})),
        claims=(
            Claim("RServe-intra vs RServe plateau throughput", -0.32,
                  lambda df: plateau_change(df, "rserve-intra", "rserve"), kind="change"),
            Claim("RServe-intra vs RServe mean TTFT, averaged over rates", 1.72,
                  lambda df: mean_change(df, "rserve-intra", "rserve"), kind="change"),
        ),
    ),
    _fig18("1k", 0.75),
    _fig18("2k", 1.69),
    Figure(
        name="fig20",
        sweep="fig20.yaml",
        plots=(("ttft-vs-rate", {"series": "system"}),),
        claims=(
            Claim("1 LLM GPU + 1 encoder GPU: RServe vs gLLM-epd TTFT, best rate (up to -26%)", -0.26,
                  lambda df: float((_by_rate(df, "rserve", TTFT) / _by_rate(df, "gllm-epd", TTFT) - 1).min()),
                  kind="change"),
            Claim("1 LLM GPU: RServe's gain is largest at the lowest rate", 1,
                  lambda df: advantage_shrinks(df, "rserve", "gllm-epd"), kind="holds"),
        ),
    ),
)

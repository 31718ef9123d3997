"""EAServe (easerve.txt section 4): the figures the simulator reruns and the claims it checks.

Fig. 12 runs ``lmmsim search`` (HAS and the random and coordinate-descent
baselines, 30 trials each) rather than a sweep. Not here: the EPDServe and
HydraInfer columns of Table 5 (no such systems in the catalog).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd

from lmmsim.metrics.goodput import tiered_goodput
from lmmsim.outputs import atomic_path
from lmmsim.reproduce.core import Claim, Figure, with_overrides
from lmmsim.search.trials import TIE_TOLERANCE

RATE = "workload.arrival.rate"
TPUT = "throughput.requests_per_s"


def _at(df: pd.DataFrame, system: str, metric: str, **where) -> float:
    """Mean ``metric`` of ``system`` (the ``name`` column where the figure has one:
    ``easerve`` preset vs ``easerve-has``, the HAS-tuned configuration)."""
    col = "name" if "name" in df.columns else "system"
    rows = df[df[col] == system]
    for key, value in where.items():
        rows = rows[rows[key.replace("__", ".")] == value]
    return float(rows[metric].mean())


OURS = "easerve-has"  # the paper's "Ours (HAS-tuned)"

# Known causes where the simulator differs (REPORT.md prints them under the table for rows that miss).
# Host preprocessing is measured (profiles/host/cpu, host.cpu_speed 1), not fitted to the paper; the
# claims' values over CPU speed factors are in plots/easerve/HOST.md (bench/easerve_host.py).
WHY_DYNAMO = ("our Dynamo is not encode-bound: its encode worker is busy a few % of the time at 2 req/s "
              "(measured preprocessing 3-57 ms per request, GPU pass 2-63 ms), and its ceiling is the LLM side "
              "(TP2 prefill on image/video, TP4 decode on audio); the paper's ~1 req/s on all three modalities "
              "would need ~0.9 s of host time per request, 17-330x what the paper's inputs cost on our profiled "
              "CPU (plots/easerve/HOST.md); the tiers are ours (Table 4 is not in our copy of the paper).")
WHY_TIERS = ("the tiers are ours (Table 4 is not in our copy of the paper); where EAServe meets a tier at the "
             "sweep's top rate its goodput is a lower bound.")
WHY_COLLAPSE = ("at 2 req/s our Dynamo is below its ceiling on video (its TP2 prefill saturates near 2.6 req/s), "
                "so its queue does not grow without bound as the paper's encode stage does; on image (ceiling "
                "1.7 req/s) it does, and the ratio is the paper's size.")
WHY_PLATFORM = ("EAServe is prefill-bound on both platforms; the cost model takes the RTX 6000 Ada's datasheet "
                "364 dense bf16 TFLOPS (above the A100's 312) and not its sustained clocks under a 300 W limit; "
                "the A100's 2.1x HBM bandwidth speeds decode, which is not the bottleneck here. Tuning EAServe per "
                "platform does not help yet: `lmmsim search scenarios/reproduce/easerve/image-llava34b.yaml --set "
                "hardware.gpu=a100-sxm-80gb --set hardware.interconnect=nvlink --rate 5 --budget 30 --jobs 2 "
                "--trial-requests 500` keeps one allocation after Stage 1 (E5-P1x1-D1x2-L5x1) and reaches 1.83 "
                "req/s, below the preset's 3.02.")
WHY_SM = ("at 50 req/s the decode worker's max_running (256, vLLM's default max_num_seqs on a 48 GB GPU) binds "
          "first: prefilled requests wait for a decode slot (P99 TTFT ~43 s), so the SM split moves P99 TTFT by "
          "under 0.1% either way over seeds 0-2; with max_running 1024 (vLLM's default on >= 70 GB GPUs) the "
          "paper's order appears on every seed: none is 16.2-20.6% above dynamic (paper +19%) and static "
          "2.5-3.2% (paper +11%) (`python bench/table6_decode_bound.py`).")
WHY_TPOT = ("both decode at their native rate here: at the paper's 2 req/s (10 on audio's x5 clock) Dynamo's P99 "
            "TPOT is 29.7 ms (image) / 38.8 ms (audio) against EAServe's 31.9 / 47.9 ms (fig10 sweeps, 5 seeds); the "
            "paper's 764 / 869 ms come from decode batches stalling behind an encode-bound Dynamo, which measured "
            "host preprocessing does not produce (plots/easerve/HOST.md).")
WHY_AUDIO_VLLM = ("vLLM TP8 saturates at 13.1 req/s on audio here (x5 clock, fig10-audio at 25 req/s) while Dynamo, "
                  "not encode-bound, reaches 16.7 with its TP4 decode worker; the paper's Dynamo (0.98 req/s) is "
                  "encode-bound (plots/easerve/HOST.md).")
WHY_BEST = ("against each baseline's best configuration under the same 8 GPUs (`python "
            "bench/easerve_best_baselines.py`: Dynamo with 2 TP2 prefill workers, vLLM as 4 x TP2 on image and "
            "video, 2 x TP4 on audio) EAServe's lead is gone: moderate-tier goodput 3.42 vs 3.48 (Dynamo) / 4.35 "
            "(vLLM) req/s on image, 4.97 vs 4.75 / 5.00 on video (5 seeds); the presets' Dynamo idles a GPU and "
            "runs one TP2 prefill worker, the presets' vLLM runs TP8, whose all-reduces over PCIe cost more than "
            "data parallelism on this 8-GPU PCIe box. HAS searches EAServe's own space only and keeps one "
            "allocation (issue 17: top-K and co-location on/off are not in it yet).")
WHY_CV = ("EAServe has more headroom at 2 req/s here than in the paper (P99 TTFT 4 s vs 10.2 s), so bursts "
          "queue less.")
WHY_VIDEO = ("a Qwen2.5-VL request here is ~60 ms of encoder GPU work (16 frames of 448x448; Dynamo's encoder "
             "GPU is 13% busy at 2 req/s), so the two encoder GPUs have room for local prefill and HAS offloads "
             "about half of it there (s ~ 0.54); the paper's video passes fill > 90% of the SMs. Needs the "
             "paper's video shape and a measured encoder latency per batch and SM share.")


# Fig. 9's tiers: Table 4's P99 TTFT / TPOT thresholds are not in our copy of the paper. Ours: both
# bounds = scale x the P99 of the slowest system at the sweep's lowest (near-isolated) rate, one
# common SLO for every system; the moderate tier is the middle one.
GOODPUT_SCALES = (2, 5, 10, 20, 50)
MODERATE = 10
QUICK_SET = ("workload.num_requests=150",)


def _goodput_ratio(df: pd.DataFrame, baseline: str, scale: float = MODERATE) -> float:
    """Goodput (highest rate meeting the tier) of the HAS-tuned EAServe over ``baseline``'s."""
    return (_at(df, OURS, "goodput_requests_per_s", slo__scale=scale)
            / _at(df, baseline, "goodput_requests_per_s", slo__scale=scale))


def _goodput_highest(df: pd.DataFrame) -> float:
    """1 if the HAS-tuned EAServe's goodput is at least vLLM's and Dynamo's at every tier."""
    for _scale, part in df.groupby("slo.scale"):
        by = part.groupby("name")["goodput_requests_per_s"].mean()
        if by[OURS] < max(by["vllm"], by["dynamo"]) - 1e-12:
            return 0.0
    return 1.0


def _encoder_util(df: pd.DataFrame, system: str, rate: float = 2) -> float:
    """Mean busy fraction of the encoder GPUs (the first ones: pools are placed encoder first)."""
    row = df[(df["name"] == system) & (df[RATE] == rate)].iloc[0]
    n = int(row["deployment.pools.encoder.workers"])
    return float(sum(row[f"gpu_utilization.per_gpu.{g}"] for g in range(n)) / n)


def _tiered_goodput(sweep: Path, folder: Path, quick: bool, jobs: int | None) -> None:
    """Run ``sweep`` (systems x rates) into ``folder/sweep``; write ``folder/results.parquet``
    with one row per system and tier: goodput = the highest rate meeting the tier's P99
    bounds (lmmsim.metrics.goodput)."""
    from lmmsim.sweep.runner import run_sweep

    if quick:
        sweep = with_overrides(sweep, folder / ".quick.yaml", QUICK_SET)
    frame = run_sweep(sweep, folder / "sweep", jobs=jobs, progress=False)
    ok = frame[frame["status"] == "ok"]
    lowest = ok[ok[RATE] == ok[RATE].min()].groupby("name")[["ttft_s.p99", "tpot_s.p99"]].mean()
    # one SLO for every system and seed: the slowest of the paper's systems' mean P99s at the lowest rate
    # (the searched best baselines, ``*-best``, are judged on those tiers but do not set them)
    lowest = lowest[~lowest.index.str.endswith("-best")]
    ttft_base, tpot_base = float(lowest["ttft_s.p99"].max()), float(lowest["tpot_s.p99"].max())
    parts = [tiered_goodput(part, GOODPUT_SCALES, ttft_base, tpot_base).assign(repeat=r)
             for r, part in ok.groupby("repeat", sort=True)]  # goodput per seed
    out = pd.concat(parts, ignore_index=True)
    out["slo.base_rate"] = float(ok[RATE].min())
    with atomic_path(folder / "results.parquet") as tmp:
        out.to_parquet(tmp, index=False)


def _goodput_above(df: pd.DataFrame, system: str, other: str, scale: float) -> float:
    """1 if ``system``'s goodput at tier ``scale`` is above ``other``'s."""
    return float(_at(df, system, "goodput_requests_per_s", slo__scale=scale)
                 > _at(df, other, "goodput_requests_per_s", slo__scale=scale))


# easerve.txt 4.2: "Dynamo beats vLLM on video only at the strictest tier ... slower than vLLM on audio"
_DYNAMO_VS_VLLM = {
    "video": Claim("video: Dynamo's goodput above vLLM's at the strictest tier", 1,
                   lambda df: _goodput_above(df, "dynamo", "vllm", min(GOODPUT_SCALES)), kind="holds",
                   why=WHY_TIERS),
    "audio": Claim("audio: vLLM's goodput above Dynamo's, moderate tier", 1,
                   lambda df: _goodput_above(df, "vllm", "dynamo", MODERATE), kind="holds", why=WHY_AUDIO_VLLM),
}


def _fig9(modality: str, dynamo: float, vllm: float) -> Figure:
    return Figure(
        name=f"fig9-{modality}", sweep=f"fig9-{modality}.yaml", make=_tiered_goodput,
        plots=(("goodput-vs-slo-scale", {"series": "name"}),),
        claims=(
            Claim(f"{modality}: goodput EAServe / Dynamo, moderate tier", dynamo,
                  lambda df: _goodput_ratio(df, "dynamo"), why=WHY_DYNAMO),
            Claim(f"{modality}: goodput EAServe / vLLM, moderate tier", vllm,
                  lambda df: _goodput_ratio(df, "vllm"), why=WHY_TIERS),
            Claim(f"{modality}: EAServe's goodput above vLLM's and Dynamo's at every tier", 1, _goodput_highest,
                  kind="holds"),
            *((_DYNAMO_VS_VLLM[modality],) if modality in _DYNAMO_VS_VLLM else ()),
            # the paper's baselines are their best configurations: ours from bench/easerve_best_baselines.py
            Claim(f"{modality}: goodput EAServe / best Dynamo configuration, moderate tier", dynamo,
                  lambda df: _goodput_ratio(df, "dynamo-best"), why=WHY_BEST),
            Claim(f"{modality}: goodput EAServe / best vLLM configuration (replicas x TP), moderate tier", vllm,
                  lambda df: _goodput_ratio(df, "vllm-best"), why=WHY_BEST),
        ),
    )


def _top_rate_throughput_highest(df: pd.DataFrame, baselines=("dynamo", "vllm")) -> float:
    """1 if the HAS-tuned EAServe's throughput at the sweep's top rate beats the ``baselines``'."""
    top = {RATE.replace(".", "__"): float(df[RATE].max())}
    return float(_at(df, OURS, TPUT, **top) > max(_at(df, s, TPUT, **top) for s in baselines))


def _ratio_at(metric: str, rate: float):
    """Dynamo's ``metric`` over the HAS-tuned EAServe's at ``rate``."""
    where = {RATE.replace(".", "__"): rate}
    return lambda df: _at(df, "dynamo", metric, **where) / _at(df, OURS, metric, **where)


def _fig10(modality: str, p99_collapse: float | None, top_rate: float = 5,
           tpot_drop: tuple[float, float] | None = None) -> Figure:
    """``tpot_drop``: (the paper's Dynamo / EAServe P99 TPOT ratio at its 2 req/s, the rate that is here)."""
    claims = [
        Claim(f"{modality}: EAServe throughput at {top_rate:g} req/s above Dynamo's and vLLM's", 1,
              _top_rate_throughput_highest, kind="holds"),
        Claim(f"{modality}: EAServe throughput at {top_rate:g} req/s above the best Dynamo and vLLM "
              "configurations'", 1, lambda df: _top_rate_throughput_highest(df, ("dynamo-best", "vllm-best")),
              kind="holds", why=WHY_BEST),
    ]
    if tpot_drop is not None:
        claims.append(Claim(f"{modality}: P99 TPOT Dynamo / EAServe at the paper's 2 req/s", tpot_drop[0],
                            _ratio_at("tpot_s.p99", tpot_drop[1]), why=WHY_TPOT))
    if p99_collapse is not None:
        claims.append(Claim(f"{modality}: P99 TTFT Dynamo / EAServe at 2 req/s", p99_collapse,
                            lambda df: _at(df, "dynamo", "ttft_s.p99", **{RATE.replace('.', '__'): 2})
                            / _at(df, OURS, "ttft_s.p99", **{RATE.replace('.', '__'): 2}), why=WHY_COLLAPSE))
    if modality == "image":
        claims += [
            Claim("image: Dynamo's encoder GPU busy < 10% at 2 req/s (Fig. 11)", 1,
                  lambda df: float(_encoder_util(df, "dynamo") < 0.10), kind="holds"),
            Claim("image: EAServe's encoder GPUs busy with local prefill, ~80% (Fig. 11)", 0.8,
                  lambda df: _encoder_util(df, OURS), kind="level"),
        ]
    return Figure(
        name=f"fig10-{modality}", sweep=f"fig10-{modality}.yaml",
        plots=(("throughput-vs-rate", {"series": "name"}), ("ttft-vs-rate", {"series": "name"}),
               ("line", {"series": "name", "metric": "tpot_s.p99"})),
        claims=tuple(claims),
    )


FIGURES: tuple[Figure, ...] = (
    # moderate tier goodput (paper): image 1.93 vs 0.95 (Dynamo) / 1.11 (vLLM); video 1.90 vs 0.95 / 1.32;
    # audio 4.17 vs 0.98 / 2.77.
    _fig9("image", 1.93 / 0.95, 1.93 / 1.11),
    _fig9("video", 1.90 / 0.95, 1.90 / 1.32),
    _fig9("audio", 4.17 / 0.98, 4.17 / 2.77),
    # P99 TPOT at 2 req/s (easerve.txt 4.2): 764 -> 72 ms on image, 869 -> 49 ms on audio
    _fig10("image", 233.8 / 10.8, tpot_drop=(764 / 72, 2)),
    _fig10("video", 144.8 / 18.0),
    _fig10("audio", None, top_rate=25, tpot_drop=(869 / 49, 10)),  # audio's rate axis x5: see fig10-audio.yaml
    Figure(
        name="table5", sweep="table5.yaml",
        plots=(("bars", {"series": "system", "metric": TPUT, "group": "hardware.gpu"}),),
        claims=(
            Claim("RTX 6000 Ada: EAServe throughput at 5 req/s (req/s)", 1.95,
                  lambda df: _at(df, "easerve", TPUT, hardware__gpu="rtx-6000-ada"), kind="level", why=WHY_PLATFORM),
            Claim("A100: EAServe throughput at 5 req/s (req/s)", 4.91,
                  lambda df: _at(df, "easerve", TPUT, hardware__gpu="a100-sxm-80gb"), kind="level", why=WHY_PLATFORM),
            Claim("EAServe's P99 TTFT below Dynamo's on both platforms", 1,
                  lambda df: float(all(_at(df, "easerve", "ttft_s.p99", hardware__gpu=g)
                                       < _at(df, "dynamo", "ttft_s.p99", hardware__gpu=g)
                                       for g in ("rtx-6000-ada", "a100-sxm-80gb"))), kind="holds"),
        ),
        quick_set=("workload.num_requests=150",),
    ),
    Figure(
        name="table6", sweep="table6.yaml",
        plots=(("bars", {"series": "deployment.local_prefill.sm_partitioning", "metric": "ttft_s.p99"}),),
        claims=(
            Claim("SM ablation: P99 TTFT dynamic < static < none", 1,
                  lambda df: float(_sm(df, "dynamic") < _sm(df, "static") < _sm(df, "none")), kind="holds",
                  why=WHY_SM),
            Claim("SM ablation: no partitioning vs dynamic, P99 TTFT (+19%)", 0.19,
                  lambda df: _sm(df, "none") / _sm(df, "dynamic") - 1, kind="change", why=WHY_SM),
            Claim("SM ablation: static 50/50 vs dynamic, P99 TTFT (+11%)", 0.11,
                  lambda df: _sm(df, "static") / _sm(df, "dynamic") - 1, kind="change", why=WHY_SM),
        ),
    ),
    Figure(
        name="table7", sweep="table7.yaml",
        plots=(("bars", {"series": "system", "metric": "ttft_s.p99", "group": "workload.arrival.cv"}),),
        claims=(
            Claim("CV 2 vs Poisson: EAServe throughput change (within a few %)", -0.03,
                  lambda df: _cv(df, 2.0, TPUT) / _cv(df, 1.0, TPUT) - 1, kind="change",
                  why="both within a few percent; a 500-request run's window includes its drain."),
            Claim("CV 2 vs Poisson: EAServe P99 TTFT (+62%)", 0.62,
                  lambda df: _cv(df, 2.0, "ttft_s.p99") / _cv(df, 1.0, "ttft_s.p99") - 1, kind="change", why=WHY_CV),
            Claim("CV 0.5 vs Poisson: EAServe P99 TTFT (-35%)", -0.35,
                  lambda df: _cv(df, 0.5, "ttft_s.p99") / _cv(df, 1.0, "ttft_s.p99") - 1, kind="change", why=WHY_CV),
        ),
    ),
)


def _sm(df: pd.DataFrame, mode: str) -> float:
    return float(df.loc[df["deployment.local_prefill.sm_partitioning"] == mode, "ttft_s.p99"].mean())


def _cv(df: pd.DataFrame, cv: float, metric: str) -> float:
    rows = df[(df["system"] == "easerve") & (df["workload.arrival.cv"] == cv)]
    return float(rows[metric].mean())


# --- Fig. 12: search efficiency (and the video run's choice of s)
SEARCH_METHODS = ("has", "random", "coordinate")


def _run_searches(spec: Path, folder: Path, quick: bool, jobs: int | None) -> None:
    """Each method's 30-trial search on the scenario ``spec`` names (rate and
    budget from the file); one row per trial with the best throughput so far."""
    import yaml

    from lmmsim import search

    cfg = yaml.safe_load(spec.read_text())
    scenario = spec.parent / cfg["scenario"]
    rows = []
    for method in cfg.get("methods", SEARCH_METHODS):
        raw, scn, base_dir = search.read_raw(scenario, [])
        problem = search.Problem(raw, scn, base_dir, rate=cfg["rate"],
                                 trial_requests=100 if quick else cfg.get("trial_requests", 200))
        result = search.search(problem, method=method, budget=cfg.get("budget", 30), jobs=jobs or 1, seed=0,
                               min_trials=cfg.get("budget", 30),
                               coordinate_start=cfg.get("coordinate_start", "scenario"))  # the full budget: the curve, not the stop
        best = -1.0
        for trial in result.history:
            tput = trial.get("throughput_rps")
            if tput == tput and tput is not None:
                best = max(best, tput)
            rows.append({"system": method, "trial": trial["trial"], "cum_sim_cost_s": trial["cum_sim_cost_s"],
                         "best_throughput_rps": best, "offload_s": trial.get("offload_s"),
                         "chosen_offload_s": (result.best or {}).get("offload_s"),
                         "chosen_throughput_rps": (result.best or {}).get("throughput_rps"), "status": "ok"})
    with atomic_path(folder / "results.parquet") as tmp:
        pd.DataFrame(rows).to_parquet(tmp, index=False)


def _cost_to_reach(df: pd.DataFrame, method: str, target: float) -> float:
    rows = df[(df["system"] == method) & (df["best_throughput_rps"] >= target)]
    return float(rows["cum_sim_cost_s"].min()) if len(rows) else float("inf")


def _has_cheaper(df: pd.DataFrame) -> float:
    """1 if HAS reaches 99% of the best throughput any method found with less simulated cost."""
    target = 0.99 * df["best_throughput_rps"].max()
    costs = {m: _cost_to_reach(df, m, target) for m in SEARCH_METHODS}
    return float(costs["has"] < min(costs["random"], costs["coordinate"]))


def _final(df: pd.DataFrame, method: str) -> float:
    return float(df.loc[df["system"] == method, "chosen_throughput_rps"].iloc[-1])


FIGURES = FIGURES + (
    Figure(
        name="fig12", sweep="fig12.yaml", make=_run_searches, is_sweep=False,
        plots=(("line", {"series": "system", "x": "cum_sim_cost_s", "metric": "best_throughput_rps"}),),
        claims=(
            Claim("HAS reaches 99% of the best configuration's throughput with the least simulated cost", 1,
                  _has_cheaper, kind="holds"),
            Claim("HAS's final throughput at least the baselines' (30 trials each; within the search's 1% ties)", 1,
                  lambda df: float(_final(df, "has") >= (1 - TIE_TOLERANCE)
                                   * max(_final(df, "random"), _final(df, "coordinate"))),
                  kind="holds"),
        ),
    ),
    Figure(
        name="fig12-video", sweep="fig12-video.yaml", make=_run_searches, is_sweep=False,
        plots=(("line", {"series": "system", "x": "cum_sim_cost_s", "metric": "best_throughput_rps"}),),
        claims=(
            Claim("video: HAS picks s = 1 (no local prefill)", 1,
                  lambda df: float(df.loc[df["system"] == "has", "chosen_offload_s"].iloc[-1] == 1.0),
                  kind="holds", why=WHY_VIDEO),
        ),
    ),
)

# What this reproduction gave before issue 16, when every disaggregated encoder call paid a constant fitted
# to the paper (deployment.encoder.call_overhead_s 0.9 s; audio 0.18 s): plots/easerve/REPORT.md at commit
# 3b35b7a, read back verbatim. REPORT.md shows them beside today's values.
FITTED_CONSTANT = {
    ('fig9-image', 'image: goodput EAServe / Dynamo, moderate tier'): 3.42,
    ('fig9-image', 'image: goodput EAServe / vLLM, moderate tier'): 1.87,
    ('fig9-image', "image: EAServe's goodput above vLLM's and Dynamo's at every tier"): 1,
    ('fig9-video', 'video: goodput EAServe / Dynamo, moderate tier'): 5.81,
    ('fig9-video', 'video: goodput EAServe / vLLM, moderate tier'): 1.62,
    ('fig9-video', "video: EAServe's goodput above vLLM's and Dynamo's at every tier"): 1,
    ('fig9-audio', 'audio: goodput EAServe / Dynamo, moderate tier'): 6.64,
    ('fig9-audio', 'audio: goodput EAServe / vLLM, moderate tier'): 1.95,
    ('fig9-audio', "audio: EAServe's goodput above vLLM's and Dynamo's at every tier"): 1,
    ('fig10-image', "image: EAServe throughput at 5 req/s above Dynamo's and vLLM's"): 1,
    ('fig10-image', 'image: P99 TTFT Dynamo / EAServe at 2 req/s'): 54,
    ('fig10-image', "image: Dynamo's encoder GPU busy < 10% at 2 req/s (Fig. 11)"): 1,
    ('fig10-image', "image: EAServe's encoder GPUs busy with local prefill, ~80% (Fig. 11)"): 0.586,
    ('fig10-video', "video: EAServe throughput at 5 req/s above Dynamo's and vLLM's"): 1,
    ('fig10-video', 'video: P99 TTFT Dynamo / EAServe at 2 req/s'): 84.9,
    ('fig10-audio', "audio: EAServe throughput at 25 req/s above Dynamo's and vLLM's"): 1,
    ('table5', 'RTX 6000 Ada: EAServe throughput at 5 req/s (req/s)'): 2.99,
    ('table5', 'A100: EAServe throughput at 5 req/s (req/s)'): 3,
    ('table5', "EAServe's P99 TTFT below Dynamo's on both platforms"): 1,
    ('table6', 'SM ablation: P99 TTFT dynamic < static < none'): 0,
    ('table6', 'SM ablation: no partitioning vs dynamic, P99 TTFT (+19%)'): 0.00196,
    ('table6', 'SM ablation: static 50/50 vs dynamic, P99 TTFT (+11%)'): -0.000692,
    ('table7', 'CV 2 vs Poisson: EAServe throughput change (within a few %)'): -0.0575,
    ('table7', 'CV 2 vs Poisson: EAServe P99 TTFT (+62%)'): 0.333,
    ('fig12', "HAS reaches 99% of the best configuration's throughput with the least simulated cost"): 1,
    ('fig12', "HAS's final throughput at least the baselines' (30 trials each; within the search's 1% ties)"): 1,
    ('fig12-video', 'video: HAS picks s = 1 (no local prefill)'): 0,
}
FITTED_CONSTANT_LABEL = ("the value at commit 3b35b7a, when every disaggregated encoder call paid a constant fitted to "
                         "the paper (deployment.encoder.call_overhead_s 0.9 s; audio 0.18 s) instead of measured host "
                         "preprocessing; each claim over host.cpu_speed 0.03-3: plots/easerve/HOST.md "
                         "(`python bench/easerve_host.py`)")
FIGURES = tuple(
    replace(fig, claims=tuple(replace(c, before=FITTED_CONSTANT.get((fig.name, c.text)),
                                      before_label=FITTED_CONSTANT_LABEL) for c in fig.claims))
    for fig in FIGURES)

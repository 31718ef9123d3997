"""RPS-Serve (rps-serve.txt): the figures the simulator reruns and the claims it checks.

Where the paper gives a range ("5-30% better") the claim takes its middle and
the report shows whether the simulator falls inside; "consistently" /
"at every" claims are yes/no shapes. Where the paper's wording has no number
("comparable", "similar"), the threshold chosen is in the claim's text.
The quantities are computed in :mod:`lmmsim.reproduce.rps_metrics`; the causes
of the misses, with the experiments that show them, in :mod:`lmmsim.reproduce.rps_why`.
"""

from __future__ import annotations

from lmmsim.reproduce import rps_metrics as m
from lmmsim.reproduce import rps_why as why
from lmmsim.reproduce.core import Claim, Figure, NotModelled
from lmmsim.reproduce.rps_metrics import GEMMA, INTERNVL, LLAVA, LLAVA7, NL, QWEN, mod

# Every claim of the paper's abstract, introduction and evaluation text (and section 2.3's
# Fig. 4, which the evaluation extends): key -> where, and what it says. Each Claim's ``ref``
# and each NotModelled's is one of these keys (tests/test_claim_inventory.py checks both ways).
PAPER_CLAIMS: dict[str, str] = {
    "abs-util": "abstract, intro: RPS-Serve increases GPU utilisation by 65% on average across models vs "
                "disaggregation-based systems",
    "abs-ttft": "abstract, intro: RPS-Serve reduces TTFT by up to 9.3x, on average across models, vs "
                "disaggregation-based systems",
    "intro-characterisation": "intro, 2.2: image and video requests consume orders of magnitude more memory "
                              "and time than text; video dominates",
    "intro-fcfs-hol": "intro: vLLM's FCFS makes lightweight text requests suffer severe head-of-line delays "
                      "behind image and video prefills",
    "fig4-llava": "2.3, Fig. 4: LLaVA-72B, vLLM ~50% lower normalized latency than ModServe",
    "fig4-internvl": "2.3, Fig. 4: InternVL-38B, vLLM ~50% higher normalized latency than ModServe",
    "fig4-modserve-idle": "2.3, Fig. 4: ModServe leaves ~60-70% of aggregate GPU capacity idle",
    "fig4-vllm-idle": "2.3, Fig. 4: vLLM TP4 idle capacity ~1-2% for LLaVA-72B and InternVL-38B",
    "fig4-vllm-idle-small": "2.3, Fig. 4: vLLM TP4 idle capacity 15-18% for Qwen-27B and Gemma-31B",
    "fig9-rps-vs-vllm": "4.2, Fig. 9: RPS-Serve 5-30% (0.95-0.7x) better normalized latency than vLLM",
    "fig9-rps-idle": "4.2, Fig. 9: RPS-Serve idle GPU capacity 1-15%",
    "fig9-modserve-idle": "4.2, Fig. 9: ModServe 60-80% idle GPU",
    "fig9-modserve-llava72b": "4.2, Fig. 9: ModServe up to 50% slower than vLLM on LLaVA-72B",
    "fig9-modserve-small": "4.2, Fig. 9: ModServe slightly worse (0-10%) than vLLM on LLaVA-7B, Qwen-27B, "
                           "Gemma-31B",
    "fig9-modserve-internvl": "4.2, Fig. 9: ModServe gains up to 35% over vLLM only on InternVL-38B",
    "fig9-modserve-rps": "4.2, Fig. 9: ModServe & RPS improves on ModServe up to 40% (LLaVA-72B, Gemma-31B), "
                         "25% (InternVL-38B); it improves on every model",
    "fig9-modserve-rps-util": "4.2, Fig. 9: ModServe & RPS keeps ModServe's GPU utilisation",
    "fig9-pareto": "4.2, Fig. 9 and takeaways: RPS-Serve is on the Pareto frontier for every model",
    "fig10-7b": "4.2, Fig. 10: LLaVA-7B on 1, 2, 4 GPUs: up to 70% lower normalized latency than every "
                "baseline at high load",
    "fig10-72b-2gpu": "4.2, Fig. 10: LLaVA-72B, 2 GPUs: 40% better than vLLM under high load",
    "fig10-72b-4gpu": "4.2, Fig. 10: LLaVA-72B, 4 GPUs: 40% better than ModServe under high load",
    "fig10-72b-4gpu-comparable": "4.2, Fig. 10: LLaVA-72B, 4 GPUs: the other baselines comparable to RPS-Serve",
    "fig11-nl-tail": "4.2, Fig. 11: ModServe's normalized latency significantly higher at P99",
    "fig11-ttft-vs-vllm": "4.2, Fig. 11: RPS-Serve reduces TTFT vs vLLM on average and at P90, P95",
    "fig11-disagg-tail": "4.2, Fig. 11: disaggregated baselines' TTFT tail 48-82 s; vLLM and RPS-Serve 3-18 s",
    "fig11-9.3x": "4.2, Fig. 11: RPS-Serve mean TTFT 9.3x lower than ModServe's (28 s -> 3 s)",
    "fig11-tpot": "4.2, Fig. 11: a TPOT trade-off, modest on average, larger at the tail",
    "fig12-text": "4.2, Fig. 12: RPS-Serve lowest text TTFT, 1.96 s mean, 3.7 s P99",
    "fig12-modserve-text": "4.2, Fig. 12: ModServe text TTFT more than 25 s",
    "fig12-modserve-rps-text": "4.2, Fig. 12: ModServe & RPS brings text TTFT to vLLM's level",
    "fig12-image": "4.2, Fig. 12: RPS-Serve image TTFT 3-10 s below vLLM's, average and tail",
    "fig12-image-disagg": "4.2, Fig. 12: both disaggregated baselines remain significantly slower on images",
    "fig12-video": "4.2, Fig. 12: RPS-Serve video TTFT slightly above vLLM's (by 1.5-3 s)",
    "fig12-video-disagg": "4.2, Fig. 12: disaggregated baselines' video TTFT extremely high",
    "fig12-mm-no-benefit": "4.2, Fig. 12: for images and videos ModServe & RPS brings no benefit over ModServe",
    "fig13-goodput": "4.2, Fig. 13: RPS-Serve the highest goodput at every SLO scale",
    "fig13-goodput-stable": "4.2, Fig. 13: goodput relatively stable across SLO scales",
    "fig13-fall": "4.2, Fig. 13: violations and their severity fall as the SLO scale grows",
    "fig13-fewer": "4.2, Fig. 13: RPS-Serve fewer SLO violations than the disaggregated baselines at every scale",
    "fig13-severity": "4.2, Fig. 13: RPS-Serve reduces violation severity 2-3x vs the disaggregated baselines",
    "fig14-classifier": "4.3, Fig. 14(a): the k-means classifier beats the naive one in every modality (up to "
                        "1.8 s mean, 2.8 s P99)",
    "fig14-regulator": "4.3, Fig. 14(b): RPS-Serve lowest TTFT in every modality vs static-only and aging-only",
    "fig14-text-700ms": "4.3, Fig. 14(b): RPS-Serve's text mean TTFT below 1 s (700 ms)",
    "fig14-edf": "4.3, Fig. 14(b): RPS-Serve beats EDF on text and images (up to 3.5 s at image P99)",
    "fig14-edf-video": "4.3, Fig. 14(b): on video RPS-Serve comparable to EDF, slightly lower (up to 1 s)",
    "fig15-text-lowest": "4.4, Fig. 15: text TTFT the lowest at every mix and rate",
    "fig15-rises": "4.4, Fig. 15: TTFT rises with the image + video share, every modality",
    "fig16-k2": "4.4, Fig. 16: with k = 2 text requests have the highest latency",
    "fig16-k3": "4.4, Fig. 16: k = 3 substantially reduces text TTFT; k > 3 gives text no further benefit",
    "fig16-k-media": "4.4, Fig. 16: k > 3 increases image and video latency",
    "fig16-clusters": "4.4, Fig. 16(b-d): k = 2 puts text and images in one class; k = 4 splits videos; k = 5 "
                      "splits texts by length",
}

NOT_MODELLED: tuple[NotModelled, ...] = (
    NotModelled("intro-characterisation", "Isolated-run memory and TTFT spread per modality (Fig. 2)",
                "orders of magnitude",
                "no Fig. 2 sweep in this reproduction: the isolated runs exist (`lmmsim admission-profile`, "
                "the Workload Profiler's input) but no figure or claim reads their per-modality spread yet"),
    NotModelled("fig16-clusters", "Fig. 16(b-d): which modalities share a class for k = 2, 4, 5",
                "text+image at k = 2",
                "the sweep's results table holds per-class counts only, not the classes' modality mix; "
                "the classifier assigns per request but no report column carries class x modality"),
)

FIG4_IDLE_SMALL = (GEMMA, QWEN)


def _fig9_claims() -> tuple[Claim, ...]:
    ms_vs_vllm = [
        Claim(f"{name}: ModServe / vLLM normalized latency (paper: {text})", paper,
              (lambda model: lambda df: m.norm_latency(df, model, "modserve") / m.norm_latency(df, model, "vllm"))(
                  model), ref=ref, why=why.FIG9_MODSERVE.get(model, ""))
        for model, name, paper, text, ref in (
            (LLAVA, "LLaVA-72B", 1.5, "up to 50% slower", "fig9-modserve-llava72b"),
            (INTERNVL, "InternVL-38B", 0.65, "up to 35% faster", "fig9-modserve-internvl"),
            (LLAVA7, "LLaVA-7B", 1.05, "0-10% slower", "fig9-modserve-small"),
            (GEMMA, "Gemma-3-27B (for Gemma4-31B)", 1.05, "0-10% slower", "fig9-modserve-small"),
            (QWEN, "Qwen2.5-VL-32B (for Qwen3.5-27B)", 1.05, "0-10% slower", "fig9-modserve-small"),
        )]
    return (
        Claim("RPS-Serve / vLLM normalized latency, best model (paper 0.7x)", 0.7,
              lambda df: float(m.ratio_by_model(df, "rps-serve", "vllm").min()), ref="fig9-rps-vs-vllm",
              why=why.RPS_VS_VLLM_BEST),
        Claim("RPS-Serve / vLLM normalized latency, worst model (paper 0.95x)", 0.95,
              lambda df: float(m.ratio_by_model(df, "rps-serve", "vllm").max()), ref="fig9-rps-vs-vllm",
              why=why.RPS_VS_VLLM_WORST),
        Claim("RPS-Serve idle GPU capacity (1-15%)", 0.08, lambda df: m.idle(df, "rps-serve"), kind="level",
              ref="fig9-rps-idle", why=why.IDLE),
        Claim("ModServe idle GPU capacity (60-80%)", 0.7, lambda df: m.idle(df, "modserve"), kind="level",
              ref="fig9-modserve-idle", why=why.IDLE),
        Claim("vLLM idle GPU capacity, Gemma-3-27B and Qwen2.5-VL-32B stand-ins (15-18%, Fig. 4's text)", 0.165,
              lambda df: m.idle(df, "vllm", FIG4_IDLE_SMALL), kind="level", ref="fig4-vllm-idle-small",
              why=why.IDLE),
        Claim("Abstract: RPS-Serve GPU utilisation vs ModServe's, mean over the five models (+65%)", 0.65,
              lambda df: float(m.ratio_by_model(df, "rps-serve", "modserve", "gpu_utilization.mean").mean() - 1),
              kind="change", ref="abs-util", why=why.IDLE),
        Claim("Abstract: ModServe mean TTFT / RPS-Serve's, mean over the five models (up to 9.3x)", 9.3,
              lambda df: float(m.ratio_by_model(df, "modserve", "rps-serve", "ttft_s.mean").mean()),
              ref="abs-ttft", why=why.MODSERVE),
        *ms_vs_vllm,
        Claim("ModServe & RPS vs ModServe normalized latency, best model (up to -40%)", -0.4,
              lambda df: float(m.ratio_by_model(df, "modserve+rps", "modserve").min() - 1), kind="change",
              ref="fig9-modserve-rps", why=why.MODSERVE_RPS),
        Claim("ModServe & RPS vs ModServe normalized latency, InternVL-38B (-25%)", -0.25,
              lambda df: float(m.ratio_by_model(df, "modserve+rps", "modserve")[INTERNVL] - 1), kind="change",
              ref="fig9-modserve-rps", why=why.MODSERVE_RPS),
        Claim("ModServe & RPS below ModServe's normalized latency on every model", 1,
              m.modserve_rps_better_everywhere, kind="holds", ref="fig9-modserve-rps", why=why.MODSERVE_RPS),
        Claim("ModServe & RPS GPU utilisation within 5 points of ModServe's, every model", 1,
              m.modserve_rps_same_utilisation, kind="holds", ref="fig9-modserve-rps-util"),
        Claim("RPS-Serve on the Pareto frontier for every model (lowest latency, idle <= vLLM's + 5%)", 1,
              m.rps_on_frontier, kind="holds", ref="fig9-pareto", why=why.PARETO),
    )


def _fig10(tag: str, claims: tuple[Claim, ...]) -> Figure:
    return Figure(name=f"fig10-{tag}", sweep=f"fig10-{tag}.yaml",
                  plots=(("line", {"series": "system", "metric": NL}), ("ttft-vs-rate", {"series": "system"})),
                  claims=claims)


def _fig11_claims() -> tuple[Claim, ...]:
    return (
        Claim("72B: ModServe mean TTFT / RPS-Serve's (9.3x: 28 s vs 3 s)", 9.3,
              lambda df: m.at(df, "modserve", "ttft_s.mean") / m.at(df, "rps-serve", "ttft_s.mean"),
              ref="fig11-9.3x", why=why.MODSERVE),
        Claim("72B: RPS-Serve TTFT below vLLM's at mean, P90 and P95", 1,
              lambda df: m.below_at_stats(df, "rps-serve", "vllm", "ttft_s", ("mean", "p90", "p95")),
              kind="holds", ref="fig11-ttft-vs-vllm", why=why.TTFT_VS_VLLM),
        Claim("72B: vLLM's text mean TTFT above RPS-Serve's (FCFS head-of-line blocking; no number given)", 1,
              lambda df: float(m.at(df, "vllm", mod("text")) > m.at(df, "rps-serve", mod("text"))), kind="holds",
              ref="intro-fcfs-hol", why=why.BUDGET),
        Claim("72B: ModServe's P99 normalized latency the highest of the four", 1,
              lambda df: m.highest(df, "modserve", "normalized_latency_s_per_token.p99"), kind="holds",
              ref="fig11-nl-tail", why=why.TAIL),
        Claim("72B: ModServe P99 TTFT (s) (48-82 s)", 65,
              lambda df: m.at(df, "modserve", "ttft_s.p99"), kind="level", ref="fig11-disagg-tail",
              why=why.MODSERVE),
        Claim("72B: RPS-Serve P99 TTFT (s) (vLLM and RPS-Serve 3-18 s)", 10.5,
              lambda df: m.at(df, "rps-serve", "ttft_s.p99"), kind="level", ref="fig11-disagg-tail",
              why=why.TAIL),
        Claim("72B: RPS-Serve mean TPOT / vLLM's (modest trade-off)", 1.05,
              lambda df: m.at(df, "rps-serve", "tpot_s.mean") / m.at(df, "vllm", "tpot_s.mean"),
              ref="fig11-tpot", why=why.TPOT),
        Claim("72B: the TPOT trade-off larger at P99 than on average", 1,
              lambda df: float(m.at(df, "rps-serve", "tpot_s.p99") / m.at(df, "vllm", "tpot_s.p99")
                               > m.at(df, "rps-serve", "tpot_s.mean") / m.at(df, "vllm", "tpot_s.mean")),
              kind="holds", ref="fig11-tpot", why=why.TPOT_TAIL),
        # Fig. 12 is the same runs by modality
        Claim("72B: text TTFT lowest with RPS-Serve, mean and P99", 1, m.text_lowest, kind="holds",
              ref="fig12-text", why=why.TEXT),
        Claim("72B: RPS-Serve text mean TTFT (s) (paper 1.96 s)", 1.96,
              lambda df: m.at(df, "rps-serve", mod("text")), kind="level", ref="fig12-text", why=why.TEXT),
        Claim("72B: RPS-Serve text TTFT P99 (s) (paper 3.7 s)", 3.7,
              lambda df: m.at(df, "rps-serve", mod("text", "p99")), kind="level", ref="fig12-text",
              why=why.TEXT),
        Claim("72B: ModServe text mean TTFT / RPS-Serve's (more than 25 s vs 1.96 s: 12.8x)", 12.8,
              lambda df: m.at(df, "modserve", mod("text")) / m.at(df, "rps-serve", mod("text")),
              ref="fig12-modserve-text", why=why.MODSERVE),
        Claim("72B: ModServe & RPS text mean TTFT closer to vLLM's than to ModServe's (log scale)", 1,
              lambda df: m.closer_to(df, "modserve+rps", "vllm", "modserve", mod("text")), kind="holds",
              ref="fig12-modserve-rps-text", why=why.MODSERVE_RPS_QUEUE),
        Claim("72B: image TTFT lower with RPS-Serve than vLLM at mean, P90, P95, P99", 1,
              lambda df: m.below_at_stats(df, "rps-serve", "vllm", "by_modality.image.ttft_s",
                                          ("mean", "p90", "p95", "p99")),
              kind="holds", ref="fig12-image", why=why.IMAGE),
        Claim("72B: vLLM - RPS-Serve image mean TTFT (s) (3-10 s across the statistics)", 6.5,
              lambda df: m.at(df, "vllm", mod("image")) - m.at(df, "rps-serve", mod("image")), kind="level",
              ref="fig12-image", why=why.IMAGE),
        Claim("72B: both disaggregated baselines' image mean TTFT above vLLM's and RPS-Serve's", 1,
              lambda df: m.disagg_slower(df, "image"), kind="holds", ref="fig12-image-disagg"),
        Claim("72B: RPS-Serve - vLLM video mean TTFT (s) (1.5-3 s)", 2.25,
              lambda df: m.at(df, "rps-serve", mod("video")) - m.at(df, "vllm", mod("video")), kind="level",
              ref="fig12-video", why=why.VIDEO),
        Claim("72B: both disaggregated baselines' video mean TTFT above vLLM's and RPS-Serve's", 1,
              lambda df: m.disagg_slower(df, "video"), kind="holds", ref="fig12-video-disagg"),
        Claim("72B: ModServe & RPS image and video mean TTFT no more than 10% below ModServe's", 1,
              m.no_benefit_for_media, kind="holds", ref="fig12-mm-no-benefit", why=why.MODSERVE_RPS_QUEUE),
    )


def _fig14_claims() -> tuple[Claim, ...]:
    def below(m_, v, stat="mean"):
        return lambda df: float(m.named(df, "rps-serve", m_, stat) < m.named(df, v, m_, stat))
    return (
        *(Claim(f"7B, 1 GPU: RPS-Serve {x} mean TTFT below the naive classifier's", 1, below(x, "naive-classes"),
                kind="holds", ref="fig14-classifier", why=why.NAIVE_TEXT if x == "text" else why.ABLATION)
          for x in ("text", "image", "video")),
        *(Claim(f"7B, 1 GPU: RPS-Serve {x} mean TTFT below {v}'s", 1, below(x, v), kind="holds",
                ref="fig14-regulator", why=why.ABLATION)
          for v in ("static-only", "aging-only") for x in ("text", "image", "video")),
        Claim("7B, 1 GPU: RPS-Serve text mean TTFT (s) (paper 0.7 s)", 0.7,
              lambda df: m.named(df, "rps-serve", "text"), kind="level", ref="fig14-text-700ms",
              why=why.TEXT_700MS),
        Claim("7B, 1 GPU: RPS-Serve text and image mean TTFT below EDF's", 1,
              lambda df: float(all(m.named(df, "rps-serve", x) < m.named(df, "edf", x) for x in ("text", "image"))),
              kind="holds", ref="fig14-edf", why=why.ABLATION),
        Claim("7B, 1 GPU: RPS-Serve image P99 TTFT below EDF's", 1, below("image", "edf", "p99"), kind="holds",
              ref="fig14-edf", why=why.ABLATION),
        Claim("7B, 1 GPU: RPS-Serve video mean TTFT below EDF's (slightly)", 1, below("video", "edf"),
              kind="holds", ref="fig14-edf-video", why=why.EDF_VIDEO),
    )


def _fig16_claims() -> tuple[Claim, ...]:
    return (
        Claim("k = 3 gives the lowest text P95 TTFT of k = 2..5", 1,
              lambda df: float(m.by_k(df, "text").idxmin() == 3), kind="holds", ref="fig16-k3", why=why.K),
        Claim("k = 4 and 5 give text P95 TTFT no lower than k = 3's", 1, m.no_text_gain_beyond_3, kind="holds",
              ref="fig16-k3", why=why.K),
        Claim("k = 2 gives the highest text P95 TTFT", 1,
              lambda df: float(m.by_k(df, "text").idxmax() == 2), kind="holds", ref="fig16-k2", why=why.K),
        Claim("image and video P95 TTFT higher at k = 5 than at k = 3", 1, m.media_rise_beyond_3, kind="holds",
              ref="fig16-k-media", why=why.K),
    )


FIGURES: tuple[Figure, ...] = (
    Figure(
        name="fig4",
        sweep="fig4.yaml",
        plots=(("pareto", {"series": "system", "x": "model", "normalize": "overall", "baseline": "vllm"}),
               ("bars", {"series": "system", "metric": NL, "group": "model"})),
        claims=(
            Claim("LLaVA-72B: vLLM normalized latency / ModServe's (vLLM ~50% lower)", 0.5,
                  lambda df: m.norm_latency(df, LLAVA, "vllm") / m.norm_latency(df, LLAVA, "modserve"),
                  ref="fig4-llava", why=why.MODSERVE),
            Claim("InternVL-38B: vLLM normalized latency / ModServe's (vLLM ~50% higher)", 1.5,
                  lambda df: m.norm_latency(df, INTERNVL, "vllm") / m.norm_latency(df, INTERNVL, "modserve"),
                  ref="fig4-internvl", why=why.INTERNVL),
            Claim("ModServe idle GPU capacity (60-70%)", 0.65, lambda df: m.idle(df, "modserve"), kind="level",
                  ref="fig4-modserve-idle", why=why.IDLE),
            Claim("vLLM TP4 idle GPU capacity (1-2% for these models)", 0.015, lambda df: m.idle(df, "vllm"),
                  kind="level", ref="fig4-vllm-idle", why=why.IDLE),
        ),
    ),
    Figure(
        name="fig9",
        sweep="fig9.yaml",
        plots=(("pareto", {"series": "system", "x": "model", "normalize": "x", "baseline": "vllm"}),
               ("bars", {"series": "system", "metric": NL, "group": "model"})),
        claims=_fig9_claims(),
    ),
    _fig10("7b-1gpu", (Claim("LLaVA-7B, 1 GPU: RPS-Serve / best baseline normalized latency, highest rate "
                             "(up to 70% lower)", 0.3, m.vs_best_at_top_rate, ref="fig10-7b", why=why.FIG10_7B),)),
    _fig10("7b-2gpu", (Claim("LLaVA-7B, 2 GPUs: RPS-Serve / best baseline, highest rate", 0.3,
                             m.vs_best_at_top_rate, ref="fig10-7b", why=why.FIG10_7B),)),
    _fig10("7b-4gpu", (Claim("LLaVA-7B, 4 GPUs: RPS-Serve / best baseline, highest rate", 0.3,
                             m.vs_best_at_top_rate, ref="fig10-7b", why=why.FIG10_7B),)),
    _fig10("72b-2gpu", (Claim("LLaVA-72B, 2 GPUs: RPS-Serve / vLLM normalized latency, highest rate (-40%)", 0.6,
                              m.vs_best_at_top_rate, ref="fig10-72b-2gpu", why=why.FIG10_72B),)),
    _fig10("72b-4gpu", (
        Claim("LLaVA-72B, 4 GPUs: RPS-Serve / ModServe normalized latency, highest rate (-40%)", 0.6,
              lambda df: m.vs_at_top_rate(df, "modserve"), ref="fig10-72b-4gpu", why=why.MODSERVE),
        Claim("LLaVA-72B, 4 GPUs: RPS-Serve within 20% of vLLM's normalized latency at the highest rate "
              "('comparable')", 1, lambda df: m.comparable_at_top_rate(df, "vllm"), kind="holds",
              ref="fig10-72b-4gpu-comparable", why=why.FIG10_72B),
    )),
    Figure(
        name="fig11",
        sweep="fig11.yaml",
        plots=tuple(("bars", {"series": "system", "metric": x}) for x in (
            "ttft_s.mean", "ttft_s.p99", "tpot_s.mean", "tpot_s.p99", "normalized_latency_s_per_token.p99",
            mod("text"), mod("text", "p99"), mod("image"), mod("image", "p99"), mod("video"), mod("video", "p99"))),
        claims=_fig11_claims(),
    ),
    Figure(
        name="fig13",
        sweep="fig13.yaml",
        plots=(("goodput-vs-slo-scale", {"series": "system"}),
               ("line", {"series": "system", "x": "slo.scale", "metric": "slo_attainment"}),
               ("line", {"series": "system", "x": "slo.scale", "metric": "slo_violation_severity"})),
        claims=(
            Claim("Goodput highest with RPS-Serve at every SLO scale", 1, m.goodput_highest, kind="holds",
                  ref="fig13-goodput", why=why.GOODPUT),
            Claim("RPS-Serve's goodput within 25% across SLO scales ('relatively stable')", 1, m.goodput_stable,
                  kind="holds", ref="fig13-goodput-stable", why=why.GOODPUT_STABLE),
            Claim("RPS-Serve meets more SLOs than both disaggregated baselines at every scale", 1,
                  m.fewer_violations_than_disagg, kind="holds", ref="fig13-fewer"),
            Claim("Violation severity, ModServe / RPS-Serve, mean over scales (2-3x)", 2.5,
                  lambda df: m.mean_ratio_over_scales(df, "modserve", "rps-serve", "slo_violation_severity"),
                  ref="fig13-severity", why=why.MODSERVE),
            Claim("SLO violations and their severity fall as the scale grows, every system", 1, m.violations_fall,
                  kind="holds", ref="fig13-fall", why=why.SEVERITY_FALL),
        ),
    ),
    Figure(
        name="fig14",
        sweep="fig14.yaml",
        plots=tuple(("bars", {"series": "system", "metric": mod(x, q)})
                    for x in ("text", "image", "video") for q in ("mean", "p99")),
        claims=_fig14_claims(),
    ),
    Figure(
        name="fig15",
        sweep="fig15.yaml",
        plots=tuple(("ttft-vs-rate", {"series": "name", "modality": x}) for x in ("text", "image", "video")),
        claims=(
            Claim("Text TTFT lowest of the modalities at every mix and rate", 1, m.text_lowest_everywhere,
                  kind="holds", ref="fig15-text-lowest", why=why.FIG15),
            Claim("TTFT rises with the image + video share at the highest rate, every modality", 1,
                  m.rises_with_share, kind="holds", ref="fig15-rises", why=why.FIG15),
        ),
    ),
    Figure(
        name="fig16",
        sweep="fig16.yaml",
        plots=tuple(("bars", {"series": "policy.queue.num_classes", "metric": mod(x, "p95")})
                    for x in ("text", "image", "video")),
        claims=_fig16_claims(),
    ),
)

"""``lmmsim reproduce PAPER``: rerun a seed paper's figures and compare its headline claims.

Each figure is a sweep YAML under ``scenarios/reproduce/<paper>/`` plus the
plots drawn from its results and the claims it checks. A claim computes the
simulator's number from the sweep's ``results.parquet`` and sets it beside
the paper's; ``REPORT.md`` lists them with their ratio. ``--quick`` runs
fewer requests. The policy issues add their papers' figures here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd

from lmmsim.errors import UserError, choices

ROOT = Path(__file__).resolve().parent.parent / "scenarios" / "reproduce"


@dataclass(frozen=True)
class Claim:
    text: str
    paper: float
    simulated: Callable[[pd.DataFrame], float]  # from results.parquet


@dataclass(frozen=True)
class Figure:
    name: str
    sweep: str  # file under scenarios/reproduce/<paper>/
    plots: tuple[tuple[str, dict], ...]
    claims: tuple[Claim, ...] = field(default=())
    quick_set: tuple[str, ...] = ("workload.num_requests=150",)


def _norm_latency(df: pd.DataFrame, model: str, system: str) -> float:
    row = df[(df["model"] == model) & (df["system"] == system)]
    return float(row["normalized_latency_s_per_token.mean"].mean())


def _idle(df: pd.DataFrame, system: str) -> float:
    return float(1 - df.loc[df["system"] == system, "gpu_utilization.mean"].mean())


LLAVA, INTERNVL = "llava-onevision-qwen2-72b", "internvl3.5-38b"

PAPERS: dict[str, tuple[Figure, ...]] = {
    "rps": (
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
                Claim("ModServe idle GPU capacity (60-70%)", 0.65, lambda df: _idle(df, "modserve")),
                Claim("vLLM TP4 idle GPU capacity (1-2% for these models)", 0.015, lambda df: _idle(df, "vllm")),
            ),
        ),
    ),
}


def reproduce(paper: str, out: Path, *, quick: bool = False, jobs: int | None = None, force: bool = False) -> Path:
    """Run the paper's figure sweeps into ``out``, draw the plots, write ``REPORT.md``."""
    from lmmsim.plotting.figures import plot
    from lmmsim.sweep.runner import run_sweep

    if paper not in PAPERS:
        raise UserError("PAPER", f"no reproduction for {paper!r} yet; valid: {choices(PAPERS)}")
    out = Path(out)
    rows = []
    for fig in PAPERS[paper]:
        sweep = ROOT / paper / fig.sweep
        if quick:
            sweep = _with_overrides(sweep, out / f".{fig.name}.quick.yaml", fig.quick_set)
        folder = out / fig.name
        frame = run_sweep(sweep, folder, jobs=jobs, progress=False)
        ok = frame[frame["status"] == "ok"]
        for kind, options in fig.plots:
            plot(kind, folder, out / f"{fig.name}-{kind}.png", force=True, **options)
        for claim in fig.claims:
            value = claim.simulated(ok)
            rows.append((fig.name, claim.text, claim.paper, value, value / claim.paper if claim.paper else float("nan")))
    report = out / "REPORT.md"
    lines = [f"# Reproduction: {paper}{' (quick)' if quick else ''}", "",
             "| figure | claim | paper | simulator | ratio |", "|---|---|---:|---:|---:|"]
    lines += [f"| {f} | {t} | {p:.3g} | {s:.3g} | {r:.2f} |" for f, t, p, s, r in rows]
    report.write_text("\n".join(lines) + "\n")
    return report


def _with_overrides(sweep: Path, target: Path, sets: tuple[str, ...]) -> Path:
    """A copy of ``sweep`` with extra fixed overrides (``--quick``), base path kept absolute."""
    import yaml

    raw = yaml.safe_load(sweep.read_text())
    if "base" in raw:
        raw["base"] = str((sweep.parent / raw["base"]).resolve())
    extra = dict(s.split("=", 1) for s in sets)
    raw["set"] = {**raw.get("set", {}), **{k: yaml.safe_load(v) for k, v in extra.items()}}
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(yaml.safe_dump(raw, sort_keys=False))
    return target

"""The reproduction machinery: figures (sweep + plots + claims), the run, ``REPORT.md``."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd

from lmmsim.errors import UserError, choices
from lmmsim.outputs import OutputDir, atomic_path, write_text_atomic

ROOT = Path(__file__).resolve().parent.parent.parent / "scenarios" / "reproduce"


@dataclass(frozen=True)
class Claim:
    """One headline claim: the paper's number beside the simulator's.

    ``kind`` says how to read the two numbers:

    * ``change`` -- a relative change (-0.18 = 18% lower); the direction is its
      sign, the magnitude ratio is simulated / paper;
    * ``ratio`` -- a factor (2.9x); direction is which side of 1, magnitude
      ratio is (simulated - 1) / (paper - 1);
    * ``level`` -- an absolute figure (tokens/s, a share); no direction,
      magnitude ratio simulated / paper;
    * ``holds`` -- a yes/no shape (1 = the paper's statement holds); direction
      matches when the simulator gives 1.

    ``why``: the known cause when the simulator differs; REPORT.md lists it
    under the table for a row whose direction or magnitude misses.

    ``before``: the value an earlier model of the simulator gave, from a committed
    run that ``before_label`` names (e.g. a fitted constant since replaced by a
    mechanism); REPORT.md shows it in a column when any claim has one.
    """

    text: str
    paper: float
    simulated: Callable[[pd.DataFrame], float]  # from results.parquet
    kind: str = "ratio"
    why: str = ""
    before: float | None = None
    before_label: str = ""

    def misses(self, value: float) -> bool:
        """Direction wrong, or magnitude outside 0.65-1.35 (where it has one)."""
        if self.direction_matches(value) is False:
            return True
        return self.kind != "holds" and not (0.65 <= self.magnitude(value) <= 1.35)

    def direction_matches(self, value: float) -> bool | None:
        if value != value:  # NaN
            return False
        if self.kind == "change":
            return (value > 0) == (self.paper > 0) and value != 0
        if self.kind == "ratio":
            return (value > 1) == (self.paper > 1) and value != 1
        if self.kind == "holds":
            return value == 1
        return None

    def magnitude(self, value: float) -> float:
        """Simulated effect over the paper's effect (1 = same size)."""
        if self.kind == "ratio":
            return (value - 1) / (self.paper - 1) if self.paper != 1 else math.nan
        if self.kind == "holds":
            return value
        return value / self.paper if self.paper else math.nan


@dataclass(frozen=True)
class Figure:
    name: str
    sweep: str  # file under scenarios/reproduce/<paper>/
    plots: tuple[tuple[str, dict], ...]
    claims: tuple[Claim, ...] = field(default=())
    quick_set: tuple[str, ...] = ("workload.num_requests=150",)
    # Instead of running ``sweep`` as a sweep: ``make(sweep_path, folder, quick, jobs)``
    # writes ``folder/results.parquet`` (one row per point, a ``status`` column) itself.
    make: Callable[[Path, Path, bool, int | None], None] | None = None


def reproduce(paper: str, out: Path, *, papers: dict, quick: bool = False, jobs: int | None = None,
              force: bool = False, figures: list[str] | None = None, sets: tuple[str, ...] = ()) -> Path:
    """Run the paper's figure sweeps into ``out``, draw the plots, write ``REPORT.md``
    (``papers``: paper -> its figures, :data:`lmmsim.reproduce.PAPERS`; ``figures``:
    only these, by name; ``sets``: ``KEY=VALUE`` overrides fixed in every run, for
    sensitivity studies -- the report's title lists them)."""
    from lmmsim.plotting.figures import plot
    from lmmsim.sweep.runner import run_sweep

    if paper not in papers:
        raise UserError("PAPER", f"no reproduction for {paper!r} yet; valid: {choices(papers)}")
    chosen = papers[paper]
    if figures:
        names = [f.name for f in chosen]
        unknown = [f for f in figures if f not in names]
        if unknown:
            raise UserError("--figures", f"no figure {unknown[0]!r} for {paper}; valid: {choices(names)}")
        chosen = tuple(f for f in chosen if f.name in figures)
    out_dir = OutputDir(out, force=force)
    out = out_dir.path
    # Every path this run writes, checked before the first sweep starts: a user's file
    # in the way stops it at once, not after minutes of simulation.
    out_dir.check("REPORT.md", *(f"{fig.name}/" for fig in chosen),
                  *(f".{fig.name}.quick.yaml" for fig in chosen if quick),
                  *(f".{fig.name}.set.yaml" for fig in chosen if sets),
                  *(_plot_file(fig.name, kind, opts if [k for k, _ in fig.plots].count(kind) > 1 else {})
                    for fig in chosen for kind, opts in fig.plots))
    rows = []
    for fig in chosen:
        sweep = ROOT / paper / fig.sweep
        if sets:
            sweep = with_overrides(sweep, out_dir.file(f".{fig.name}.set.yaml"), _checked_sets(sets))
        folder = out_dir.folder(fig.name)
        if fig.make is not None:
            fig.make(sweep, folder, quick, jobs)
            frame = pd.read_parquet(folder / "results.parquet")
        else:
            if quick and fig.quick_set:
                sweep = with_overrides(sweep, out_dir.file(f".{fig.name}.quick.yaml"), fig.quick_set)
            frame = run_sweep(sweep, folder, jobs=jobs, progress=False)
        ok = frame[frame["status"] == "ok"]
        kinds = [kind for kind, _ in fig.plots]
        for kind, options in fig.plots:
            name = _plot_file(fig.name, kind, options if kinds.count(kind) > 1 else {})
            with atomic_path(out_dir.file(name)) as tmp:
                plot(kind, folder, tmp, force=True, **options)
        for claim in fig.claims:
            rows.append((fig.name, claim, float(claim.simulated(ok))))
    report = out_dir.file("REPORT.md")
    label = next((c.before_label for _, c, _ in rows if c.before is not None), None)
    lines = [f"# Reproduction: {paper}{' (quick)' if quick else ''}", "",
             *([f"Every run with: {', '.join(f'`{s}`' for s in sets)}.", ""] if sets else []),
             "Direction: does the simulator move the same way as the paper. Magnitude: the simulator's effect "
             "over the paper's (1.00 = same size; within 0.65-1.35 counts as matching).", "",
             *([f"Before: {label}.", ""] if label else []),
             "| figure | claim | paper | simulator | direction | magnitude |" + (" before |" if label else ""),
             "|---|---|---:|---:|:---:|---:|" + ("---:|" if label else "")]
    for fig_name, claim, value in rows:
        direction = claim.direction_matches(value)
        mark = "-" if direction is None else ("yes" if direction else "**no**")
        mag = claim.magnitude(value)
        mag_text = "-" if claim.kind == "holds" else (f"{mag:.2f}" if 0.65 <= mag <= 1.35 else f"**{mag:.2f}**")
        before = ("" if not label else " - |" if claim.before is None else f" {claim.before:.3g} |")
        lines.append(f"| {fig_name} | {claim.text} | {claim.paper:.3g} | {value:.3g} | {mark} | {mag_text} |"
                     + before)
    notes = [(f, c) for f, c, v in rows if c.why and c.misses(v)]
    if notes:
        lines += ["", "## Where it differs, and why", ""]
        lines += [f"* {f}, {c.text}: {c.why}" for f, c in notes]
    write_text_atomic(report, "\n".join(lines) + "\n")
    return report


def _plot_file(figure: str, kind: str, options: dict) -> str:
    """``fig-kind.png``; several plots of one kind in a figure get their metric or modality in the name."""
    extra = [str(options[k]) for k in ("modality", "metric") if k in options and kind in ("bars", "line",
                                                                                         "ttft-vs-rate")]
    extra = [e.replace("by_modality.", "").replace(".", "-").replace("_s-", "-") for e in extra]
    return "-".join([figure, kind, *extra]) + ".png"


def _checked_sets(sets: tuple[str, ...]) -> tuple[str, ...]:
    for s in sets:
        if "=" not in s or not s.split("=", 1)[0].strip():
            raise UserError("--set", f"expected KEY=VALUE, got {s!r}")
    return sets


def with_overrides(sweep: Path, target: Path, sets: tuple[str, ...]) -> Path:
    """A copy of ``sweep`` with extra fixed overrides (``--quick``), base path kept absolute."""
    import yaml

    raw = yaml.safe_load(sweep.read_text())
    if "base" in raw:
        raw["base"] = str((sweep.parent / raw["base"]).resolve())
    extra = dict(s.split("=", 1) for s in sets)
    raw["set"] = {**raw.get("set", {}), **{k: yaml.safe_load(v) for k, v in extra.items()}}
    write_text_atomic(target, yaml.safe_dump(raw, sort_keys=False))
    return target

"""The reproduction machinery: figures (sweep + plots + claims), the run, ``REPORT.md``."""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd

from lmmsim.errors import UserError, choices
from lmmsim.outputs import OutputDir, atomic_path, write_text_atomic
from lmmsim.reproduce.stats import SeedStats, direction, magnitude_interval, magnitude_misses, magnitude_text

ROOT = Path(__file__).resolve().parent.parent / "scenarios" / "reproduce"  # package data


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
    ref: str = ""  # the key of the paper statement this row checks (the paper module's PAPER_CLAIMS)

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
class NotModelled:
    """A paper claim the simulator cannot express yet: a row in REPORT.md all the same,
    saying what is missing (``ref``: its key in the paper module's PAPER_CLAIMS)."""

    ref: str
    text: str
    paper: str  # the paper's figure as it states it ("66%", "1.5x")
    missing: str


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
    # False: ``sweep`` names no sweep (a search spec for ``make``): no --set or seed overrides
    # apply, and its claims come from one run
    is_sweep: bool = True


DEFAULT_SEEDS = 5  # seeds per claim in a full run (a quick run: 1, and no verdicts)


def reproduce(paper: str, out: Path, *, papers: dict, quick: bool = False, jobs: int | None = None,
              force: bool = False, figures: list[str] | None = None, sets: tuple[str, ...] = (),
              seeds: int | None = None, not_modelled: tuple[NotModelled, ...] = (),
              progress: bool = False) -> Path:
    """Run the paper's figure sweeps into ``out``, draw the plots, write ``REPORT.md``
    (``papers``: paper -> its figures, :data:`lmmsim.reproduce.PAPERS`; ``figures``:
    only these, by name; ``sets``: ``KEY=VALUE`` overrides fixed in every run, for
    sensitivity studies -- the report's title lists them; ``seeds``: runs per point,
    seeds ``seed .. seed + seeds - 1``, default :data:`DEFAULT_SEEDS` (1 with ``quick``)).
    Every claim is evaluated once per seed and reported with its 95% CI
    (:mod:`lmmsim.reproduce.stats`); a quick run is a smoke test and gives no verdicts.
    ``not_modelled``: the paper's claims the simulator cannot express, listed in a
    full report of every figure. ``progress``: each figure's name and its sweep's progress
    bar on stderr."""
    if paper not in papers:
        raise UserError("PAPER", f"no reproduction for {paper!r} yet; valid: {choices(papers)}")
    seeds = seeds if seeds is not None else (1 if quick else DEFAULT_SEEDS)
    if seeds < 1:
        raise UserError("--seeds", f"must be at least 1, got {seeds}")
    chosen = _chosen(paper, papers[paper], figures)
    out_dir = OutputDir(out, force=force)
    # Every path this run writes, checked before the first sweep starts: a user's file
    # in the way stops it at once, not after minutes of simulation.
    out_dir.check("REPORT.md", *(f"{fig.name}/" for fig in chosen),
                  *(f".{fig.name}.{what}.yaml" for fig in chosen for what in ("quick", "set", "seeds")),
                  *(_plot_file(fig.name, kind, opts if [k for k, _ in fig.plots].count(kind) > 1 else {})
                    for fig in chosen for kind, opts in fig.plots))
    rows = []
    from lmmsim.sweep.executors import shared_pool

    with shared_pool(jobs):  # one warm worker pool for every figure, not one per figure
        for k, fig in enumerate(chosen, 1):
            if progress:
                print(f"{paper} {fig.name} (figure {k} of {len(chosen)})", file=sys.stderr, flush=True)
            ok = _run_figure(paper, fig, out_dir, quick=quick, jobs=jobs, sets=sets, seeds=seeds,
                             progress=progress)
            rows += [(fig.name, claim, seed_stats(claim, ok)) for claim in fig.claims]
    report = out_dir.file("REPORT.md")
    unmodelled = not_modelled if not figures else ()
    write_text_atomic(report, render_report(paper, rows, quick=quick, sets=sets, seeds=seeds,
                                            not_modelled=unmodelled))
    return report


def _chosen(paper: str, figures_of_paper: tuple, names: list[str] | None) -> tuple:
    if not names:
        return figures_of_paper
    known = [f.name for f in figures_of_paper]
    unknown = [f for f in names if f not in known]
    if unknown:
        raise UserError("--figures", f"no figure {unknown[0]!r} for {paper}; valid: {choices(known)}")
    return tuple(f for f in figures_of_paper if f.name in names)


def _run_figure(paper: str, fig: Figure, out_dir, *, quick: bool, jobs, sets, seeds: int,
                progress: bool = False) -> pd.DataFrame:
    """Run one figure (its sweep, or its own ``make``), draw its plots; the ok rows."""
    from lmmsim.plotting.figures import plot
    from lmmsim.sweep.runner import run_sweep

    sweep = ROOT / paper / fig.sweep
    if sets and fig.is_sweep:
        sweep = with_overrides(sweep, out_dir.file(f".{fig.name}.set.yaml"), _checked_sets(sets))
    if seeds > 1 and fig.is_sweep:
        sweep = with_overrides(sweep, out_dir.file(f".{fig.name}.seeds.yaml"), (), repeats=seeds)
    folder = out_dir.folder(fig.name)
    if fig.make is not None:
        fig.make(sweep, folder, quick, jobs)
        frame = pd.read_parquet(folder / "results.parquet")
    else:
        if quick and fig.quick_set:
            sweep = with_overrides(sweep, out_dir.file(f".{fig.name}.quick.yaml"), fig.quick_set)
        frame = run_sweep(sweep, folder, jobs=jobs, progress=progress)
    ok = frame[frame["status"] == "ok"]
    kinds = [kind for kind, _ in fig.plots]
    for kind, options in fig.plots:
        name = _plot_file(fig.name, kind, options if kinds.count(kind) > 1 else {})
        with atomic_path(out_dir.file(name)) as tmp:
            plot(kind, folder, tmp, force=True, **options)
    return ok


def seed_stats(claim: Claim, ok: pd.DataFrame) -> SeedStats:
    """The claim evaluated on each seed's rows (the sweep's ``repeat``), or once on all of them."""
    if "repeat" in ok.columns and ok["repeat"].nunique() > 1:
        return SeedStats(tuple(float(claim.simulated(part)) for _, part in ok.groupby("repeat", sort=True)))
    return SeedStats((float(claim.simulated(ok)),))


def _value_text(claim: Claim, s: SeedStats) -> str:
    """A holds claim as the share of seeds it holds in; any other as mean ± CI half-width."""
    if claim.kind == "holds" and s.n > 1:
        return f"holds in {sum(1 for v in s.values if v == 1)}/{s.n}"
    return s.text()


def render_report(paper: str, rows: list, *, quick: bool, sets: tuple[str, ...], seeds: int,
                  not_modelled: tuple[NotModelled, ...] = ()) -> str:
    """REPORT.md: one row per claim; verdict columns only for a full run; the claims
    not modelled in a table of their own. A row that misses without a known cause
    says so: a cause is never left blank."""
    label = next((c.before_label for _, c, _ in rows if c.before is not None), None)
    title = f"# Reproduction: {paper}" + (" (quick: a smoke test, no verdicts)" if quick else "")
    lines = [title, "", *([f"Every run with: {', '.join(f'`{s}`' for s in sets)}.", ""] if sets else [])]
    if quick:
        lines += ["Fewer requests per run and one seed: the numbers show that every figure runs; they are not "
                  "evidence for or against a claim (a full run gives the verdicts).", "",
                  "| figure | claim | paper | simulator |", "|---|---|---:|---:|"]
        lines += [f"| {f} | {c.text} | {c.paper:.3g} | {_value_text(c, s)} |" for f, c, s in rows]
        return "\n".join(lines) + "\n"
    lines += [f"Each claim over {seeds} seed(s): the simulator's mean ± the half-width of its 95% CI. Direction: "
              "yes when the whole CI lies on the paper's side, tie when it straddles, no when it lies on the "
              "other. Magnitude: the simulator's effect over the paper's (1.00 = same size), with its CI; bold "
              "when the whole CI lies outside 0.65-1.35.", "",
              *([f"Before: {label}.", ""] if label else []),
              "| figure | claim | paper | simulator | direction | magnitude |" + (" before |" if label else ""),
              "|---|---|---:|---:|:---:|---:|" + ("---:|" if label else "")]
    notes = []
    for fig_name, claim, s in rows:
        verdict = direction(claim.kind, claim.paper, s)
        interval = magnitude_interval(claim.kind, claim.paper, s)
        mag = "-" if interval is None else magnitude_text(interval, claim.magnitude(s.mean))
        mark = "**no**" if verdict == "no" else verdict
        before = ("" if not label else " - |" if claim.before is None else f" {claim.before:.3g} |")
        lines.append(f"| {fig_name} | {claim.text} | {claim.paper:.3g} | {_value_text(claim, s)} | {mark} | {mag} |"
                     + before)
        if verdict not in ("yes", "-") or magnitude_misses(interval):
            notes.append(f"* {fig_name}, {claim.text}: {claim.why or 'cause not established yet.'}")
    if notes:
        lines += ["", "## Where it differs, and why", "", *notes]
    if not_modelled:
        lines += ["", "## Claims not modelled", "", "| claim | paper | what is missing |", "|---|---:|---|",
                  *(f"| {n.text} | {n.paper} | {n.missing} |" for n in not_modelled)]
    return "\n".join(lines) + "\n"


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


def with_overrides(sweep: Path, target: Path, sets: tuple[str, ...], repeats: int | None = None) -> Path:
    """A copy of ``sweep`` with extra fixed overrides (``--quick``, ``--set``) and, given
    ``repeats``, that many runs per point (seeds); base path kept absolute."""
    import yaml

    raw = yaml.safe_load(sweep.read_text())
    if "base" in raw:
        raw["base"] = str((sweep.parent / raw["base"]).resolve())
    extra = dict(s.split("=", 1) for s in sets)
    raw["set"] = {**raw.get("set", {}), **{k: yaml.safe_load(v) for k, v in extra.items()}}
    if repeats is not None:
        raw["repeats"] = repeats
    write_text_atomic(target, yaml.safe_dump(raw, sort_keys=False))
    return target

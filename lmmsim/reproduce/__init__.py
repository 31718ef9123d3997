"""``lmmsim reproduce PAPER``: rerun a seed paper's figures and compare its headline claims.

Each figure is a sweep YAML under ``scenarios/reproduce/<paper>/`` plus the
plots drawn from its results and the claims it checks. A claim computes the
simulator's number from the sweep's ``results.parquet`` and sets it beside
the paper's; ``REPORT.md`` lists them with whether the direction matches and
how large the simulated effect is against the paper's. ``--quick`` runs
fewer requests. One module per paper lists its figures.
"""

from __future__ import annotations

from pathlib import Path

from lmmsim.reproduce import core, easerve, rps, rserve
from lmmsim.reproduce.core import Claim, Figure, NotModelled

PAPERS: dict[str, tuple[Figure, ...]] = {
    "rps": rps.FIGURES,
    "rserve": rserve.FIGURES,
    "easerve": easerve.FIGURES,
}
# Per paper: every claim of its abstract, introduction and evaluation text, by key
# (key -> where and what), and those the simulator cannot express yet.
PAPER_CLAIMS: dict[str, dict[str, str]] = {
    "rps": rps.PAPER_CLAIMS, "rserve": rserve.PAPER_CLAIMS, "easerve": easerve.PAPER_CLAIMS}
NOT_MODELLED: dict[str, tuple[NotModelled, ...]] = {
    "rps": rps.NOT_MODELLED, "rserve": rserve.NOT_MODELLED, "easerve": easerve.NOT_MODELLED}


def reproduce(paper: str, out: Path, **options) -> Path:
    """:func:`lmmsim.reproduce.core.reproduce` over :data:`PAPERS` (the figures live
    in the paper modules, which import the core: the core does not import them)."""
    return core.reproduce(paper, out, papers=PAPERS, not_modelled=NOT_MODELLED.get(paper, ()), **options)

__all__ = ["NOT_MODELLED", "PAPERS", "PAPER_CLAIMS", "Claim", "Figure", "NotModelled", "reproduce"]

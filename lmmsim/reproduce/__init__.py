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
from lmmsim.reproduce.core import Claim, Figure

PAPERS: dict[str, tuple[Figure, ...]] = {
    "rps": rps.FIGURES,
    "rserve": rserve.FIGURES,
    "easerve": easerve.FIGURES,
}


def reproduce(paper: str, out: Path, **options) -> Path:
    """:func:`lmmsim.reproduce.core.reproduce` over :data:`PAPERS` (the figures live
    in the paper modules, which import the core: the core does not import them)."""
    return core.reproduce(paper, out, papers=PAPERS, **options)

__all__ = ["PAPERS", "Claim", "Figure", "reproduce"]

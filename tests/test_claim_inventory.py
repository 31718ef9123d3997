"""Every claim a seed paper makes has a row in its reproduction: a checked Claim or a NotModelled."""

from __future__ import annotations

import pytest

from lmmsim.reproduce import NOT_MODELLED, PAPER_CLAIMS, PAPERS
from lmmsim.reproduce.core import Claim, NotModelled, render_report
from lmmsim.reproduce.stats import SeedStats


@pytest.mark.parametrize("paper", sorted(PAPERS))
def test_every_listed_claim_has_a_row_and_every_row_a_listed_claim(paper):
    listed = PAPER_CLAIMS[paper]
    assert listed, f"{paper}: PAPER_CLAIMS is empty"
    checked = {c.ref for fig in PAPERS[paper] for c in fig.claims}
    unmodelled = {n.ref for n in NOT_MODELLED[paper]}
    assert not (checked & unmodelled), f"{paper}: claimed both checked and not modelled: {checked & unmodelled}"
    missing = set(listed) - checked - unmodelled
    assert not missing, f"{paper}: paper claims without a row: {sorted(missing)}"
    unknown = (checked | unmodelled) - set(listed)
    assert not unknown, f"{paper}: rows whose ref is not in PAPER_CLAIMS: {sorted(unknown)}"


@pytest.mark.parametrize("paper", sorted(PAPERS))
def test_not_modelled_rows_say_what_is_missing(paper):
    for n in NOT_MODELLED[paper]:
        assert n.text and n.paper and len(n.missing) > 20, n


def test_report_lists_not_modelled_claims_and_flags_a_miss_without_a_cause():
    miss = Claim("x up", 2.0, lambda df: 0.5, ref="x")
    report = render_report("p", [("f", miss, SeedStats((0.5, 0.4, 0.6)))], quick=False, sets=(), seeds=3,
                           not_modelled=(NotModelled("y", "y halves", "50%", "no model of y's queue yet"),))
    assert "## Claims not modelled" in report and "no model of y's queue yet" in report
    assert "cause not established yet" in report
    quick = render_report("p", [("f", miss, SeedStats((0.5,)))], quick=True, sets=(), seeds=1,
                          not_modelled=())
    assert "direction" not in quick and "cause" not in quick

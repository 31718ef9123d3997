"""Claims as statistics (lmmsim.reproduce.stats): CIs over seeds and the verdicts read off them."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from lmmsim.reproduce import PAPERS
from lmmsim.reproduce.core import Claim, render_report, seed_stats
from lmmsim.reproduce.stats import SeedStats, direction, magnitude_interval, magnitude_misses


def test_ci_of_the_mean_by_hand():
    s = SeedStats((1.0, 2.0, 3.0))
    # sd 1, t(0.975, 2) = 4.302653: half-width 4.302653 / sqrt(3)
    assert s.mean == 2.0 and s.half_width == pytest.approx(4.302653 / math.sqrt(3), rel=1e-6)
    assert SeedStats((5.0,)).half_width == 0.0 and SeedStats((5.0,)).text() == "5"
    assert "± " in s.text() and "n=3" in s.text()


@pytest.mark.parametrize("values, verdict", [
    ((-0.10, -0.12, -0.08), "yes"),   # one-sided, the paper's side
    ((0.10, 0.12, 0.08), "no"),       # one-sided, the other side
    ((-0.10, 0.05, -0.02), "tie"),    # straddles zero
    ((-0.05,), "yes"), ((0.0,), "no"),  # one seed: the point decides; no effect is no
])
def test_change_direction_from_the_ci(values, verdict):
    assert direction("change", -0.18, SeedStats(values)) == verdict


def test_ratio_holds_and_level_verdicts():
    assert direction("ratio", 2.0, SeedStats((1.5, 1.6, 1.7))) == "yes"
    assert direction("ratio", 2.0, SeedStats((0.9, 1.2, 1.05))) == "tie"
    assert direction("ratio", 0.5, SeedStats((1.2, 1.3, 1.25))) == "no"
    assert direction("holds", 1, SeedStats((1, 1, 1))) == "yes"
    assert direction("holds", 1, SeedStats((1, 0, 1))) == "2/3"
    assert direction("holds", 1, SeedStats((0, 0))) == "no"
    assert direction("level", 3.0, SeedStats((3.1, 2.9))) == "-"


def test_magnitude_misses_only_when_the_whole_ci_is_outside_the_band():
    wide = SeedStats((1.2, 1.9, 2.6))  # ratio vs paper 2.0: magnitudes 0.2 .. 1.6 cover the band
    assert not magnitude_misses(magnitude_interval("ratio", 2.0, wide))
    far = SeedStats((3.0, 3.1, 3.2))  # magnitude ~2.1, tight
    assert magnitude_misses(magnitude_interval("ratio", 2.0, far))
    # a negative paper value flips the map: the interval is still ordered
    lo, hi = magnitude_interval("change", -0.2, SeedStats((-0.1, -0.3)))
    assert lo <= hi
    assert magnitude_interval("holds", 1, SeedStats((1,))) is None


def test_a_claim_is_evaluated_per_seed():
    frame = pd.DataFrame({"repeat": [0, 0, 1, 1], "x": [1.0, 3.0, 5.0, 7.0]})
    claim = Claim("mean x", 4.0, lambda df: df["x"].mean(), kind="level")
    assert seed_stats(claim, frame).values == (2.0, 6.0)
    assert seed_stats(claim, frame[frame["repeat"] == 0]).values == (2.0,)


def test_quick_reports_have_no_verdicts_and_full_ones_do():
    claim = Claim("gain", -0.18, lambda df: 0.0, kind="change", why="because", before=-0.3, before_label="old")
    rows = [("figX", claim, SeedStats((-0.05, 0.02, -0.01)))]
    quick = render_report("p", rows, quick=True, sets=(), seeds=1)
    assert "smoke test" in quick and "direction" not in quick and "magnitude" not in quick
    full = render_report("p", rows, quick=False, sets=("a=1",), seeds=3)
    line = next(x for x in full.splitlines() if x.startswith("| figX |"))
    assert "| tie |" in line and line.endswith("| -0.3 |") and "Before: old." in full
    assert "* figX, gain: because" in full  # a tie is not a match: its cause is listed


def test_every_paper_module_lists_its_claims_once():
    for paper, figures in PAPERS.items():
        texts = [(f.name, c.text) for f in figures for c in f.claims]
        assert texts and len(texts) == len(set(texts)), paper


def test_a_nil_paper_effect_has_no_magnitude_verdict():
    assert magnitude_interval("level", 0, SeedStats((0.2, 0.3))) is None
    assert magnitude_interval("ratio", 1, SeedStats((1.2, 1.3))) is None
    assert not magnitude_misses(magnitude_interval("change", 0, SeedStats((0.2, 0.3))))

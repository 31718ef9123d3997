"""Goodput as the highest rate meeting P99 bounds (lmmsim.metrics.goodput)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from lmmsim.metrics.goodput import sustainable_rate, tiered_goodput

RATES = [1.0, 2.0, 3.0, 4.0]
TTFT = [1.0, 2.0, 6.0, 20.0]  # P99 TTFT (s) at each rate
TPOT = [0.02, 0.03, 0.04, 0.30]


def test_interpolates_the_crossing_of_the_first_metric_to_miss():
    # TTFT bound 4 s: met at 2 (2 s), missed at 3 (6 s) -> 2 + (4 - 2) / (6 - 2) = 2.5
    assert sustainable_rate(RATES, TTFT, TPOT, 4.0, None) == pytest.approx(2.5)
    # TPOT bound 0.1 s: met up to 3, missed at 4 -> 3 + (0.1 - 0.04) / (0.30 - 0.04)
    assert sustainable_rate(RATES, TTFT, TPOT, None, 0.1) == pytest.approx(3 + 0.06 / 0.26)
    # both: the TTFT crossing (2.5) comes first
    assert sustainable_rate(RATES, TTFT, TPOT, 4.0, 0.1) == pytest.approx(2.5)
    # at the same interval the earlier crossing of the two wins
    assert sustainable_rate(RATES, TTFT, TPOT, 13.0, 0.1) == pytest.approx(3 + min(7 / 14, 0.06 / 0.26))


def test_edges_order_and_missing_values():
    assert sustainable_rate(RATES, TTFT, TPOT, 100.0, 1.0) == 4.0  # met everywhere: the top rate
    assert sustainable_rate(RATES, TTFT, TPOT, 0.5, None) == 0.0  # missed at the lowest rate
    assert sustainable_rate(RATES, TTFT, TPOT, None, None) == 4.0
    shuffled = [3, 1, 4, 2]
    assert sustainable_rate([RATES[i - 1] for i in shuffled], [TTFT[i - 1] for i in shuffled],
                            [TPOT[i - 1] for i in shuffled], 4.0, None) == pytest.approx(2.5)
    # a rate where nothing finished (NaN) misses, without interpolation
    assert sustainable_rate(RATES, [1.0, 2.0, math.nan, 3.0], TPOT, 10.0, None) == 2.0
    # a rate that meets again after a miss does not count: every lower rate must meet
    assert sustainable_rate(RATES, [1.0, 9.0, 2.0, 2.0], TPOT, 5.0, None) == pytest.approx(1 + 4 / 8)


def test_tiered_goodput_one_row_per_series_and_tier():
    frame = pd.DataFrame({"name": ["a"] * 4 + ["b"] * 4, "workload.arrival.rate": RATES * 2,
                          "ttft_s.p99": TTFT + [t / 2 for t in TTFT], "tpot_s.p99": TPOT * 2})
    out = tiered_goodput(frame, [2, 4], 1.0, None)
    assert list(out["name"]) == ["a", "a", "b", "b"]
    assert list(out["slo.ttft_p99_s"]) == [2.0, 4.0, 2.0, 4.0]
    # b's TTFT is half a's: 0.5, 1, 3, 10 s
    assert out["goodput_requests_per_s"].tolist() == pytest.approx([2.0, 2.5, 2.5, 3 + (4 - 3) / (10 - 3)])

"""EAServe's dynamic SM partitioning table (easerve.txt §3.4) on synthetic latency curves."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lmmsim.easerve.sm_table import (
    DEFAULT_LEVELS,
    SmTable,
    build_sm_table,
    encode_latency_from_parts,
    parts_from_cost_model,
)
from lmmsim.engine.gpu_share import SmShareCurve


def linear_parts(per_item_compute, memory, free_items=0):
    """compute = per_item_compute * max(0, b - free_items), memory constant."""
    return lambda b: (per_item_compute * max(0, b - free_items), memory)


# ---------------------------------------------------------- hand-computed cases
# latency(b, x) = 0.01 b (x + k) / ((1 + k) x) + m, k = 0.25; exclusive 0.01 b + m.
# Within 10 %: 0.01 b (stretch(x) - 1.1) <= 0.1 m.  stretch: 0.2 -> 1.8, 0.4 -> 1.3,
# 0.6 -> 17/15 = 1.1333, 0.8 -> 1.05, 1.0 -> 1.
def test_hand_computed_small_memory():
    # m = 0.002: b <= 0.02 / (stretch - 1.1): 0.0286, 0.1, 0.6 -> no batch at all;
    # 0.8 (stretch 1.05 <= 1.1) and 1.0 -> every batch.
    table = build_sm_table(encode_latency_from_parts(linear_parts(0.01, 0.002)), max_batch=16)
    assert table.levels == DEFAULT_LEVELS
    assert table.supported == (0, 0, 0, 16, 16)
    assert table.tolerance == 0.10
    assert [table.share_for(b) for b in (1, 8, 16)] == [0.8, 0.8, 0.8]
    assert table.share_for(17) == 1.0  # beyond the probed sizes: whole GPU


def test_hand_computed_memory_heavier():
    # m = 0.035: b <= 0.35 / (stretch - 1.1): 0.2 -> 0.5 (0), 0.4 -> 1.75 (1), 0.6 -> 10.5 (10).
    table = build_sm_table(encode_latency_from_parts(linear_parts(0.01, 0.035)), max_batch=16)
    assert table.as_dict() == {0.2: 0, 0.4: 1, 0.6: 10, 0.8: 16, 1.0: 16}
    assert table.share_for(1) == 0.4
    assert all(table.share_for(b) == 0.6 for b in range(2, 11))
    assert all(table.share_for(b) == 0.8 for b in range(11, 17))
    assert table.split_for(1) == (0.4, 0.6)
    assert table.split_for(12) == (0.8, 0.2)  # 1 - 0.8 rounded: exactly 0.2
    assert table.prefill_share_for(17) == 0.0
    assert table.supported_batch(0.6) == 10
    with pytest.raises(ValueError):
        table.supported_batch(0.5)
    with pytest.raises(ValueError):
        table.share_for(0)


def test_tolerance_zero_only_full_share_except_flat():
    lat = encode_latency_from_parts(linear_parts(0.01, 0.002))
    assert build_sm_table(lat, max_batch=12, tolerance=0).supported == (0, 0, 0, 0, 12)
    # first 3 items cost no compute: the curve is flat there, so every level holds them
    flat = encode_latency_from_parts(linear_parts(0.01, 0.002, free_items=3))
    table = build_sm_table(flat, max_batch=12, tolerance=0)
    assert table.supported == (3, 3, 3, 3, 12)
    assert table.share_for(3) == 0.2 and table.share_for(4) == 1.0
    # purely memory-bound: flat everywhere
    mem_only = encode_latency_from_parts(lambda b: (0.0, 0.001 * b))
    assert build_sm_table(mem_only, max_batch=12, tolerance=0).supported == (12,) * 5


def test_probed_sizes_and_levels():
    lat = encode_latency_from_parts(linear_parts(0.01, 0.035))
    table = build_sm_table(lat, batch_sizes=[16, 1, 4, 8, 2], levels=[1.0, 0.5, 0.25, 0.5])
    assert table.levels == (0.25, 0.5, 1.0) and table.batch_sizes == (1, 2, 4, 8, 16)
    # stretch(0.5) = 1.2: b <= 0.35 / 0.1 = 3.5 -> probed 2; stretch(0.25) = 1.6 -> b <= 0.7 -> 0
    assert table.supported == (0, 2, 16)
    assert table.share_for(2) == 0.5
    assert table.share_for(3) == 1.0  # 3 was not probed: only a level supporting 4+ covers it
    for kwargs in ({}, {"max_batch": 4, "batch_sizes": [1]}, {"max_batch": 0}, {"batch_sizes": [0, 1]},
                   {"max_batch": 4, "levels": [0.0, 1.0]}, {"max_batch": 4, "levels": []},
                   {"max_batch": 4, "tolerance": -0.1}):
        with pytest.raises(ValueError):
            build_sm_table(lat, **kwargs)


def test_prefix_rule_and_monotone_entries():
    # a noisy profile: at share 0.4 batch 3 fails though 4 passes; at 0.6 batch 2 fails
    fails = {(3, 0.4), (2, 0.6)}

    def lat(b, x):
        return 2.0 if (b, x) in fails else 1.0

    table = build_sm_table(lat, max_batch=5, levels=[0.2, 0.4, 0.6, 1.0])
    # raw prefixes: 0.2 -> 5, 0.4 -> 2, 0.6 -> 1, 1.0 -> 5; made monotone by a running max
    assert table.supported == (5, 5, 5, 5)
    assert table.share_for(5) == 0.2  # lookups are unchanged by the running max


def test_full_share_is_its_own_baseline_even_when_noisy():
    calls = []

    def noisy(b, x):
        calls.append((b, x))
        return 1.0 + 0.5 * (len(calls) % 2)  # never the same twice in a row

    table = build_sm_table(noisy, max_batch=6, levels=[0.5, 1.0], tolerance=0)
    assert table.supported[-1] == 6
    assert calls.count((3, 1.0)) == 1  # exclusive latency measured once per size


def test_table_validation():
    with pytest.raises(ValueError):
        SmTable((0.5, 1.0), (4, 2), 0.1, (1, 2, 3, 4))
    with pytest.raises(ValueError):
        SmTable((1.0,), (4, 2), 0.1, (1, 2, 3, 4))


def test_parts_from_cost_model():
    class FakeCostModel:
        def encode_parts(self, works):
            return (0.01 * len(works), 0.002)

    parts = parts_from_cost_model(FakeCostModel(), object())
    assert parts(3) == (0.01 * 3, 0.002)
    lat = encode_latency_from_parts(parts, SmShareCurve(k=0.25))
    assert lat(3, 1.0) == 0.01 * 3 + 0.002  # share 1.0 is exactly the exclusive time


# ------------------------------------------------------------------ properties
@settings(max_examples=150, deadline=None)
@given(
    per_item=st.floats(1e-4, 0.1),
    base_compute=st.floats(0, 0.05),
    memory=st.floats(0, 0.1),
    k=st.floats(0.01, 5),
    tolerance=st.floats(0, 1),
    max_batch=st.integers(1, 40),
    levels=st.lists(st.floats(0.01, 1.0), min_size=1, max_size=6),
)
def test_table_is_monotone(per_item, base_compute, memory, k, tolerance, max_batch, levels):
    parts = lambda b: (base_compute + per_item * b, memory)
    lat = encode_latency_from_parts(parts, SmShareCurve(k=k))
    table = build_sm_table(lat, levels=levels + [1.0], max_batch=max_batch, tolerance=tolerance)
    assert list(table.supported) == sorted(table.supported)
    assert table.supported[-1] == max_batch  # the full share supports every batch
    shares = [table.share_for(b) for b in range(1, max_batch + 5)]
    assert shares == sorted(shares)
    assert all(s == 1.0 for s in shares[max_batch:])
    for b in range(1, max_batch + 1):
        x = table.share_for(b)
        assert x in table.levels
        bound = (1 + tolerance) * lat(b, 1.0)
        # the chosen share meets the target, and the next smaller level would not (for
        # this monotone model; slack 1e-9 for rounding when a level sits on the boundary)
        assert lat(b, x) <= bound * (1 + 1e-9)
        smaller = [y for y in table.levels if y < x]
        if smaller:
            assert lat(b, smaller[-1]) > bound * (1 - 1e-9)
        enc, pre = table.split_for(b)
        assert 0 <= pre <= 1 and abs(enc + pre - 1) < 1e-9

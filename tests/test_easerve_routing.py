"""EAServe's rate-controlled partial offload (easerve.txt §3.3): the deficit
router's guarantees, and how the random and windowed baselines miss them."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

# importing the module registers the "offload" role (until lmmsim.policies imports it)
from lmmsim.policies.offload import (
    DeficitOffloadConfig,
    DeficitRouter,
    OffloadRouter,
    RandomOffloadConfig,
    RandomRouter,
    RouteCount,
    WindowedOffloadConfig,
    WindowedRouter,
    exact_fraction,
)
from lmmsim.policies.registry import config_union, create, describe, names

NAMED_S = [0.0, 1.0, 1 / 3, 2 / 3, 0.55, 0.1, 0.5, 0.7, 0.29, 0.001, 0.999, 1e-7, 1 - 1e-7]
S = st.one_of(st.sampled_from(NAMED_S), st.floats(0.0, 1.0, allow_nan=False))


def decisions(router, n: int) -> list[bool]:
    return [router.route() for _ in range(n)]


def longest_run(seq: list[bool], value: bool) -> int:
    best = cur = 0
    for x in seq:
        cur = cur + 1 if x == value else 0
        best = max(best, cur)
    return best


# ------------------------------------------------------------- deficit router
@settings(max_examples=150, deadline=None)
@given(s=S, n=st.integers(1, 3000))
def test_deficit_count_is_floor_n_s_after_every_prefix(s, n):
    router = DeficitRouter(s)
    ratio = router.ratio
    p, q = ratio.numerator, ratio.denominator
    exact_s = Fraction(s)  # the float's exact binary value
    remote = 0
    for i in range(1, n + 1):
        remote += router.route()
        assert remote == i * p // q  # floor(i * ratio): the paper's floor(n s + d0), d0 = 0
        # ... and within +-1 of i*s for the float s itself (n <= 10**6, module docstring)
        assert i * exact_s - 1 < remote <= i * exact_s + Fraction(1, 2)
        assert 0 <= router.deficit < 1
    assert router.count == RouteCount(remote, n - remote)
    assert router.count.total == n


@settings(max_examples=150, deadline=None)
@given(s=S, n=st.integers(1, 3000))
def test_deficit_runs_are_bounded(s, n):
    router = DeficitRouter(s)
    seq = decisions(router, n)
    exact_s = Fraction(s)
    ratio = router.ratio
    longest_remote, longest_local = longest_run(seq, True), longest_run(seq, False)
    if exact_s < 1:
        assert longest_remote <= math.ceil(1 / (1 - exact_s))
    if exact_s > 0:
        assert longest_local <= math.ceil(1 / exact_s)
    # the sharper form the proof gives: L * (1 - ratio) < 1 and L * ratio < 1
    assert longest_remote * (1 - ratio) < 1 or ratio == 1
    assert longest_local * ratio < 1 or ratio == 0


@settings(max_examples=100, deadline=None)
@given(s=S, n=st.integers(1, 3000))
def test_deficit_fraction_converges(s, n):
    router = DeficitRouter(s)
    decisions(router, n)
    assert abs(router.remote_fraction - s) <= 1 / n + 1e-12  # count in (n s - 1, n s + 1/2]
    assert abs(router.remote_fraction - float(router.ratio)) < 1 / n


def test_deficit_exact_on_decimal_ratios():
    r = DeficitRouter(0.1)
    assert decisions(r, 10) == [False] * 9 + [True]  # 0.1 added ten times reaches exactly 1
    assert r.deficit == 0
    r = DeficitRouter(0.7)
    assert sum(decisions(r, 10)) == 7  # the float 0.7 is 0.69999...; its ratio is 7/10
    r = DeficitRouter(0.55)
    assert r.ratio == Fraction(11, 20)
    assert sum(decisions(r, 20)) == 11
    assert DeficitRouter(1 / 3).ratio == Fraction(1, 3)
    assert decisions(DeficitRouter(1 / 3), 6) == [False, False, True] * 2


def test_deficit_extremes():
    assert decisions(DeficitRouter(1.0), 50) == [True] * 50
    assert decisions(DeficitRouter(1), 5) == [True] * 5
    assert decisions(DeficitRouter(0.0), 50) == [False] * 50
    # below 1/(2*10**6) the ratio rounds to 0 (documented); floor(n*s) is 0 anyway for n <= 10**6
    assert DeficitRouter(1e-7).ratio == 0
    assert DeficitRouter(1 - 1e-7).ratio == 1


def test_deficit_accepts_exact_fractions():
    r = DeficitRouter(Fraction(3, 7))
    seq = decisions(r, 700)
    assert sum(seq) == 300
    assert r.ratio == Fraction(3, 7)
    # a rational with a denominator above 10**6 is kept exact, not rounded
    assert DeficitRouter(Fraction(1, 10**7 + 1)).ratio == Fraction(1, 10**7 + 1)


@pytest.mark.parametrize("bad", [-0.01, 1.01, math.nan, math.inf, Fraction(3, 2), -1])
def test_ratio_out_of_range(bad):
    with pytest.raises(ValueError):
        exact_fraction(bad)
    with pytest.raises(ValueError):
        DeficitRouter(bad)


def test_stats_before_and_after():
    r = DeficitRouter(0.25)
    assert math.isnan(r.remote_fraction)
    assert r.count == RouteCount(0, 0)
    assert r.target_fraction == 0.25
    decisions(r, 8)
    assert r.count == RouteCount(2, 6)
    assert r.remote_fraction == 0.25
    assert isinstance(r, OffloadRouter)
    assert isinstance(RandomRouter(0.5), OffloadRouter)
    assert isinstance(WindowedRouter(0.5, 4), OffloadRouter)


# ------------------------------------------------------------------ baselines
def test_random_router_violates_the_run_bound():
    # s = 1/2: the deficit router alternates (runs of 1, bound ceil(1/(1-s)) = 2);
    # seed 1 gives 13 remote decisions in a row within the first 100 requests.
    s = 0.5
    seq = decisions(RandomRouter(s, seed=1), 100)
    assert longest_run(seq, True) == 13 > math.ceil(1 / (1 - s))
    deficit = decisions(DeficitRouter(s), 100)
    assert longest_run(deficit, True) == 1 and longest_run(deficit, False) == 1
    # it also drifts more than 1 from n*s at short horizons
    worst = max(abs(sum(seq[:n]) - n * s) for n in range(1, 101))
    assert worst > 1


def test_random_router_local_runs_and_seeds():
    s = 0.55
    seqs = {seed: decisions(RandomRouter(s, seed=seed), 200) for seed in range(5)}
    # some seed exceeds the local-run bound ceil(1/s) = 2
    assert any(longest_run(seq, False) > math.ceil(1 / s) for seq in seqs.values())
    assert decisions(RandomRouter(s, seed=3), 200) == seqs[3]  # reproducible
    assert seqs[0] != seqs[1]
    assert decisions(RandomRouter(0.0, seed=0), 100) == [False] * 100
    assert decisions(RandomRouter(1.0, seed=0), 100) == [True] * 100


def test_random_router_fraction_on_average():
    r = RandomRouter(0.3, seed=7)
    decisions(r, 20000)
    assert abs(r.remote_fraction - 0.3) < 0.02


def test_windowed_meets_fraction_only_at_boundaries():
    s, w = 0.5, 10
    r = WindowedRouter(s, window=w)
    seq = decisions(r, 100)
    assert seq[:10] == [True] * 5 + [False] * 5  # remote first
    counts = [sum(seq[:n]) for n in range(1, 101)]
    for n, c in enumerate(counts, start=1):
        if n % w == 0:
            assert c == n * s
    assert counts[4] - 5 * s == 2.5  # mid-window: 5 remote after 5 requests
    assert max(abs(c - n * s) for n, c in enumerate(counts, start=1)) > 1
    assert longest_run(seq, True) == 5 > math.ceil(1 / (1 - s))
    assert longest_run(seq, False) == 5 > math.ceil(1 / s)


def test_windowed_depends_on_window():
    # s * W not an integer: the fraction is floor(s W)/W even at boundaries
    r = WindowedRouter(0.55, window=10)
    decisions(r, 1000)
    assert r.remote_fraction == 0.5
    r = WindowedRouter(0.55, window=20)
    decisions(r, 1000)
    assert r.remote_fraction == 0.55
    # exact ratio: 0.29 * 100 is 28.999999999999996 in floats, still 29 remote
    assert WindowedRouter(0.29, window=100).remote_per_window == 29
    with pytest.raises(ValueError):
        WindowedRouter(0.5, window=0)


@settings(max_examples=100, deadline=None)
@given(s=S, w=st.integers(1, 50), m=st.integers(1, 40))
def test_windowed_exact_at_every_boundary(s, w, m):
    r = WindowedRouter(s, window=w)
    k = r.remote_per_window
    for _ in range(m):
        decisions(r, w)
        assert r.count.remote == (r.count.total // w) * k
    assert k == math.floor(exact_fraction(s) * w)


# ------------------------------------------------------------------- registry
def test_registered_by_name():
    assert {"deficit", "random", "windowed"} <= set(names("offload"))
    assert set(describe()["offload"]) >= {"deficit", "random", "windowed"}
    r = create("offload", DeficitOffloadConfig(remote_fraction=0.25))
    assert isinstance(r, DeficitRouter) and r.ratio == Fraction(1, 4)
    r = create("offload", RandomOffloadConfig(remote_fraction=0.5, seed=1))
    assert isinstance(r, RandomRouter) and decisions(r, 100) == decisions(RandomRouter(0.5, seed=1), 100)
    r = create("offload", WindowedOffloadConfig(remote_fraction=0.5, window=4))
    assert isinstance(r, WindowedRouter) and decisions(r, 4) == [True, True, False, False]
    assert isinstance(create("offload", DeficitOffloadConfig()), DeficitRouter)  # default s = 1


def test_config_union_validates():
    adapter = TypeAdapter(config_union("offload"))
    cfg = adapter.validate_python({"kind": "windowed", "remote_fraction": 0.3, "window": 20})
    assert isinstance(cfg, WindowedOffloadConfig) and cfg.window == 20
    cfg = adapter.validate_python({"kind": "deficit", "remote_fraction": 0.55})
    assert cfg.remote_fraction == 0.55
    for bad in (
        {"kind": "deficit", "remote_fraction": 1.5},
        {"kind": "deficit", "remote_fraction": -0.1},
        {"kind": "windowed", "window": 0},
        {"kind": "deficit", "seed": 3},  # extra field
        {"kind": "nope"},
    ):
        with pytest.raises(ValidationError):
            adapter.validate_python(bad)

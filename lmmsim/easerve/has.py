"""EAServe's Hybrid Auto Selection (HAS): offline search of ``(alloc, B, s)`` (easerve.txt §3.1).

HAS picks, for a target arrival rate Λ and a GPU budget, the configuration of
an ``e_p_d`` deployment: the GPU allocation ``alloc`` (encoder, prefill and
decode workers and their TP, plus the TP of the local prefill workers on the
encoder GPUs), the encode batch bound ``B`` (``encoder.dispatch.max_batch`` of
the ``poisson_gap`` rule) and the offload ratio ``s``
(``local_prefill.offload.remote_fraction``). Here every "deployment" is a
simulated run of the scenario.

Stage 1 -- profile and prune (analytical)
-----------------------------------------
*Capacities* (requests/s of one worker, saturated), from stress runs of the
scenario's own model, GPU and request mix (:func:`profile_capacities`):

* Every stress run: the scenario's requests arrive at ``STRESS_RATE`` (1000
  req/s: a burst, so the stage under test always has a full queue), on a
  virtual machine with as many GPUs as the run needs (the paper profiles "on
  disjoint GPU subsets"), the front-end router set to ``round_robin`` so
  over-provisioned pools share the load evenly, no local prefill. The stage
  under test has **one** worker; its capacity is its completions per second
  over its busy span, ``N / (last completion - first start)`` of that stage's
  per-request timestamps.
* ``C_E`` (one TP1 encoder): completions = ``encode_finished_at``, start =
  ``encode_started_at``. Encoding never waits for downstream (embedding
  sends queue behind it), so nothing else needs isolating. ``B`` doubles
  (1, 2, 4, ...) until the capacity grows by no more than 5%; ``C_E`` is the
  largest capacity seen (``encode_batch``: its B); the curve (capacity per
  B) and the encoder GPU's busy share of each run (``u_E``: a call's host-side
  time leaves it idle) are kept. Runs hold ``8 B`` requests, at least 64
  (or the trial size if smaller). Text-only requests count in ``N`` (so
  ``C_E`` is "requests of this mix per second"); a mix without media has
  ``C_E = inf``.
* ``C_P(tp)`` (one prefill worker at ``tp``): completions = ``first_token_at``,
  start = ``prefill_started_at``; every request asks for one output token,
  so the (largest-TP) decode worker never pushes back; the encoder pool is
  sized to at least twice ``C_P`` (checked after the run, rerun bigger if not).
* ``C_D(tp)`` (one decode worker at ``tp``): real output lengths, completions
  = ``finished_at``. A burst is a poor stress here: equal output lengths
  finish together and the next wave waits for its KV transfers, and an
  overloaded decode worker thrashes (admitted requests outgrow the KV cache
  and are preempted). So the burst (rate = ``N / (last finish - first
  first token)``) only gives a first estimate ``c0``; then Poisson streams at
  ``c0, 1.4 c0, 1.4^2 c0, ...`` (or down by 1/1.4 when the first falls
  behind) until the worker falls behind (completes under 90% of the stream),
  prefill (the TP with the highest capacity) and encoders sized to 1.25x the
  stream. A stream's rate = completions between the 20% and the 80%
  completion per second; ``C_D`` = the highest rate seen. Runs hold 2x the
  worker's concurrency (KV capacity / tokens per request, at most
  ``max_running``; at most 2000 requests).

Capacities are cached in memory per (profile-relevant scenario keys, stage,
TP or B): a second search of the same scenario reprofiles nothing.

*Allocations* (:func:`enumerate_allocations`): ``n_E >= 1`` TP1 encoders,
``n_P >= 1`` prefill workers at one TP, ``n_D >= 1`` decode workers at one
TP, ``n_E + n_P tp_P + n_D tp_D <= budget``; when the scenario has local
prefill, a local TP dividing ``n_E`` (none divides: no local prefill,
``s = 1``). ``n_P = 0`` (all prefill local) is not offered: the deployment
schema needs a remote prefill worker. A candidate is *feasible* when
:func:`lmmsim.build.build` accepts it (memory fit, head divisibility).

*Loads at Λ* (:func:`stage_loads`): ``load = Λ / capacity`` per stage with
``cap_E = n_E C_E(B_max)`` (the encode curve at the allocation's batch bound
``B_max = ceil(Λ / n_E)``, capped at the saturating B: an encoder whose calls
cost fixed host time serves ~B per call, and Stage 2 never offers a B above
``B_max``), ``cap_P = n_P C_P(tp_P) + n_L α C_P(tp_L)``,
``cap_D = n_D C_D(tp_D)`` (``n_L = n_E / tp_L`` local workers).

*α* (:func:`local_alpha`, our choice; the paper names it without a formula):
the share of a dedicated prefill worker's capacity a local one keeps.
``dynamic``: ``α = 1 - ρ_E max(u_E, x_min)``, where ``ρ_E = min(1, Λ /
cap_E)`` is the encoders' busy fraction, ``u_E`` the fraction of a busy
encoder's time its GPU passes take (measured in the encode profile at the
allocation's ``B_max``; a call's host-side time leaves the SMs idle) and
``x_min`` the smallest SM level (a call holds at least that share throughout)
-- the local worker is counted as losing the encoder's SM share while a call
runs and having the whole GPU between calls. ``none`` (time slicing): ``α = 1
- ρ_E u_E`` (only the GPU passes take the GPU). ``static``:
``α = 1 - static_encoder_share``. HBM-bandwidth interference is ignored.

*Pruning* (:func:`prune`, pure): (1) drop allocations another one dominates
(every stage capacity at least as large, one larger: our addition, it can
never be better); (2) drop those whose most loaded stage exceeds capacity
(``max load > 1``) -- when none is left, keep instead those whose max load is
within the pruning factor of the least loaded one; (3) score = ``max load /
min load`` (bottleneck balance; stages with infinite capacity are left out;
1 = perfectly balanced), keep scores within 1.2x of the best (``rule="score"``;
``rule="bottleneck"`` keeps instead max loads within 1.2x of the best-scored
allocation's, the reading of the paper's §4.3); (4) the top ``K = 3`` by
score (ties: lower max load, then more GPUs).

*Seeds* per kept allocation: ``B_max = ceil(Λ / n_E)``
(:func:`seed_batch_bound`), ``s* = C_remote / (C_remote + C_local)`` with a
±0.2 window clipped to [0, 1] (:func:`seed_offload_window`); without local
prefill ``s = 1``.

Stage 2 -- Bayesian refinement
------------------------------
One Optuna study, TPE sampler seeded with ``seed``. Parameters: ``alloc``
(categorical among the top-K), then conditional ``B@<i>`` in ``[1, B_max]``
and ``s@<i>`` in the window (fixed values are not suggested). The first K
trials are enqueued at each survivor's analytical point ``(B_max, s*)``.
Each trial is a full simulated run at rate Λ (``trial_requests`` requests,
default 200). Objective (:func:`objective_value`): throughput rounded to a
quantum ``q = tie_tolerance x Λ`` (1% of Λ) plus ``q x`` a tie-breaker in
[0, 0.99) that falls with mean TTFT, then mean TPOT, so the sampler ranks
lexicographically. The reported best (:func:`best_index`) is exactly
lexicographic with a tolerance: among trials within 1% of the highest
throughput, the lowest mean TTFT, then the lowest mean TPOT. Stop
(:func:`stop_reason`) when the top-3 throughputs (distinct configurations)
spread less than 1%, or
after 5 consecutive trials without a new best, or at the budget (30); the
two early rules apply only from ``min_trials`` (10) on, so they cannot fire
on the seeds alone (at an under-saturating Λ every good trial reaches Λ).

Baselines under the same budget and trial function: ``random`` (uniform over
every feasible allocation, ``B`` in ``[1, max B_max]``, ``s`` in [0, 1]) and
``coordinate`` (coordinate descent from the scenario's own configuration, or with
``coordinate_start="center"`` from the middle allocation with B = 1, s = 1:
alloc, then B, then s, each a line search over the neighbours ``±r`` in the
allocation order, ``B ± r``, ``2B``, ``B // 2``, ``s ± step``; after a cycle
without a move ``r`` grows by 1 and ``step`` halves; it stops early once
cycles keep finding nothing new). Neither uses Stage 1's profiling (no
profiling cost); both use the same feasibility check (memory fit).

Parallelism and determinism
---------------------------
``jobs = 1``: ``study.optimize`` with a stopping callback, trials in this
process -- the history is a function of (scenario, Λ, seed, budget).
``jobs > 1``: batches of ``jobs`` trials asked from the study (TPE's
constant liar keeps a batch's trials apart), simulated in a process pool,
told back in trial order, stopping rules checked after each batch. The
simulator is deterministic and nothing depends on completion order, so the
history is also a function of (..., jobs) -- reproducible, but different
from the ``jobs = 1`` one (``random`` and ``coordinate`` give the same history
for any ``jobs``). The sweep executors
(:mod:`lmmsim.sweep.executors`) are not reused: they write a results folder
per run, and a trial only needs four numbers back.

A configuration seen before is not simulated again: its trial repeats the
earlier metrics with no simulated cost (``cached``).

Search cost: ``sim_duration_s`` is the simulated time a trial's run lasted;
``cum_sim_cost_s`` adds, per trial, that time plus ``deploy_s`` (starting the
trial's workers: loading weights and warming up, which on real hardware is
most of a trial's "several minutes", easerve.txt §3.1; default
``DEPLOY_S`` = 120 s, our assumption, ``--deploy-cost``), for HAS starting
from the Stage 1 cost: the longest of the three stages' profiling (they run in
parallel on disjoint GPUs), each its runs up to the stage's last completion
plus one deployment per TP it profiles (one for encode).
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import os
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lmmsim.outputs import OutputDir, atomic_path, write_text_atomic
from lmmsim.errors import StuckRunError, UserError

METHODS = ("has", "random", "coordinate")
OPTUNA_HINT = 'needs optuna: pip install "lmmsim[search]"'

DEFAULT_BUDGET = 30
DEFAULT_TRIAL_REQUESTS = 200
DEPLOY_S = 120.0  # seconds to start a trial's workers (weights, warm-up); our assumption, see "Search cost"
PRUNING_FACTOR = 1.2
TOP_K = 3
S_WINDOW = 0.2
SPREAD_TOLERANCE = 0.01  # stop when the top-3 throughputs spread less than this (relative)
PATIENCE = 5  # stop after this many consecutive trials without a new best
MIN_TRIALS = 10  # the two early-stopping rules apply from this many trials on
TIE_TOLERANCE = 0.01  # throughputs within this fraction (of Λ / of the best) are comparable
ENCODE_GROWTH = 0.05  # B doubles while the encode capacity grows by more than this
MAX_PROFILE_BATCH = 256
STRESS_RATE = 1000.0  # req/s of the profiling stress runs (a burst)
TP_CHOICES = (1, 2, 4)
TTFT_REF_S = 1.0  # tie-breaker scales (objective_value)
TPOT_REF_S = 0.05


# ------------------------------------------------------------------ allocations
@dataclass(frozen=True, order=True)
class Allocation:
    """GPU allocation: ``n_e`` TP1 encoders, ``n_p`` prefill workers at ``tp_p``,
    ``n_d`` decode workers at ``tp_d``; ``local_tp``: local prefill workers of that
    TP on the encoder GPUs (``n_e / local_tp`` of them), or None."""

    n_e: int
    n_p: int
    tp_p: int
    n_d: int
    tp_d: int
    local_tp: int | None = None

    @property
    def gpus(self) -> int:
        return self.n_e + self.n_p * self.tp_p + self.n_d * self.tp_d

    @property
    def n_local(self) -> int:
        return self.n_e // self.local_tp if self.local_tp else 0

    @property
    def label(self) -> str:
        text = f"E{self.n_e}-P{self.n_p}x{self.tp_p}-D{self.n_d}x{self.tp_d}"
        return text + (f"-L{self.n_local}x{self.local_tp}" if self.local_tp else "")

    def sort_key(self) -> tuple:
        return (self.n_e, self.n_p * self.tp_p, self.n_d * self.tp_d, self.tp_p, self.tp_d, self.local_tp or 0)


def enumerate_allocations(budget: int, prefill_tps: Iterable[int], decode_tps: Iterable[int],
                          local_tps: Iterable[int] | None = None) -> list[Allocation]:
    """Every allocation within ``budget`` GPUs (see the module docstring), in
    :meth:`Allocation.sort_key` order. ``local_tps`` None: no local prefill."""
    prefill_tps, decode_tps = sorted(set(prefill_tps)), sorted(set(decode_tps))
    local_tps = None if local_tps is None else sorted(set(local_tps))
    out = []
    for n_e in range(1, budget + 1):
        for tp_p in prefill_tps:
            for n_p in range(1, (budget - n_e) // tp_p + 1):
                left = budget - n_e - n_p * tp_p
                for tp_d in decode_tps:
                    for n_d in range(1, left // tp_d + 1):
                        dividing = [t for t in (local_tps or []) if n_e % t == 0]
                        for lt in dividing or [None]:
                            out.append(Allocation(n_e, n_p, tp_p, n_d, tp_d, lt))
    return sorted(out, key=Allocation.sort_key)


# ------------------------------------------------------------------- Stage 1 math
@dataclass
class Capacities:
    """Per-worker saturated capacities in requests/s: ``encode`` (one TP1 encoder,
    at batch bound ``encode_batch``), ``prefill[tp]``, ``decode[tp]``."""

    encode: float
    prefill: dict[int, float]
    decode: dict[int, float]
    encode_batch: int | None = None
    encode_curve: dict[int, float] = field(default_factory=dict)
    # GPU-busy fraction of a saturated encoder per B (its calls' host time leaves the GPU
    # idle); missing: 1 (every second of a call on the GPU).
    encode_gpu_share: dict[int, float] = field(default_factory=dict)

    def encode_at(self, batch_bound: int) -> float:
        """One encoder's capacity when its batches hold at most ``batch_bound`` requests:
        the profiled curve at ``min(batch_bound, encode_batch)``, linear between the
        profiled (power-of-two) bounds; no curve: ``encode``."""
        return self._on_curve(self.encode_curve, batch_bound, self.encode)

    def gpu_share_at(self, batch_bound: int) -> float:
        """The GPU-busy fraction of a saturated encoder at that bound (1 if not profiled)."""
        return self._on_curve(self.encode_gpu_share, batch_bound, 1.0)

    def _on_curve(self, curve: dict[int, float], batch_bound: int, default: float) -> float:
        if not curve:
            return default
        points = sorted(curve.items())
        b = min(batch_bound, self.encode_batch or points[-1][0])
        lower = [(bb, c) for bb, c in points if bb <= b]
        upper = [(bb, c) for bb, c in points if bb >= b]
        if not lower:
            return points[0][1]
        (b0, c0), (b1, c1) = lower[-1], (upper[0] if upper else lower[-1])
        if b1 == b0 or math.isinf(c0) or math.isinf(c1):
            return c0
        return c0 + (c1 - c0) * (b - b0) / (b1 - b0)

    def to_json(self) -> dict:
        return {"encode_rps": _finite(self.encode), "encode_batch": self.encode_batch,
                "encode_curve_rps": {str(b): c for b, c in self.encode_curve.items()},
                "encode_gpu_share": {str(b): u for b, u in self.encode_gpu_share.items()},
                "prefill_rps": {str(t): c for t, c in sorted(self.prefill.items())},
                "decode_rps": {str(t): c for t, c in sorted(self.decode.items())}}


@dataclass(frozen=True)
class LocalSettings:
    """What :func:`local_alpha` needs of the scenario's ``local_prefill``."""

    sm_partitioning: str = "dynamic"
    static_encoder_share: float = 0.5
    min_sm_share: float = 0.0  # dynamic: the smallest SM level an encoder call holds


def local_alpha(rate: float, encode_capacity: float, local: LocalSettings = LocalSettings(),
                gpu_share: float = 1.0) -> float:
    """α: the share of a dedicated prefill worker's capacity a local prefill worker
    keeps, given the encoder pool's capacity ``encode_capacity`` (``n_E C_E``) and the
    fraction ``gpu_share`` of a busy encoder's time that its GPU passes take (the rest,
    host-side call time, leaves the GPU to local prefill)."""
    if local.sm_partitioning == "static":
        return 1.0 - local.static_encoder_share
    busy = 0.0 if math.isinf(encode_capacity) else min(1.0, rate / encode_capacity)
    if local.sm_partitioning == "none":  # time slicing: only the passes take the GPU
        return max(0.0, 1.0 - busy * gpu_share)
    return max(0.0, 1.0 - busy * max(gpu_share, local.min_sm_share))


def encode_pool_capacity(alloc: Allocation, caps: Capacities, rate: float) -> float:
    """``n_E C_E`` with each encoder's batches bounded by the allocation's ``B_max``
    (our reading: a saturation capacity at a batch the search never offers would
    hide encoders that are too few; the curve is what the paper's doubling records)."""
    return alloc.n_e * caps.encode_at(seed_batch_bound(rate, alloc.n_e))


def prefill_capacities(alloc: Allocation, caps: Capacities, rate: float,
                       local: LocalSettings = LocalSettings()) -> tuple[float, float]:
    """``(C_remote, C_local)`` of an allocation: ``n_P C_P(tp_P)`` and ``n_L α C_P(tp_L)``."""
    remote = alloc.n_p * caps.prefill[alloc.tp_p]
    if not alloc.local_tp:
        return remote, 0.0
    alpha = local_alpha(rate, encode_pool_capacity(alloc, caps, rate), local,
                        caps.gpu_share_at(seed_batch_bound(rate, alloc.n_e)))
    return remote, alloc.n_local * alpha * caps.prefill[alloc.local_tp]


def stage_capacities(alloc: Allocation, caps: Capacities, rate: float,
                     local: LocalSettings = LocalSettings()) -> dict[str, float]:
    remote, loc = prefill_capacities(alloc, caps, rate, local)
    return {"encode": encode_pool_capacity(alloc, caps, rate), "prefill": remote + loc, "decode": alloc.n_d * caps.decode[alloc.tp_d]}


def stage_loads(alloc: Allocation, caps: Capacities, rate: float,
                local: LocalSettings = LocalSettings()) -> dict[str, float]:
    """``Λ / stage capacity`` per stage (0 for a stage of infinite capacity)."""
    return {k: (0.0 if math.isinf(c) else (math.inf if c <= 0 else rate / c))
            for k, c in stage_capacities(alloc, caps, rate, local).items()}


def balance_score(loads: dict[str, float]) -> float:
    """Bottleneck balance: most over least loaded stage (>= 1; 1 = balanced). Stages
    with no load (infinite capacity) are left out."""
    busy = [v for v in loads.values() if v > 0]
    if not busy:
        return 1.0
    return max(busy) / min(busy)


def seed_batch_bound(rate: float, n_e: int) -> int:
    """``B_max = ceil(Λ / n_E)`` (at least 1)."""
    return max(1, math.ceil(rate / n_e - 1e-9))


def seed_offload_window(c_remote: float, c_local: float, half_width: float = S_WINDOW) -> tuple[float, float, float]:
    """``(s*, low, high)``: ``s* = C_remote / (C_remote + C_local)``, window ``s* ± half_width``
    clipped to [0, 1]; no local capacity: ``(1, 1, 1)``."""
    if c_local <= 0:
        return 1.0, 1.0, 1.0
    star = c_remote / (c_remote + c_local)
    return star, max(0.0, star - half_width), min(1.0, star + half_width)


@dataclass
class Candidate:
    """An allocation with its Stage 1 numbers."""

    alloc: Allocation
    loads: dict[str, float]
    score: float
    max_load: float
    b_max: int
    s_star: float
    s_low: float
    s_high: float

    def to_json(self) -> dict:
        return {"alloc": self.alloc.label, **asdict(self.alloc), "gpus": self.alloc.gpus,
                "loads": {k: _finite(v) for k, v in self.loads.items()}, "score": _finite(self.score),
                "max_load": _finite(self.max_load), "b_max": self.b_max,
                "s_star": self.s_star, "s_window": [self.s_low, self.s_high]}


@dataclass
class PruneResult:
    feasible: list[Candidate]  # every allocation given, scored
    undominated: list[Candidate]
    within_capacity: list[Candidate]  # after the capacity filter (or its fallback)
    capacity_fallback: bool  # no allocation had max load <= 1
    within_factor: list[Candidate]  # score within the pruning factor of the best
    kept: list[Candidate]  # the top K

    def to_json(self) -> dict:
        return {"feasible": len(self.feasible), "undominated": len(self.undominated),
                "within_capacity": len(self.within_capacity), "capacity_fallback": self.capacity_fallback,
                "within_factor": len(self.within_factor), "kept": len(self.kept),
                "kept_allocations": [c.to_json() for c in self.kept],
                "all_allocations": [c.to_json() for c in self.feasible]}


def score_allocation(alloc: Allocation, caps: Capacities, rate: float,
                     local: LocalSettings = LocalSettings(), s_half_width: float = S_WINDOW) -> Candidate:
    loads = stage_loads(alloc, caps, rate, local)
    remote, loc = prefill_capacities(alloc, caps, rate, local)
    star, lo, hi = seed_offload_window(remote, loc, s_half_width)
    return Candidate(alloc, loads, balance_score(loads), max(loads.values()), seed_batch_bound(rate, alloc.n_e),
                     star, lo, hi)


def _dominates(a: dict[str, float], b: dict[str, float]) -> bool:
    return all(a[k] >= b[k] for k in a) and any(a[k] > b[k] for k in a)


PRUNE_RULES = ("score", "bottleneck")


def prune(allocs: Sequence[Allocation], caps: Capacities, rate: float, *, local: LocalSettings = LocalSettings(),
          factor: float = PRUNING_FACTOR, top_k: int = TOP_K, drop_dominated: bool = True,
          s_half_width: float = S_WINDOW, rule: str = "score") -> PruneResult:
    """Stage 1's pruning (module docstring); pure: capacities in, candidates out.

    ``rule``: what the pruning factor compares. ``score`` (default): keep balance
    scores within ``factor`` of the best score. ``bottleneck`` (the paper's §4.3
    wording, "a bottleneck stage at least 20% more loaded than the best-balanced
    candidate"): keep max loads within ``factor`` of the best-scored candidate's."""
    if rule not in PRUNE_RULES:
        raise UserError("search", f"unknown pruning rule {rule!r}; valid: {', '.join(PRUNE_RULES)}")
    if not allocs:
        raise UserError("search", "no feasible allocation to prune")
    scored = [score_allocation(a, caps, rate, local, s_half_width) for a in allocs]
    undominated = scored
    if drop_dominated:
        capsets = [stage_capacities(c.alloc, caps, rate, local) for c in scored]
        undominated = [c for c, mine in zip(scored, capsets) if not any(_dominates(o, mine) for o in capsets)]
    within = [c for c in undominated if c.max_load <= 1.0]
    fallback = not within
    if fallback:  # every allocation is over capacity: keep the least loaded ones
        least = min(c.max_load for c in undominated)
        within = [c for c in undominated if c.max_load <= factor * least + 1e-12]
    ranked = sorted(within, key=lambda c: (c.score, c.max_load, -c.alloc.gpus, c.alloc.sort_key()))
    if rule == "score":
        near = [c for c in ranked if c.score <= factor * ranked[0].score + 1e-12]
    else:
        near = [c for c in ranked if c.max_load <= factor * ranked[0].max_load + 1e-12]
    return PruneResult(scored, undominated, within, fallback, near, near[:top_k])


# ------------------------------------------------------------------ ranking
def objective_value(throughput: float, ttft: float | None, tpot: float | None, quantum: float) -> float:
    """Scalar for TPE: throughput rounded to ``quantum``, plus ``quantum x`` a
    tie-breaker in [0, 0.99) falling with mean TTFT (weight 0.9) and mean TPOT (0.09)."""
    if throughput is None or not math.isfinite(throughput):
        return -1.0
    ttft = math.inf if ttft is None or not math.isfinite(ttft) else ttft
    tpot = math.inf if tpot is None or not math.isfinite(tpot) else tpot
    tie = 0.9 / (1.0 + ttft / TTFT_REF_S) + 0.09 / (1.0 + tpot / TPOT_REF_S)
    return round(throughput / quantum) * quantum + quantum * tie


def _metric(row: dict, key: str) -> float:
    v = row.get(key)
    return math.inf if v is None or not math.isfinite(v) else v


def best_index(rows: Sequence[dict], tolerance: float = TIE_TOLERANCE) -> int | None:
    """Index of the best row: among rows within ``tolerance`` (relative) of the highest
    throughput, the lowest mean TTFT, then mean TPOT, then the earliest."""
    ok = [(i, r) for i, r in enumerate(rows) if r.get("status") == "ok" and r.get("throughput_rps") is not None]
    if not ok:
        return None
    top = max(r["throughput_rps"] for _, r in ok)
    near = [(i, r) for i, r in ok if r["throughput_rps"] >= top * (1 - tolerance) - 1e-12]
    return min(near, key=lambda p: (_metric(p[1], "ttft_mean_s"), _metric(p[1], "tpot_mean_s"), p[0]))[0]


def stop_reason(rows: Sequence[dict], *, min_trials: int = MIN_TRIALS, spread: float = SPREAD_TOLERANCE,
                patience: int = PATIENCE, tolerance: float = TIE_TOLERANCE) -> str | None:
    """Why HAS stops after ``rows`` (None: go on): the top-3 throughputs of distinct
    configurations spread less than ``spread``, or ``patience`` trials in a row brought
    no new best (:func:`best_index`); neither before ``min_trials``. Budget is the caller's."""
    if len(rows) < max(3, min_trials):
        return None
    distinct = {}  # a configuration tried twice counts once
    for i, r in enumerate(rows):
        if r.get("status") == "ok":
            distinct.setdefault((r.get("alloc", i), r.get("batch_bound"), r.get("offload_s")), r["throughput_rps"])
    thr = sorted(distinct.values(), reverse=True)
    if len(thr) >= 3 and thr[0] > 0 and (thr[0] - thr[2]) / thr[0] < spread:
        return f"top-3 throughput spread below {spread:.0%}"
    bests = [best_index(rows[:n + 1], tolerance) for n in range(len(rows))]
    last_improvement = max((n for n in range(len(rows)) if bests[n] == n), default=-1)
    if len(rows) - 1 - last_improvement >= patience:
        return f"{patience} consecutive trials without improvement"
    return None


# ------------------------------------------------------------------ the problem
@dataclass(frozen=True)
class Config:
    alloc: Allocation
    batch_bound: int
    offload_s: float

    def key(self) -> tuple:
        return (self.alloc, self.batch_bound, round(self.offload_s, 6))


def _finite(x):
    return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else x


def read_raw(path: str | Path, overrides: Sequence[str] = ()) -> tuple[dict, object, Path]:
    """The scenario file as a mapping (``--set`` applied), its validated form and base dir."""
    from lmmsim.scenario import apply_override, load_scenario

    scn, base_dir = load_scenario(path, list(overrides))  # all user errors reported here
    raw = yaml.safe_load(Path(path).read_text()) or {}
    for assignment in overrides:
        apply_override(raw, assignment)
    return raw, scn, base_dir


class Problem:
    """The scenario being tuned: turns configurations into scenario mappings, checks
    feasibility, and knows the workload shape and local-prefill settings."""

    def __init__(self, raw: dict, scn, base_dir: Path, rate: float | None = None,
                 trial_requests: int | None = DEFAULT_TRIAL_REQUESTS, deploy_s: float = DEPLOY_S):
        from lmmsim.systems import get_system

        if scn.deployment.kind != "e_p_d":
            raise UserError("deployment.kind", f"search tunes an e_p_d deployment (EAServe's E+P+D); "
                                               f"got {scn.deployment.kind!r}")
        arrival = scn.workload.arrival
        if not hasattr(arrival, "rate"):
            raise UserError("workload.arrival", "search needs an arrival process with a rate "
                                                "(poisson, gamma or deterministic), not a trace")
        if rate is not None and not (rate > 0 and math.isfinite(rate)):
            raise UserError("--rate", f"must be a positive number of requests/s (got {rate})")
        if trial_requests is not None and trial_requests < 1:
            raise UserError("--trial-requests", f"must be >= 1 (got {trial_requests})")
        if not (deploy_s >= 0 and math.isfinite(deploy_s)):
            raise UserError("--deploy-cost", f"must be >= 0 seconds (got {deploy_s})")
        self.deploy_s = float(deploy_s)
        self.raw = copy.deepcopy(raw)
        self.scn = scn
        self.base_dir = Path(base_dir)
        self.rate = float(rate if rate is not None else arrival.rate)
        self.trial_requests = trial_requests
        self.budget = scn.hardware.count
        dep = scn.deployment
        self.has_local = dep.local_prefill is not None
        lp = dep.local_prefill
        self.local = (LocalSettings(lp.sm_partitioning, lp.static_encoder_share, min(lp.sm_levels)) if lp is not None
                      else LocalSettings())
        self.preset_dep = get_system(scn.system).defaults_for(scn.hardware.count).get("deployment", {}) or {}
        disp = dep.encoder.dispatch
        self.base_dispatch = {"kind": "poisson_gap"}
        if disp.kind == "poisson_gap":  # keep its other settings (non-default ones only)
            self.base_dispatch.update(disp.model_dump(mode="json", exclude_defaults=True))
        self.base_local = None
        if lp is not None:
            self.base_local = {"tp": lp.tp, **lp.model_dump(mode="json", exclude_defaults=True)}
            self.base_local["offload"] = {"kind": lp.offload.kind,
                                          **lp.offload.model_dump(mode="json", exclude_defaults=True)}
            self.base_local["sm_partitioning"] = lp.sm_partitioning
        self._feasible: dict[Allocation, str | None] = {}

    # ------------------------------------------------------------ scenario mappings
    def _unset(self, dep: dict, pool: str | None, key: str) -> None:
        """Remove ``key`` (of ``pool``) so the preset's value does not come back."""
        holder = dep if pool is None else dep.setdefault(pool, {})
        preset = self.preset_dep if pool is None else (self.preset_dep.get(pool) or {})
        if isinstance(preset, dict) and key in preset:
            holder[key] = None
        else:
            holder.pop(key, None)

    def deployment(self, config: Config) -> dict:
        """The scenario's ``deployment`` mapping with ``config`` applied."""
        a = config.alloc
        dep = copy.deepcopy(self.raw.get("deployment") or {})
        dep["kind"] = "e_p_d"
        enc = dict(dep.get("encoder") or {})
        enc.update(workers=a.n_e, tp=1)
        dep["encoder"] = enc
        self._unset(dep, "encoder", "gpu_ids")
        disp = copy.deepcopy(self.base_dispatch)
        disp.update(kind="poisson_gap", max_batch=int(config.batch_bound))
        enc["dispatch"] = disp
        for pool, n, tp in (("prefill", a.n_p, a.tp_p), ("decode", a.n_d, a.tp_d)):
            spec = dict(dep.get(pool) or {})
            spec.update(workers=n, tp=tp)
            if "pp" in spec:
                spec["pp"] = 1
            dep[pool] = spec
            self._unset(dep, pool, "gpu_ids")
        if a.local_tp:
            local = copy.deepcopy(self.base_local) or {}
            local["tp"] = a.local_tp
            local["offload"] = {**local.get("offload", {"kind": "deficit"}), "remote_fraction": float(config.offload_s)}
            dep["local_prefill"] = local
            self._unset(dep, None, "gpu_sharing")
        elif self.has_local or "local_prefill" in dep:
            dep["local_prefill"] = None
        return dep

    def scenario_raw(self, config: Config, *, num_requests: int | None = None, rate: float | None = None) -> dict:
        """A full scenario mapping for one trial (``num_requests`` None: ``trial_requests``)."""
        raw = copy.deepcopy(self.raw)
        raw["deployment"] = self.deployment(config)
        wl = raw.setdefault("workload", {})
        n = num_requests if num_requests is not None else self.trial_requests
        if n is not None:
            wl["num_requests"] = int(n)
            wl.pop("duration_s", None)
        arrival = dict(wl.get("arrival") or {})
        arrival["rate"] = float(rate if rate is not None else self.rate)
        wl["arrival"] = arrival
        return raw

    def best_scenario(self, config: Config) -> dict:
        """The original scenario (workload untouched) with the chosen deployment."""
        raw = copy.deepcopy(self.raw)
        raw["deployment"] = self.deployment(config)
        return raw

    def validated(self, raw: dict):
        from lmmsim.scenario import validate_scenario

        return validate_scenario(raw)

    def check(self, raw: dict) -> str | None:
        """None when the scenario builds, else the one-line reason."""
        from lmmsim.build import build

        try:
            build(self.validated(raw), self.base_dir)
        except UserError as exc:
            return str(exc)
        return None

    def feasible(self, alloc: Allocation) -> str | None:
        if alloc not in self._feasible:
            cfg = Config(alloc, 1, 0.5 if alloc.local_tp else 1.0)
            self._feasible[alloc] = self.check(self.scenario_raw(cfg, num_requests=1))
        return self._feasible[alloc]

    def default_config(self) -> Config:
        """The scenario's own configuration (its allocation may not be a candidate)."""
        dep = self.scn.deployment
        lp = dep.local_prefill
        alloc = Allocation(dep.encoder.workers, dep.prefill.workers, dep.prefill.tp * dep.prefill.pp,
                           dep.decode.workers, dep.decode.tp * dep.decode.pp, lp.tp if lp is not None else None)
        disp = dep.encoder.dispatch
        b = getattr(disp, "max_batch", 1)
        s = lp.offload.remote_fraction if lp is not None else 1.0
        return Config(alloc, int(b), float(s))

    def profile_key(self) -> str:
        """What capacities depend on: model, GPU, links, cost model, workload shape, policy, dispatch."""
        keep = {k: self.raw.get(k) for k in ("model", "hardware", "policy", "seed", "system")}
        keep["hardware"] = {k: v for k, v in (keep["hardware"] or {}).items() if k != "count"}
        wl = copy.deepcopy(self.raw.get("workload") or {})
        wl.pop("arrival", None)
        wl.pop("num_requests", None)
        wl.pop("duration_s", None)
        keep["workload"] = wl
        keep["max_model_len"] = (self.raw.get("deployment") or {}).get("max_model_len")
        keep["dispatch"] = self.base_dispatch
        return hashlib.sha256(json.dumps(keep, sort_keys=True, default=str).encode()).hexdigest()


# ------------------------------------------------------------------ simulation
def simulate(task: tuple[dict, str]) -> dict:
    """Run one scenario mapping; a picklable worker function. Never raises on a
    user error: returns ``status: failed`` and its message."""
    from lmmsim.results import run_scenario
    from lmmsim.scenario import validate_scenario

    raw, base_dir = task
    start = time.perf_counter()
    try:
        run = run_scenario(validate_scenario(raw), Path(base_dir))
    except (UserError, StuckRunError) as exc:  # an infeasible or deadlocked trial scores nothing
        return {"status": "failed", "error": str(exc), "throughput_rps": 0.0, "ttft_mean_s": None,
                "tpot_mean_s": None, "num_finished": 0, "sim_duration_s": 0.0,
                "wall_s": time.perf_counter() - start}
    s = run.summary
    return {"status": "ok", "error": None, "throughput_rps": s["throughput"]["requests_per_s"] or 0.0,
            "ttft_mean_s": s["ttft_s"]["mean"], "tpot_mean_s": s["tpot_s"]["mean"],
            "num_finished": s["num_finished"], "sim_duration_s": s["sim_end_at_s"],
            "wall_s": time.perf_counter() - start}


def _profile_run(raw: dict, base_dir: Path):
    from lmmsim.results import run_scenario
    from lmmsim.scenario import validate_scenario

    return run_scenario(validate_scenario(raw), base_dir)


class Evaluator:
    """Simulates trial configurations, in this process (``jobs = 1``) or a process pool,
    results in submission order; a configuration seen before is answered from memory."""

    def __init__(self, problem: Problem, jobs: int = 1, executor: str = "local", address: str | None = None):
        if jobs < 1:
            raise UserError("--jobs", f"must be >= 1 (got {jobs})")
        if executor not in ("local", "dask"):
            raise UserError("--executor", f"unknown executor {executor!r}; valid: 'dask', 'local'")
        self.problem = problem
        self.jobs = jobs
        self.cache: dict[tuple, dict] = {}
        self._pool: ProcessPoolExecutor | None = None
        # dask: trials run on the cluster at ``address`` (or a local one of ``jobs`` workers)
        self.executor = executor
        self.address = address
        self._dask = None  # the open client context

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None
        if self._dask is not None:
            self._dask.__exit__(None, None, None)
            self._dask = None

    def run(self, configs: Sequence[Config]) -> list[tuple[dict, bool]]:
        """``(metrics, cached)`` per configuration."""
        todo: dict[tuple, Config] = {}
        for c in configs:
            if c.key() not in self.cache:
                todo.setdefault(c.key(), c)
        tasks = [(self.problem.scenario_raw(c), str(self.problem.base_dir)) for c in todo.values()]
        if tasks and self.executor == "dask":
            if self._dask is None:
                from lmmsim.sweep.executors import dask_client

                self._dask = dask_client(self.jobs, self.address)
                self._client = self._dask.__enter__()
            results = self._client.gather(self._client.map(simulate, tasks, pure=False))
        elif len(tasks) > 1 and self.jobs > 1:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(max_workers=self.jobs)
            results = list(self._pool.map(simulate, tasks))
        else:
            results = [simulate(t) for t in tasks]
        fresh = set()
        for key, res in zip(todo, results):
            self.cache[key] = res
            fresh.add(key)
        out = []
        for c in configs:
            cached = c.key() not in fresh
            fresh.discard(c.key())  # a duplicate inside one batch is cached after its first
            out.append((self.cache[c.key()], cached))
        return out


# ------------------------------------------------------------------ Stage 1: profiling
_CAPACITY_CACHE: dict[tuple, Any] = {}


@dataclass
class ProfileRun:
    stage: str
    setting: int  # B for encode, TP otherwise
    setup: str  # the profiling allocation's label
    requests: int
    capacity_rps: float
    sim_duration_s: float
    wall_s: float
    arrival_rps: float = STRESS_RATE
    cached: bool = False
    gpu_busy_fraction: float = 1.0


def _span_rate(df, start_col: str, end_col: str) -> float:
    starts, ends = df[start_col].dropna(), df[end_col].dropna()
    if ends.empty:
        return math.inf
    span = float(ends.max() - starts.min())
    return len(df) / span if span > 0 else math.inf


def _window_rate(df, end_col: str, low: float = 0.2, high: float = 0.8) -> float:
    """Completions per second between the ``low`` and ``high`` quantiles of the completions."""
    ends = df[end_col].dropna().sort_values().to_numpy()
    k1, k2 = int(low * len(ends)), math.ceil(high * len(ends)) - 1
    if k2 <= k1 or ends[k2] <= ends[k1]:
        return math.inf
    return (k2 - k1) / float(ends[k2] - ends[k1])


def _stress_raw(problem: Problem, alloc: Allocation, batch: int, n: int, *, one_token: bool,
                rate: float = STRESS_RATE) -> dict:
    raw = problem.scenario_raw(Config(alloc, batch, 1.0), num_requests=n, rate=rate)
    raw["hardware"] = {**raw["hardware"], "count": alloc.gpus}
    policy = dict(raw.get("policy") or {})
    policy["router"] = {"kind": "round_robin"}
    raw["policy"] = policy
    wl = raw["workload"]
    wl["arrival"] = {"kind": "poisson", "rate": float(rate)}
    if one_token:
        wl["output_tokens"] = {"kind": "fixed", "value": 1}
        for cls in wl.get("mix") or []:
            if isinstance(cls, dict) and cls.get("output_tokens") is not None:
                cls["output_tokens"] = {"kind": "fixed", "value": 1}
    return raw


def usable_tps(problem: Problem, tp_choices: Sequence[int] = TP_CHOICES) -> dict[str, list[int]]:
    """The TPs (within the GPU budget) each role can use: a worker at that TP builds (memory,
    heads) while the other role runs at the largest TP."""
    tps = sorted(t for t in set(tp_choices) if 1 <= t <= problem.budget)
    if not tps:
        raise UserError("search", f"no TP in {list(tp_choices)} fits a budget of {problem.budget} GPUs")
    big = max(tps)
    out: dict[str, list[int]] = {"prefill": [], "decode": []}
    for tp in tps:
        for role, alloc in (("prefill", Allocation(1, 1, tp, 1, big)), ("decode", Allocation(1, 1, big, 1, tp))):
            if problem.check(_stress_raw(problem, alloc, 1, 1, one_token=False)) is None:
                out[role].append(tp)
    if not out["prefill"] or not out["decode"]:
        why = problem.check(_stress_raw(problem, Allocation(1, 1, big, 1, big), 1, 1, one_token=False))
        raise UserError("search", f"no prefill/decode TP in {tps} fits {problem.scn.model} on "
                                  f"{problem.scn.hardware.gpu}: {why}")
    return out


def _decode_concurrency(problem: Problem, alloc: Allocation, max_running: int) -> int:
    """Requests one decode worker holds at once: KV capacity / tokens per request (no simulation)."""
    from lmmsim.build import build

    raw = _stress_raw(problem, alloc, 1, 64, one_token=False)
    built = build(problem.validated(raw), problem.base_dir)
    kv = built.memory["decode"].kv_capacity_tokens
    reqs = built.requests
    per = sum(r.num_prompt_tokens + r.num_output_tokens for r in reqs) / max(len(reqs), 1)
    return max(1, min(max_running, int(kv // max(per, 1))))


def profile_capacities(problem: Problem, *, tp_choices: Sequence[int] = TP_CHOICES,
                       requests: int | None = None, log: Callable[[str], None] = lambda m: None
                       ) -> tuple[Capacities, list[ProfileRun], dict[str, list[int]]]:
    """Stage 1 profiling (module docstring). Returns the capacities, the runs made and
    the TPs each role can use (``{"prefill": [...], "decode": [...]}``)."""
    n0 = max(requests or problem.trial_requests or DEFAULT_TRIAL_REQUESTS, 32)
    key = problem.profile_key()
    runs: list[ProfileRun] = []
    tps = tp_choices

    def stress(stage, setting, alloc, batch, n, one_token, start_col, end_col, rate_in=STRESS_RATE):
        ck = (key, stage, setting, alloc, batch, n, round(rate_in, 6))
        if ck in _CAPACITY_CACHE:
            rec = _CAPACITY_CACHE[ck]
            runs.append(ProfileRun(**{**asdict(rec), "cached": True}))
            return rec.capacity_rps
        raw = _stress_raw(problem, alloc, batch, n, one_token=one_token, rate=rate_in)
        t0 = time.perf_counter()
        run = _profile_run(raw, problem.base_dir)
        if rate_in >= STRESS_RATE:
            rate = _span_rate(run.requests, start_col, end_col)
        else:
            rate = _window_rate(run.requests, end_col)
        # A stage profile stops once the stage under test is done (a real one runs that
        # stage alone): its cost is the time to the stage's last completion.
        ends = run.requests[end_col].dropna()
        # The first GPU's busy time over the stage's span (encode: the encoder's GPU
        # passes, without its host-side call time).
        span = float(ends.max() - run.requests[start_col].min()) if len(ends) else 0.0
        busy = run.summary["gpu_utilization"]["per_gpu"][0] * (run.summary["window_s"] or 0.0)
        rec = ProfileRun(stage, setting, alloc.label, n, rate, float(ends.max()) if len(ends) else 0.0,
                         time.perf_counter() - t0, arrival_rps=rate_in,
                         gpu_busy_fraction=min(1.0, busy / span) if span > 0 else 1.0)
        _CAPACITY_CACHE[ck] = rec
        runs.append(rec)
        return rate

    role_tps = usable_tps(problem, tps)
    p_big, d_big = max(role_tps["prefill"]), max(role_tps["decode"])

    # Encode: double B until the capacity stops growing by more than 5%.
    curve: dict[int, float] = {}
    gpu_share: dict[int, float] = {}
    b, prev = 1, None
    while True:
        n = max(min(n0, 64), 8 * b)
        c = stress("encode", b, Allocation(1, 1, p_big, 1, d_big), b, n, True,
                      "encode_started_at", "encode_finished_at")
        curve[b] = c
        gpu_share[b] = runs[-1].gpu_busy_fraction
        log(f"  encode B={b}: {c:.2f} req/s")
        if math.isinf(c) or (prev is not None and c <= prev * (1 + ENCODE_GROWTH)) or b >= MAX_PROFILE_BATCH:
            break
        prev, b = c, b * 2
    c_e = max(curve.values())
    b_sat = min(bb for bb, v in curve.items() if v == c_e)

    def encoders_for(rate: float) -> int:
        return 1 if math.isinf(c_e) else max(1, math.ceil(2 * rate / c_e))

    # Prefill: one worker per TP; encoders >= 2x its capacity; one output token.
    c_p: dict[int, float] = {}
    for tp in role_tps["prefill"]:
        n_e, c = 1, None
        for _ in range(4):
            c = stress("prefill", tp, Allocation(n_e, 1, tp, 1, d_big), b_sat, n0, True,
                          "prefill_started_at", "first_token_at")
            if encoders_for(c) <= n_e:
                break
            n_e = encoders_for(c)
        c_p[tp] = c
        log(f"  prefill TP{tp}: {c:.3f} req/s")

    # Decode: one worker per TP, >= 4x its concurrency in requests. A burst
    # synchronises the batch (equal output lengths finish together, then wait for the
    # next wave's KV transfers) and an overloaded decode worker thrashes (admitted
    # requests outgrow the KV cache and are preempted), so both under-estimate. The
    # burst gives a first estimate c0; then Poisson streams at c0, 1.4 c0, ... (prefill
    # and encoders sized to 1.25x the stream) until the worker falls behind (completes
    # < 90% of the stream). Each run's rate = completions between the 20% and 80%
    # completions per second; C_D = the highest rate seen.
    tp_up = max(c_p, key=lambda t: (c_p[t], -t))
    max_running = getattr(problem.scn.policy.batching, "max_running", 256)
    c_d: dict[int, float] = {}
    for tp in role_tps["decode"]:
        n = max(n0, min(2 * _decode_concurrency(problem, Allocation(1, 1, tp_up, 1, tp), max_running), 2000))
        c = stress("decode", tp, Allocation(1, 2, tp_up, 1, tp), b_sat, n, False, "first_token_at", "finished_at")
        best, rate_in, step = c, c, None
        for _ in range(6):
            up = Allocation(encoders_for(rate_in), max(1, math.ceil(1.25 * rate_in / c_p[tp_up])), tp_up, 1, tp)
            c = stress("decode", tp, up, b_sat, n, False, "first_token_at", "finished_at", rate_in=rate_in)
            best = max(best, c)
            kept_up = c >= 0.9 * rate_in
            if step is None:  # the first stream says which way to go
                step = 1.4 if kept_up else 1 / 1.4
            elif kept_up != (step > 1):  # fell behind going up, or kept up going down
                break
            rate_in *= step
        c = best
        c_d[tp] = c
        log(f"  decode TP{tp}: {c:.3f} req/s")
    return Capacities(c_e, c_p, c_d, b_sat, curve, gpu_share), runs, role_tps


def stage1_cost(runs: Sequence[ProfileRun], deploy_s: float = 0.0) -> float:
    """Simulated profiling time: the three stages run in parallel on disjoint GPUs, each
    the sum of its runs plus ``deploy_s`` per deployment it needs (one for encode, whose
    B changes at run time; one per TP for prefill and decode). A run answered from the
    in-memory cache still counts: the cost belongs to the method."""
    per: dict[str, float] = {}
    deployments: dict[str, set] = {}
    for r in runs:
        per[r.stage] = per.get(r.stage, 0.0) + r.sim_duration_s
        deployments.setdefault(r.stage, set()).add(None if r.stage == "encode" else r.setting)
    return max((per[k] + deploy_s * len(deployments[k]) for k in per), default=0.0)


# ------------------------------------------------------------------ search driver
HISTORY_COLUMNS = ["trial", "method", "alloc", "n_e", "n_p", "tp_p", "n_d", "tp_d", "local_tp", "batch_bound",
                   "offload_s", "throughput_rps", "ttft_mean_s", "tpot_mean_s", "num_finished", "objective",
                   "sim_duration_s", "cum_sim_cost_s", "wall_s", "cached", "status", "error"]


@dataclass
class SearchResult:
    method: str
    rate: float
    history: list[dict]
    best: dict | None
    best_config: Config | None
    summary: dict
    best_scenario: dict | None


class _Recorder:
    def __init__(self, method: str, quantum: float, start_cost: float = 0.0, deploy_s: float = 0.0):
        self.method = method
        self.deploy_s = deploy_s
        self.quantum = quantum
        self.rows: list[dict] = []
        self.cost = start_cost

    def add(self, config: Config, metrics: dict, cached: bool) -> dict:
        a = config.alloc
        sim = 0.0 if cached else metrics["sim_duration_s"]
        self.cost += sim + (0.0 if cached else self.deploy_s)
        row = {"trial": len(self.rows), "method": self.method, "alloc": a.label, "n_e": a.n_e, "n_p": a.n_p,
               "tp_p": a.tp_p, "n_d": a.n_d, "tp_d": a.tp_d, "local_tp": a.local_tp,
               "batch_bound": int(config.batch_bound), "offload_s": float(config.offload_s),
               "throughput_rps": metrics["throughput_rps"], "ttft_mean_s": metrics["ttft_mean_s"],
               "tpot_mean_s": metrics["tpot_mean_s"], "num_finished": metrics["num_finished"],
               "objective": objective_value(metrics["throughput_rps"] if metrics["status"] == "ok" else None,
                                            metrics["ttft_mean_s"], metrics["tpot_mean_s"], self.quantum),
               "sim_duration_s": sim, "cum_sim_cost_s": self.cost, "wall_s": 0.0 if cached else metrics["wall_s"],
               "cached": cached, "status": metrics["status"], "error": metrics["error"]}
        self.rows.append(row)
        return row


def require_optuna():
    """The optuna module, or a one-line user error saying how to install it."""
    try:
        import optuna
    except ImportError:
        raise UserError("search", OPTUNA_HINT) from None
    return optuna


def _run_has(problem: Problem, evaluator: Evaluator, kept: list[Candidate], budget: int, seed: int,
             rec: _Recorder, min_trials: int, n_startup: int | None) -> str:
    optuna = require_optuna()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=n_startup or len(kept) + 2,
                                         constant_liar=evaluator.jobs > 1)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    choices = list(range(len(kept)))

    def params_of(c: Candidate, i: int, b: int, s: float) -> dict:
        p: dict = {"alloc": i}
        if c.b_max > 1:
            p[f"B@{i}"] = b
        if c.s_high > c.s_low:
            p[f"s@{i}"] = s
        return p

    for i, c in enumerate(kept):  # seeds: each survivor's analytical point
        study.enqueue_trial(params_of(c, i, c.b_max, min(max(c.s_star, c.s_low), c.s_high)))

    def suggest(trial) -> Config:
        i = trial.suggest_categorical("alloc", choices)
        c = kept[i]
        b = trial.suggest_int(f"B@{i}", 1, c.b_max) if c.b_max > 1 else 1
        s = trial.suggest_float(f"s@{i}", c.s_low, c.s_high) if c.s_high > c.s_low else c.s_low
        return Config(c.alloc, b, round(s, 4))

    reason = "budget"

    def record(trial, config, metrics, cached):
        row = rec.add(config, metrics, cached)
        trial.set_user_attr("row", row["trial"])
        return row["objective"]

    if evaluator.jobs == 1:
        def objective(trial):
            config = suggest(trial)
            (metrics, cached), = evaluator.run([config])
            return record(trial, config, metrics, cached)

        def stopper(study_, frozen):
            nonlocal reason
            why = stop_reason(rec.rows, min_trials=min_trials)
            if why:
                reason = why
                study_.stop()

        study.optimize(objective, n_trials=budget, callbacks=[stopper])
        return reason
    while len(rec.rows) < budget:
        trials = [study.ask() for _ in range(min(evaluator.jobs, budget - len(rec.rows)))]
        configs = [suggest(t) for t in trials]
        for t, c, (metrics, cached) in zip(trials, configs, evaluator.run(configs)):
            study.tell(t, record(t, c, metrics, cached))
        why = stop_reason(rec.rows, min_trials=min_trials)
        if why:
            return why
    return reason


def _full_b(problem: Problem, allocs: Sequence[Allocation]) -> int:
    return max(seed_batch_bound(problem.rate, min(a.n_e for a in allocs)), 1)


def _run_random(problem: Problem, evaluator: Evaluator, allocs: list[Allocation], budget: int, seed: int,
                rec: _Recorder) -> str:
    import numpy as np

    rng = np.random.default_rng(seed)
    b_full = _full_b(problem, allocs)
    while len(rec.rows) < budget:
        configs = []
        for _ in range(min(evaluator.jobs, budget - len(rec.rows))):
            a = allocs[int(rng.integers(len(allocs)))]
            b = int(rng.integers(1, b_full + 1))
            s = round(float(rng.uniform(0.0, 1.0)), 4) if a.local_tp else 1.0
            configs.append(Config(a, b, s))
        for c, (metrics, cached) in zip(configs, evaluator.run(configs)):
            rec.add(c, metrics, cached)
    return "budget"


COORDINATE_STARTS = ("scenario", "center")


def _run_coordinate(problem: Problem, evaluator: Evaluator, allocs: list[Allocation], budget: int,
                    rec: _Recorder, start_at: str = "scenario") -> str:
    """``start_at``: ``scenario`` -- the scenario's own configuration (a user's warm
    start); ``center`` -- an uninformed start: the middle allocation of the order with
    Dynamo's pass-through settings B = 1, s = 1 (easerve.txt §3.1)."""
    order = sorted(allocs, key=Allocation.sort_key)
    b_full = _full_b(problem, order)
    start = problem.default_config() if start_at == "scenario" else Config(order[len(order) // 2], 1, 1.0)
    idx = order.index(start.alloc) if start.alloc in order else len(order) // 2
    cur = Config(order[idx], min(max(start.batch_bound, 1), b_full),
                 start.offload_s if order[idx].local_tp else 1.0)
    seen: dict[tuple, int] = {}  # config key -> row index

    def evaluate(configs: list[Config]) -> None:
        configs = [c for c in dict.fromkeys(configs) if c.key() not in seen][: budget - len(rec.rows)]
        for c, (metrics, cached) in zip(configs, evaluator.run(configs)):
            seen[c.key()] = rec.add(c, metrics, cached)["trial"]

    def best_of(configs: list[Config]) -> Config:
        cands = [c for c in configs if c.key() in seen]
        rows = [rec.rows[seen[c.key()]] for c in cands]
        i = best_index(rows)
        return cur if i is None else cands[i]

    def fit(alloc: Allocation, b: int, s: float) -> Config:
        return Config(alloc, min(max(b, 1), b_full), round(min(max(s, 0.0), 1.0), 4) if alloc.local_tp else 1.0)

    evaluate([cur])
    radius, step, idle = 1, 0.1, 0
    while len(rec.rows) < budget:
        moved, tried = False, 0
        for coord in ("alloc", "B", "s"):
            if len(rec.rows) >= budget:
                break
            i = order.index(cur.alloc)
            if coord == "alloc":
                cands = [fit(order[j], cur.batch_bound, cur.offload_s if cur.alloc.local_tp else 0.5)
                         for j in (i - radius, i + radius) if 0 <= j < len(order)]
            elif coord == "B":
                b = cur.batch_bound
                cands = [fit(cur.alloc, v, cur.offload_s) for v in (b - radius, b + radius, 2 * b, b // 2)]
            else:
                if not cur.alloc.local_tp:
                    continue
                cands = [fit(cur.alloc, cur.batch_bound, cur.offload_s + d) for d in (-step, step)]
            new = [c for c in cands if c.key() not in seen]
            tried += len(new)
            evaluate(new)
            nxt = best_of([cur] + cands)
            if nxt != cur:
                cur, moved = nxt, True
        idle = 0 if tried else idle + 1
        if idle > len(order) + 2 * b_full + 12:  # every neighbourhood, at every radius, already seen
            return "search space exhausted"
        if not moved:
            radius, step = radius + 1, step / 2
    return "budget"


def search(problem: Problem, *, method: str = "has", budget: int = DEFAULT_BUDGET, jobs: int = 1, seed: int = 0,
           tp_choices: Sequence[int] = TP_CHOICES, top_k: int = TOP_K, factor: float = PRUNING_FACTOR,
           min_trials: int = MIN_TRIALS, n_startup: int | None = None, drop_dominated: bool = True,
           prune_rule: str = "score", log: Callable[[str], None] = lambda m: None,
           executor: str = "local", address: str | None = None, coordinate_start: str = "scenario"
           ) -> SearchResult:
    """Run one search method on ``problem``; see the module docstring. ``executor``
    ``dask`` runs the trials on a Dask cluster (``address``, or a local one of ``jobs``
    workers); trials then complete in any order but are recorded in submission order."""
    if method not in METHODS:
        raise UserError("--method", f"unknown method {method!r}; valid: {', '.join(METHODS)}")
    if coordinate_start not in COORDINATE_STARTS:
        raise UserError("--start", f"unknown start {coordinate_start!r}; valid: {', '.join(COORDINATE_STARTS)}")
    if budget < 1:
        raise UserError("--budget", f"must be >= 1 (got {budget})")
    if jobs < 1:
        raise UserError("--jobs", f"must be >= 1 (got {jobs})")
    if method == "has":
        require_optuna()
    t0 = time.perf_counter()
    summary: dict = {"method": method, "rate_rps": problem.rate, "budget": budget, "jobs": jobs, "seed": seed,
                     "gpu_budget": problem.budget, "trial_requests": problem.trial_requests,
                     "deploy_cost_s": problem.deploy_s,
                     "scenario": problem.scn.name, "model": problem.scn.model,
                     "hardware": f"{problem.scn.hardware.count}x {problem.scn.hardware.gpu}"}
    caps, runs, role_tps = None, [], None
    start_cost = 0.0
    if method == "has":
        log("Stage 1: profiling per-worker capacities")
        caps, runs, role_tps = profile_capacities(problem, tp_choices=tp_choices, log=log)
        start_cost = stage1_cost(runs, problem.deploy_s)
        summary["capacities"] = caps.to_json()
        summary["profiling"] = {"runs": [asdict(r) for r in runs], "sim_cost_s": start_cost,
                                "wall_s": sum(r.wall_s for r in runs)}
    else:
        role_tps = usable_tps(problem, tp_choices)
    local_tps = None
    if problem.has_local:
        local_tps = role_tps["prefill"]
    allocs = enumerate_allocations(problem.budget, role_tps["prefill"], role_tps["decode"], local_tps)
    infeasible = {}
    feasible = []
    for a in allocs:
        why = problem.feasible(a)
        if why is None:
            feasible.append(a)
        else:
            infeasible[a.label] = why
    if not feasible:
        first = next(iter(infeasible.values()), "no allocation fits the GPU budget")
        raise UserError("search", f"no feasible allocation within {problem.budget} GPUs: {first}")
    summary["allocations"] = {"enumerated": len(allocs), "feasible": len(feasible),
                              "infeasible_examples": dict(itertools.islice(infeasible.items(), 5))}
    quantum = TIE_TOLERANCE * problem.rate
    rec = _Recorder(method, quantum, start_cost, problem.deploy_s)
    with Evaluator(problem, jobs, executor, address) as evaluator:
        if method == "has":
            pr = prune(feasible, caps, problem.rate, local=problem.local, factor=factor, top_k=top_k,
                       drop_dominated=drop_dominated, rule=prune_rule)
            summary["pruning"] = {"rule": prune_rule, "factor": factor, "top_k": top_k,
                                  "drop_dominated": drop_dominated, **pr.to_json()}
            summary["alpha_rule"] = ("static: 1 - static_encoder_share" if problem.local.sm_partitioning == "static"
                                     else "1 - min(1, rate / (n_E C_E))")
            log(f"Stage 1: {len(feasible)} feasible allocations, {len(pr.undominated)} undominated, "
                f"{len(pr.within_capacity)} within capacity, kept {len(pr.kept)}: "
                + ", ".join(c.alloc.label for c in pr.kept))
            reason = _run_has(problem, evaluator, pr.kept, budget, seed, rec, min_trials, n_startup)
        elif method == "random":
            reason = _run_random(problem, evaluator, feasible, budget, seed, rec)
        else:
            reason = _run_coordinate(problem, evaluator, feasible, budget, rec, coordinate_start)
    rows = rec.rows
    bi = best_index(rows)
    best = rows[bi] if bi is not None else None
    best_config = None
    best_raw = None
    if best is not None:
        a = Allocation(best["n_e"], best["n_p"], best["tp_p"], best["n_d"], best["tp_d"], best["local_tp"])
        best_config = Config(a, best["batch_bound"], best["offload_s"])
        best_raw = problem.best_scenario(best_config)
    summary.update({
        "trials": len(rows), "stop_reason": reason, "sim_cost_s": rec.cost,
        "best": None if best is None else {k: best[k] for k in (
            "trial", "alloc", "n_e", "n_p", "tp_p", "n_d", "tp_d", "local_tp", "batch_bound", "offload_s",
            "throughput_rps", "ttft_mean_s", "tpot_mean_s", "num_finished")},
        "wall_s": time.perf_counter() - t0,
    })
    return SearchResult(method, problem.rate, rows, best, best_config, summary, best_raw)


# ------------------------------------------------------------------ outputs
#: What a search writes into its folder.
OUTPUT_FILES = ("trials.csv", "trials.parquet", "best.yaml", "summary.json")


def check_output_dir(out: Path, force: bool) -> OutputDir:
    """The search folder, checked before searching (:mod:`lmmsim.outputs`: without
    ``force`` absent or empty; with it, no user file where an output goes)."""
    folder = OutputDir(out, force=force)
    folder.check(*OUTPUT_FILES)
    return folder


def write_outputs(result: SearchResult, out: Path, force: bool = True) -> dict[str, Path]:
    """``best.yaml`` (runnable scenario), ``trials.csv`` / ``trials.parquet`` (history),
    ``summary.json``, each written to a temporary sibling and renamed into place; a stale
    ``best.yaml`` of an earlier search is removed when this one found none. Returns the
    paths written."""
    import pandas as pd

    folder = check_output_dir(out, force)
    paths = {}
    frame = pd.DataFrame(result.history, columns=HISTORY_COLUMNS)
    frame["local_tp"] = frame["local_tp"].astype("Int64")
    paths["trials_csv"] = folder.file("trials.csv")
    with atomic_path(paths["trials_csv"]) as tmp:
        frame.to_csv(tmp, index=False)
    paths["trials_parquet"] = folder.file("trials.parquet")
    with atomic_path(paths["trials_parquet"]) as tmp:
        frame.to_parquet(tmp, index=False)
    if result.best_scenario is not None:
        b = result.best
        head = (f"# Chosen by `lmmsim search` ({result.method}, rate {result.rate:g} req/s): {b['alloc']}, "
                f"B={b['batch_bound']}, s={b['offload_s']:g}\n# trial {b['trial']}: "
                f"{b['throughput_rps']:.3f} req/s, mean TTFT {_fmt(b['ttft_mean_s'])} s, "
                f"mean TPOT {_fmt(b['tpot_mean_s'], 1e3)} ms\n")
        paths["best_yaml"] = folder.file("best.yaml")
        write_text_atomic(paths["best_yaml"], head + yaml.safe_dump(result.best_scenario, sort_keys=False))
    paths["summary_json"] = folder.file("summary.json")
    summary = {**result.summary, "files": {k: p.name for k, p in paths.items()}}
    write_text_atomic(paths["summary_json"], json.dumps(_clean(summary), indent=2, default=_json_default) + "\n")
    folder.remove_unclaimed()
    return paths


def _fmt(x, scale: float = 1.0) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x * scale:.3f}"


def _clean(x):
    """JSON-safe: non-finite floats become null."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def _json_default(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if hasattr(x, "item"):
        return x.item()
    return str(x)


def default_jobs() -> int:
    return max(1, min(os.cpu_count() or 1, 8))

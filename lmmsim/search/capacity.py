"""Stage 1 of HAS, analytically: GPU allocations, stage loads at Λ, pruning and seeds.

The model (easerve.txt §3.1; "our choice" marks what the paper leaves open).
Per-worker capacities come from :mod:`lmmsim.search.profiling`; everything
here is pure arithmetic on them, so it is unit-tested without a simulation.

*Allocations* (:func:`enumerate_allocations`): ``n_E >= 1`` TP1 encoders,
``n_P >= 1`` prefill workers at one TP, ``n_D >= 1`` decode workers at one
TP, ``n_E + n_P tp_P + n_D tp_D <= budget``; when the scenario has local
prefill, each local TP dividing ``n_E`` *and* no local prefill (``s = 1``):
co-location on or off is part of the allocation (easerve.txt §2.1: the
allocation "together with the choice to enable co-located workers"
specifies the deployment). ``n_P = 0`` (all prefill local) is not offered: the deployment
schema needs a remote prefill worker. A candidate is *feasible* when
:func:`lmmsim.build.build` accepts it (memory fit, head divisibility;
checked by :class:`lmmsim.search.mapping.Problem`).

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

*Pruning* (:func:`prune`, pure): (1) drop allocations another one with the
same co-location choice dominates (every stage capacity at least as large,
one larger: our addition, it can never be better in this model; co-location
on and off are not compared, since α leaves out what co-location costs the
encoder -- shared HBM bandwidth, §2.3 -- and that is Stage 2's to measure); (2) drop those whose most loaded stage exceeds capacity
(``max load > 1``) -- when none is left, keep instead those whose max load is
within the pruning factor of the least loaded one; (3) score = ``max load /
min load`` (bottleneck balance; stages with infinite capacity are left out;
1 = perfectly balanced), keep scores within 1.2x of the best (``rule="score"``;
``rule="bottleneck"`` keeps instead max loads within 1.2x of the best-scored
allocation's, the reading of the paper's §4.3); (4) the top ``K = 3`` by
score (ties: lower max load, then more GPUs). When fewer than K pass (3),
the kept list is filled up to K with the next survivors of (2) by max
load (the least loaded first; when every allocation is over capacity, any
undominated one): K survivors always give K candidates (the paper keeps
"the top-K candidates", §3.1; 3 of 7 in §4.3, at a Λ above saturation).

*Seeds* per kept allocation: ``B_max = ceil(Λ / n_E)``
(:func:`seed_batch_bound`), ``s* = C_remote / (C_remote + C_local)`` with a
±0.2 window clipped to [0, 1] (:func:`seed_offload_window`); without local
prefill ``s = 1``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field

from lmmsim.errors import UserError

PRUNING_FACTOR = 1.2
TOP_K = 3
S_WINDOW = 0.2


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
                        for lt in dividing + [None]:  # co-location on (each dividing TP) or off
                            out.append(Allocation(n_e, n_p, tp_p, n_d, tp_d, lt))
    return sorted(out, key=Allocation.sort_key)


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
    kept: list[Candidate]  # the top K (filled up to K from the undominated ones, by max load)
    filled: int = 0  # how many of ``kept`` the fill added

    def to_json(self) -> dict:
        return {"feasible": len(self.feasible), "undominated": len(self.undominated),
                "within_capacity": len(self.within_capacity), "capacity_fallback": self.capacity_fallback,
                "within_factor": len(self.within_factor), "kept": len(self.kept), "filled": self.filled,
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


def _undominated(scored: list[Candidate], caps: Capacities, rate: float, local: LocalSettings) -> list[Candidate]:
    """The candidates no other one with the same co-location choice dominates."""
    capsets = [stage_capacities(c.alloc, caps, rate, local) for c in scored]
    coloc = [c.alloc.local_tp is not None for c in scored]
    return [c for c, mine, co in zip(scored, capsets, coloc)
            if not any(o_co == co and _dominates(o, mine) for o, o_co in zip(capsets, coloc))]


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
    undominated = _undominated(scored, caps, rate, local) if drop_dominated else scored
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
    kept = near[:top_k]
    # the fill: survivors of the capacity test; when every allocation is over capacity (the paper's
    # search rate is above saturation, §4.3), every undominated one, least loaded first
    pool = undominated if fallback else within
    rest = sorted((c for c in pool if c not in kept),
                  key=lambda c: (c.max_load, c.score, -c.alloc.gpus, c.alloc.sort_key()))
    filled = rest[:max(0, top_k - len(kept))]
    return PruneResult(scored, undominated, within, fallback, near, kept + filled, len(filled))


def _finite(x):
    return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else x

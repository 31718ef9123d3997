"""EAServe's dynamic SM partitioning table (easerve.txt §3.4).

An encode GPU hosts the encode worker and a co-resident local prefill worker,
split spatially by SMs (``sm_split`` in :mod:`lmmsim.engine.gpu_share`).
Encode latency as a function of its SM share saturates: past some share, more
SMs barely help. So for every micro-batch EAServe gives encode the smallest
share that keeps its latency close to exclusive use, and the rest to local
prefill.

The table is built once, offline, by "profiling" encode latency at a few SM
levels (5 by default: 0.2, 0.4, 0.6, 0.8, 1.0) and batch sizes 1..B_max.
For each level it records the largest batch size whose latency at that share
is within ``(1 + tolerance)`` of the exclusive (share 1.0) latency of the
same batch (default tolerance 10 %: the paper says "stays close to the
exclusive-access baseline" without a number). At run time
:meth:`SmTable.share_for` returns the smallest level whose supported batch
size covers the micro-batch (1.0 when none does), and the local prefill
worker gets ``1 - share``.

Choices
-------
* **Prefix rule.** A level supports batch ``b`` only if *every* probed batch
  size up to ``b`` passes at that level. "Covers" at run time means "any
  batch no larger than the entry", so a level that passed at 8 but failed at
  6 (noise in a real profile) must not be trusted at 6 or 7. For latency
  models where the slowdown ratio grows with the batch -- compute share grows
  with batch size, as in :func:`encode_latency_from_parts` -- this equals the
  plain "largest passing batch size".
* **Monotone across levels.** Entries are made non-decreasing in the level
  (a running maximum: more SMs are never slower). This never changes
  :meth:`SmTable.share_for` -- it picks the smallest covering level, which
  is the same before and after -- but keeps the table readable.
* **Unprobed sizes.** A batch between probed sizes is covered only by a
  level whose entry is at least that large; a batch above every probed size
  gets the whole GPU (1.0): the table says nothing about it.
* **The full share is the baseline.** Latency at share 1.0 is measured once
  per batch size and compared with itself, so the level 1.0 (when listed)
  supports every probed batch size, even for a noisy latency function.
* The batch size is whatever unit the encode dispatcher batches (media items
  of one kind per encode forward pass in lmmsim); the table is per encoder
  model, GPU and item shape, as in the paper.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from lmmsim.engine.gpu_share import SmShareCurve

#: SM-allocation levels of the paper's deployment (five, evenly spaced).
DEFAULT_LEVELS: tuple[float, ...] = (0.2, 0.4, 0.6, 0.8, 1.0)
#: Allowed encode slowdown relative to exclusive use (an assumption; see module docstring).
DEFAULT_TOLERANCE = 0.10

EncodeLatency = Callable[[int, float], float]  # (batch_size, sm_share) -> seconds
EncodeParts = Callable[[int], tuple[float, float]]  # batch_size -> (compute_s, memory_s), exclusive GPU


@dataclass(frozen=True)
class SmTable:
    """Largest encode batch size each SM level supports (0: none).

    ``levels`` are strictly increasing SM fractions in (0, 1]; ``supported[i]``
    is the entry for ``levels[i]`` (non-decreasing in ``i``); ``batch_sizes``
    are the probed sizes (increasing); ``tolerance`` the allowed slowdown.
    """

    levels: tuple[float, ...]
    supported: tuple[int, ...]
    tolerance: float
    batch_sizes: tuple[int, ...]

    def __post_init__(self):
        if len(self.levels) != len(self.supported) or not self.levels:
            raise ValueError("SmTable needs one supported batch size per level, and at least one level")
        if any(hi < lo for lo, hi in zip(self.supported, self.supported[1:])):
            raise ValueError(f"SmTable entries must be non-decreasing in the level, got {self.supported}")

    def supported_batch(self, level: float) -> int:
        """The entry for ``level`` (one of :attr:`levels`)."""
        try:
            return self.supported[self.levels.index(level)]
        except ValueError:
            raise ValueError(f"{level!r} is not an SM level of this table ({self.levels})") from None

    def share_for(self, batch_size: int) -> float:
        """SM share for an encode micro-batch of ``batch_size``: the smallest level
        whose supported batch size is at least ``batch_size``; 1.0 when none is.
        Non-decreasing in ``batch_size``."""
        if batch_size < 1:
            raise ValueError(f"batch size must be >= 1, got {batch_size!r}")
        i = bisect.bisect_left(self.supported, batch_size)  # entries are sorted
        return self.levels[i] if i < len(self.levels) else 1.0

    def prefill_share_for(self, batch_size: int) -> float:
        """SM share left to the local prefill worker: ``1 - share_for(batch_size)``,
        rounded to 12 decimals so ``1 - 0.8`` is ``0.2`` rather than ``0.19999999999999996``
        (the two shares may then sum to 1 within float rounding, which
        :class:`~lmmsim.engine.gpu_share.SharedGpu` accepts)."""
        return min(1.0, max(0.0, round(1.0 - self.share_for(batch_size), 12)))

    def split_for(self, batch_size: int) -> tuple[float, float]:
        """``(encode_share, local_prefill_share)`` for a micro-batch."""
        return self.share_for(batch_size), self.prefill_share_for(batch_size)

    def as_dict(self) -> dict[float, int]:
        """level -> largest supported batch size."""
        return dict(zip(self.levels, self.supported))


def build_sm_table(
    encode_latency: EncodeLatency,
    *,
    levels: Iterable[float] = DEFAULT_LEVELS,
    max_batch: int | None = None,
    batch_sizes: Sequence[int] | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
) -> SmTable:
    """Profile ``encode_latency(batch_size, sm_share)`` and build the table.

    Probes ``batch_sizes`` (default ``1..max_batch``; give exactly one of the
    two) at every level, against the exclusive latency
    ``encode_latency(b, 1.0)``; a level supports ``b`` when
    ``latency(b, level) <= (1 + tolerance) * latency(b, 1.0)`` holds for every
    probed size up to ``b``. ``levels`` are SM fractions in (0, 1], given in
    any order (duplicates dropped). ``encode_latency`` is called once per
    (size, level) pair, the exclusive one once per size.
    """
    lv = sorted({float(x) for x in levels})
    if not lv:
        raise ValueError("build_sm_table needs at least one SM level")
    for x in lv:
        if not (0.0 < x <= 1.0):
            raise ValueError(f"SM levels must be in (0, 1], got {x!r}")
    if (max_batch is None) == (batch_sizes is None):
        raise ValueError("give exactly one of max_batch and batch_sizes")
    if batch_sizes is None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch!r}")
        sizes = list(range(1, max_batch + 1))
    else:
        sizes = sorted({int(b) for b in batch_sizes})
        if not sizes or sizes[0] < 1:
            raise ValueError(f"batch sizes must be >= 1, got {batch_sizes!r}")
    if not (tolerance >= 0 and math.isfinite(tolerance)):
        raise ValueError(f"tolerance must be finite and >= 0, got {tolerance!r}")

    def measure(b: int, x: float) -> float:
        t = float(encode_latency(b, x))
        if not (t >= 0 and math.isfinite(t)):
            raise ValueError(f"encode latency at batch {b}, share {x} must be finite and >= 0, got {t!r}")
        return t

    exclusive = {b: measure(b, 1.0) for b in sizes}
    raw: list[int] = []
    for x in lv:
        best = 0
        for b in sizes:  # prefix rule: stop at the first failure
            t = exclusive[b] if x == 1.0 else measure(b, x)
            if t > (1.0 + tolerance) * exclusive[b]:
                break
            best = b
        raw.append(best)
    supported = []
    running = 0
    for s in raw:  # more SMs are never slower: make the entries monotone
        running = max(running, s)
        supported.append(running)
    return SmTable(tuple(lv), tuple(supported), float(tolerance), tuple(sizes))


def encode_latency_from_parts(parts: EncodeParts, curve: SmShareCurve | None = None) -> EncodeLatency:
    """``encode_latency(b, x) = compute_s(b) * curve.stretch(x) + memory_s(b)``.

    ``parts(b)`` gives the exclusive-GPU split of a batch of ``b`` into
    compute-bound and memory-bound seconds (e.g. from
    ``ComposedStepCostModel.encode_parts``; see :func:`parts_from_cost_model`).
    Only the compute part is stretched, by ``1 / g(x)`` with the saturating
    :class:`~lmmsim.engine.gpu_share.SmShareCurve` ``g(x) = (1+k)x/(x+k)``
    (default ``k = 0.25``); ``stretch`` rather than ``/ speed`` so that share
    1.0 gives exactly the exclusive time. The memory part is **not**
    stretched: SM partitioning does not isolate HBM bandwidth (§2.3), and a
    smaller SM share is assumed to still saturate it. Like the paper's
    encode-only profiling passes, this is latency with the other tenant idle:
    the memory interference :class:`~lmmsim.engine.gpu_share.SharedGpu` adds
    while local prefill runs concurrently is not part of the table.
    """
    curve = curve if curve is not None else SmShareCurve()

    def latency(b: int, x: float) -> float:
        compute_s, memory_s = parts(b)
        return compute_s * curve.stretch(x) + memory_s

    return latency


def parts_from_cost_model(cost_model, work) -> EncodeParts:
    """``b -> cost_model.encode_parts([work] * b)``: a batch of ``b`` identical
    media items (``work`` an :class:`~lmmsim.workload.request.EncoderWork`)."""

    def parts(b: int) -> tuple[float, float]:
        return cost_model.encode_parts([work] * b)

    return parts

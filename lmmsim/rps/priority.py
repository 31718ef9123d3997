"""RPS-Serve's Priority Regulator (rps-serve.txt sections 3.5 and 4.1).

Every scheduling iteration a waiting request r of class c gets

    Priority_r = StaticPriority_c + Aging_c(waiting_time_r, queue_length_c)

with the aging term in [0, 1), and the scheduler runs the lowest
``Score_r = -log(Priority_r)`` first (vLLM's "lower score, higher priority").
The paper names the per-class parameters (StaticPriority, p, k) and bounds
the aging term, but leaves its formula out. Ours (``exponential_aging``)::

    Aging = 1 - exp(-k * w**p * (1 + ln(1 + q)))

w = seconds waited, q = requests in the class's queue. It is 0 at w = 0,
increases in w and q, and stays below 1; p shapes how sharply a class
"wakes up" (sand, p = 3.5, goes from ~0 to ~1 between 1 and 3 s; rocks,
p = 1.1 and a tiny k, take minutes), and the queue factor grows slowly so
a crowded class gains urgency without swamping waiting time (Figure 8: new
sand arrivals push the waiting sand ahead of a rock). Replace it by passing
another ``aging`` callable to :class:`PriorityRegulator`.

Variants (the paper's ablation, Fig. 14b): ``static-only`` drops the aging
term, ``aging-only`` drops the static term. Pure Python, no SimPy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class ClassParams:
    static: float  # StaticPriority of the class
    p: float  # aging exponent on waiting time
    k: float  # aging rate


# The paper's values (section 4.1), lightest class first.
SAND = ClassParams(0.1, 3.5, 0.05)
PEBBLES = ClassParams(0.05, 2.5, 0.003)
ROCKS = ClassParams(0.0, 1.1, 0.00075)
PAPER_CLASSES = (SAND, PEBBLES, ROCKS)


def default_classes(num_classes: int) -> tuple[ClassParams, ...]:
    """Parameters for ``num_classes`` classes, lightest first.

    k = 3 is the paper's table. For other k (its Fig. 16 varies k without
    giving the parameters) we keep sand's and rocks' values at the ends and
    interpolate between them: static and p linearly, k geometrically.
    """
    if num_classes == 3:
        return PAPER_CLASSES
    if num_classes < 2:
        raise ValueError("at least two classes")
    out = []
    for i in range(num_classes):
        t = i / (num_classes - 1)
        out.append(ClassParams(
            static=SAND.static + t * (ROCKS.static - SAND.static),
            p=SAND.p + t * (ROCKS.p - SAND.p),
            k=SAND.k * (ROCKS.k / SAND.k) ** t,
        ))
    return tuple(out)


def exponential_aging(wait_s: float, queue_len: int, params: ClassParams) -> float:
    """Our aging term: ``1 - exp(-k * w**p * (1 + ln(1 + q)))``, in [0, 1)."""
    if wait_s <= 0:
        return 0.0
    # capped below 1: the bound must hold in floating point too (exp underflows past ~37)
    return min(-math.expm1(-params.k * wait_s ** params.p * (1.0 + math.log1p(queue_len))), _BELOW_ONE)


_BELOW_ONE = math.nextafter(1.0, 0.0)


VARIANTS = ("rps", "static-only", "aging-only")


class PriorityRegulator:
    """Priorities and scores of requests by class, waiting time and queue length."""

    def __init__(self, classes: tuple[ClassParams, ...], variant: str = "rps",
                 aging: Callable[[float, int, ClassParams], float] = exponential_aging):
        if variant not in VARIANTS:
            raise ValueError(f"unknown priority variant {variant!r}; valid: {', '.join(VARIANTS)}")
        self.classes = tuple(classes)
        self.variant = variant
        self.aging = aging

    def priority(self, cls: int, wait_s: float, queue_len: int) -> float:
        params = self.classes[cls]
        if self.variant == "static-only":
            return params.static
        aging = self.aging(wait_s, queue_len, params)
        return aging if self.variant == "aging-only" else params.static + aging

    def score(self, cls: int, wait_s: float, queue_len: int) -> float:
        """``-log(priority)``; lower runs first (a zero priority scores +inf)."""
        prio = self.priority(cls, wait_s, queue_len)
        return -math.log(prio) if prio > 0 else math.inf

    def overtake_wait_s(self, heavy: int, light: int, queue_len: int = 0) -> float:
        """How long a request of class ``heavy`` must wait before its priority
        exceeds a newly arrived one of class ``light`` (whose aging is 0), with
        ``queue_len`` requests in the heavy class's queue; inf if never.

        Solved for the default aging by inverting it; a replaced aging rule is
        bisected (it must increase in waiting time).
        """
        target = self.priority(light, 0.0, 0)
        hp = self.classes[heavy]
        need = target - (hp.static if self.variant != "aging-only" else 0.0)
        if self.variant == "static-only":
            return 0.0 if need < 0 else math.inf
        if need < 0:
            return 0.0
        if need >= 1:
            return math.inf
        if self.aging is exponential_aging:
            return (-math.log1p(-need) / (hp.k * (1 + math.log1p(queue_len)))) ** (1 / hp.p)
        lo, hi = 0.0, 1.0
        while self.aging(hi, queue_len, hp) <= need:
            hi *= 2
            if hi > 1e12:
                return math.inf
        for _ in range(200):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if self.aging(mid, queue_len, hp) <= need else (lo, mid)
        return hi

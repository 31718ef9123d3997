"""How ``lmmsim profile-host`` times a call: :class:`Case` and the round-robin :func:`measure_cases`.

Kept apart from :mod:`lmmsim.profiler.host` so that the modules that build cases for it
(:mod:`~lmmsim.profiler.host_tokenize`, :mod:`~lmmsim.profiler.host_dispatch`) can share the
machinery without importing the driver that imports them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

TIME_COLUMNS = ["time_ms", "time_ms_p10", "time_ms_p90", "repeats"]


@dataclass
class Case:
    """One measurement: the CSV it belongs to, its row's input columns, and the call to time.
    ``prepare``, when given, runs untimed right before every timed call: it sets the state the call is
    meant to be measured in (say, a tokenizer's tables in the CPU caches), whatever case ran before."""

    table: str
    row: dict
    fn: Callable[[], object]
    times: list[float] = field(default_factory=list)
    prepare: Callable[[], object] | None = None


def measure_cases(cases: list[Case], seconds: float, max_repeats: int, min_repeats: int) -> dict[str, list[dict]]:
    """Warm every case up once, then time them round-robin (one call each per round) until ``max_repeats``
    rounds or ``seconds`` are spent (never fewer than ``min_repeats``). Interleaving spreads a burst of
    load from elsewhere on the machine over many cases' single repeats instead of one case's median."""
    t0 = time.perf_counter()
    for case in cases:
        case.fn()
    for rnd in range(max_repeats):
        if rnd >= min_repeats and time.perf_counter() - t0 >= seconds:
            break
        for case in cases:
            if case.prepare is not None:
                case.prepare()
            t = time.perf_counter()
            case.fn()
            case.times.append((time.perf_counter() - t) * 1e3)
    tables: dict[str, list[dict]] = {}
    for case in cases:
        arr = np.asarray(case.times)
        tables.setdefault(case.table, []).append(
            {**case.row, "time_ms": float(np.median(arr)), "time_ms_p10": float(np.percentile(arr, 10)),
             "time_ms_p90": float(np.percentile(arr, 90)), "repeats": len(case.times)})
    return tables

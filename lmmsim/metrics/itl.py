"""Inter-token latency (ITL): the gaps between successive output tokens of a request.

As ``vllm bench serve`` defines it: for each finished request, the times between
one output token and the next, after the first; the run's ITL statistics pool
the gaps of all requests.

Token times come from the engine steps, without per-token work while simulating:
the first token at ``first_token_at``; then every step of a decode cohort the
request was in emits one (a cohort keeps each step's end time in ``step_ends``,
fast-forwarded stretches included, and a member that leaves appends
``(step_ends, first, stop)`` to its ``token_spans``); a recompute after preemption
emits the token its prefill samples (a float in ``token_spans``). Each request
has ``num_output_tokens - 1`` gaps, summing to ``finished_at - first_token_at``
(up to float rounding).

Nor are the gaps expanded per token afterwards: the gap between two steps of a
cohort is the same for every member decoding through both, so the pooled gaps are
kept as distinct values with counts (one value per engine step, plus one *lead*
gap per span: from the request's previous token to the span's first), and the
statistics are weighted ones, equal to those of the expanded list.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain

import numpy as np

from lmmsim.metrics.summary import QUANTILES


@dataclass(frozen=True)
class TokenGaps:
    """The ITL gaps of the finished requests of a run, compactly.

    ``step_gaps[j]``: ``pooled[j] - pooled[j - 1]`` over the concatenated step-end
    times of all cohorts; a span covers ``step_gaps[lo:hi]``. ``lead``: one gap per
    span or recompute token, from the request's previous token. ``*_owner``: the
    position (in the states given) of the request. ``per_request_max``: the largest
    gap per position (NaN where none).
    """

    step_gaps: np.ndarray
    span_lo: np.ndarray
    span_hi: np.ndarray
    span_owner: np.ndarray
    lead: np.ndarray
    lead_owner: np.ndarray
    per_request_max: np.ndarray
    step_order: np.ndarray  # stable argsort of step_gaps: the weighted statistics merge sorted runs
    sorted_gaps: np.ndarray  # step_gaps[step_order]


    @property
    def count(self) -> int:
        return int((self.span_hi - self.span_lo).sum()) + self.lead.size

    def weighted(self, rows=None) -> tuple[np.ndarray, np.ndarray]:
        """``(values, counts)`` of the gaps of the requests at positions where the
        boolean array ``rows`` is true (all if None)."""
        lo, hi, lead = self.span_lo, self.span_hi, self.lead
        if rows is not None:
            keep = rows[self.span_owner]
            lo, hi = lo[keep], hi[keep]
            lead = lead[rows[self.lead_owner]]
        n = self.step_gaps.size
        cover = np.bincount(lo, minlength=n + 1)[: n + 1] - np.bincount(hi, minlength=n + 1)[: n + 1]
        counts = np.cumsum(cover)[:n][self.step_order]  # in value order
        used = counts > 0
        values = np.concatenate([self.sorted_gaps[used], np.sort(lead)])
        return values, np.concatenate([counts[used], np.ones(lead.size, dtype=np.int64)])

    def stats(self, rows=None) -> dict[str, float | None]:
        """:func:`weighted_stats` of :meth:`weighted` ``(rows)``."""
        return weighted_stats(*self.weighted(rows))


def weighted_stats(values: np.ndarray, counts: np.ndarray) -> dict[str, float | None]:
    """``{mean, p50, p90, p95, p99, max, std}`` of the list holding each value
    ``counts`` times (percentiles interpolated linearly, as numpy's default)."""
    total = int(counts.sum())
    if total == 0:
        return {"mean": None, **{k: None for k, _ in QUANTILES}, "max": None, "std": None}
    order = np.argsort(values, kind="stable")  # timsort: sorted runs merge in linear time
    vals, cum = values[order], np.cumsum(counts[order])
    mean = float((values * counts).sum() / total)
    out: dict[str, float | None] = {"mean": mean}
    for key, q in QUANTILES:
        h = (total - 1) * q / 100
        below = int(np.floor(h))
        a = vals[np.searchsorted(cum, below, side="right")]
        b = vals[np.searchsorted(cum, min(below + 1, total - 1), side="right")]
        out[key] = float(a + (b - a) * (h - below))
    out["max"] = float(vals[-1])
    out["std"] = float(np.sqrt((counts * (values - mean) ** 2).sum() / total))
    return out


def token_gaps(seqs) -> TokenGaps:
    """The ITL gaps of the finished ``seqs`` (engine states)."""
    seqs = list(seqs)
    offsets: dict[int, int] = {}  # id(step_ends list) -> its offset in the pooled times
    arrays: list = []
    total = 0
    lo: list[int] = []
    hi: list[int] = []
    span_owner: list[int] = []
    lead: list[float] = []
    lead_owner: list[int] = []
    for i, s in enumerate(seqs):
        spans = s.token_spans
        if not spans or s.status != "finished":
            continue
        prev = s.first_token_at
        for span in spans:
            if isinstance(span, tuple):
                ends, first, stop = span
                off = offsets.get(id(ends))
                if off is None:
                    off = offsets[id(ends)] = total
                    arrays.append(ends)
                    total += len(ends)
                lead.append(ends[first] - prev)
                lo.append(off + first + 1)
                hi.append(off + stop)
                span_owner.append(i)
                prev = ends[stop - 1]
            else:
                lead.append(span - prev)
                prev = span
            lead_owner.append(i)
    pooled = np.fromiter(chain.from_iterable(arrays), float, total)
    step_gaps = np.diff(pooled, prepend=pooled[:1])
    order = stable_argsort(step_gaps)
    gaps = TokenGaps(step_gaps, np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64),
                     np.asarray(span_owner, dtype=np.int64), np.asarray(lead, dtype=float),
                     np.asarray(lead_owner, dtype=np.int64), np.full(len(seqs), np.nan), order, step_gaps[order])
    _fill_per_request_max(gaps)
    return gaps


def stable_argsort(values: np.ndarray) -> np.ndarray:
    """``np.argsort(values, kind="stable")`` of a float array, a few times faster: numpy's stable
    sort of floats is a merge sort, its default one much quicker, and the positions of equal
    values put back in index order make the two the same (NaN, which is never equal, aside).
    Only the sorted places inside a run of equal values are reordered: a run's step gaps are
    mostly distinct (gLLM, 270k gaps: 18k tied), so re-sorting all of them cost twice the sort."""
    if np.isnan(values).any():
        return np.argsort(values, kind="stable")
    order = np.argsort(values)
    ordered = values[order]
    tie = ordered[1:] == ordered[:-1]
    if tie.any():
        ties_before = np.zeros(values.size + 1, bool)  # sorted place k equals place k - 1
        ties_before[1:-1] = tie
        tied = np.flatnonzero(ties_before[1:] | ties_before[:-1])  # places in a run of equal values
        run = np.cumsum(~ties_before[tied])  # a run starts at a tied place not equal to the one before
        at = order[tied]
        order[tied] = at[np.argsort(run * values.size + at)]  # within each run, positions ascending
    return order


def _fill_per_request_max(g: TokenGaps) -> None:
    per_max = g.per_request_max
    if g.lead.size:
        np.fmax.at(per_max, g.lead_owner, g.lead)
    inner = np.flatnonzero(g.span_hi > g.span_lo)
    if inner.size:
        inner = inner[np.argsort(g.span_lo[inner], kind="stable")]  # keeps the unused odd ranges short
        padded = np.append(g.step_gaps, 0.0)
        bounds = np.column_stack([g.span_lo[inner], g.span_hi[inner]]).ravel()
        np.fmax.at(per_max, g.span_owner[inner], np.maximum.reduceat(padded, bounds)[::2])


def token_times(seq) -> np.ndarray:
    """Every output token's emission time of one request (engine state), in order;
    per token, for checks and small runs (the summary never expands them)."""
    if seq.first_token_at != seq.first_token_at:  # NaN: no token yet
        return np.empty(0)
    parts = [np.asarray([seq.first_token_at])]
    for span in seq.token_spans:
        if isinstance(span, tuple):
            ends, first, stop = span
            parts.append(np.asarray(ends[first:stop], dtype=float))
        else:
            parts.append(np.asarray([span]))
    return np.concatenate(parts)

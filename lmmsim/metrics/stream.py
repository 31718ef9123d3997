"""Bounded-memory results (``sim.keep_requests: false``): each request's record and ITL are
taken as it ends, and its state dropped.

* :class:`RequestSink` writes each ended request's row (the columns of
  :func:`~lmmsim.metrics.records.requests_frame`, built by the same code) into Parquet row
  groups of :data:`ROWS_PER_GROUP` rows. Rows are in the order requests ended (then the
  ``unfinished`` and ``not_arrived`` ones), not by id: sort by ``request_id`` to get the
  in-memory table.
* :class:`ItlStream` takes a finished request's ITL when it ends: its lead gaps and its
  largest gap at once, and one coverage range per decode span on the span's
  :class:`~lmmsim.engine.decode_cohort.StepEnds`. When a cohort drops step ends no request
  can still read (``DecodeCohort.bound_ends``), the gaps there are final: each step's gap
  with its count per modality goes to a spill file (float64 value, uint32 count), as do the
  lead gaps (count 1). The weighted statistics (:func:`spilled_stats`) then select the
  percentile ranks exactly from the files in two passes: the same values as
  :func:`~lmmsim.metrics.itl.weighted_stats` of the in-memory run; ``mean`` and ``std``
  sum in another order, so they agree to float rounding (relative 1e-12), not bit for bit.
"""

from __future__ import annotations

import math
import shutil
import tempfile
import weakref
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from lmmsim.metrics.records import COLUMNS, frame_of, row_of
from lmmsim.metrics.summary import LATENCIES, QUANTILES

#: Rows per Parquet row group of a bounded-memory run's requests.parquet.
ROWS_PER_GROUP = 65536

#: Spilled ITL entries buffered in memory before they are appended to their file.
SPILL_EVERY = 1 << 20

STRINGS = ("class_name", "modality", "status", "reject_reason")


def requests_schema(cached: bool) -> pa.Schema:
    """The Arrow schema of requests.parquet, fixed up front (a row group whose
    ``reject_reason`` is all None must not change it)."""
    names = [*COLUMNS, *(["num_cached_tokens"] if cached else []), "ttft_s", "e2e_s", "tpot_s",
             "normalized_latency_s_per_token", "itl_max_s"]
    ints = {"request_id", "replica", "num_prompt_tokens", "num_text_tokens", "num_mm_tokens",
            "num_media_items", "num_output_tokens", "num_preemptions", "num_cached_tokens"}
    return pa.schema([(n, pa.string() if n in STRINGS else pa.int64() if n in ints else pa.float64())
                      for n in names])


class RequestSink:
    """Ended requests -> requests.parquet at ``path`` (see the module docstring)."""

    def __init__(self, path: Path, cached: bool, itl: "ItlStream", sketch: "SummarySketch | None" = None):
        self.path = Path(path)
        # the spill folder holding ``path`` lives as long as this sink (a RunOutput holds it)
        weakref.finalize(self, shutil.rmtree, self.path.parent, True)
        self.cached = cached
        self.itl = itl
        self.sketch = sketch  # sim.exact_summary false: the summary's statistics, taken per row group
        self.schema = requests_schema(cached)
        self._writer = pq.ParquetWriter(self.path, self.schema)
        self._rows: list[tuple] = []
        self._itl_max: list[float] = []
        self.num_rows = 0

    def add(self, seq) -> None:
        """Record ``seq`` (ended, or in its final status at the end of the run)."""
        self._itl_max.append(self.itl.consume(seq) if seq.status == "finished" else math.nan)
        self._rows.append(row_of(seq))
        if len(self._rows) >= ROWS_PER_GROUP:
            self._flush()

    def _flush(self) -> None:
        if not self._rows:
            return
        df = frame_of(self._rows, np.asarray(self._itl_max, dtype=float), self.cached)
        if self.sketch is not None:
            self.sketch.add_frame(df)
        self._writer.write_table(pa.Table.from_pandas(df, schema=self.schema, preserve_index=False))
        self.num_rows += len(self._rows)
        self._rows, self._itl_max = [], []

    def close(self) -> None:
        self._flush()
        if self.num_rows == 0:
            self._writer.write_table(self.schema.empty_table())
        self._writer.close()


class ItlStream:
    """ITL gaps of finished requests, spilled to files in ``folder`` (module docstring), or
    with ``exact`` false taken into a :class:`Sketch` per modality instead."""

    def __init__(self, folder: Path, exact: bool = True):
        self.folder = Path(folder)
        self.sketches: dict[int, Sketch] | None = None if exact else {}
        self.codes: dict[str, int] = {}  # modality -> code (file index)
        self._buffers: dict[int, list] = {}  # code -> [values arrays, counts arrays, size]
        self._leads: dict[int, list] = {}  # code -> lead gaps (count 1 each) not yet spilled
        self._num_leads = 0
        self._ends: dict[int, object] = {}  # id -> every StepEnds a consumed span used

    def consume(self, seq) -> float:
        """Take a finished request's gaps; return its largest (NaN if it has none)."""
        code = self.codes.setdefault(seq.request.modality, len(self.codes))
        prev = seq.first_token_at
        leads = self._leads.setdefault(code, [])
        num_leads = len(leads)
        largest = -math.inf
        for span in seq.token_spans:
            if isinstance(span, tuple):
                ends, first, stop = span
                base = ends.base
                leads.append(ends[first - base] - prev)
                if stop - first > 1:
                    largest = max(largest, float(np.diff(ends[first - base: stop - base]).max()))
                    ends.cover.append((first + 1, stop, code))
                prev = ends[stop - 1 - base]
                ends.unpin(first)
                self._ends[id(ends)] = ends
            else:
                leads.append(span - prev)
                prev = span
        if len(leads) > num_leads:
            largest = max(largest, max(leads[num_leads:]))
            self._num_leads += len(leads) - num_leads
            if self._num_leads >= SPILL_EVERY:
                self._spill_leads()
        return largest if largest > -math.inf else math.nan

    def _spill_leads(self) -> None:
        leads, self._leads, self._num_leads = self._leads, {}, 0
        for code, values in leads.items():
            if values:
                self._put(code, np.asarray(values, dtype=float), None)

    def on_trim(self, ends, new_base: int) -> None:
        """Steps up to ``new_base`` of ``ends`` are final: spill their gaps' counts."""
        base = ends.base
        if new_base <= base or not ends.cover:
            return
        gaps = np.diff(np.asarray(ends[: new_base - base + 1], dtype=float))  # gap j = base + 1 + index
        width = gaps.size
        keep = []
        by_code: dict[int, np.ndarray] = {}
        for lo, hi, code in ends.cover:
            a, b = lo - base - 1, min(hi, new_base + 1) - base - 1
            if a < b:
                diff = by_code.get(code)
                if diff is None:
                    diff = by_code[code] = np.zeros(width + 1, dtype=np.int64)
                diff[a] += 1
                diff[b] -= 1
            if hi > new_base + 1:
                keep.append((max(lo, new_base + 1), hi, code))
        ends.cover = keep
        for code, diff in by_code.items():
            counts = np.cumsum(diff[:width])
            used = counts > 0
            self._put(code, gaps[used], counts[used].astype(np.uint32))

    def finish(self) -> None:
        """At the end of the run: spill every remaining step and flush the buffers."""
        for ends in self._ends.values():
            self.on_trim(ends, ends.base + len(ends) - 1)
        self._spill_leads()
        for code in list(self._buffers):
            self._spill(code)

    def _put(self, code: int, values: np.ndarray, counts) -> None:
        if counts is None:
            counts = np.ones(values.size, dtype=np.uint32)
        buf = self._buffers.setdefault(code, [[], [], 0])
        buf[0].append(values)
        buf[1].append(counts)
        buf[2] += values.size
        if buf[2] >= SPILL_EVERY:
            self._spill(code)

    def _spill(self, code: int) -> None:
        values, counts, _ = self._buffers.pop(code)
        if values and self.sketches is not None:
            self.sketches.setdefault(code, Sketch()).add(np.concatenate(values), np.concatenate(counts))
        elif values:
            with open(self.folder / f"itl_{code}.f8", "ab") as f:
                np.concatenate(values).astype(np.float64).tofile(f)
            with open(self.folder / f"itl_{code}.u4", "ab") as f:
                np.concatenate(counts).astype(np.uint32).tofile(f)

    def _chunks(self, codes):
        """(values, counts) chunks of the spilled gaps of ``codes``."""
        for code in codes:
            vpath, cpath = self.folder / f"itl_{code}.f8", self.folder / f"itl_{code}.u4"
            if not vpath.exists():
                continue
            # read, not memory-mapped: a mapped file's touched pages would count as resident
            with open(vpath, "rb") as vf, open(cpath, "rb") as cf:
                while True:
                    values = np.fromfile(vf, dtype=np.float64, count=SPILL_EVERY)
                    if not values.size:
                        break
                    yield values, np.fromfile(cf, dtype=np.uint32, count=values.size).astype(np.int64)

    def stats(self) -> dict:
        """The ``itl_s`` block of every finished request."""
        if self.sketches is not None:
            return Sketch.merged(self.sketches.values()).stats()
        return spilled_stats(lambda: self._chunks(self.codes.values()))

    def by_modality(self, modalities) -> dict:
        """The ``itl_s`` block per modality of ``modalities``."""
        out = {}
        for m in modalities:
            code = self.codes.get(str(m))
            if self.sketches is not None:
                out[str(m)] = self.sketches.get(code, Sketch()).stats()
                continue
            out[str(m)] = spilled_stats(lambda: self._chunks(() if code is None else (code,)))
        return out


def _key(values: np.ndarray) -> np.ndarray:
    """A monotone bucket of non-negative floats: sign, exponent and 12 mantissa bits."""
    return values.view(np.int64) >> SELECT_SHIFTS[0]


# The percentile ranks are found by radix selection on the gaps' bit patterns (monotone in
# the value for non-negative floats): first the bucket of the top 24 bits holding each rank,
# then, within it, the bucket of the next 20 bits, then the exact value. Each level keeps
# at most 2**20 counts per rank, however many gaps tie: a fleet's identical replicas make
# hundreds of millions of gaps fall in a few buckets (collecting them was 1.5 GB at 10M).
SELECT_SHIFTS = (40, 20, 0)


def _counts_by_key(counts_of: dict, keys: np.ndarray, counts: np.ndarray) -> None:
    """Add ``counts`` into ``counts_of`` (key -> count) under their ``keys``."""
    uniq, inverse = np.unique(keys, return_inverse=True)
    for k, c in zip(uniq.tolist(), np.bincount(inverse, weights=counts).tolist()):
        counts_of[k] = counts_of.get(k, 0) + int(c)


def _locate(counts_of: dict, rank: int) -> tuple[int, int]:
    """(the key holding ``rank`` in key order, the rank within it)."""
    order = sorted(counts_of)
    cum = np.cumsum([counts_of[k] for k in order])
    i = int(np.searchsorted(cum, rank, side="right"))
    return order[i], rank - (int(cum[i - 1]) if i else 0)


def _select(chunks, buckets: dict, ranks, also=None) -> dict[int, float]:
    """The value of each rank of ``ranks`` (0-based, in the weighted sorted order) among the
    gaps ``chunks()`` yields, ``buckets``: their counts by top-level key (pass 1); ``also``
    sees each chunk ``(values, counts)`` of the first pass."""
    where = {r: _locate(buckets, r) for r in ranks}  # rank -> (key at this level, rank within)
    for level, shift in enumerate(SELECT_SHIFTS[1:]):
        up = SELECT_SHIFTS[level]
        finer: dict[int, dict] = {k: {} for k, _ in where.values()}
        for values, counts in chunks():
            if also is not None and level == 0:
                also(values, counts)
            bits = values.view(np.int64)
            top = bits >> up
            for k, counts_of in finer.items():
                hit = top == k
                if hit.any():
                    _counts_by_key(counts_of, bits[hit] >> shift, counts[hit])
        where = {r: _locate(finer[k], within) for r, (k, within) in where.items()}
    return {r: float(np.array([k], dtype=np.int64).view(np.float64)[0]) for r, (k, _) in where.items()}


def spilled_stats(chunks) -> dict[str, float | None]:
    """:func:`~lmmsim.metrics.itl.weighted_stats` of the gaps ``chunks()`` yields, in passes
    over them: pass 1 counts per bucket (:func:`_key`) and sums; the next ones select the
    values at the percentile ranks (:func:`_select`), the first of them also summing the
    squared deviations."""
    total, sums, top = 0, [], -math.inf
    buckets: dict[int, int] = {}
    for values, counts in chunks():
        total += int(counts.sum())
        sums.append(float((values * counts).sum()))
        top = max(top, float(values.max()))
        _counts_by_key(buckets, _key(values), counts)
    if total == 0:
        return {"mean": None, **{k: None for k, _ in QUANTILES}, "max": None, "std": None}
    mean = math.fsum(sums) / total
    ranks = set()
    for _, q in QUANTILES:
        h = (total - 1) * q / 100
        below = int(np.floor(h))
        ranks |= {below, min(below + 1, total - 1)}
    dev = []
    at = _select(chunks, buckets, ranks, also=lambda v, c: dev.append(float((c * (v - mean) ** 2).sum())))
    out: dict[str, float | None] = {"mean": mean}
    for key, q in QUANTILES:
        h = (total - 1) * q / 100
        below = int(np.floor(h))
        a, b = at[below], at[min(below + 1, total - 1)]
        out[key] = float(a + (b - a) * (h - below))
    out["max"] = top
    out["std"] = float(np.sqrt(math.fsum(dev) / total))
    return out


def spill_folder(near: Path | None = None) -> Path:
    """A fresh temporary folder for a run's spill files (beside ``near``, else the system's)."""
    return Path(tempfile.mkdtemp(prefix=".lmmsim-run-", dir=near))


class FileColumns:
    """Columns of a written requests.parquet, one at a time, in request-id order without the
    ``not_arrived`` rows (index: positions in id order), as the in-memory frame's. Each column
    is read a row group at a time into its place: one array per column, no Arrow copy of it."""

    def __init__(self, path: Path):
        self.path = path
        self.file = pq.ParquetFile(path)
        self.names = set(self.file.schema_arrow.names)
        self.num_rows = self.file.metadata.num_rows
        order = np.argsort(self._gather("request_id", None), kind="stable")
        self.rank = np.empty(self.num_rows, dtype=np.int64)  # row of the file -> its place in id order
        self.rank[order] = np.arange(self.num_rows)
        del order
        status = self._gather("status", self.rank)
        self.num_not_arrived = int(np.count_nonzero(status == "not_arrived"))
        self.keep = None if not self.num_not_arrived else np.flatnonzero(status != "not_arrived")

    def _gather(self, name: str, rank) -> np.ndarray:
        """Column ``name``, rows put at ``rank`` (file order if None)."""
        string = name in STRINGS
        out = np.empty(self.num_rows, dtype=object if string else self.file.schema_arrow.field(name).type.to_pandas_dtype())
        at = 0
        for g in range(self.file.num_row_groups):
            col = self.file.read_row_group(g, columns=[name]).column(0)
            if string:  # through the dictionary: one Python object per distinct value, not per row
                col = col.dictionary_encode().combine_chunks()
                words = np.array([*col.dictionary.to_pylist(), None], dtype=object)
                values = words[col.indices.fill_null(-1).to_numpy(zero_copy_only=False)]
            else:
                values = col.to_numpy()
            if rank is None:
                out[at: at + len(values)] = values
            else:
                out[rank[at: at + len(values)]] = values
            at += len(values)
        return out

    def __call__(self, name: str) -> pd.Series:
        values = self._gather(name, self.rank)
        if self.keep is not None:
            values = values[self.keep]
        if name in STRINGS:  # categorical: a byte a row, and the same comparisons and maps
            values = pd.Categorical(values)
        return pd.Series(values, index=self.keep, name=name)


class Sketch:
    """Streaming statistics of a weighted sample: exact count and max, mean and std merged
    chunk by chunk (Chan et al.; equal to float rounding); each percentile interpolated
    between the two ranks around it as numpy does, a rank's value read as the middle of its
    bucket, 2**-8 wide relative to the value (:data:`SKETCH_SHIFT`): within 0.2% of it."""

    def __init__(self):
        self.n, self.mean, self.m2, self.top = 0, 0.0, 0.0, -math.inf
        self.buckets: dict[int, int] = {}

    def add(self, values: np.ndarray, counts=None) -> None:
        values = np.asarray(values, dtype=float)
        values = values[np.isfinite(values)] if counts is None else values
        if values.size == 0:
            return
        counts = np.ones(values.size, dtype=np.int64) if counts is None else np.asarray(counts, dtype=np.int64)
        n = int(counts.sum())
        mean = float((values * counts).sum() / n)
        m2 = float((counts * (values - mean) ** 2).sum())
        total = self.n + n
        delta = mean - self.mean
        self.mean += delta * n / total
        self.m2 += m2 + delta * delta * self.n * n / total
        self.n = total
        self.top = max(self.top, float(values.max()))
        keys, inverse = np.unique(np.abs(values).view(np.int64) >> SKETCH_SHIFT, return_inverse=True)
        for k, c in zip(keys.tolist(), np.bincount(inverse, weights=counts).tolist()):
            self.buckets[k] = self.buckets.get(k, 0) + int(c)

    @classmethod
    def merged(cls, parts) -> "Sketch":
        """One sketch of the samples of ``parts``."""
        out = cls()
        for p in parts:
            if p.n == 0:
                continue
            total = out.n + p.n
            delta = p.mean - out.mean
            out.mean += delta * p.n / total
            out.m2 += p.m2 + delta * delta * out.n * p.n / total
            out.n = total
            out.top = max(out.top, p.top)
            for k, c in p.buckets.items():
                out.buckets[k] = out.buckets.get(k, 0) + c
        return out

    def stats(self) -> dict[str, float | None]:
        if self.n == 0:
            return {"mean": None, **{k: None for k, _ in QUANTILES}, "max": None, "std": None}
        order = sorted(self.buckets)
        cum = np.cumsum([self.buckets[k] for k in order])
        out: dict[str, float | None] = {"mean": self.mean}

        def at(rank: int) -> float:  # the middle of the bucket holding the value of that rank
            k = order[int(np.searchsorted(cum, rank, side="right"))]
            lo, hi = np.array([k << SKETCH_SHIFT, (k + 1) << SKETCH_SHIFT]).view(np.float64)
            return min(float((lo + hi) / 2), self.top)

        for key, q in QUANTILES:  # interpolated between ranks, as numpy's percentiles
            h = (self.n - 1) * q / 100
            below = int(np.floor(h))
            a, b = at(below), at(min(below + 1, self.n - 1))
            out[key] = a + (b - a) * (h - below)
        out["max"] = self.top
        out["std"] = math.sqrt(self.m2 / self.n)
        return out


#: Mantissa bits a :class:`Sketch` bucket drops (52 - 8: buckets 2**-8 wide, relative).
SKETCH_SHIFT = 44


class SummarySketch:
    """The summary's request statistics, taken one written row group at a time
    (``sim.exact_summary: false``); :meth:`summary` assembles them as
    :func:`~lmmsim.metrics.summary.summarize` does, percentiles from :class:`Sketch`."""

    def __init__(self, ttft_slo: dict, tpot_slo):
        self.ttft_slo, self.tpot_slo = ttft_slo, tpot_slo
        self.counts: dict[str, int] = {}
        self.start, self.last = math.inf, -math.inf
        self.sums = {"num_prompt_tokens": 0, "num_output_tokens": 0, "num_cached_tokens": 0, "hits": 0}
        self.met = 0
        self.excess = [0.0, 0]
        self.groups: dict[str, dict] = {}  # modality -> {requests, finished, met, sketches}
        self.latency = {name: Sketch() for name in LATENCIES}
        self.cached = False

    def add_frame(self, df: pd.DataFrame) -> None:
        from lmmsim.metrics.summary import slo_met

        for status, n in df["status"].value_counts().items():
            self.counts[status] = self.counts.get(status, 0) + int(n)
        df = df[df["status"].ne("not_arrived")]
        if not len(df):
            return
        finished = df["status"].eq("finished")
        self.start = min(self.start, float(df["arrived_at"].min()))
        if finished.any():
            self.last = max(self.last, float(df.loc[finished, "finished_at"].max()))
        met = slo_met(df, self.ttft_slo, self.tpot_slo)
        self.met += int(met.sum())
        done = df[finished]
        for c in ("num_prompt_tokens", "num_output_tokens"):
            self.sums[c] += int(done[c].sum())
        if "num_cached_tokens" in df:
            self.cached = True
            self.sums["num_cached_tokens"] += int(done["num_cached_tokens"].sum())
            self.sums["hits"] += int(done["num_cached_tokens"].gt(0).sum())
        if self.ttft_slo:
            excess = done["ttft_s"] / done["modality"].map(self.ttft_slo).astype(float) - 1
            missed = excess[excess > 0]
            self.excess = [self.excess[0] + float(missed.sum()), self.excess[1] + len(missed)]
        for name in LATENCIES:
            self.latency[name].add(done[name].to_numpy())
        for m, part in df.groupby("modality", sort=False):
            g = self.groups.setdefault(str(m), {"requests": 0, "finished": 0, "met": 0,
                                                "latency": {name: Sketch() for name in LATENCIES}})
            fin = part["status"].eq("finished")
            g["requests"] += len(part)
            g["finished"] += int(fin.sum())
            g["met"] += int(met[part.index].sum())
            for name in LATENCIES:
                g["latency"][name].add(part.loc[fin, name].to_numpy())

    def summary(self, *, gpu_busy_s, end_at, ttft_slo, tpot_slo, num_preemptions, itl=None,
                prefix_cache_evictions=None) -> dict:
        c = self.counts
        arrived = sum(n for s, n in c.items() if s != "not_arrived")
        finished = c.get("finished", 0)
        start = self.start if arrived else 0.0
        last = self.last if finished else start
        stop = end_at if c.get("unfinished", 0) else last
        window = max(stop - start, 0.0)

        def rate(x: float) -> float | None:
            return x / window if window > 0 else None

        out = {"num_requests": sum(c.values()), "num_finished": finished, "num_rejected": c.get("rejected", 0),
               "num_unfinished": c.get("unfinished", 0), "num_not_arrived": c.get("not_arrived", 0),
               "window_s": window, **{n: s.stats() for n, s in self.latency.items()},
               **({} if itl is None else {"itl_s": itl.stats()}),
               "throughput": {"requests_per_s": rate(float(finished)),
                              "input_tokens_per_s": rate(float(self.sums["num_prompt_tokens"])),
                              "output_tokens_per_s": rate(float(self.sums["num_output_tokens"]))},
               "goodput_requests_per_s": rate(float(self.met)),
               "slo_attainment": self.met / arrived if arrived else None,
               "slo_violation_severity": (self.excess[0] / self.excess[1] if self.excess[1] else 0.0)
               if ttft_slo else None,
               "gpu_utilization": {
                   "per_gpu": [min(b / window, 1.0) if window > 0 else 0.0 for b in gpu_busy_s],
                   "mean": (sum(min(b / window, 1.0) for b in gpu_busy_s) / len(gpu_busy_s))
                   if window > 0 and gpu_busy_s else 0.0},
               "num_preemptions": int(num_preemptions), "by_modality": {}}
        if self.cached:
            prompt, cached = self.sums["num_prompt_tokens"], self.sums["num_cached_tokens"]
            out["prefix_cache"] = {"hit_rate": cached / prompt if prompt else None,
                                   "hit_requests_share": self.sums["hits"] / finished if finished else None,
                                   "cached_tokens": cached,
                                   "evictions": None if prefix_cache_evictions is None else int(prefix_cache_evictions)}
        for m in sorted(self.groups):
            g = self.groups[m]
            out["by_modality"][m] = {"num_requests": g["requests"], "num_finished": g["finished"],
                                     **{n: s.stats() for n, s in g["latency"].items()},
                                     **({} if itl is None else {"itl_s": itl.by_modality([m])[m]}),
                                     "slo_attainment": g["met"] / g["requests"]}
        return out

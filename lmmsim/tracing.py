"""Chrome / Perfetto traces of a run's step log, and reading them back.

:func:`write_chrome_trace` turns :class:`~lmmsim.engine.steplog.StepRecord`\\ s
into the Chrome "Trace Event" JSON object format, which https://ui.perfetto.dev
and ``chrome://tracing`` open directly::

    {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}

What is in the file:

* one process, ``pid`` 1, named by ``title`` (``process_name`` metadata);
* one thread per track (``worker``), with ``thread_name`` and
  ``thread_sort_index`` metadata. Worker threads get ``tid`` 1, 2, ... in the
  order of :func:`worker_sort_key` (below); ``tid`` 0 is the ``requests``
  marker track, present only when a requests frame is given;
* *lanes*: the JSON format cannot show overlapping slices on one thread
  (Perfetto draws them as false nesting), so a worker whose records overlap
  (concurrent transfers on a link, say) gets one thread per concurrent slot.
  Each record takes the lowest free lane when it starts (greedy, records in
  start order); lane 0 keeps the worker's name, lane ``k`` is named
  ``"<worker> #k"`` and sorts right after it, and its events carry
  ``args.worker`` so that :func:`read_chrome_trace` folds lanes back together.
  No two ``X`` events of one thread overlap (``ts + dur`` of one is at most the
  next one's ``ts``);
* one complete event (``"ph": "X"``) per record: ``ts``/``dur`` in
  microseconds of *simulated* time, ``name`` the kind plus the request ids
  (``"prefill r3,4"``; past four ids ``"decode r0,1,2,3 (+12)"``), ``cat`` the
  kind, ``args`` ``{request_ids, num_tokens, batch_size, start_at, end_at}``.
  ``start_at``/``end_at`` are the record's own seconds, kept so that
  :func:`read_chrome_trace` gives back the records bit for bit (a
  seconds -> microseconds -> seconds round trip is not exact in floating point);
* counter events (``"ph": "C"``), one pair per engine step at its start, from
  the records' ``kv_blocks_used`` / ``num_waiting`` / ``num_running``:
  ``"<engine> KV"`` with ``{"blocks used": n}`` and ``"<engine> queue"`` with
  ``{"waiting": w, "running": r}`` (Perfetto shows the tracks
  ``"replica0 KV blocks used"``, ``"replica0 queue waiting"``, ...). The engine
  is the worker without a ``/stageN`` suffix; timestamps rise per counter;
* with ``requests``: one instant event (``"ph": "i"``, thread scope) per
  request arrival (``"arrive r<id>"``) and per first token
  (``"first token r<id>"``) on the ``requests`` track. Requests that never got
  a first token have no second marker. No flow arrows are drawn.

Left out: per-token events inside a fast-forwarded ``decode_run`` (it stays
one slice, with one counter sample at its start), completion markers. The
file holds no wall-clock time or host name, so the same run writes the same
bytes. A path ending in ``.gz`` is written gzip-compressed (Perfetto opens
``.json.gz``).

Worker order (:func:`worker_sort_key`): encoders, then prefill workers and
monolithic replicas, then decode workers, then links, then any other name.
Within a group names sort *naturally* (digit runs compare as numbers, so
``replica2`` < ``replica10`` and ``prefill0/stage2`` < ``prefill0/stage10``),
a worker's own track before its stages. Links ``link:SRC->DST`` sort by the
source's place in that order, then by the destination's.
"""

from __future__ import annotations

import gzip
import io
import json
import math
import re
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from lmmsim import __version__
from lmmsim.engine.steplog import STEP_COLUMNS, StepRecord

PID = 1
REQUESTS_TRACK = "requests"
REQUESTS_TID = 0
_US = 1e6  # microseconds per second
_MAX_IDS_IN_NAME = 4

_DIGITS = re.compile(r"(\d+)")
# (prefix, rank): first match wins; "encoder" before "encode" is harmless, both rank 0.
_ROLE_RANKS: tuple[tuple[str, int], ...] = (
    ("encoder", 0),
    ("encode", 0),
    ("prefill", 1),
    ("replica", 1),
    ("decode", 2),
)
_LINK_RANK = 3
_OTHER_RANK = 4


def _natural(name: str) -> tuple:
    """``"prefill0/stage10"`` -> ``("prefill", 0, "/stage", 10, "")``: strings and ints alternate."""
    parts = _DIGITS.split(name)
    return tuple(int(p) if i % 2 else p for i, p in enumerate(parts))


def _node_key(name: str) -> tuple:
    for prefix, rank in _ROLE_RANKS:
        if name.startswith(prefix):
            return (rank, _natural(name))
    return (_OTHER_RANK, _natural(name))


def worker_sort_key(name: str) -> tuple:
    """Sort key giving the module's worker order (see the module docstring)."""
    if name.startswith("link:"):
        src, sep, dst = name[5:].partition("->")
        return (_LINK_RANK, _node_key(src), _node_key(dst) if sep else (-1, ()))
    rank, natural = _node_key(name)
    return (rank, natural, ())


def order_workers(names: Iterable[str]) -> list[str]:
    """Distinct ``names`` in the module's worker order."""
    return sorted(set(names), key=worker_sort_key)


def _event_name(kind: str, ids: tuple[int, ...]) -> str:
    if not ids:
        return kind
    shown = ",".join(str(i) for i in ids[:_MAX_IDS_IN_NAME])
    if len(ids) > _MAX_IDS_IN_NAME:
        return f"{kind} r{shown} (+{len(ids) - _MAX_IDS_IN_NAME})"
    return f"{kind} r{shown}"


def _meta(name: str, tid: int | None, args: dict) -> dict:
    event = {"ph": "M", "pid": PID, "name": name, "args": args}
    if tid is not None:
        event["tid"] = tid
    return event


def _request_markers(requests: pd.DataFrame) -> list[dict]:
    missing = [c for c in ("request_id", "arrived_at", "first_token_at") if c not in requests.columns]
    if missing:
        raise KeyError(f"requests frame lacks column(s) {missing}")
    events = []
    ids = requests["request_id"].tolist()
    for column, label in (("arrived_at", "arrive"), ("first_token_at", "first token")):
        for rid, at in zip(ids, requests[column].tolist()):
            if at is None or not math.isfinite(at):
                continue
            events.append(
                {
                    "ph": "i",
                    "s": "t",
                    "pid": PID,
                    "tid": REQUESTS_TID,
                    "name": f"{label} r{int(rid)}",
                    "cat": "request",
                    "ts": float(at) * _US,
                    "args": {"request_id": int(rid), "at": float(at)},
                }
            )
    return events


def lane_name(worker: str, lane: int) -> str:
    """Thread name of ``worker``'s lane ``lane``: the worker itself for lane 0, else ``"<worker> #<lane>"``."""
    return worker if lane == 0 else f"{worker} #{lane}"


def assign_lanes(records: list) -> tuple[list[int], dict[str, int]]:
    """Lane of each record (lowest lane of its worker free at its start) and lanes per worker.

    Records are taken in start order (ties: end order, then list order); a lane is
    free once its last record ended at or before the start.
    """
    order = sorted(range(len(records)),
                   key=lambda i: (float(records[i].start_at), float(records[i].end_at), i))
    ends: dict[str, list[float]] = {}  # worker -> end of each lane's last record
    lanes = [0] * len(records)
    for i in order:
        r = records[i]
        start, end = float(r.start_at), float(r.end_at)
        lane_ends = ends.setdefault(r.worker, [])
        for k, busy_to in enumerate(lane_ends):
            if busy_to <= start:
                break
        else:
            k = len(lane_ends)
            lane_ends.append(end)
        lane_ends[k] = end
        lanes[i] = k
    return lanes, {w: len(v) for w, v in ends.items()}


def _slice(r, tid: int, lane: int) -> dict:
    start, end = float(r.start_at), float(r.end_at)
    ids = tuple(int(i) for i in r.request_ids)
    ts, end_us = start * _US, end * _US  # dur from the rounded ends: ts + dur never passes the next ts
    args = {
        "request_ids": list(ids),
        "num_tokens": int(r.num_tokens),
        "batch_size": int(r.batch_size),
        "start_at": start,
        "end_at": end,
    }
    if lane:
        args["worker"] = r.worker
    return {"ph": "X", "pid": PID, "tid": tid, "name": _event_name(r.kind, ids), "cat": r.kind,
            "ts": ts, "dur": max(0.0, end_us - ts), "args": args}


_STAGE_SUFFIX = re.compile(r"/stage\d+$")


def _counters(records: list) -> list[dict]:
    """KV and queue counter events, per engine in time order (see the module docstring)."""
    samples = [r for r in records if getattr(r, "kv_blocks_used", -1) >= 0 or getattr(r, "num_waiting", -1) >= 0]
    samples.sort(key=lambda r: (worker_sort_key(_STAGE_SUFFIX.sub("", r.worker)), float(r.start_at)))
    events = []
    for r in samples:
        engine = _STAGE_SUFFIX.sub("", r.worker)
        ts = float(r.start_at) * _US
        if r.kv_blocks_used >= 0:
            events.append({"ph": "C", "pid": PID, "name": f"{engine} KV", "cat": "counter", "ts": ts,
                           "args": {"blocks used": int(r.kv_blocks_used)}})
        if r.num_waiting >= 0:
            events.append({"ph": "C", "pid": PID, "name": f"{engine} queue", "cat": "counter", "ts": ts,
                           "args": {"waiting": int(r.num_waiting), "running": int(max(r.num_running, 0))}})
    return events


def write_chrome_trace(
    records: Iterable[StepRecord],
    path: Path,
    *,
    title: str = "lmmsim",
    requests: pd.DataFrame | None = None,
) -> None:
    """Write ``records`` (and optional request markers) as a Chrome/Perfetto trace JSON at ``path``.

    Raises ``ValueError`` for a record with a non-finite time or ``end_at < start_at``.
    Overwrites ``path``; the parent folder is created.
    """
    records = list(records)
    for r in records:
        start, end = float(r.start_at), float(r.end_at)
        if not (math.isfinite(start) and math.isfinite(end)) or end < start:
            raise ValueError(f"step record with bad interval [{start}, {end}] on {r.worker!r}")
    workers = order_workers(r.worker for r in records)
    lanes, num_lanes = assign_lanes(records)
    tids: dict[tuple[str, int], int] = {}
    for w in workers:
        for k in range(num_lanes[w]):
            tids[(w, k)] = len(tids) + 1

    events: list[dict] = [
        _meta("process_name", None, {"name": title}),
        _meta("process_sort_index", None, {"sort_index": 0}),
    ]
    if requests is not None:
        events.append(_meta("thread_name", REQUESTS_TID, {"name": REQUESTS_TRACK}))
        events.append(_meta("thread_sort_index", REQUESTS_TID, {"sort_index": REQUESTS_TID}))
    for (w, k), tid in tids.items():
        events.append(_meta("thread_name", tid, {"name": lane_name(w, k)}))
        events.append(_meta("thread_sort_index", tid, {"sort_index": tid}))

    for r, lane in zip(records, lanes):
        events.append(_slice(r, tids[(r.worker, lane)], lane))
    if requests is not None:
        events.extend(_request_markers(requests))
    events.extend(_counters(records))

    doc = {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "title": title,
            "generator": f"lmmsim {__version__}",
            "clock": "simulated time; ts and dur in microseconds",
            "workers": workers,
            "num_steps": len(records),
        },
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(doc, separators=(",", ":"), allow_nan=False)
    if path.suffix == ".gz":
        with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", filename="", mtime=0) as gz:
            gz.write(text.encode("utf-8"))
    else:
        path.write_text(text, encoding="utf-8")


def _load(path: Path):
    path = Path(path)
    if path.suffix == ".gz":
        with gzip.open(path, "rb") as gz:
            return json.load(io.TextIOWrapper(gz, encoding="utf-8"))
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def read_chrome_trace(path: Path) -> pd.DataFrame:
    """The step events (``"ph": "X"``) of a trace, one row each, in file order.

    Columns ``worker, start_at, end_at, kind, request_ids, num_tokens,
    batch_size`` (``request_ids`` a tuple of ints), equal to the records
    :func:`write_chrome_trace` was given. Traces from other tools work too:
    times then come from ``ts``/``dur``, the kind from ``cat`` (else the
    name's first word), missing counts read as 0. ``frame.attrs["workers"]``
    lists the workers with steps in the trace's track order.
    """
    doc = _load(path)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    thread_names: dict[tuple, str] = {}
    sort_index: dict[tuple, float] = {}
    for e in events:
        if e.get("ph") != "M":
            continue
        key = (e.get("pid"), e.get("tid"))
        if e.get("name") == "thread_name":
            thread_names[key] = str(e.get("args", {}).get("name"))
        elif e.get("name") == "thread_sort_index":
            sort_index[key] = e.get("args", {}).get("sort_index", 0)

    cols: dict[str, list] = {c: [] for c in STEP_COLUMNS}
    seen: dict[str, tuple] = {}
    for e in events:
        if e.get("ph") != "X":
            continue
        key = (e.get("pid"), e.get("tid"))
        args = e.get("args") or {}
        worker = str(args["worker"]) if "worker" in args else thread_names.get(key, f"pid{key[0]}/tid{key[1]}")
        ts = float(e.get("ts", 0.0))
        dur = float(e.get("dur", 0.0))
        start = float(args["start_at"]) if "start_at" in args else ts / _US
        end = float(args["end_at"]) if "end_at" in args else (ts + dur) / _US
        kind = e.get("cat") or str(e.get("name", "")).split(" ")[0]
        cols["worker"].append(worker)
        cols["start_at"].append(start)
        cols["end_at"].append(end)
        cols["kind"].append(kind)
        cols["request_ids"].append(tuple(int(i) for i in args.get("request_ids", ())))
        cols["num_tokens"].append(int(args.get("num_tokens", 0)))
        cols["batch_size"].append(int(args.get("batch_size", 0)))
        if worker not in seen:
            seen[worker] = (0, sort_index[key], key[1] or 0) if key in sort_index else (1, worker_sort_key(worker))

    frame = pd.DataFrame(
        {
            "worker": pd.Series(cols["worker"], dtype=object),
            "start_at": pd.Series(cols["start_at"], dtype="float64"),
            "end_at": pd.Series(cols["end_at"], dtype="float64"),
            "kind": pd.Series(cols["kind"], dtype=object),
            "request_ids": pd.Series(cols["request_ids"], dtype=object),
            "num_tokens": pd.Series(cols["num_tokens"], dtype="int64"),
            "batch_size": pd.Series(cols["batch_size"], dtype="int64"),
        },
        columns=list(STEP_COLUMNS),
    )
    frame.attrs["workers"] = sorted(seen, key=lambda w: seen[w])
    return frame

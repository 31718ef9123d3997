"""Public production traces as lmmsim requests: Azure LLM/LMM, Mooncake, BurstGPT.

``workload.arrival: {kind: trace, path, format, speedup, start_s, duration_s, image}``
reads any of these (``format`` omitted: detected from the header / first line):

``lmmsim``
    lmmsim's own JSONL/CSV trace (:mod:`lmmsim.workload.trace`).
``azure``
    Azure LLM inference trace 2023 (Splitwise, ISCA'24) CSV,
    ``TIMESTAMP,ContextTokens,GeneratedTokens`` (``TIMESTAMP`` a date-time),
    and the multimodal 2024 variant (ModServe) with ``NumImages``: each image
    becomes an image of ``image: {width, height}`` (default 1024 x 1024) placed
    before the text; ``ContextTokens`` is taken as the text prompt.
``mooncake``
    Mooncake FAST'25 JSONL: ``timestamp`` (ms), ``input_length``,
    ``output_length``, ``hash_ids`` (one id per 512-token prefix block; equal
    ids are a reusable KV prefix). ``hash_ids`` are kept on each request
    (:attr:`Request.prefix_hash_ids`) for a later prefix cache; no engine uses
    them yet.
``burstgpt``
    BurstGPT CSV: ``Timestamp`` (s), ``Model``, ``Request tokens``,
    ``Response tokens``, ``Total tokens``, ``Log Type``. Rows with 0 response
    tokens are the trace's failed requests and are skipped; ``Model`` becomes
    the request's class name.

Trace time (``tau``, seconds) is the file's timestamp, or for Azure the
seconds since the first row. ``start_s`` / ``duration_s`` keep the rows with
``start_s <= tau < start_s + duration_s``; a request then arrives at
``(tau - start_s) / speedup``. Files may be gzip-compressed (``.gz``).
Requests are numbered 0, 1, ... in arrival order (rows are sorted stably by
time). A malformed row raises :class:`UserError` keyed ``<path>:<line>`` that
names the expected columns.
"""

from __future__ import annotations

import csv
import gzip
import json
import math
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from lmmsim.errors import UserError, choices
from lmmsim.workload.request import PromptSegment, Request, build_segments, prompt_parts
from lmmsim.workload import trace as trace_rows
from lmmsim.workload.trace import MediaFactory, read_trace

FORMATS = ("lmmsim", "azure", "mooncake", "burstgpt")
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
AZURE_OPTIONAL = ("NumImages",)
MOONCAKE_FIELDS = ("timestamp", "input_length", "output_length")
MOONCAKE_OPTIONAL = ("hash_ids",)
BURSTGPT_COLUMNS = ("Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type")
DEFAULT_IMAGE = (1024, 1024)


# A problem in one row; re-raised as a UserError naming the file, line and expected columns
# (the row readers of lmmsim's own trace raise the same class).
_Bad = trace_rows.RowError


def _open(path: Path):
    if path.suffix.lower() == ".gz":
        return gzip.open(path, "rt", newline="", encoding="utf-8")
    return open(path, newline="", encoding="utf-8")


def _kind(path: Path) -> str:
    """``.csv`` or ``.jsonl`` (a ``.gz`` suffix looked through)."""
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    return suffixes[-1] if suffixes else ""


def detect_format(path: Path) -> str:
    """The trace format of ``path`` from its header row (CSV) or first object (JSONL)."""
    path = Path(path)
    kind = _kind(path)
    if kind not in (".csv", ".jsonl"):
        raise UserError(str(path), f"unknown trace format {path.suffix!r}; use a .jsonl or .csv file "
                        f"(formats: {choices(FORMATS)})")
    try:
        with _open(path) as fh:
            if kind == ".csv":
                header = {h.strip() for h in next(csv.reader(fh), [])}
                if {"TIMESTAMP", "ContextTokens"} <= header:
                    return "azure"
                if {"Request tokens", "Response tokens"} <= header:
                    return "burstgpt"
                return "lmmsim"
            for line in fh:
                if line.strip():
                    try:
                        first = json.loads(line)
                    except json.JSONDecodeError:
                        return "lmmsim"  # the reader reports the line
                    return "mooncake" if isinstance(first, dict) and "input_length" in first else "lmmsim"
    except FileNotFoundError:
        raise UserError(str(path), "trace file not found") from None
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise UserError(str(path), f"cannot read trace file ({exc})") from None
    return "lmmsim"


# ------------------------------------------------------------------ rows
_int = trace_rows.integer


def _float(name: str, value) -> float:
    x = trace_rows.number(name, value)
    if x < 0:
        raise _Bad(f"{name}: must be a finite number >= 0, got {value!r}")
    return x


def _csv_rows(fh, required: tuple, optional: tuple):
    """(line, dict) per data row; the header must hold ``required`` and nothing outside ``optional``."""
    return trace_rows.csv_rows(fh, required, required + optional)


def _jsonl_rows(fh, required: tuple, optional: tuple):
    """(line, dict) per non-blank line holding every ``required`` field and no other."""
    return trace_rows.jsonl_rows(fh, (required, optional))


class _Azure:
    columns, optional = AZURE_COLUMNS, AZURE_OPTIONAL
    rows = staticmethod(_csv_rows)

    def __init__(self):
        self.t0 = None

    def parse(self, row: dict) -> tuple:
        try:
            stamp = datetime.fromisoformat(row["TIMESTAMP"].strip()).timestamp()
        except ValueError:
            raise _Bad(f"TIMESTAMP: expected a date-time like 2023-11-16 18:17:03.97, got {row['TIMESTAMP']!r}") from None
        if self.t0 is None:
            self.t0 = stamp
        images = _int("NumImages", row["NumImages"], 0) if "NumImages" in row else 0
        return (stamp - self.t0, _int("ContextTokens", row["ContextTokens"], 0),
                _int("GeneratedTokens", row["GeneratedTokens"], 1), images, (), None)


class _Mooncake:
    columns, optional = MOONCAKE_FIELDS, MOONCAKE_OPTIONAL
    rows = staticmethod(_jsonl_rows)

    def parse(self, row: dict) -> tuple:
        return (_float("timestamp", row["timestamp"]) / 1000.0, _int("input_length", row["input_length"], 0),
                _int("output_length", row["output_length"], 1), 0, trace_rows.hash_ids(row.get("hash_ids")), None)


class _BurstGPT:
    columns, optional = BURSTGPT_COLUMNS, ()
    rows = staticmethod(_csv_rows)

    def parse(self, row: dict) -> tuple | None:
        out = _int("Response tokens", row["Response tokens"], 0)
        if out == 0:
            return None  # a failed request in the trace
        return (_float("Timestamp", row["Timestamp"]), _int("Request tokens", row["Request tokens"], 0), out, 0, (),
                row["Model"].strip() or None)


_PARSERS = {"azure": _Azure, "mooncake": _Mooncake, "burstgpt": _BurstGPT}


def _expected(parser) -> str:
    names = ", ".join(parser.columns) + "".join(f" [, {o}]" for o in parser.optional)
    return f"expected columns: {names}"


def _read_rows(path: Path, fmt: str, start_s: float, end_s: float, limit: int | None) -> list[tuple]:
    """(tau, text, output, images, hash_ids, class, line) of the rows in the window, sorted by tau."""
    parser = _PARSERS[fmt]()
    kept: list[tuple] = []
    ordered, last = True, -math.inf
    try:
        with _open(path) as fh:
            for line_no, row in parser.rows(fh, parser.columns, parser.optional):
                try:
                    if isinstance(row, _Bad):
                        raise row
                    parsed = parser.parse(row)
                except _Bad as exc:
                    raise UserError(f"{path}:{line_no}", f"{exc} ({fmt} trace; {_expected(parser)})") from None
                if parsed is None:
                    continue
                tau = parsed[0]
                ordered, last = ordered and tau >= last, tau
                if start_s <= tau < end_s:
                    kept.append((*parsed, line_no))
                # sorted so far: nothing later can fall in the window (or under the limit)
                if ordered and (tau >= end_s or (limit is not None and len(kept) > limit)):
                    break
    except FileNotFoundError:
        raise UserError(str(path), "trace file not found") from None
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise UserError(str(path), f"cannot read trace file ({exc})") from None
    if not ordered:
        kept.sort(key=lambda r: r[0])
    return kept if limit is None else kept[:limit]


def _requests(rows, path: Path, model, start_s: float, speedup: float, image: tuple) -> list[Request]:
    factory = MediaFactory(model)
    out = []
    for k, (tau, text, output, images, hashes, cls, line_no) in enumerate(rows):
        at = (tau - start_s) / speedup
        if images:
            try:
                items = (factory.image(*image),) * images
            except UserError as exc:  # a text-only model
                raise UserError(f"{path}:{line_no}", f"NumImages {images}: {exc.message}") from None
            segments = build_segments(prompt_parts("media_first", text, items))
            modality = "image"
        elif text > 0:
            segments, modality = (PromptSegment(0, text),), "text"
        else:
            raise UserError(f"{path}:{line_no}", "empty prompt: 0 prompt tokens and no image")
        out.append(Request(k, at, modality, cls or "trace", segments, output, prefix_hash_ids=hashes))
    return out


def read_any_trace(path: Path, model, *, fmt: str | None = None, speedup: float = 1.0, start_s: float = 0.0,
                   duration_s: float | None = None, image: tuple | None = None,
                   limit: int | None = None) -> list[Request]:
    """Requests for ``model`` from a trace in any of :data:`FORMATS` (``fmt`` None: detected)."""
    path = Path(path)
    fmt = fmt or detect_format(path)
    if fmt not in FORMATS:
        raise UserError("workload.arrival.format", f"unknown trace format {fmt!r}; valid: {choices(FORMATS)}")
    end_s = math.inf if duration_s is None else start_s + duration_s
    if fmt == "lmmsim":
        if start_s == 0 and duration_s is None:
            return read_trace(path, model, speedup=speedup, limit=limit)
        window = [r for r in read_trace(path, model) if start_s <= r.arrived_at < end_s][:limit]
        return [replace(r, request_id=k, arrived_at=(r.arrived_at - start_s) / speedup) for k, r in enumerate(window)]
    rows = _read_rows(path, fmt, start_s, end_s, limit)
    if not rows and limit != 0:
        where = "" if duration_s is None and start_s == 0 else f" in [{start_s:g}, {end_s:g}) s"
        raise UserError(str(path), f"trace file has no requests{where}")
    return _requests(rows, path, model, start_s, speedup, tuple(image or DEFAULT_IMAGE))

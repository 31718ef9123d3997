"""Request traces: read a file of timed requests, or write one out.

A trace row describes a request by its media, not by token counts, so one
trace replays on any model that takes those media: the model's token rules
turn each media description into a :class:`MediaItem` on reading.

Formats, chosen by suffix:

``.jsonl``
    One JSON object per line, e.g.
    ``{"timestamp": 0.25, "text_tokens": 80, "output_tokens": 128,
    "media": [{"type": "image", "width": 1024, "height": 768}]}``
``.csv``
    A header row, then one request per row; ``media`` holds the same JSON
    list as a string (empty for none).

Fields (those without a default are required):

=============  ==================================================================
timestamp      arrival time in seconds, >= 0, non-decreasing down the file
text_tokens    prompt text tokens, int >= 0
output_tokens  tokens to generate, int >= 1
media          list of ``{"type": "image", "width", "height"}``,
               ``{"type": "video", "frames", "width", "height"}``,
               ``{"type": "audio", "seconds"}``; default none. Each may
               add ``"id"``: a non-empty string (or integer) naming the
               content, as a hash would; items with the same id are the same
               media, so the engines' caches reuse work done for it
               (:mod:`lmmsim.engine.media_cache`). One id names one shape.
modality       text | image | video | audio; must match the media (video >
               image > audio > text); derived when absent
class_name     default ``"trace"``
layout         ``media_first`` (default), ``text_first`` or ``interleaved``
hash_ids       optional list of integers: prefix-block hashes (Mooncake's),
               kept on the request (``prefix_hash_ids``); written only when set
lead_text      optional int >= 0, at most ``text_tokens``: text tokens placed before
               the layout's parts (a shared system prompt ahead of the media);
               written only for such a prompt (one with ``shared`` runs)
shared         optional list of ``[key, tokens]`` runs from position 0: the
               request's ``shared_content`` (a key is a JSON list of strings and
               integers); written only when set
answer         optional key (a JSON list of strings and integers): the content
               key of the request's answer, which later prompts resend
               (``answer_content``: a conversation's turns); written only when set
=============  ==================================================================

Requests are numbered 0, 1, ... in file order. Every problem in a row raises
:class:`UserError` keyed ``"<path>:<line>"`` (1-based, the CSV header being
line 1). Timestamps are written with ``repr`` so a written trace reads back
exactly.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import replace
from pathlib import Path

from lmmsim.errors import UserError, choices
from lmmsim.workload.request import MODALITIES, MediaItem, Request, build_segments, prompt_parts, request_modality

FIELDS = ("timestamp", "modality", "text_tokens", "media", "output_tokens", "class_name", "layout")
REQUIRED = ("timestamp", "text_tokens", "output_tokens")
OPTIONAL = ("hash_ids", "lead_text", "shared", "answer")  # read when present, written only when a request has them
LAYOUTS = ("media_first", "text_first", "interleaved")
DEFAULT_CLASS = "trace"

# Media type -> the fields that describe it, in the order the model's
# ``<type>_item`` method takes them; this tuple is also the item's ``source``.
MEDIA_FIELDS = {
    "image": ("width", "height"),
    "video": ("frames", "width", "height"),
    "audio": ("seconds",),
}


# -------------------------------------------------------------- media items
class MediaFactory:
    """Memoised ``model.<type>_item(...)`` calls.

    Token rules are pure functions of the media shape, and a workload repeats a
    few shapes thousands of times, so each shape is computed once. Returned
    items carry ``source`` = the describing values in :data:`MEDIA_FIELDS`
    order, which is what :func:`write_trace` writes back. A model that does not
    take a medium raises :class:`UserError`; callers re-key it to their input.
    """

    def __init__(self, model):
        self.model = model
        self._cache: dict[tuple, MediaItem] = {}

    def image(self, width: int, height: int) -> MediaItem:
        return self.get("image", (int(width), int(height)))

    def video(self, frames: int, width: int, height: int) -> MediaItem:
        return self.get("video", (int(frames), int(width), int(height)))

    def audio(self, seconds: float) -> MediaItem:
        return self.get("audio", (float(seconds),))

    def get(self, kind: str, shape: tuple) -> MediaItem:
        key = (kind, *shape)
        item = self._cache.get(key)
        if item is None:
            item = getattr(self.model, f"{kind}_item")(*shape)
            if item.source != shape:
                item = MediaItem(item.modality, item.num_llm_tokens, item.encoder, shape)
            self._cache[key] = item
        return item


def media_description(item: MediaItem) -> dict:
    """The trace form of a media item, e.g. ``{"type": "image", "width": 1024, "height": 768}``
    (with its ``"id"`` when it has one)."""
    names = MEDIA_FIELDS.get(item.modality)
    if names is None or len(item.source) != len(names):
        raise ValueError(
            f"{item.modality} item has source {item.source!r}; a trace needs {names} "
            "(build items with MediaFactory)"
        )
    desc = {"type": item.modality, **dict(zip(names, item.source))}
    if item.media_id is not None:
        desc["id"] = item.media_id
    return desc


# ------------------------------------------------------------------- reading
class _RowError(Exception):
    """A problem in one row; turned into a UserError keyed by file and line."""


def _number(name: str, value) -> float:
    if isinstance(value, str):
        try:
            x = float(value.strip())
        except ValueError:
            raise _RowError(f"{name}: not a number: {value!r}") from None
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        x = float(value)
    else:
        raise _RowError(f"{name}: expected a number, got {value!r}")
    if not math.isfinite(x):
        raise _RowError(f"{name}: must be a finite number, got {value!r}")
    return x


def _integer(name: str, value, minimum: int) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        n = value
    else:
        x = _number(name, value)
        if not x.is_integer():
            raise _RowError(f"{name}: expected a whole number, got {value!r}")
        n = int(x)
    if n < minimum:
        raise _RowError(f"{name}: must be >= {minimum}, got {value!r}")
    return n


def _media_id(where: str, value) -> str:
    """A media item's ``id``: a non-empty string, or an integer (read as its digits)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, str) and value.strip():
        return value
    raise _RowError(f"{where}.id: expected a non-empty string (or an integer) naming the media item, got {value!r}")


def _with_id(where: str, item: MediaItem, desc: dict, ids: dict) -> MediaItem:
    """``item`` named by ``desc["id"]`` if given; an id seen before must name the same shape."""
    if "id" not in desc:
        return item
    media_id = _media_id(where, desc["id"])
    shape = (item.modality, item.source)
    first = ids.setdefault(media_id, shape)
    if first != shape:
        raise _RowError(f"{where}.id: {media_id!r} already names {first[0]} {first[1]}, not {shape[0]} {shape[1]}; "
                        "one id names one media item")
    return replace(item, media_id=media_id)


def _parse_media(value, factory: MediaFactory, ids: dict) -> list[MediaItem]:
    if value is None or value == "":
        return []
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise _RowError(f"media: invalid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(value, list):
        raise _RowError(f"media: expected a list of media objects, got {value!r}")
    items = []
    for k, desc in enumerate(value):
        where = f"media[{k}]"
        if not isinstance(desc, dict):
            raise _RowError(f"{where}: expected an object like {{\"type\": \"image\", ...}}, got {desc!r}")
        kind = desc.get("type")
        if not isinstance(kind, str) or kind not in MEDIA_FIELDS:
            raise _RowError(f"{where}.type: expected one of {choices(MEDIA_FIELDS)}, got {kind!r}")
        names = MEDIA_FIELDS[kind]
        extra = set(desc) - {"type", "id", *names}
        if extra:
            raise _RowError(f"{where}: unknown key {sorted(extra)[0]!r} for {kind} (keys: {choices((*names, 'id'))})")
        missing = [n for n in names if n not in desc]
        if missing:
            raise _RowError(f"{where}: {kind} needs {missing[0]!r}")
        try:
            if kind == "audio":
                seconds = _number(f"{where}.seconds", desc["seconds"])
                if seconds <= 0:
                    raise _RowError(f"{where}.seconds: must be > 0, got {desc['seconds']!r}")
                item = factory.audio(seconds)
            else:
                shape = tuple(_integer(f"{where}.{n}", desc[n], 1) for n in names)
                item = factory.get(kind, shape)
        except UserError as exc:  # the model does not take this medium
            raise _RowError(f"{where}: {exc.message}") from None
        items.append(_with_id(where, item, desc, ids))
    return items


def _build_request(row: dict, request_id: int, speedup: float, factory: MediaFactory,
                   ids: dict) -> tuple[float, Request]:
    """Validate one row (a field -> value dict, CSV strings or JSON values); ``ids``
    maps the media ids seen so far to their shapes."""
    unknown = [k for k in row if k not in FIELDS and k not in OPTIONAL]
    if unknown:
        raise _RowError(f"unknown field {unknown[0]!r} (fields: {choices(FIELDS + OPTIONAL)})")
    for name in REQUIRED:
        if row.get(name) in (None, ""):
            raise _RowError(f"missing {name}")

    timestamp = _number("timestamp", row["timestamp"])
    if timestamp < 0:
        raise _RowError(f"timestamp: must be >= 0, got {row['timestamp']!r}")
    text_tokens = _integer("text_tokens", row["text_tokens"], 0)
    output_tokens = _integer("output_tokens", row["output_tokens"], 1)
    items = _parse_media(row.get("media"), factory, ids)

    derived = request_modality(items)
    modality = row.get("modality") or derived
    if modality not in MODALITIES:
        raise _RowError(f"modality: expected one of {choices(MODALITIES)}, got {modality!r}")
    if modality != derived:
        raise _RowError(f"modality: {modality!r} does not match the media (which make it {derived!r})")

    layout = row.get("layout") or "media_first"
    if layout not in LAYOUTS:
        raise _RowError(f"layout: expected one of {choices(LAYOUTS)}, got {layout!r}")
    class_name = row.get("class_name") or DEFAULT_CLASS
    if not isinstance(class_name, str):
        raise _RowError(f"class_name: expected a string, got {class_name!r}")

    lead = 0 if row.get("lead_text") in (None, "") else _integer("lead_text", row["lead_text"], 0)
    if lead > text_tokens:
        raise _RowError(f"lead_text: {lead} is more than text_tokens {text_tokens}")
    segments = build_segments(lead_text_parts(lead, prompt_parts(layout, text_tokens - lead, tuple(items))))
    if not segments:
        raise _RowError("empty prompt: text_tokens is 0 and there is no media")
    request = Request(request_id, timestamp / speedup, modality, class_name, segments, output_tokens,
                      prefix_hash_ids=_hash_ids(row.get("hash_ids")), shared_content=_shared(row.get("shared")),
                      answer_content=_answer(row.get("answer")))
    if sum(n for _, n in request.shared_content) > request.num_prompt_tokens:
        raise _RowError(f"shared: its runs hold more than the prompt's {request.num_prompt_tokens} tokens")
    return timestamp, request


def lead_text_parts(lead: int, parts: list) -> list:
    """``lead`` text tokens before ``parts``, joining a leading text run (one segment): a
    system prompt ahead of a prompt's layout (the generator's, and a trace's ``lead_text``)."""
    if not lead:
        return parts
    return [lead + parts[0], *parts[1:]] if parts and isinstance(parts[0], int) else [lead, *parts]


def _shared(value) -> tuple:
    """The ``shared`` field as ``shared_content``: ``((key tuple, tokens), ...)``."""
    value = _json_list(value, "shared", "list of [key, tokens] runs")
    if value is None:
        return ()
    runs = []
    for run in value:
        ok = isinstance(run, list) and len(run) == 2 and isinstance(run[0], list) and run[0]
        ok = ok and all(isinstance(k, (str, int)) and not isinstance(k, bool) for k in run[0])
        if not ok or not isinstance(run[1], int) or isinstance(run[1], bool) or run[1] < 1:
            raise _RowError(f"shared: each run is [key, tokens], a key a list of strings and integers and "
                            f"tokens an integer >= 1; got {run!r}")
        runs.append((tuple(run[0]), run[1]))
    return tuple(runs)


def _answer(value) -> tuple | None:
    """The ``answer`` field as ``answer_content``: a key tuple, or None."""
    value = _json_list(value, "answer", "non-empty list of strings and integers")
    if value is None:
        return None
    if not value or not all(isinstance(k, (str, int)) and not isinstance(k, bool) for k in value):
        raise _RowError(f"answer: expected a non-empty list of strings and integers, got {value!r}")
    return tuple(value)


def _hash_ids(value) -> tuple:
    value = _json_list(value, "hash_ids", "list of integers")
    if value is None:
        return ()
    if not all(isinstance(h, int) and not isinstance(h, bool) for h in value):
        raise _RowError(f"hash_ids: expected a list of integers, got {value!r}")
    return tuple(value)


def _json_list(value, name: str, what: str) -> list | None:
    """A list-valued field: a list (JSON lines) or its JSON text (a CSV cell); None when empty."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise _RowError(f"{name}: expected a JSON {what}, got {value!r}") from None
    if not isinstance(value, list):
        raise _RowError(f"{name}: expected a {what}, got {value!r}")
    return value


def _jsonl_rows(fh, fields: tuple[tuple, tuple] | None = None):
    """Yield (line number, field dict) for each non-blank line; with ``fields`` = (required,
    optional) a row must hold every required field and no other (the public trace readers)."""
    for line_no, line in enumerate(fh, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            yield line_no, _RowError(f"invalid JSON ({exc.msg} at column {exc.colno})")
            continue
        if not isinstance(row, dict):
            yield line_no, _RowError("expected a JSON object {...}")
            continue
        if fields is not None:
            required, optional = fields
            unknown = [k for k in row if k not in required + optional]
            missing = [k for k in required if k not in row]
            if unknown or missing:
                yield line_no, _RowError(f"unknown field {unknown[0]!r}" if unknown else f"missing field {missing[0]!r}")
                continue
        yield line_no, row


def _csv_rows(fh, required: tuple | None = None, allowed: tuple | None = None):
    """Yield (line number, field dict) for each non-blank row after the header, whose columns
    must hold ``required`` and nothing outside ``allowed`` (default: lmmsim's own trace)."""
    required = REQUIRED if required is None else required
    allowed = FIELDS + OPTIONAL if allowed is None else allowed
    reader = csv.reader(fh)
    header = next(reader, None)
    if header is None:
        yield 1, _RowError("empty file: expected a header row")
        return
    header = [h.strip() for h in header]
    bad = [h for h in header if h not in allowed]
    if bad:
        yield 1, _RowError(f"unknown column {bad[0]!r} (columns: {choices(allowed)})")
        return
    missing = [h for h in required if h not in header]
    if missing:
        yield 1, _RowError(f"missing column {missing[0]!r}")
        return
    end = reader.line_num
    for cells in reader:
        # A quoted cell may span lines; report the line the record starts on.
        start, end = end + 1, reader.line_num
        if not cells or cells == [""]:
            continue
        if len(cells) != len(header):
            yield start, _RowError(f"expected {len(header)} columns, got {len(cells)}")
            continue
        yield start, dict(zip(header, cells))


def read_trace(path: Path, model, speedup: float = 1.0, limit: int | None = None) -> list[Request]:
    """Read a ``.jsonl`` or ``.csv`` trace into requests for ``model``.

    Arrival times are ``timestamp / speedup``; reading stops after ``limit``
    requests (rows past it are not checked). Raises :class:`UserError` for a
    missing file, an unknown suffix, an empty trace or any malformed row.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".jsonl", ".csv"):
        raise UserError(str(path), f"unknown trace format {path.suffix!r}; use a .jsonl or .csv file")
    if not speedup > 0:
        raise ValueError(f"speedup must be > 0, got {speedup}")
    factory = MediaFactory(model)
    ids: dict[str, tuple] = {}
    requests: list[Request] = []
    last = 0.0
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            rows = _jsonl_rows(fh) if suffix == ".jsonl" else _csv_rows(fh)
            for line_no, row in rows:
                if limit is not None and len(requests) >= limit:
                    break
                try:
                    if isinstance(row, _RowError):
                        raise row
                    timestamp, request = _build_request(row, len(requests), speedup, factory, ids)
                    if timestamp < last:
                        raise _RowError(f"timestamp {timestamp!r} is before the previous row's {last!r}")
                except _RowError as exc:
                    raise UserError(f"{path}:{line_no}", str(exc)) from None
                last = timestamp
                requests.append(request)
    except FileNotFoundError:
        raise UserError(str(path), "trace file not found") from None
    except UnicodeDecodeError:
        raise UserError(str(path), "trace file is not UTF-8 text") from None
    except OSError as exc:
        raise UserError(str(path), f"cannot read trace file ({exc.strerror})") from None
    if not requests and limit != 0:
        raise UserError(str(path), "trace file has no requests")
    return requests


# ------------------------------------------------------------------- writing
def _layout(request: Request) -> tuple[str, int]:
    """The layout and ``lead_text`` that rebuild this prompt; a prompt matching none cannot be
    written. A lead is tried only where no layout alone fits and the prompt starts with shared
    content (a system prompt ahead of the media): a trace row describes generated prompts,
    not arbitrary segment lists."""
    items = tuple(s.item for s in request.segments if s.item is not None)
    text = sum(s.length for s in request.segments if s.item is None)
    first = request.segments[0]
    leads = (0, first.length) if first.item is None and items and request.shared_content else (0,)
    for lead in leads:
        for layout in LAYOUTS:
            if build_segments(lead_text_parts(lead, prompt_parts(layout, text - lead, items))) == request.segments:
                return layout, lead
    kinds = "".join("m" if s.item is not None else "t" for s in request.segments)
    raise ValueError(
        f"request {request.request_id}: prompt layout {kinds} is none of {', '.join(LAYOUTS)}; "
        "a trace row cannot hold it"
    )


def _row(request: Request) -> dict:
    row = {
        "timestamp": float(request.arrived_at),
        "modality": request.modality,
        "text_tokens": request.num_text_tokens,
        "media": [media_description(s.item) for s in request.media_segments],
        "output_tokens": request.num_output_tokens,
        "class_name": request.class_name,
    }
    row["layout"], lead = _layout(request)
    if request.prefix_hash_ids:
        row["hash_ids"] = list(request.prefix_hash_ids)
    if lead:
        row["lead_text"] = lead
    if request.shared_content:
        row["shared"] = [[list(key), n] for key, n in request.shared_content]
    if request.answer_content is not None:
        row["answer"] = list(request.answer_content)
    return row


def write_trace(requests: list[Request], path: Path) -> None:
    """Write requests as a ``.jsonl`` or ``.csv`` trace that :func:`read_trace` reads back equal."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".jsonl", ".csv"):
        raise UserError(str(path), f"unknown trace format {path.suffix!r}; use a .jsonl or .csv file")
    rows = [_row(r) for r in requests]  # validate everything before touching the file
    with open(path, "w", newline="", encoding="utf-8") as fh:
        if suffix == ".jsonl":
            # json writes floats with repr, the shortest exact round trip.
            for row in rows:
                fh.write(json.dumps(row) + "\n")
        else:
            columns = FIELDS + tuple(o for o in OPTIONAL if any(o in row for row in rows))
            writer = csv.writer(fh, lineterminator="\n")
            writer.writerow(columns)
            for row in rows:
                cells = {**row, "timestamp": repr(row["timestamp"]), "lead_text": row.get("lead_text", "")}
                for f in ("media", "hash_ids", "shared", "answer"):  # JSON in a cell; empty for none
                    cells[f] = json.dumps(row[f], separators=(",", ":")) if row.get(f) else ""
                writer.writerow([cells[f] for f in columns])


# The row readers, field parsers and their error, shared with the public-trace readers (trace_formats.py).
RowError, jsonl_rows, csv_rows = _RowError, _jsonl_rows, _csv_rows
number, integer, hash_ids = _number, _integer, _hash_ids

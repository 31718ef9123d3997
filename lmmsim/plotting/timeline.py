"""Gantt chart of the first few requests, read from a saved Chrome trace.

In the spirit of RServe's Figures 7 and 8 (Guo et al., 2025): how the steps of
a handful of requests are laid out over the encoders, prefill workers or
pipeline stages, decode workers and links.

What is drawn:

* one row per worker, in the trace's track order (encoders at the top, links at
  the bottom; see :mod:`lmmsim.tracing`); every worker in the trace gets a row,
  even one with nothing in the window;
* the *shown requests* are the ``first_n`` smallest request ids in the trace.
  Each step that holds one of them is a bar coloured by request: a light shade
  for encoder work and transfers, the dark shade of the same hue for LLM steps
  (prefill, decode, mixed, decode_run). A step batching several shown requests
  is split into equal horizontal stripes, one per request, smallest id on top;
* steps that hold none of the shown requests are light grey, behind;
* transfers (``kind == "transfer"``) are drawn at half height;
* x axis: ``time (s)`` since the earliest start of a shown request's step,
  up to the latest end of one; steps outside that window are clipped away;
* legend (below the axes): ``request <id>`` with its light and dark shade,
  plus ``other requests`` when grey bars are drawn; optional title on top.

Left out: queueing (a request waiting has no bar), preemptions as such
(recomputed steps just appear again), KV-cache state, the request markers of
the trace. A fast-forwarded ``decode_run`` is one bar, not one per step.

Only the trace file is read (``plotting reads only saved results``); figures
are made without pyplot, so this runs headless.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.legend_handler import HandlerTuple
from matplotlib.patches import Patch

from lmmsim.plotting.style import COLUMN_WIDTH_IN, FULL_WIDTH_IN, paper_style, save
from lmmsim.tracing import order_workers, read_chrome_trace

#: (dark, light) shade pairs, one per shown request, cycling: Okabe-Ito colours (colour-blind safe,
#: lmmsim.plotting.palette) and a 55 % tint of each.
REQUEST_SHADES: tuple[tuple[str, str], ...] = (
    ("#0072B2", "#8cc0dc"),
    ("#E69F00", "#f4d48c"),
    ("#009E73", "#8cd3c0"),
    ("#D55E00", "#ecb78c"),
    ("#CC79A7", "#e8c3d7"),
    ("#56B4E9", "#b3ddf5"),
)
OTHER_COLOR = "#d9d9d9"
LIGHT_KINDS = frozenset({"encode", "transfer"})
ROW_HEIGHT = 0.8
TRANSFER_HEIGHT = 0.4


@dataclass(frozen=True, slots=True)
class Bar:
    """One drawn rectangle: row ``row`` (0 = top), from ``start_at`` to ``end_at`` (trace seconds)."""

    worker: str
    row: int
    start_at: float
    end_at: float
    kind: str
    request_id: int | None  # None: a grey bar (no shown request)
    color: str
    y0: float  # bottom edge in row units (rows are centred on their index)
    height: float


@dataclass(frozen=True)
class TimelineLayout:
    workers: list[str]
    request_ids: list[int]  # the shown requests, ascending
    t0: float  # x origin (trace seconds)
    t1: float  # right end of the window
    bars: list[Bar]  # grey bars first, then coloured ones

    @property
    def colored(self) -> list[Bar]:
        return [b for b in self.bars if b.request_id is not None]


def layout_timeline(frame: pd.DataFrame, *, first_n: int = 4) -> TimelineLayout:
    """Pick the shown requests and place every bar; ``frame`` as :func:`read_chrome_trace` returns it."""
    if first_n < 1:
        raise ValueError(f"first_n must be at least 1, got {first_n}")
    if frame.empty:
        raise ValueError("the trace has no steps to draw")
    workers = list(frame.attrs.get("workers") or order_workers(frame["worker"]))
    for w in order_workers(frame["worker"]):
        if w not in workers:
            workers.append(w)
    row_of = {w: i for i, w in enumerate(workers)}

    all_ids = sorted({i for ids in frame["request_ids"] for i in ids})
    shown = all_ids[:first_n]
    shown_set = set(shown)
    rank = {rid: k for k, rid in enumerate(shown)}

    steps = list(
        zip(frame["worker"], frame["start_at"], frame["end_at"], frame["kind"], frame["request_ids"])
    )
    hits = [s for s in steps if not shown_set.isdisjoint(s[4])]
    window = hits or steps
    t0 = min(s[1] for s in window)
    t1 = max(s[2] for s in window)

    grey: list[Bar] = []
    colored: list[Bar] = []
    for worker, start, end, kind, ids in steps:
        mine = sorted(shown_set.intersection(ids))
        if not mine and (end <= t0 or start >= t1):
            continue  # other requests' steps only where they overlap the window
        row = row_of[worker]
        height = TRANSFER_HEIGHT if kind == "transfer" else ROW_HEIGHT
        if not mine:
            grey.append(Bar(worker, row, start, end, kind, None, OTHER_COLOR, row - height / 2, height))
            continue
        stripe = height / len(mine)
        light = kind in LIGHT_KINDS
        for k, rid in enumerate(mine):
            dark_c, light_c = REQUEST_SHADES[rank[rid] % len(REQUEST_SHADES)]
            # rows grow downwards (the y axis is inverted), so the first stripe is the top one
            colored.append(
                Bar(worker, row, start, end, kind, rid, light_c if light else dark_c,
                    row - height / 2 + k * stripe, stripe)
            )
    return TimelineLayout(workers, shown, t0, t1, grey + colored)


def timeline_figure(
    frame: pd.DataFrame, *, first_n: int = 4, title: str | None = None
) -> tuple[Figure, TimelineLayout]:
    """Build (do not save) the Gantt figure; call inside :func:`paper_style` for the paper look."""
    lay = layout_timeline(frame, first_n=first_n)
    width = COLUMN_WIDTH_IN if len(lay.workers) <= 12 else FULL_WIDTH_IN
    fig = Figure(figsize=(width, 0.9 + 0.2 * len(lay.workers)), layout="constrained")
    ax = fig.add_subplot()

    groups: dict[tuple, list[tuple[float, float]]] = {}
    for b in lay.bars:
        groups.setdefault((b.color, b.y0, b.height, b.request_id is None), []).append(
            (b.start_at - lay.t0, b.end_at - b.start_at)
        )
    for (color, y0, height, is_grey), xranges in groups.items():
        ax.broken_barh(
            xranges,
            (y0, height),
            facecolors=color,
            edgecolors="white" if not is_grey else "none",
            linewidth=0.2,
            zorder=1 if is_grey else 2,
            gid="other" if is_grey else "request",
        )

    span = max(lay.t1 - lay.t0, 1e-9)
    ax.set_xlim(0.0, span * 1.01)
    ax.set_ylim(len(lay.workers) - 0.5, -0.5)
    ax.set_yticks(range(len(lay.workers)), lay.workers)
    ax.set_xlabel("time (s)")
    ax.tick_params(axis="y", length=0)
    ax.grid(axis="x", zorder=0)
    ax.set_axisbelow(True)

    handles, labels = [], []
    for k, rid in enumerate(lay.request_ids):
        dark_c, light_c = REQUEST_SHADES[k % len(REQUEST_SHADES)]
        handles.append((Patch(facecolor=light_c), Patch(facecolor=dark_c)))
        labels.append(f"request {rid}")
    if any(b.request_id is None for b in lay.bars):
        handles.append(Patch(facecolor=OTHER_COLOR))
        labels.append("other requests")
    if handles:
        ncols = min(len(handles), 3)
        # matplotlib fills legend columns first; reorder so entries read left to right
        order = [i for c in range(ncols) for i in range(c, len(handles), ncols)]
        fig.legend(
            [handles[i] for i in order],
            [labels[i] for i in order],
            loc="outside lower center",
            ncols=ncols,
            handler_map={tuple: HandlerTuple(ndivide=None, pad=0)},
            columnspacing=1.0,
        )
    if title:
        fig.suptitle(title)
    return fig, lay


def plot_timeline(
    trace_path: Path,
    out_path: Path,
    *,
    first_n: int = 4,
    force: bool = False,
    title: str | None = None,
) -> Path:
    """Read the trace at ``trace_path``, draw the first ``first_n`` requests, save to ``out_path``.

    ``out_path`` ends in ``.png``, ``.pdf`` or ``.svg``; an existing file is kept (``FileExistsError``)
    unless ``force``. Returns ``out_path``.
    """
    out_path = Path(out_path)
    if out_path.exists() and not force:
        raise FileExistsError(f"{out_path} exists; pass force=True to overwrite")
    frame = read_chrome_trace(Path(trace_path))
    with paper_style():
        fig, _ = timeline_figure(frame, first_n=first_n, title=title)
        return save(fig, out_path, force=force)

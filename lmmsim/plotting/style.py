"""One look for every lmmsim figure: colours, markers, sizes, and saving.

* Colours come from :mod:`lmmsim.plotting.palette` (re-exported here): the
  colour-blind-safe Okabe-Ito palette, a fixed colour, marker and line style
  per known system (:data:`SYSTEM_STYLES`, :func:`system_style`), and
  :func:`series_styles`, which gives the series of one figure distinct styles
  (unknown names take the unused colours in order of appearance, then line
  styles). :data:`MODALITY_COLORS` colours text, image, video and audio.
  The paper rcParams' colour cycle is the same palette.
* :data:`RC_PARAMS` sizes figures for one column of a two-column paper
  (3.3 in wide, 8-pt fonts). Apply them with ``with paper_style(): ...``;
  importing this module changes no global matplotlib state.
* :func:`save` writes PNG (200 dpi), PDF or SVG by the path's suffix, creates
  the folder, and refuses to overwrite an existing file unless ``force=True``.
  PDFs embed TrueType fonts and carry no creation date, SVGs no date and fixed
  ids, so the same figure gives the same bytes.
* :func:`fit_tick_labels` rotates category tick labels (30 degrees, right
  aligned) when they would not fit side by side.

Figures are built with :class:`matplotlib.figure.Figure` directly (no pyplot
state, Agg rendering), so all of this works headless.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import matplotlib as mpl
from cycler import cycler
from matplotlib.figure import Figure

from lmmsim.plotting.palette import (  # noqa: F401 (re-exported)
    MIXED_COLOR,
    MODALITY_COLORS,
    OKABE_ITO,
    SYSTEM_STYLES,
    modality_color,
    series_styles,
    system_color,
    system_marker,
    system_style,
)

#: Width of one paper column, inches.
COLUMN_WIDTH_IN = 3.3
#: Width of a figure spanning both columns, inches.
FULL_WIDTH_IN = 7.0
PNG_DPI = 200

#: rcParams for one-column paper figures.
RC_PARAMS: dict[str, object] = {
    "figure.figsize": (COLUMN_WIDTH_IN, COLUMN_WIDTH_IN * 0.7),
    "figure.dpi": 100,
    "savefig.dpi": PNG_DPI,
    "font.size": 8,
    "axes.titlesize": 8,
    "axes.labelsize": 8,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "legend.fontsize": 7,
    "legend.frameon": False,
    "legend.handlelength": 1.5,
    "axes.linewidth": 0.6,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "xtick.major.width": 0.6,
    "ytick.major.width": 0.6,
    "xtick.major.size": 2.5,
    "ytick.major.size": 2.5,
    "lines.linewidth": 1.0,
    "lines.markersize": 4,
    "grid.linewidth": 0.4,
    "grid.alpha": 0.5,
    "pdf.fonttype": 42,  # TrueType in PDFs (editable text; accepted by paper checkers)
    "ps.fonttype": 42,
    "svg.hashsalt": "lmmsim",
    "svg.fonttype": "none",  # text stays text in SVGs
    "axes.prop_cycle": cycler(color=list(OKABE_ITO)),
}


@contextlib.contextmanager
def paper_style(**overrides):
    """Context in which new figures use :data:`RC_PARAMS` (plus ``overrides``, rcParams keys)."""
    with mpl.rc_context({**RC_PARAMS, **overrides}):
        yield


def new_figure(width_in: float = COLUMN_WIDTH_IN, height_in: float | None = None) -> Figure:
    """A pyplot-free figure (call inside :func:`paper_style` to get the paper look)."""
    return Figure(figsize=(width_in, height_in if height_in is not None else width_in * 0.7))


_FORMATS = {".png": "png", ".pdf": "pdf", ".svg": "svg"}
#: Suffixes :func:`save` accepts.
FIGURE_SUFFIXES: tuple[str, ...] = tuple(_FORMATS)
_METADATA = {"pdf": {"CreationDate": None}, "svg": {"Date": None}}


def fit_tick_labels(ax, labels: list[str], *, axis_width_in: float | None = None) -> bool:
    """Set ``labels`` as the x tick labels, rotated 30 degrees (right-aligned) if they would collide.

    Collision is estimated from the label lengths (about 0.6 em per character at
    the tick font size) against the width per tick. Returns whether it rotated.
    """
    labels = [str(t) for t in labels]
    if axis_width_in is None:
        axis_width_in = ax.figure.get_figwidth() * 0.85
    size = mpl.font_manager.FontProperties(size=mpl.rcParams["xtick.labelsize"]).get_size_in_points()
    widest = max((len(t) for t in labels), default=0) * 0.6 * size / 72.0
    slot = axis_width_in / max(len(labels), 1)
    ax.set_xticks(range(len(labels)), labels)
    rotate = widest > 0.9 * slot and len(labels) > 1
    if rotate:
        for text in ax.get_xticklabels():
            text.set_rotation(30)
            text.set_horizontalalignment("right")
            text.set_rotation_mode("anchor")
    return rotate


def save(fig: Figure, path: Path, *, force: bool = False) -> Path:
    """Write ``fig`` to ``path`` (``.png`` at 200 dpi, ``.pdf`` or ``.svg``); returns the path.

    Creates the parent folder. Raises ``FileExistsError`` if ``path`` exists and
    ``force`` is false, ``ValueError`` for another suffix.
    """
    path = Path(path)
    fmt = _FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ValueError(f"cannot save a figure as {path.suffix or 'no suffix'!r}; use .png, .pdf or .svg")
    if path.exists() and not force:
        raise FileExistsError(f"{path} exists; pass force=True to overwrite")
    path.parent.mkdir(parents=True, exist_ok=True)
    with mpl.rc_context({"pdf.fonttype": 42, "svg.hashsalt": "lmmsim"}):  # TrueType PDFs, stable SVG ids
        fig.savefig(path, format=fmt, dpi=PNG_DPI, metadata=_METADATA.get(fmt), bbox_inches="tight",
                    pad_inches=0.02)
    return path

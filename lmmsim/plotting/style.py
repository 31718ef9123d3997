"""One look for every lmmsim figure: colours, markers, sizes, and saving.

* :data:`SYSTEM_STYLES` gives each named system (the presets in
  :mod:`lmmsim.systems`) a fixed colour and marker, so a system looks the same
  in every plot. :func:`system_color` / :func:`system_marker` /
  :func:`system_style` answer for any name: an unknown name gets a colour and
  marker picked from a fallback palette by a hash of the name (stable across
  runs and machines, unlike Python's ``hash``).
* :data:`MODALITY_COLORS` colours text, image, video and audio.
* :data:`RC_PARAMS` sizes figures for one column of a two-column paper
  (3.3 in wide, 8-pt fonts). Apply them with ``with paper_style(): ...``;
  importing this module changes no global matplotlib state.
* :func:`save` writes PNG (200 dpi) or PDF by the path's suffix, creates the
  folder, and refuses to overwrite an existing file unless ``force=True``.
  PDFs embed TrueType fonts and carry no creation date, so the same figure
  gives the same bytes.

Figures are built with :class:`matplotlib.figure.Figure` directly (no pyplot
state, Agg rendering), so all of this works headless.
"""

from __future__ import annotations

import contextlib
import hashlib
from pathlib import Path

import matplotlib as mpl
from matplotlib.figure import Figure

#: Width of one paper column, inches.
COLUMN_WIDTH_IN = 3.3
#: Width of a figure spanning both columns, inches.
FULL_WIDTH_IN = 7.0
PNG_DPI = 200

#: Fixed colour and marker per system. Colours are matplotlib's tab10 (colour-blind-aware, distinct in print).
SYSTEM_STYLES: dict[str, dict[str, str]] = {
    "vllm": {"color": "#1f77b4", "marker": "o"},
    "vllm-pp": {"color": "#17becf", "marker": "s"},
    "gllm": {"color": "#ff7f0e", "marker": "^"},
    "gllm-epd": {"color": "#8c564b", "marker": "v"},
    "modserve": {"color": "#9467bd", "marker": "D"},
    "dynamo": {"color": "#7f7f7f", "marker": "P"},
    "rserve": {"color": "#2ca02c", "marker": "*"},
    "rserve-intra": {"color": "#bcbd22", "marker": "X"},
    "rps-serve": {"color": "#d62728", "marker": "h"},
    "easerve": {"color": "#e377c2", "marker": "p"},
}

#: Colours for systems not in :data:`SYSTEM_STYLES` (dark tones of tab20b/Dark2, none equal to the above).
FALLBACK_COLORS: tuple[str, ...] = (
    "#393b79",
    "#637939",
    "#8c6d31",
    "#843c39",
    "#7b4173",
    "#1b9e77",
    "#d95f02",
    "#7570b3",
    "#e7298a",
    "#66a61e",
    "#e6ab02",
    "#a6761d",
)
FALLBACK_MARKERS: tuple[str, ...] = ("<", ">", "d", "H", "8", "1", "2", "3", "4", "+", "x")

#: Colour per request modality.
MODALITY_COLORS: dict[str, str] = {
    "text": "#4c72b0",
    "image": "#dd8452",
    "video": "#55a868",
    "audio": "#c44e52",
}
MIXED_COLOR = "#8172b3"  # anything else (e.g. a request mixing modalities)

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
}


def _pick(name: str, options: tuple[str, ...], salt: str) -> str:
    digest = hashlib.sha256(f"{salt}:{name}".encode()).digest()
    return options[int.from_bytes(digest[:8], "big") % len(options)]


def system_color(name: str) -> str:
    """Hex colour of system ``name`` (fixed for known systems, hash-picked otherwise)."""
    style = SYSTEM_STYLES.get(name)
    return style["color"] if style else _pick(name, FALLBACK_COLORS, "color")


def system_marker(name: str) -> str:
    """Marker of system ``name`` (fixed for known systems, hash-picked otherwise)."""
    style = SYSTEM_STYLES.get(name)
    return style["marker"] if style else _pick(name, FALLBACK_MARKERS, "marker")


def system_style(name: str) -> dict[str, str]:
    """``{"color", "marker", "label"}`` for ``ax.plot(..., **system_style(name))``."""
    return {"color": system_color(name), "marker": system_marker(name), "label": name}


def modality_color(modality: str) -> str:
    """Colour of a modality; unknown or mixed modalities share :data:`MIXED_COLOR`."""
    return MODALITY_COLORS.get(modality, MIXED_COLOR)


@contextlib.contextmanager
def paper_style(**overrides):
    """Context in which new figures use :data:`RC_PARAMS` (plus ``overrides``, rcParams keys)."""
    with mpl.rc_context({**RC_PARAMS, **overrides}):
        yield


def new_figure(width_in: float = COLUMN_WIDTH_IN, height_in: float | None = None) -> Figure:
    """A pyplot-free figure (call inside :func:`paper_style` to get the paper look)."""
    return Figure(figsize=(width_in, height_in if height_in is not None else width_in * 0.7))


_FORMATS = {".png": "png", ".pdf": "pdf"}


def save(fig: Figure, path: Path, *, force: bool = False) -> Path:
    """Write ``fig`` to ``path`` (``.png`` at 200 dpi or ``.pdf``); returns the path.

    Creates the parent folder. Raises ``FileExistsError`` if ``path`` exists and
    ``force`` is false, ``ValueError`` for another suffix.
    """
    path = Path(path)
    fmt = _FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ValueError(f"cannot save a figure as {path.suffix or 'no suffix'!r}; use .png or .pdf")
    if path.exists() and not force:
        raise FileExistsError(f"{path} exists; pass force=True to overwrite")
    path.parent.mkdir(parents=True, exist_ok=True)
    metadata = {"CreationDate": None} if fmt == "pdf" else None
    with mpl.rc_context({"pdf.fonttype": 42}):  # TrueType in every PDF, styled or not
        fig.savefig(path, format=fmt, dpi=PNG_DPI, metadata=metadata, bbox_inches="tight", pad_inches=0.02)
    return path

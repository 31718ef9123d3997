"""Paper-style figures made from saved results only (traces, frames), never from a live run.

* :mod:`lmmsim.plotting.style`: shared colours per system and modality, one-column
  paper rcParams, :func:`save` (PNG/PDF, no silent overwrite).
* :mod:`lmmsim.plotting.timeline`: :func:`plot_timeline`, a Gantt chart of the
  first requests from a Chrome trace written by :func:`lmmsim.tracing.write_chrome_trace`.

Everything renders through Agg with :class:`matplotlib.figure.Figure` (no pyplot), so it runs headless.
"""

from lmmsim.plotting.style import (
    MODALITY_COLORS,
    RC_PARAMS,
    SYSTEM_STYLES,
    modality_color,
    paper_style,
    save,
    system_color,
    system_marker,
    system_style,
)
from lmmsim.plotting.timeline import plot_timeline

__all__ = [
    "MODALITY_COLORS",
    "RC_PARAMS",
    "SYSTEM_STYLES",
    "modality_color",
    "paper_style",
    "plot_timeline",
    "save",
    "system_color",
    "system_marker",
    "system_style",
]

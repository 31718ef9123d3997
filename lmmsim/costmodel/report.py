"""The error report of a cost-model fit: ``fit/report.md`` and ``fit/pred_vs_measured.png``.

The table gives, per class: usable rows, the chosen estimator, its
cross-validated MAPE (on the 80 % used for choosing), its MAPE and P95
absolute percentage error on the 20 % held out (never used for choosing),
and every candidate's CV MAPE. An elementwise class fitted per op
(:mod:`lmmsim.costmodel.selection`) has a row for the class -- errors over
all its rows, each predicted by its op's model -- then one for the pooled
model (which answers ops without their own) and one per op. A second table
gives each fitted roofline's efficiencies (the numbers a GPU catalog's
``efficiency:`` block holds), whichever estimator won, per op included.

The plot has one log-log panel per class: predicted against measured time,
each row predicted out of sample (cross-validation folds for the choosing
rows, the held-out fit for the held-out rows), with the y = x line and a
+-10 % band. Built on :class:`matplotlib.figure.Figure` (Agg), so it runs headless.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from lmmsim.plotting.style import save

if TYPE_CHECKING:
    from lmmsim.costmodel.selection import ClassFit, Fit

ESTIMATOR_COLUMNS = ("roofline", "poly2", "poly3", "forest")


def _pct(x) -> str:
    return "-" if x is None or not np.isfinite(x) else f"{x:.1f}"


def report_markdown(fit: Fit) -> str:
    """The report as Markdown text."""
    from lmmsim.costmodel.selection import HELDOUT_FRACTION, TIE_MARGIN_PCT

    lines = [f"# Cost-model fit: {fit.gpu}", ""]
    meta = fit.provenance.get("meta") or {}
    lines.append(f"Profile: `{fit.provenance.get('path', '?')}`")
    for key in sorted(meta):
        value = meta[key]
        if isinstance(value, (str, int, float, bool)):
            lines.append(f"* {key}: {value}")
    lines += [
        "",
        (
            f"Errors in % of the measured median. CV: {TIE_MARGIN_PCT:g}-point tie-break towards roofline, then "
            f"polynomials, over the forest (they extrapolate). Held-out: {HELDOUT_FRACTION:.0%} of the rows, "
            "never used for choosing. P95: 95th percentile of the held-out absolute percentage errors."
        ),
        "",
        "| class | rows | chosen | CV MAPE | held-out MAPE | held-out P95 | "
        + " | ".join(f"CV {e}" for e in ESTIMATOR_COLUMNS) + " |",
        "|---|---:|---|---:|---:|---:|" + "---:|" * len(ESTIMATOR_COLUMNS),
    ]
    notes = []
    for op_class, cf in fit.classes.items():
        m = cf.metrics
        if not cf.per_op:
            lines.append(_error_row(op_class, cf.estimator_name, m, m["chosen_cv_mape_pct"], m["heldout_mape_pct"],
                                    m["heldout_p95_pct"]))
            continue
        pooled = m["pooled"]
        lines.append(_error_row(op_class, f"per op ({len(cf.per_op)}) + pooled", m, m["chosen_cv_mape_pct"],
                                m["heldout_mape_pct"], m["heldout_p95_pct"], candidates=False))
        lines.append(_error_row(f"{op_class}: pooled", cf.estimator_name, m, pooled["chosen_cv_mape_pct"],
                                pooled["heldout_mape_pct"], pooled["heldout_p95_pct"]))
        for op, sub in sorted(cf.per_op.items()):
            sm = sub.metrics
            lines.append(_error_row(f"{op_class}: {op}", sub.estimator_name, sm, sm["chosen_cv_mape_pct"],
                                    sm["heldout_mape_pct"], sm["heldout_p95_pct"]))
        without = [f"{op} ({n} rows)" for op, n in sorted(m.get("op_rows", {}).items()) if op not in cf.per_op]
        notes.append(f"{op_class}: the pooled model (fitted on all rows) answers calls that name no op or an op "
                     f"without a model of its own{': ' + ', '.join(without) if without else ''}.")
    if notes:
        lines += [""] + notes
    lines += ["", "Fitted roofline per class (`launch_s` per kernel; per ring step for allreduce):", "",
              "| class | compute_max | compute_half_flops | memory_max | memory_half_bytes | launch_us |",
              "|---|---:|---:|---:|---:|---:|"]
    for op_class, cf in fit.classes.items():
        lines.append(_roofline_row(op_class if not cf.per_op else f"{op_class}: pooled", cf))
        for op, sub in sorted(cf.per_op.items()):
            lines.append(_roofline_row(f"{op_class}: {op}", sub))
    occupancy = [c for c, cf in fit.classes.items() if cf.roofline.params().get("num_sms")]
    if occupancy:
        lines += ["", (f"{', '.join(occupancy)}: the memory term's bytes are divided by the grid's occupancy, "
                       "min(1, thread blocks / SMs), efficiencies bounded by 1 (RooflineRegressor, \"Occupancy\").")]
    domains = [(c, cf.domain) for c, cf in fit.classes.items()
               if cf.domain and (cf.domain["cells"] or cf.domain["octave"])]
    if domains:
        lines += ["", ("Domain (calls outside are extrapolations: counted, and answered by the fitted roofline; "
                       "lmmsim.costmodel.domain):"), ""]
        for c, d in domains:
            per = list(d["cells"]) + ([f"octave of {d['octave']}"] if d["octave"] else [])
            lines.append(f"* {c}: {len(d['boxes'])} boxes over {', '.join(d['box'])}, one per {' x '.join(per)}")
    if fit.skipped:
        lines += ["", "Not fitted (the predictor uses the v0 roofline for these):", ""]
        lines += [f"* {c}: {why}" for c, why in fit.skipped.items()]
    return "\n".join(lines) + "\n"


def _error_row(label: str, chosen: str, m: dict, cv: float, held: float, p95: float, candidates: bool = True) -> str:
    cvs = m["cv_mape_pct"] if candidates else {}
    return (f"| {label} | {m['rows']} | {chosen} | {_pct(cv)} | {_pct(held)} | {_pct(p95)} | "
            + " | ".join(_pct(cvs.get(e)) for e in ESTIMATOR_COLUMNS) + " |")


def _roofline_row(label: str, cf: ClassFit) -> str:
    p = cf.roofline.params()
    cm = "-" if p["compute_max"] is None else f"{p['compute_max']:.3f}"
    ch = "-" if p["compute_half_flops"] is None else f"{p['compute_half_flops']:.3g}"
    return (f"| {label} | {cm} | {ch} | {p['memory_max']:.3f} | {p['memory_half_bytes']:.3g} | "
            f"{p['launch_s'] * 1e6:.2f} |")


def plot_pred_vs_measured(fit: Fit):
    """Predicted vs measured (log-log), one panel per fitted class; returns the Figure."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullFormatter

    classes = [c for c, cf in fit.classes.items() if cf.evaluation is not None]
    cols = min(3, max(1, len(classes)))
    rows = max(1, math.ceil(len(classes) / cols))
    fig = Figure(figsize=(3.2 * cols, 3.0 * rows))
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax, op_class in zip(axes, classes):
        cf = fit.classes[op_class]
        ev = cf.evaluation
        for split, color in (("cv", "#1f77b4"), ("held-out", "#d62728")):
            part = ev[ev["split"] == split]
            ax.scatter(part["measured_s"] * 1e3, part["predicted_s"] * 1e3, s=6, alpha=0.6, color=color,
                       label=split, linewidths=0)
        both = np.concatenate([ev["measured_s"], ev["predicted_s"]]) * 1e3
        lo, hi = float(np.nanmin(both)) / 1.5, float(np.nanmax(both)) * 1.5
        line = np.array([lo, hi])
        ax.plot(line, line, color="black", lw=0.8)
        ax.fill_between(line, line / 1.1, line * 1.1, color="grey", alpha=0.15, lw=0)
        ax.set_xscale("log")
        ax.set_yscale("log")
        for axis in (ax.xaxis, ax.yaxis):  # minor labels collide on a narrow decade
            axis.set_minor_formatter(NullFormatter())
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        chosen = f"per op ({len(cf.per_op)}) + {cf.estimator_name}" if cf.per_op else cf.estimator_name
        ax.set_title(f"{op_class} ({chosen}, held-out {cf.metrics['heldout_mape_pct']:.1f}%)", fontsize=8)
        ax.set_xlabel("measured (ms)", fontsize=8)
        ax.set_ylabel("predicted (ms)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=7, loc="upper left")
    for ax in axes[len(classes):]:
        ax.set_visible(False)
    if not classes:
        axes[0].set_visible(True)
        axes[0].text(0.5, 0.5, "no class fitted", ha="center", va="center")
        axes[0].set_axis_off()
    fig.tight_layout()
    return fig


def write_report(folder: Path, fit: Fit) -> tuple[Path, Path]:
    """Write ``folder/report.md`` and ``folder/pred_vs_measured.png`` (overwriting); returns both paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    md = folder / "report.md"
    md.write_text(report_markdown(fit))
    png = save(plot_pred_vs_measured(fit), folder / "pred_vs_measured.png", force=True)
    return md, png

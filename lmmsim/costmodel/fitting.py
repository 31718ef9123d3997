"""Fitting operator cost models to a profile: the ``lmmsim fit`` / ``validate-costmodel`` entry points.

``lmmsim fit`` reads a profile folder (:mod:`lmmsim.costmodel.opdata`: one CSV
per operator class, ``time_ms`` the median) and, for every fitted class with
at least :data:`MIN_ROWS` usable rows, picks one estimator (one per
elementwise op), measures its error on rows it never saw, and writes
``fit/model.json`` (+ forests as ``.forest.npz``, + ``fit/report.md`` and
``fit/pred_vs_measured.png``).
:class:`~lmmsim.costmodel.fitted.FittedPredictor` loads that folder. No pickle
anywhere: the saved fit is plain JSON and arrays, and predicting needs numpy
only (scikit-learn and scipy are imported inside the fitting functions).

The pieces, one module each, in the order a fit runs:

* :mod:`lmmsim.costmodel.features` -- per class, the roofline work
  ``(flops, bytes, count)`` and the log-size features of a shape; usable rows;
  the canonical elementwise op of each row.
* :mod:`lmmsim.costmodel.estimators` -- the candidates: fitted roofline
  (:class:`RooflineRegressor`), log-log polynomials, random forest.
* :mod:`lmmsim.costmodel.selection` -- held-out split, cross-validated choice
  with a tie-break towards estimators that extrapolate, scoring, refit; one
  model per elementwise op plus a pooled one (:func:`fit_class`).
* :mod:`lmmsim.costmodel.fitstore` -- ``model.json`` and forest arrays:
  :func:`save_fit`, :func:`load_fit`, :func:`derive_classes` (rooflines carried
  to another GPU), rebuilt as the numpy-only models of
  :mod:`lmmsim.costmodel.npmodels`.
* :mod:`lmmsim.costmodel.report` -- ``report.md`` and the predicted-vs-measured plot.

This module runs them over a profile folder (:func:`fit_profile`) and scores
a saved fit on a profile (:func:`validate`); it re-exports the names above,
which is where callers have always imported them from.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from lmmsim.catalog import GpuSpec, LinkSpec
from lmmsim.costmodel import opdata
from lmmsim.costmodel.estimators import (  # noqa: F401 - re-exported
    ESTIMATORS,
    EXTRAPOLATING,
    FOREST_PARAMS,
    RIDGE_ALPHAS,
    SEED,
    RooflineRegressor,
    estimator_inputs,
    make_estimator,
)
from lmmsim.costmodel.features import (  # noqa: F401 - re-exported
    CLASSES,
    LINK_CLASSES,
    WORK,
    B,
    ClassSpec,
    allreduce_features,
    allreduce_work,
    attention_decode_features,
    attention_decode_work,
    attention_prefill_features,
    attention_prefill_work,
    class_features,
    class_peaks,
    elementwise_features,
    elementwise_work,
    gemm_features,
    gemm_work,
    matrix,
    p2p_features,
    p2p_work,
    row_ops,
    usable_rows,
)
from lmmsim.costmodel.fitstore import (  # noqa: F401 - re-exported
    FORMAT,
    LoadedClass,
    LoadedFit,
    derive_classes,
    load_fit,
    save_fit,
)
from lmmsim.costmodel.npmodels import ForestModel, PolyModel, RooflineModel  # noqa: F401 - re-exported
from lmmsim.costmodel.selection import (  # noqa: F401 - re-exported
    CV_FOLDS,
    HELDOUT_FRACTION,
    MIN_ROWS,
    TIE_MARGIN_PCT,
    ClassFit,
    Fit,
    ape,
    choose,
    fit_class,
)
from lmmsim.errors import UserError


#: What a fit folder always holds (plus a ``.forest.npz`` per forest).
FIT_FILES = ("model.json", "report.md", "pred_vs_measured.png")


def _profile_link(gpu: GpuSpec, meta: dict, interconnect: LinkSpec | None) -> LinkSpec | None:
    if interconnect is not None:
        return interconnect
    name = meta.get("interconnect")
    if name in gpu.links:
        return gpu.links[name]
    return gpu.links.get("nvlink") or next(iter(gpu.links.values()), None)


def _prior(op_class: str, gpu: GpuSpec, link: LinkSpec | None) -> dict:
    if op_class in LINK_CLASSES:
        return {"memory_max": 1.0, "memory_half_bytes": 0.0, "launch_s": (link.latency_us if link else 2.0) / 1e6}
    e = gpu.efficiency
    prior = {"compute_max": e.compute_max, "compute_half_flops": e.compute_half_flops, "memory_max": e.memory_max,
             "memory_half_bytes": e.memory_half_bytes, "launch_s": e.kernel_launch_us / 1e6}
    if "ctas" in CLASSES[op_class].work_features:  # the roofline scales its memory term by occupancy
        prior["num_sms"] = gpu.num_sms
    return prior


def fit_profile(profile_dir: Path, gpu: GpuSpec, *, out: Path | None = None, classes=None,
                interconnect: LinkSpec | None = None) -> dict:
    """Fit every fitted class of a profile folder; write the fit folder; return the metrics.

    ``out``: the fit folder (default ``profile_dir/fit``), which receives
    ``model.json``, ``<class>.forest.npz``, ``report.md`` and
    ``pred_vs_measured.png``. ``classes``: a subset of
    :data:`~lmmsim.costmodel.opdata.ALL_FITTED_CLASSES` (default all; then an FP8 / MoE class
    without rows is left out silently, a dense one is reported as skipped; a class named here is reported). ``interconnect``: the link
    the collectives were measured on (default: ``meta.json``'s
    ``interconnect`` name on ``gpu``, else NVLink, else the first link). A
    class with fewer than :data:`MIN_ROWS` usable rows is skipped (reported;
    the predictor falls back to the roofline for it). If no class can be
    fitted it is a UserError naming the profile folder, and nothing is written.

    Returns ``{"gpu", "fit_folder", "classes": {class: metrics + "chosen"}, "skipped": {class: why}}``;
    an elementwise class fitted per op adds ``"per_op": {op: metrics + "chosen"}`` (its own
    ``chosen`` is the pooled model; its errors are over all rows, routed by op).
    """
    from lmmsim.costmodel import report

    profile_dir = Path(profile_dir)
    out = Path(out) if out is not None else profile_dir / "fit"
    asked = classes is not None  # classes named by the caller: a missing one is reported, FP8 / MoE too
    classes = tuple(classes) if classes is not None else opdata.ALL_FITTED_CLASSES
    unknown = [c for c in classes if c not in CLASSES]
    if unknown:
        raise ValueError(f"unknown classes {unknown}; fitted classes: {', '.join(opdata.ALL_FITTED_CLASSES)}")
    meta = opdata.read_meta(profile_dir)
    link = _profile_link(gpu, meta, interconnect)
    fit = Fit(gpu.name, {"path": str(profile_dir), "meta": meta}, {})
    for op_class in classes:
        df = opdata.read_class(profile_dir, op_class)
        if df is None:
            if asked or op_class in opdata.FITTED_CLASSES:  # by default an FP8 / MoE class a profile lacks is no news
                fit.skipped[op_class] = "no rows in the profile"
            continue
        df = usable_rows(op_class, df)
        if len(df) < MIN_ROWS:
            fit.skipped[op_class] = f"{len(df)} usable rows (< {MIN_ROWS})"
            continue
        peaks = class_peaks(op_class, gpu, link)
        if peaks[1] is None:
            fit.skipped[op_class] = "no interconnect link to scale the collective"
            continue
        fit.peaks[op_class] = list(peaks)
        fit.classes[op_class] = fit_class(op_class, df, peaks, _prior(op_class, gpu, link),
                                          CLASSES[op_class].estimators or ESTIMATORS)
    if not fit.classes:
        raise UserError(str(profile_dir), _nothing_fitted(fit.skipped))
    save_fit(out, fit)
    report.write_report(out, fit)
    return {"gpu": gpu.name, "fit_folder": str(out), "skipped": dict(fit.skipped),
            "classes": {c: _summary(cf) for c, cf in fit.classes.items()}}


def _nothing_fitted(skipped: dict[str, str]) -> str:
    """Why a profile gave no class to fit: no data at all, or too little of it per class."""
    files = ", ".join(opdata.csv_path(Path(), c).name for c in skipped)
    if all(why == "no rows in the profile" for why in skipped.values()):
        return f"nothing to fit: no rows in any of {files} (operator CSVs, see lmmsim.costmodel.opdata)"
    reasons = "; ".join(f"{c}: {why}" for c, why in skipped.items() if why != "no rows in the profile")
    return f"no class could be fitted ({reasons}); looked for {files}"


def _summary(cf: ClassFit) -> dict:
    out = {"chosen": cf.estimator_name, **cf.metrics}
    if cf.per_op:
        out["per_op"] = {op: {"chosen": sub.estimator_name, **sub.metrics} for op, sub in cf.per_op.items()}
    return out


def validate(fit_folder: Path, profile_dir: Path, gpu: GpuSpec | None = None,
             interconnect: LinkSpec | None = None) -> pd.DataFrame:
    """Per-class error of a saved fit on a profile's rows (``lmmsim validate-costmodel``).

    One row per fitted class present in the profile: ``rows``, ``mape_pct``,
    ``p95_pct`` of the saved predictor on those rows, how it predicts them
    (``kind``, ``per-op+<pooled kind>`` for an elementwise class fitted per op;
    ``derived_from``), and the held-out ``fit_heldout_mape_pct`` /
    ``fit_heldout_p95_pct`` recorded when fitting. ``in_sample`` is true when the
    profile is the one the fit was made from (its final refit saw these rows,
    so the fit's held-out columns are the honest figures). Classes the fit
    lacks are predicted by the v0 roofline of ``gpu`` (default: the catalog
    GPU named in model.json) and marked ``kind = "roofline-v0"``.
    """
    from lmmsim.costmodel.fitted import FittedPredictor

    fit_folder, profile_dir = Path(fit_folder), Path(profile_dir)
    doc = json.loads((fit_folder / "model.json").read_text())
    if gpu is None:
        from lmmsim.catalog import get_gpu

        gpu = get_gpu(doc["gpu"])
    meta = opdata.read_meta(profile_dir)
    link = _profile_link(gpu, meta, interconnect)
    predictor = FittedPredictor(fit_folder, gpu, link)
    fitted_meta = doc.get("profile", {})
    fitted_path = fitted_meta.get("path")
    in_sample = (bool(fitted_path) and Path(fitted_path).resolve() == profile_dir.resolve()) or (
        bool(meta) and meta == fitted_meta.get("meta"))
    rows = []
    for op_class in opdata.ALL_FITTED_CLASSES:
        df = opdata.read_class(profile_dir, op_class)
        if df is None:
            continue
        df = usable_rows(op_class, df)
        if df.empty:
            continue
        measured = df["time_ms"].to_numpy(float) / 1e3
        loaded = predictor.fit.classes.get(op_class)
        if loaded is not None:
            pred = predictor.predict_frame(op_class, df)
            kind, derived = loaded.kind, loaded.derived_from
            if loaded.per_op:  # each row by its op's model, the pooled one for the rest
                kind = f"per-op+{kind}"
        else:
            method = getattr(predictor, op_class + "_s")
            cols = opdata.SHAPE_COLUMNS[op_class]
            try:
                pred = np.array([method(*row) for row in df[list(cols)].itertuples(index=False)], float)
            except (ValueError, NotImplementedError):  # NotImplementedError: no roofline for an FP8 / MoE class
                continue
            kind, derived = "roofline-v0", None
        err = ape(pred, measured)
        m = loaded.metrics if loaded is not None else {}
        rows.append({"op_class": op_class, "kind": kind, "derived_from": derived, "rows": len(df),
                     "mape_pct": float(np.mean(err)), "p95_pct": float(np.percentile(err, 95)),
                     "fit_heldout_mape_pct": m.get("heldout_mape_pct", np.nan),
                     "fit_heldout_p95_pct": m.get("heldout_p95_pct", np.nan),
                     "in_sample": bool(in_sample and loaded is not None and not derived)})
    return pd.DataFrame(rows, columns=["op_class", "kind", "derived_from", "rows", "mape_pct", "p95_pct",
                                       "fit_heldout_mape_pct", "fit_heldout_p95_pct", "in_sample"])

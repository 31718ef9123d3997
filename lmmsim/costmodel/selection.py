"""Choosing, scoring and refitting one class's estimator (one per elementwise op).

One model (:func:`fit_class`)
-----------------------------
A fixed-seed 20 % of the rows is held out first. On the other 80 %, 5-fold
cross-validation (shuffled, fixed seed) gives each estimator's MAPE. The
choice is the first of ``roofline, poly2, poly3`` whose CV MAPE is within
:data:`TIE_MARGIN_PCT` (1 percentage point) of the best estimator's, else the
best: a model that extrapolates is worth a point of in-range accuracy, because
the simulator asks for shapes the profile never had (forests are flat outside
the data, polynomials of higher degree bend). The chosen estimator, refit on the
80 %, is scored on the held-out 20 % (MAPE and P95 absolute percentage error,
never used for choosing); then it is refit on all rows and saved. The fitted
roofline is always saved too: the predictor uses it to split time into compute-
and memory-bound shares, and another GPU may derive a class from it.

One model per elementwise op
----------------------------
Elementwise kernels of equal traffic differ several-fold in speed (a row
gather vs a streaming add), and ``num_bytes`` cannot tell them apart. When the
elementwise rows carry an ``op`` column and at least one canonical op
(:func:`~lmmsim.costmodel.features.row_ops`) has :data:`MIN_ROWS` rows, the
held-out 20 % is drawn per op (stratified, same seed) and

* every op with :data:`MIN_ROWS` rows gets its own model, chosen and scored as
  above on its own rows (:attr:`ClassFit.per_op`);
* a pooled model over all rows (the :class:`ClassFit` itself) answers ops
  without a model of their own, and calls that name no op;
* the class's CV / held-out MAPE and P95 are over all its rows, each row
  predicted by its op's model (the pooled one for ops without one); the
  pooled model's own figures stay in ``metrics["pooled"]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from lmmsim.costmodel.estimators import (
    ESTIMATORS,
    EXTRAPOLATING,
    SEED,
    RooflineRegressor,
    estimator_inputs,
    make_estimator,
)
from lmmsim.costmodel.domain import fit_domain
from lmmsim.costmodel.features import CLASSES, class_features, matrix, row_ops

MIN_ROWS = 8
HELDOUT_FRACTION = 0.2
CV_FOLDS = 5
TIE_MARGIN_PCT = 1.0


def ape(pred_s: np.ndarray, measured_s: np.ndarray) -> np.ndarray:
    """Absolute percentage errors."""
    return 100.0 * np.abs(pred_s - measured_s) / measured_s


def choose(cv_mape: dict[str, float]) -> str:
    """The selection rule (module docstring): an extrapolating estimator within
    :data:`TIE_MARGIN_PCT` of the best CV MAPE wins, in :data:`EXTRAPOLATING` order."""
    finite = {k: v for k, v in cv_mape.items() if np.isfinite(v)}
    if not finite:
        raise ValueError("no estimator could be fitted")
    best = min(finite, key=lambda k: (finite[k], ESTIMATORS.index(k)))
    for name in EXTRAPOLATING:
        if name in finite and finite[name] <= finite[best] + TIE_MARGIN_PCT:
            return name
    return best


@dataclass
class ClassFit:
    """One class's chosen estimator (refit on all rows) and what was measured choosing it.

    For an elementwise class fitted per op, this is the pooled model and
    ``per_op`` maps each canonical op with enough rows to its own ClassFit;
    ``metrics`` and ``evaluation`` then describe the routed predictions.
    """

    op_class: str
    estimator_name: str
    estimator: object
    roofline: RooflineRegressor  # always fitted on all rows (compute/memory split, derivation)
    metrics: dict
    feature_ranges: dict[str, list[float]]
    evaluation: pd.DataFrame | None = None  # measured_s, predicted_s (out of sample), split (+ op)
    per_op: dict[str, ClassFit] = field(default_factory=dict)
    domain: dict | None = None  # where the rows lie (lmmsim.costmodel.domain.fit_domain)


@dataclass
class Fit:
    gpu: str
    provenance: dict
    classes: dict[str, ClassFit]
    skipped: dict[str, str] = field(default_factory=dict)
    peaks: dict[str, list] = field(default_factory=dict)


def _oof(name, op_class, X, y, peaks, prior):
    """Out-of-fold log predictions of ``name`` by K-fold CV (shuffled, fixed seed)."""
    from sklearn.model_selection import KFold

    out = np.empty(len(y))
    for train, test in KFold(min(CV_FOLDS, len(y)), shuffle=True, random_state=SEED).split(X):
        out[test] = make_estimator(name, op_class, peaks, prior).fit(X[train], y[train]).predict(X[test])
    return out


def _heldout_split(n: int, rng: np.random.Generator, at_least_one: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(train, test) row indices: a random :data:`HELDOUT_FRACTION` of ``n`` rows held out."""
    perm = rng.permutation(n)
    n_test = round(HELDOUT_FRACTION * n)
    if at_least_one:
        n_test = max(1, n_test)
    return np.sort(perm[n_test:]), np.sort(perm[:n_test])


def fit_class(op_class: str, df: pd.DataFrame, peaks: tuple[float | None, float], prior: dict | None = None,
              estimators=ESTIMATORS, *, per_op: bool = True) -> ClassFit:
    """Choose, score and refit one class's estimator (see the module docstring).

    ``df``: the class's usable rows; ``peaks``: (FLOP/s, bytes/s) constants of
    the roofline; ``prior``: v0 efficiencies (``compute_max``, ...,
    ``launch_s``) the roofline leans on where the data say nothing.
    ``per_op``: for ``elementwise``, fit one model per op with enough rows (the
    default; False fits the pooled model only, as for the other classes).
    """
    n = len(df)
    if n < MIN_ROWS:
        raise ValueError(f"{op_class}: {n} usable rows, need {MIN_ROWS}")
    ops = row_ops(df) if (per_op and op_class == "elementwise") else None
    if ops is not None:
        names, counts = np.unique(ops, return_counts=True)
        if any(op and c >= MIN_ROWS for op, c in zip(names, counts)):
            return _fit_per_op(op_class, df, ops, peaks, prior, estimators)
    train, test = _heldout_split(n, np.random.default_rng(SEED))
    return _fit_rows(op_class, df, train, test, peaks, prior, estimators)


def _fit_rows(op_class, df, train, test, peaks, prior, estimators) -> ClassFit:
    """One model chosen on ``train`` (CV), scored on ``test``, refit on all of ``df``."""
    feats = class_features(op_class, df)
    y_s = df["time_ms"].to_numpy(float) / 1e3
    y = np.log(y_s)
    cv_mape, oof = {}, {}
    for name in estimators:
        X = matrix(feats, estimator_inputs(name, op_class))
        try:
            oof[name] = _oof(name, op_class, X[train], y[train], peaks, prior)
            cv_mape[name] = float(np.mean(ape(np.exp(oof[name]), y_s[train])))
        except (ValueError, np.linalg.LinAlgError, FloatingPointError):
            cv_mape[name] = float("inf")
    chosen = choose(cv_mape)
    X = matrix(feats, estimator_inputs(chosen, op_class))
    held = np.exp(make_estimator(chosen, op_class, peaks, prior).fit(X[train], y[train]).predict(X[test]))
    errors = ape(held, y_s[test])
    final = make_estimator(chosen, op_class, peaks, prior).fit(X, y)
    roof = final if chosen == "roofline" else make_estimator("roofline", op_class, peaks, prior).fit(
        matrix(feats, CLASSES[op_class].work_features), y)

    evaluation = pd.DataFrame({"measured_s": y_s, "predicted_s": np.nan, "split": ""})
    evaluation.loc[train, "predicted_s"] = np.exp(oof[chosen])
    evaluation.loc[train, "split"] = "cv"
    evaluation.loc[test, "predicted_s"] = held
    evaluation.loc[test, "split"] = "held-out"
    metrics = {
        "rows": len(df), "train_rows": len(train), "heldout_rows": len(test),
        "cv_mape_pct": {k: (v if np.isfinite(v) else None) for k, v in cv_mape.items()},  # None: failed
        "chosen_cv_mape_pct": cv_mape[chosen],
        "heldout_mape_pct": float(np.mean(errors)), "heldout_p95_pct": float(np.percentile(errors, 95)),
    }
    if "source" in df.columns:
        metrics["sources"] = sorted(map(str, df["source"].dropna().unique()))
    if "op" in df.columns:
        metrics["ops"] = sorted(map(str, df["op"].dropna().unique()))
    ranges = {nm: [float(np.min(feats[nm])), float(np.max(feats[nm]))] for nm in CLASSES[op_class].log_features}
    return ClassFit(op_class, chosen, final, roof, metrics, ranges, evaluation, domain=fit_domain(op_class, feats))


def _fit_per_op(op_class, df, ops, peaks, prior, estimators) -> ClassFit:
    """The pooled model plus one model per op with :data:`MIN_ROWS` rows (module docstring)."""
    rng = np.random.default_rng(SEED)
    groups = {op: np.flatnonzero(ops == op) for op in sorted(set(ops))}
    train_parts, test_parts, per_op = [], [], {}
    for op, rows in groups.items():
        own = bool(op) and len(rows) >= MIN_ROWS
        train, test = _heldout_split(len(rows), rng, at_least_one=own)
        train_parts.append(rows[train])
        test_parts.append(rows[test])
        if own:
            sub = df.iloc[rows].reset_index(drop=True)
            per_op[op] = _fit_rows(op_class, sub, train, test, peaks, prior, estimators)
    train, test = np.sort(np.concatenate(train_parts)), np.sort(np.concatenate(test_parts))
    pooled = _fit_rows(op_class, df, train, test, peaks, prior, estimators)

    # Route: every row predicted (out of sample) by its op's model.
    evaluation = pooled.evaluation.assign(op=ops)
    for op, cf in per_op.items():
        evaluation.loc[groups[op], "predicted_s"] = cf.evaluation["predicted_s"].to_numpy()
    errors = ape(evaluation["predicted_s"].to_numpy(float), evaluation["measured_s"].to_numpy(float))
    cv, held = errors[(evaluation["split"] == "cv").to_numpy()], errors[(evaluation["split"] == "held-out").to_numpy()]
    m = pooled.metrics
    pooled.metrics = {
        **m,
        "chosen_cv_mape_pct": float(np.mean(cv)),
        "heldout_mape_pct": float(np.mean(held)), "heldout_p95_pct": float(np.percentile(held, 95)),
        "pooled": {"estimator": pooled.estimator_name, "chosen_cv_mape_pct": m["chosen_cv_mape_pct"],
                   "heldout_mape_pct": m["heldout_mape_pct"], "heldout_p95_pct": m["heldout_p95_pct"]},
        "op_rows": {op or "(no op)": len(rows) for op, rows in groups.items()},
        "per_op_models": sorted(per_op),
    }
    pooled.evaluation = evaluation
    pooled.per_op = per_op
    return pooled

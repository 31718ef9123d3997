"""Accuracy of the FP8 / MoE operator fits on rows they never saw (not a test; a report).

    python bench/fp8_moe_accuracy.py h200 [--shapes]

Imports one GPU's aiconfigurator tables (needs aiconfigurator-core, the calibrate
extra) and, per class, repeats what ``lmmsim fit`` does (same rows, seed and
held-out 20 %): the chosen estimator fitted on the other 80 % predicts the
held-out rows; prints median / p90 / mean / p95 absolute percentage error.
``--shapes`` adds leave-one-shape-out for ``moe_experts``: each of the table's
(hidden, inter, num_experts, topk) shapes predicted by the class's estimator
fitted on all the others (how it does on a model the table lacks).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from lmmsim.catalog import get_gpu
from lmmsim.costmodel import opdata
from lmmsim.costmodel.estimators import ESTIMATORS, estimator_inputs, make_estimator
from lmmsim.costmodel.features import CLASSES, class_features, class_peaks, matrix, usable_rows
from lmmsim.costmodel.fitting import _prior, _profile_link
from lmmsim.costmodel.selection import fit_class
from lmmsim.profiler.aiconfigurator_import import import_aiconfigurator


def _stats(err: np.ndarray) -> str:
    return (f"median {np.median(err):5.1f}%  p90 {np.percentile(err, 90):5.1f}%  mean {err.mean():5.1f}%  "
            f"p95 {np.percentile(err, 95):5.1f}%  ({len(err)} rows)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gpu")
    ap.add_argument("--shapes", action="store_true")
    args = ap.parse_args()
    gpu = get_gpu(args.gpu)
    with tempfile.TemporaryDirectory() as tmp:
        import_aiconfigurator(Path(tmp), gpu=args.gpu, classes=list(opdata.EXTRA_FITTED_CLASSES))
        link = _profile_link(gpu, {}, None)
        frames = {c: usable_rows(c, opdata.read_class(Path(tmp), c)) for c in opdata.EXTRA_FITTED_CLASSES
                  if opdata.read_class(Path(tmp), c) is not None}
    for c, df in frames.items():
        peaks, prior = class_peaks(c, gpu, link), _prior(c, gpu, link)
        cf = fit_class(c, df, peaks, prior, CLASSES[c].estimators or ESTIMATORS)
        ev = cf.evaluation[cf.evaluation["split"] == "held-out"]
        err = 100 * np.abs(ev["predicted_s"] - ev["measured_s"]).to_numpy() / ev["measured_s"].to_numpy()
        print(f"{args.gpu} {c:22s} {cf.estimator_name:8s} held-out: {_stats(err)}")
        if c == "moe_experts" and args.shapes:
            _leave_one_shape_out(df, cf.estimator_name, peaks, prior)


def _leave_one_shape_out(df, name: str, peaks, prior) -> None:
    feats = class_features("moe_experts", df)
    X, y = matrix(feats, estimator_inputs(name, "moe_experts")), np.log(df["time_ms"].to_numpy() / 1e3)
    key = df[["hidden", "inter", "num_experts", "topk"]].astype(str).agg("/".join, axis=1).to_numpy()
    errs = []
    for shape in sorted(set(key)):
        out = key == shape
        model = make_estimator(name, "moe_experts", peaks, prior).fit(X[~out], y[~out])
        err = 100 * np.abs(np.exp(model.predict(X[out]) - y[out]) - 1)
        errs.append(err)
        print(f"    {shape:22s} {_stats(err)}")
    print(f"  moe_experts leave-one-shape-out ({name}): {_stats(np.concatenate(errs))}")


if __name__ == "__main__":
    main()

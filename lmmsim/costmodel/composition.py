"""Composition check: does the composed cost model predict whole forward passes?

A profile may hold ``composition.csv`` -- measured wall times of complete
forward passes of small real models (``lmmsim.profiler.composition``) -- and
``composition_models.json`` with those models' dimensions as catalog entries.
Here we predict each pass with :class:`ComposedStepCostModel` over the
profile's fitted operators and report the error. No torch needed.

Rows: ``kind`` ``prefill`` (a fresh prompt of ``num_tokens``, one sampled
row), ``decode`` (``batch`` sequences, one token each, ``context`` tokens
attended each, new token included, every row sampled) or ``encode``
(``batch`` images of ``seq_len`` patches).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from lmmsim.catalog import GpuSpec, ModelSpec
from lmmsim.costmodel.composed import ComposedStepCostModel
from lmmsim.workload.request import EncoderWork

COMPOSITION_CSV = "composition.csv"
COMPOSITION_MODELS = "composition_models.json"


def predict_pass_s(cost: ComposedStepCostModel, row) -> float:
    """Predicted seconds of one measured forward pass."""
    if row["kind"] == "prefill":
        n = int(row["num_tokens"])
        return cost.llm_step_s(((n, n),), 0, 0, 1)
    if row["kind"] == "decode":
        b, c = int(row["batch"]), int(row["context"])
        return cost.llm_step_s((), b, b * c, b)
    if row["kind"] == "encode":
        return cost.encode_s([EncoderWork(int(row["batch"]), int(row["seq_len"]))])
    raise ValueError(f"unknown composition kind {row['kind']!r}")


def load_models(profile_dir: Path) -> dict[str, ModelSpec]:
    raw = json.loads((Path(profile_dir) / COMPOSITION_MODELS).read_text())
    return {name: ModelSpec.model_validate(spec) for name, spec in raw.items()}


def composition_frame(profile_dir: Path, predictor, gpu: GpuSpec) -> pd.DataFrame:
    """Every measured pass with its prediction and absolute percentage error."""
    df = pd.read_csv(Path(profile_dir) / COMPOSITION_CSV)
    models = load_models(profile_dir)
    costs = {name: ComposedStepCostModel(spec, gpu, 1, predictor) for name, spec in models.items()}
    df["predicted_ms"] = [predict_pass_s(costs[r["model"]], r) * 1e3 for _, r in df.iterrows()]
    df["ape_pct"] = (df["predicted_ms"] / df["time_ms"] - 1).abs() * 100
    return df


def composition_report(profile_dir: Path, fit_folder: Path, gpu: GpuSpec) -> pd.DataFrame:
    """MAPE and worst error per (model, kind) with the fitted predictor."""
    from lmmsim.costmodel.fitted import FittedPredictor

    df = composition_frame(profile_dir, FittedPredictor(fit_folder, gpu), gpu)
    out = df.groupby(["model", "kind"], sort=True).agg(
        passes=("ape_pct", "size"), mape_pct=("ape_pct", "mean"), max_err_pct=("ape_pct", "max"))
    return out.round(1).reset_index()

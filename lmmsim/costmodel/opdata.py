"""The operator-profile data format shared by the profiler, importers and the fitter.

A profile folder (``profiles/ops/<name>/``) holds one CSV per operator class
plus ``meta.json``. Every row is one shape, timed with warm-up and repeats:
``time_ms`` is the median, ``time_ms_p10`` / ``time_ms_p90`` the spread (may
be empty when a source gives only a median). Shapes are per GPU (already
divided by tensor parallelism), exactly the arguments of the matching
:class:`~lmmsim.costmodel.base.OperatorPredictor` method, so a fitted
predictor maps a call straight to its class's model.

Classes and their shape columns:

=====================  ====================================================  ==============================
class (file stem)      shape columns                                         predictor method
=====================  ====================================================  ==============================
``gemm``               ``m, n, k`` (+ ``op``: qkv, o, gate_up, down, ...)    ``gemm_s(m, n, k)``
``attention_prefill``  ``new_tokens, context, num_heads, num_kv_heads,       ``attention_prefill_s``
                       head_dim, causal`` (one sequence)
``attention_decode``   ``batch, context_sum, num_heads, num_kv_heads,        ``attention_decode_s``
                       head_dim`` (contexts equal: context_sum / batch each)
``elementwise``        ``num_bytes`` (+ ``op``: rmsnorm, silu_mul, rotary,   ``elementwise_s(num_bytes)``
                       add, embedding, ...)
``allreduce``          ``num_bytes, world``                                  ``allreduce_s(num_bytes, world)``
``p2p``                ``num_bytes``                                         ``p2p_s(num_bytes)``
``encoder_layer``      ``family, num_units, seq_len, hidden_size, num_heads, validation of the composition
                       intermediate_size, window_tokens, tp``                (not fitted)
``sm_limit``           ``family, sm_fraction, num_units, seq_len``           SM-share curve (calibration)
=====================  ====================================================  ==============================

Optional columns on every class: ``source`` (model or tool the shape came
from), ``dtype``, ``repeats``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

TIME_COLUMNS = ("time_ms", "time_ms_p10", "time_ms_p90")

SHAPE_COLUMNS: dict[str, tuple[str, ...]] = {
    "gemm": ("m", "n", "k"),
    "attention_prefill": ("new_tokens", "context", "num_heads", "num_kv_heads", "head_dim", "causal"),
    "attention_decode": ("batch", "context_sum", "num_heads", "num_kv_heads", "head_dim"),
    "elementwise": ("num_bytes",),
    "allreduce": ("num_bytes", "world"),
    "p2p": ("num_bytes",),
    "encoder_layer": ("family", "num_units", "seq_len", "hidden_size", "num_heads", "intermediate_size",
                      "window_tokens", "tp"),
    "sm_limit": ("family", "sm_fraction", "num_units", "seq_len"),
}

#: Classes a fitted predictor replaces (the others validate or calibrate).
FITTED_CLASSES = ("gemm", "attention_prefill", "attention_decode", "elementwise", "allreduce", "p2p")


def csv_path(folder: Path, op_class: str) -> Path:
    return Path(folder) / f"{op_class}.csv"


def read_class(folder: Path, op_class: str) -> pd.DataFrame | None:
    """The rows of one class, or None if the profile has none."""
    path = csv_path(folder, op_class)
    if not path.exists():
        return None
    df = pd.read_csv(path)
    missing = [c for c in (*SHAPE_COLUMNS[op_class], "time_ms") if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: missing columns {missing}")
    return df if len(df) else None


def write_class(folder: Path, op_class: str, df: pd.DataFrame) -> Path:
    """Write one class's rows (shape columns first, then times, then the rest)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    first = [c for c in (*SHAPE_COLUMNS[op_class], *TIME_COLUMNS) if c in df.columns]
    rest = [c for c in df.columns if c not in first]
    path = csv_path(folder, op_class)
    df[first + rest].to_csv(path, index=False)
    return path


def read_meta(folder: Path) -> dict:
    path = Path(folder) / "meta.json"
    return json.loads(path.read_text()) if path.exists() else {}


def write_meta(folder: Path, meta: dict) -> None:
    Path(folder).mkdir(parents=True, exist_ok=True)
    (Path(folder) / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")

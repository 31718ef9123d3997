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
``elementwise``        ``num_bytes`` (+ ``op``: rmsnorm, silu_mul, rotary,   ``elementwise_s(num_bytes, op)``
                       add, embedding, ...; see below)
``allreduce``          ``num_bytes, world``                                  ``allreduce_s(num_bytes, world)``
``p2p``                ``num_bytes``                                         ``p2p_s(num_bytes)``
``encoder_layer``      ``family, num_units, seq_len, hidden_size, num_heads, validation of the composition
                       intermediate_size, window_tokens, tp``                (not fitted)
``sm_limit``           ``family, sm_fraction, num_units, seq_len``           SM-share curve (calibration)
=====================  ====================================================  ==============================

Optional columns on every class: ``source`` (model or tool the shape came
from), ``dtype``, ``repeats``.

Elementwise kernels differ several-fold in achieved bandwidth (a row gather
reaches a fraction of what a streaming residual add does), so the ``op``
column names the kernel; the fitter fits one model per canonical op
(:data:`ELEMENTWISE_OPS`; :func:`canonical_elementwise_op` maps the names
profilers and importers write) and the composition passes the canonical op
with every call.
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

#: Canonical elementwise kernels (the ``op`` of ``elementwise_s``) and what each moves.
#: ``num_bytes`` follows :mod:`lmmsim.costmodel.composed` (bf16 = 2 bytes per element).
ELEMENTWISE_OPS = ("norm", "add_norm", "act", "act_gated", "rotary", "embedding", "add", "softmax")
ELEMENTWISE_OP_DOC = {
    "norm": "unfused RMSNorm / LayerNorm: read x, write y (2 x tokens x width x 2 B)",
    "add_norm": "fused residual add + RMSNorm (vLLM fused_add_rms_norm): read x and residual, write both (4x)",
    "act": "plain activation (gelu): read up, write the ffn output",
    "act_gated": "gated activation (silu_mul / gelu_and_mul): read gate|up, write the ffn output",
    "rotary": "in-place rotary embedding on Q and K: read + write of the Q and K widths",
    "embedding": "embedding row gather: read the looked-up rows, write them (2x)",
    "add": "residual (or position-embedding) add: read both operands, write the sum (3x)",
    "softmax": "fp32 sampling softmax over the vocabulary: read + write 4-byte logits",
}

# Names profilers / importers write -> canonical op (keys normalised: lower case, '_' for '-' and ' ').
_ELEMENTWISE_ALIASES = {
    **{name: "norm" for name in (
        "norm", "rmsnorm", "rms_norm", "layernorm", "layer_norm", "ln", "input_layernorm",
        "post_attention_layernorm", "pre_norm", "post_norm", "final_norm", "final_layernorm")},
    **{name: "add_norm" for name in (
        "add_norm", "add_rmsnorm", "add_rms_norm", "fused_add_rmsnorm", "fused_add_rms_norm",
        "add_layernorm", "residual_rmsnorm")},
    **{name: "act" for name in (
        "act", "activation", "mlp_act", "gelu", "gelu_tanh", "gelu_new", "quick_gelu", "silu", "relu")},
    **{name: "act_gated" for name in (
        "act_gated", "silu_mul", "silu_and_mul", "swiglu", "geglu", "gelu_and_mul")},
    **{name: "rotary" for name in ("rotary", "rope", "attn_rope", "rotary_emb", "rotary_embedding", "mrope")},
    **{name: "embedding" for name in ("embedding", "emb", "embed", "embed_tokens", "token_embedding")},
    **{name: "add" for name in ("add", "residual_add", "residual", "add_residual", "pos_embed_add",
                                "position_embedding_add")},
    **{name: "softmax" for name in ("softmax", "sampling", "sampler", "sampling_softmax", "logits_softmax")},
}
_ELEMENTWISE_PREFIXES = ("enc_", "encoder_", "vision_", "vit_", "llm_")


def canonical_elementwise_op(name: str) -> str:
    """The canonical elementwise op (:data:`ELEMENTWISE_OPS`) a profiler's or importer's
    name stands for; a name it does not know comes back unchanged.

    Permissive: case, surrounding blanks, ``-`` / spaces for ``_``, and an
    ``enc_`` / ``encoder_`` / ``vision_`` / ``vit_`` / ``llm_`` prefix (encoder
    variants of the same kernel) do not matter.
    """
    key = str(name).strip().lower().replace("-", "_").replace(" ", "_")
    op = _ELEMENTWISE_ALIASES.get(key)
    if op is None:
        for prefix in _ELEMENTWISE_PREFIXES:
            if key.startswith(prefix) and key[len(prefix):] in _ELEMENTWISE_ALIASES:
                return _ELEMENTWISE_ALIASES[key[len(prefix):]]
        return name
    return op


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

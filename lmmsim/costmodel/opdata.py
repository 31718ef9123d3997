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

FP8 and mixture-of-experts classes (:data:`EXTRA_FITTED_CLASSES`; what the
aiconfigurator tables behind them measure: :mod:`lmmsim.profiler.aiconfigurator_moe`),
each answered by the predictor method of its name + ``_s``:

* ``gemm_fp8``: ``m, n, k``, a W8A8 FP8 GEMM (per-tensor scales, input quantisation included);
* ``attention_decode_fp8``: as ``attention_decode``, over an FP8 KV cache;
* ``moe_experts``: ``tokens, hidden, inter, num_experts, topk, moe_tp, moe_ep, dtype, routing``:
  one MoE layer's experts on one GPU, ``tokens`` the batch before dispatch, ``dtype``
  :data:`MOE_DTYPES`, ``routing`` :data:`MOE_ROUTINGS`;
* ``moe_alltoall``: ``tokens, hidden, topk, ep, phase``: an all-to-all ``phase``
  (:data:`A2A_PHASES`) of ``tokens`` per EP rank.

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

import contextlib
import json
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

import pandas as pd

from lmmsim.errors import UserError
from lmmsim.outputs import OutputDir, atomic_path

TIME_COLUMNS = ("time_ms", "time_ms_p10", "time_ms_p90")

SHAPE_COLUMNS: dict[str, tuple[str, ...]] = {
    "gemm": ("m", "n", "k"),
    "attention_prefill": ("new_tokens", "context", "num_heads", "num_kv_heads", "head_dim", "causal"),
    "attention_decode": ("batch", "context_sum", "num_heads", "num_kv_heads", "head_dim"),
    "elementwise": ("num_bytes",),
    "allreduce": ("num_bytes", "world"),
    "p2p": ("num_bytes",),
    "gemm_fp8": ("m", "n", "k"),
    "attention_decode_fp8": ("batch", "context_sum", "num_heads", "num_kv_heads", "head_dim"),
    "moe_experts": ("tokens", "hidden", "inter", "num_experts", "topk", "moe_tp", "moe_ep", "dtype", "routing"),
    "moe_alltoall": ("tokens", "hidden", "topk", "ep", "phase"),
    "encoder_layer": ("family", "num_units", "seq_len", "hidden_size", "num_heads", "intermediate_size",
                      "window_tokens", "tp"),
    "sm_limit": ("family", "sm_fraction", "num_units", "seq_len"),
}

#: Classes a fitted predictor replaces (the others validate or calibrate).
FITTED_CLASSES = ("gemm", "attention_prefill", "attention_decode", "elementwise", "allreduce", "p2p")
#: Fitted classes of FP8 and mixture-of-experts models. Kept apart from FITTED_CLASSES: a
#: GPU's fit may lack them without falling back for the dense classes, and ``lmmsim fit
#: --derive-from`` carries only the dense classes to another GPU (these depend on kernels
#: that differ per architecture).
EXTRA_FITTED_CLASSES = ("gemm_fp8", "attention_decode_fp8", "moe_experts", "moe_alltoall")
ALL_FITTED_CLASSES = FITTED_CLASSES + EXTRA_FITTED_CLASSES
#: Shape columns that hold names, not numbers.
TEXT_COLUMNS = ("causal", "family", "dtype", "routing", "phase")
#: Their valid values (``causal`` is a flag, ``family`` free text).
MOE_DTYPES = ("bf16", "fp8")
MOE_ROUTINGS = ("balanced", "power_law_1.01", "power_law_1.2")
A2A_PHASES = ("dispatch", "combine")

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


#: Spellings of a true / false flag column (``causal``), as the fitter reads them.
FLAG_VALUES = ("true", "false", "1", "0", "1.0", "0.0", "yes", "no")


def _names(cols) -> str:
    """Column names for a one-line message (a name with control characters is quoted, escaped)."""
    cols = [str(c) if str(c).isprintable() else repr(str(c)) for c in cols]
    return ", ".join(cols[:12]) + (f", ... ({len(cols)} in all)" if len(cols) > 12 else "")


def _load_csv(path: Path) -> pd.DataFrame:
    """``pd.read_csv``, with an unreadable or empty file as a UserError naming it."""
    try:
        return pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise UserError(str(path), "empty file: no header line, no rows") from None
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(str(path), f"not a readable CSV ({first})") from None


def _bad_value(path: Path, df: pd.DataFrame, col: str, bad: pd.Series, what: str) -> UserError:
    row = int(bad.to_numpy().nonzero()[0][0])
    return UserError(str(path), f"column {col!r}, data row {row + 1}: {df[col].iloc[row]!r} is not {what}"
                                f" ({int(bad.sum())} such value(s))")


def read_table(path: Path, *, required=(), numeric=(), complete=(), flags=()) -> pd.DataFrame:
    """A CSV file as a DataFrame, or a UserError naming the file and what is wrong.

    ``required``: columns that must exist. ``numeric``: columns (those present)
    whose values must be numbers; they come back converted, an empty cell as
    NaN. ``complete``: numeric columns with no empty cell either. ``flags``:
    columns holding only :data:`FLAG_VALUES` (or empty cells).
    """
    path = Path(path)
    df = _load_csv(path)
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise UserError(str(path), f"missing column(s) {_names(missing)}; it has {_names(df.columns) or 'none'}")
    check_numeric(path, df, numeric, complete)
    _check_flags(path, df, flags)
    return df


def _check_flags(path: Path, df: pd.DataFrame, flags) -> None:
    for col in flags:
        if col in df.columns and df[col].dtype != bool:
            text = df[col].astype(str).str.strip().str.lower()
            bad = df[col].notna() & ~text.isin(FLAG_VALUES)
            if bad.any():
                raise _bad_value(path, df, col, bad, "true/false (or 1/0)")


def check_numeric(path: Path, df: pd.DataFrame, numeric=(), complete=()) -> pd.DataFrame:
    """Convert ``numeric`` and ``complete`` columns of ``df`` (those present) to numbers in place;
    a value that is not a number, or an empty cell of a ``complete`` column, is a UserError
    naming ``path``, the column and the row. Returns ``df``."""
    for col in dict.fromkeys([*numeric, *complete]):
        if col not in df.columns:
            continue
        values = pd.to_numeric(df[col], errors="coerce")
        bad = values.isna() & df[col].notna()
        if bad.any():
            raise _bad_value(path, df, col, bad, "a number")
        if col in complete and values.isna().any():
            raise _bad_value(path, df, col, values.isna(), "a value (empty cell)")
        df[col] = values
    return df


def read_class(folder: Path, op_class: str) -> pd.DataFrame | None:
    """The rows of one class, or None if the profile has none (no file, or a header only).

    A file lmmsim cannot use (unreadable, empty, missing a shape column or
    ``time_ms``, a value that is not a number) is a UserError naming it."""
    path = csv_path(folder, op_class)
    if not path.exists():
        return None
    shape = SHAPE_COLUMNS[op_class]
    numeric = [c for c in (*shape, "time_ms") if c not in TEXT_COLUMNS]
    df = read_table(path, required=(*shape, "time_ms"), numeric=numeric, flags=("causal",))
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
    """The profile's ``meta.json`` ({} when there is none); a file that is not a JSON object is a UserError."""
    path = Path(folder) / "meta.json"
    if not path.exists():
        return {}
    try:
        meta = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as err:
        raise UserError(str(path), f"not valid JSON ({err})") from None
    if not isinstance(meta, dict):
        raise UserError(str(path), f"must hold a JSON object, not {type(meta).__name__}")
    return meta


def write_meta(folder: Path, meta: dict) -> None:
    Path(folder).mkdir(parents=True, exist_ok=True)
    (Path(folder) / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")


# ------------------------------------------------------- writing an output folder
@contextlib.contextmanager
def staged_output(out: OutputDir) -> Iterator[Path]:
    """Yield an empty scratch folder for a command's writers (profile, import, fit);
    when the block succeeds, :func:`publish` its files into ``out``.

    Staging lets every name a command wrote be checked against the user's files in
    ``out`` before the first one is replaced, however deep inside the writers are;
    a failed or interrupted command leaves ``out`` as it was.
    """
    with tempfile.TemporaryDirectory(prefix="lmmsim-stage-") as tmp:
        yield Path(tmp)
        publish(Path(tmp), out)


def publish(staged: Path, out: OutputDir) -> list[Path]:
    """Move every file under ``staged`` into ``out`` under the ``--force`` rule
    (:mod:`lmmsim.outputs`): all names are checked first, then each is claimed in
    the manifest and renamed into place; last, the files an earlier lmmsim output
    left there and this one did not write again are removed (a stale class CSV
    would be read as part of the new profile). Returns the removed paths."""
    staged = Path(staged)
    rels = sorted(p.relative_to(staged).as_posix() for p in staged.rglob("*") if p.is_file())
    out.check(*rels)
    for rel in rels:
        with atomic_path(out.file(rel)) as tmp:
            shutil.move(staged / rel, tmp)  # a rename on one file system, else a copy
    return out.remove_unclaimed()

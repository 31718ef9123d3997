"""Features of the fitted operator classes: roofline work and log sizes, per class.

One function per class, ``<class>_features(*shape columns)``, computes every
feature from the shape columns of :mod:`lmmsim.costmodel.opdata`, the same at
fit time (over DataFrame columns, vectorised) and at predict time (over the
arguments of one call, pure Python floats). Each returns the roofline *work*
-- ``flops``, ``bytes`` (HBM or link bytes) and ``count`` (how many fixed
latencies the operator pays: 1 per kernel, ``2 (world - 1)`` ring steps for
an all-reduce), computed by ``<class>_work`` with the formulas of
:mod:`lmmsim.costmodel.roofline` (the predictor calls that alone when the
class is a roofline) -- plus natural logs of the sizes:

* ``gemm``: ``log_m, log_n, log_k, log_flops (2mnk), log_bytes (2(mk+kn+mn))``;
* ``attention_prefill``: logs of the five sizes, ``causal`` (0/1),
  ``log_flops`` (causal-average keys), ``log_bytes`` (Q, O, K, V once);
* ``attention_decode``: logs of the five sizes, ``log_flops``, ``log_bytes``
  (the KV read dominates);
* ``elementwise``: ``log_bytes``; ``p2p``: ``log_bytes`` (at least one byte);
* ``allreduce``: ``log_num_bytes, log_world, log_steps`` with steps = 2(world-1);
  work bytes are the ring's ``steps / world * num_bytes`` sent per GPU.

Which elementwise kernel a row times is not a feature: the fitter groups rows
by :func:`row_ops` (the canonical op of each row) and fits one model per op.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from lmmsim.catalog import GpuSpec, LinkSpec
from lmmsim.costmodel import opdata

B = 2  # bf16 bytes per element
WORK = ("flops", "bytes", "count")
#: Classes limited by the interconnect link rather than HBM.
LINK_CLASSES = ("allreduce", "p2p")


def _log(x):
    return np.log(x) if isinstance(x, np.ndarray) else math.log(x)


def gemm_work(m, n, k):
    return 2.0 * m * n * k, B * (m * k + k * n + m * n), 1.0


def gemm_features(m, n, k) -> dict:
    flops, nbytes, _ = gemm_work(m, n, k)
    return {"flops": flops, "bytes": nbytes, "count": 1.0, "log_m": _log(m), "log_n": _log(n),
            "log_k": _log(k), "log_flops": _log(flops), "log_bytes": _log(nbytes)}


def attention_prefill_work(new_tokens, context, num_heads, num_kv_heads, head_dim, causal=True):
    keys = context - (causal * 1.0) * (new_tokens - 1) / 2.0
    flops = 4.0 * num_heads * head_dim * new_tokens * keys
    return flops, B * head_dim * (2 * new_tokens * num_heads + 2 * context * num_kv_heads), 1.0


def attention_prefill_features(new_tokens, context, num_heads, num_kv_heads, head_dim, causal=True) -> dict:
    c = causal * 1.0
    flops, nbytes, _ = attention_prefill_work(new_tokens, context, num_heads, num_kv_heads, head_dim, c)
    return {"flops": flops, "bytes": nbytes, "count": 1.0, "log_new_tokens": _log(new_tokens),
            "log_context": _log(context), "log_num_heads": _log(num_heads), "log_num_kv_heads": _log(num_kv_heads),
            "log_head_dim": _log(head_dim), "causal": c, "log_flops": _log(flops), "log_bytes": _log(nbytes)}


def attention_decode_work(batch, context_sum, num_heads, num_kv_heads, head_dim):
    flops = 4.0 * num_heads * head_dim * context_sum
    return flops, B * head_dim * (2 * context_sum * num_kv_heads + 2 * batch * num_heads), 1.0


def attention_decode_features(batch, context_sum, num_heads, num_kv_heads, head_dim) -> dict:
    flops, nbytes, _ = attention_decode_work(batch, context_sum, num_heads, num_kv_heads, head_dim)
    return {"flops": flops, "bytes": nbytes, "count": 1.0, "log_batch": _log(batch),
            "log_context_sum": _log(context_sum), "log_num_heads": _log(num_heads),
            "log_num_kv_heads": _log(num_kv_heads), "log_head_dim": _log(head_dim),
            "log_flops": _log(flops), "log_bytes": _log(nbytes)}


def elementwise_work(num_bytes):
    return 0.0, num_bytes * 1.0, 1.0


def elementwise_features(num_bytes) -> dict:
    return {"flops": 0.0, "bytes": num_bytes * 1.0, "count": 1.0, "log_bytes": _log(num_bytes)}


def allreduce_work(num_bytes, world):
    steps = 2.0 * (world - 1)
    return 0.0, steps / world * num_bytes, steps


def allreduce_features(num_bytes, world) -> dict:
    _, nbytes, steps = allreduce_work(num_bytes, world)
    return {"flops": 0.0, "bytes": nbytes, "count": steps, "log_num_bytes": _log(num_bytes),
            "log_world": _log(world), "log_steps": _log(steps)}


def p2p_work(num_bytes):
    return 0.0, (np.maximum(num_bytes, 1.0) if isinstance(num_bytes, np.ndarray) else max(num_bytes, 1.0)), 1.0


def p2p_features(num_bytes) -> dict:
    nbytes = p2p_work(num_bytes)[1]
    return {"flops": 0.0, "bytes": nbytes * 1.0, "count": 1.0, "log_bytes": _log(nbytes)}


@dataclass(frozen=True)
class ClassSpec:
    work: Callable[..., tuple]  # (flops, bytes, count): the roofline's inputs
    features: Callable[..., dict]  # work + the log features
    log_features: tuple[str, ...]  # the inputs of poly / forest, in column order
    uses_compute: bool  # False: a pure-traffic operator (no compute term)


CLASSES: dict[str, ClassSpec] = {
    "gemm": ClassSpec(gemm_work, gemm_features, ("log_m", "log_n", "log_k", "log_flops", "log_bytes"), True),
    "attention_prefill": ClassSpec(
        attention_prefill_work, attention_prefill_features,
        ("log_new_tokens", "log_context", "log_num_heads", "log_num_kv_heads", "log_head_dim", "causal",
         "log_flops", "log_bytes"),
        True,
    ),
    "attention_decode": ClassSpec(
        attention_decode_work, attention_decode_features,
        ("log_batch", "log_context_sum", "log_num_heads", "log_num_kv_heads", "log_head_dim", "log_flops",
         "log_bytes"),
        True,
    ),
    "elementwise": ClassSpec(elementwise_work, elementwise_features, ("log_bytes",), False),
    "allreduce": ClassSpec(allreduce_work, allreduce_features, ("log_num_bytes", "log_world", "log_steps"), False),
    "p2p": ClassSpec(p2p_work, p2p_features, ("log_bytes",), False),
}


def _bool_column(col: pd.Series) -> np.ndarray:
    if col.dtype == bool:
        return col.to_numpy(float)
    return col.astype(str).str.strip().str.lower().isin(("true", "1", "1.0", "yes")).to_numpy(float)


def usable_rows(op_class: str, df: pd.DataFrame) -> pd.DataFrame:
    """Rows with a positive finite time and positive work (what the predictor would not answer 0 for)."""
    t = pd.to_numeric(df["time_ms"], errors="coerce")
    ok = np.isfinite(t) & (t > 0)
    cols = {c: pd.to_numeric(df[c], errors="coerce") for c in opdata.SHAPE_COLUMNS[op_class] if c != "causal"}
    if op_class == "gemm":
        ok &= (cols["m"] > 0) & (cols["n"] > 0) & (cols["k"] > 0)
    elif op_class == "attention_prefill":
        ok &= (cols["new_tokens"] > 0) & (cols["context"] >= cols["new_tokens"])
        ok &= (cols["num_heads"] > 0) & (cols["num_kv_heads"] > 0) & (cols["head_dim"] > 0)
    elif op_class == "attention_decode":
        ok &= (cols["batch"] > 0) & (cols["context_sum"] > 0)
        ok &= (cols["num_heads"] > 0) & (cols["num_kv_heads"] > 0) & (cols["head_dim"] > 0)
    elif op_class == "elementwise":
        ok &= cols["num_bytes"] > 0
    elif op_class == "allreduce":
        ok &= (cols["num_bytes"] > 0) & (cols["world"] > 1)
    elif op_class == "p2p":
        ok &= cols["num_bytes"] >= 0
    return df[ok.fillna(False).to_numpy(bool)].reset_index(drop=True)


def class_features(op_class: str, df: pd.DataFrame) -> dict[str, np.ndarray]:
    """Every feature of ``op_class`` over the rows of ``df`` (arrays of len(df))."""
    args = [_bool_column(df[c]) if c == "causal" else df[c].to_numpy(float) for c in opdata.SHAPE_COLUMNS[op_class]]
    feats = CLASSES[op_class].features(*args)
    n = len(df)
    return {k: np.broadcast_to(np.asarray(v, float), (n,)).copy() for k, v in feats.items()}


def matrix(feats: dict, names) -> np.ndarray:
    return np.column_stack([np.asarray(feats[nm], float) for nm in names])



def row_ops(df: pd.DataFrame) -> np.ndarray | None:
    """The canonical elementwise op of every row (``""`` where it is missing), or
    None when ``df`` has no ``op`` column (:func:`~lmmsim.costmodel.opdata.canonical_elementwise_op`)."""
    if "op" not in df.columns:
        return None
    return np.array(["" if pd.isna(v) else opdata.canonical_elementwise_op(str(v)) for v in df["op"]], dtype=object)


def class_peaks(op_class: str, gpu: GpuSpec, link: LinkSpec | None) -> tuple[float | None, float | None]:
    """The roofline constants of ``op_class`` on ``gpu``: (FLOP/s, bytes/s); links for collectives."""
    if op_class in LINK_CLASSES:
        return None, (link.bandwidth_gbs * 1e9 if link is not None else None)
    return gpu.peak_flops, gpu.hbm_bytes_per_s

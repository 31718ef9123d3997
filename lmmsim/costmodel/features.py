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
  ``log_flops`` (causal-average keys), ``log_bytes`` (Q, O, K, V once), and
  the tiles FlashAttention runs (:data:`ATTENTION_TILE` rows per block):
  ``log_q_tiles`` (query blocks per sequence), ``log_ctas`` (query blocks x
  heads: the thread blocks of the grid), ``log_tile_work`` (query/key block
  pairs the mask keeps x heads x head_dim: the padded work, which is what a
  64-token window really costs), ``log_prefix`` (``log(context / new_tokens)``,
  0 for a fresh prefill) and ``log_gqa`` (query heads per KV head);
* ``attention_decode``: logs of the five sizes, ``log_flops``, ``log_bytes``
  (the KV read dominates), ``log_mean_context`` (context_sum / batch) and
  ``log_gqa``;
* ``elementwise``: ``log_bytes``; ``p2p``: ``log_bytes`` (at least one byte);
* ``allreduce``: ``log_num_bytes, log_world, log_steps`` with steps = 2(world-1);
  work bytes are the ring's ``steps / world * num_bytes`` sent per GPU.

Domain (:class:`Domain`, what "inside the data" means)
-------------------------------------------------------
A saved fit records, per class, where its rows lie; a call outside is an
extrapolation (counted, and for attention answered by the fitted roofline:
:mod:`lmmsim.costmodel.fitted`). For most classes the domain is the box of
the model's log features. For attention it is finer, because a box over
independent features accepts shapes nobody measured:

* *Batch folded into heads is exact for the kernel, so ``num_heads`` stays a
  coordinate.* Callers (and the aiconfigurator import) pass ``b`` equal-length
  sequences of ``h`` heads as one sequence of ``b*h`` heads: FlashAttention's
  grid is ``(query blocks, heads, batch)`` and every block does the same work,
  so the kernel cannot tell the two apart (aiconfigurator's H100 encoder rows
  with equal ``isl`` and ``b*h`` but different splits agree to a median 6 %).
* *But the joint coverage matters.* Folded heads span four decades in a
  profile (a batch of 256 at 96 heads) while a long sequence was only timed
  with few of them, so ``log_num_heads`` "in range" says little on its own.
  The prefill box is therefore kept per ``(causal, head_dim)`` (different
  kernels / tile configurations; a head_dim never measured is outside) and per
  octave of ``new_tokens``: a call must fall in an octave the data has for its
  kernel, within that octave's range of folded heads, GQA ratio, prefix and
  padded work. Decode is kept per ``head_dim`` and octave of ``batch``, over
  mean context, heads and KV heads.
* *A chunk with a cached prefix is a different shape from a fresh prefill.*
  ``log_prefix`` is in the box, so a profile without chunked-prefill rows
  (aiconfigurator's context table: ``context == new_tokens`` always) leaves
  every later chunk of a prompt outside, honestly.

This is still a box per cell, not a hull: a call inside a cell's ranges but
between two sparse rows counts as inside.

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


#: Query / key rows per FlashAttention block (FA2 and FA3 at head_dim <= 128 use 128-row
#: query blocks; the key block varies, 128 is the common case). Only the tile features use it.
ATTENTION_TILE = 128


def _ceil(x):
    return np.ceil(x) if isinstance(x, np.ndarray) else float(math.ceil(x))


def attention_prefill_features(new_tokens, context, num_heads, num_kv_heads, head_dim, causal=True) -> dict:
    c = causal * 1.0
    flops, nbytes, _ = attention_prefill_work(new_tokens, context, num_heads, num_kv_heads, head_dim, c)
    q_tiles = _ceil(new_tokens / ATTENTION_TILE)
    k_tiles = _ceil(context / ATTENTION_TILE)
    # Block pairs the mask keeps: a causal chunk's query block i sees the prefix's blocks plus
    # i + 1 of its own (exact when the prefix is a whole number of blocks).
    pairs = q_tiles * k_tiles - c * q_tiles * (q_tiles - 1) / 2.0
    return {"flops": flops, "bytes": nbytes, "count": 1.0, "log_new_tokens": _log(new_tokens),
            "log_context": _log(context), "log_num_heads": _log(num_heads), "log_num_kv_heads": _log(num_kv_heads),
            "log_head_dim": _log(head_dim), "causal": c, "log_flops": _log(flops), "log_bytes": _log(nbytes),
            "log_q_tiles": _log(q_tiles), "ctas": q_tiles * num_heads, "log_ctas": _log(q_tiles * num_heads),
            "log_tile_work": _log(pairs * num_heads * head_dim), "log_prefix": _log(context / new_tokens),
            "log_gqa": _log(num_heads / num_kv_heads)}


def attention_decode_work(batch, context_sum, num_heads, num_kv_heads, head_dim):
    flops = 4.0 * num_heads * head_dim * context_sum
    return flops, B * head_dim * (2 * context_sum * num_kv_heads + 2 * batch * num_heads), 1.0


def _logger(*args):
    """np.log when any argument is an array (fit time), else math.log: one type test per call
    instead of one per feature (decode attention's features are computed every engine step)."""
    return np.log if any(isinstance(a, np.ndarray) for a in args) else math.log


def attention_decode_features(batch, context_sum, num_heads, num_kv_heads, head_dim) -> dict:
    flops, nbytes, _ = attention_decode_work(batch, context_sum, num_heads, num_kv_heads, head_dim)
    log = _logger(batch, context_sum, num_heads, num_kv_heads, head_dim)
    return {"flops": flops, "bytes": nbytes, "count": 1.0, "log_batch": log(batch),
            "log_context_sum": log(context_sum), "log_num_heads": log(num_heads),
            "log_num_kv_heads": log(num_kv_heads), "log_head_dim": log(head_dim),
            "log_flops": log(flops), "log_bytes": log(nbytes), "log_mean_context": log(context_sum / batch),
            "log_gqa": log(num_heads / num_kv_heads)}


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
class Domain:
    """Where a class's data lie (module docstring): one box over ``box`` per cell.

    A cell is the rounded values of ``cells`` (categorical features) plus, when
    ``octave`` is set, ``floor(log2(size))`` of that log feature. None of it
    set: one box over the model's log features.
    """

    cells: tuple[str, ...] = ()
    octave: str | None = None
    box: tuple[str, ...] = ()


@dataclass(frozen=True)
class ClassSpec:
    work: Callable[..., tuple]  # (flops, bytes, count): the roofline's inputs
    features: Callable[..., dict]  # work + the log features
    log_features: tuple[str, ...]  # the inputs of poly / forest, in column order
    uses_compute: bool  # False: a pure-traffic operator (no compute term)
    domain: Domain | None = None  # None: the box of log_features
    # The roofline's inputs: WORK, plus the grid's thread blocks ("ctas") where occupancy
    # scales the memory term (:class:`~lmmsim.costmodel.estimators.RooflineRegressor`).
    work_features: tuple[str, ...] = WORK


CLASSES: dict[str, ClassSpec] = {
    "gemm": ClassSpec(gemm_work, gemm_features, ("log_m", "log_n", "log_k", "log_flops", "log_bytes"), True),
    "attention_prefill": ClassSpec(
        attention_prefill_work, attention_prefill_features,
        ("log_new_tokens", "log_context", "log_num_heads", "log_num_kv_heads", "log_head_dim", "causal",
         "log_flops", "log_bytes", "log_q_tiles", "log_ctas", "log_tile_work", "log_prefix", "log_gqa"),
        True,
        Domain(cells=("causal", "log_head_dim"), octave="log_new_tokens",
               box=("log_new_tokens", "log_prefix", "log_num_heads", "log_gqa", "log_tile_work")),
        work_features=(*WORK, "ctas"),
    ),
    "attention_decode": ClassSpec(
        attention_decode_work, attention_decode_features,
        ("log_batch", "log_context_sum", "log_num_heads", "log_num_kv_heads", "log_head_dim", "log_flops",
         "log_bytes", "log_mean_context", "log_gqa"),
        True,
        Domain(cells=("log_head_dim",), octave="log_batch",
               box=("log_batch", "log_mean_context", "log_num_heads", "log_num_kv_heads")),
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

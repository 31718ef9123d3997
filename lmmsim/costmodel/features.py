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
* ``gemm_fp8``: as ``gemm``, with FP8 operands: bytes ``kn`` (1-byte weights) +
  ``4mk`` (bf16 input read, FP8 copy written and read: vLLM quantises the
  activation in a kernel of its own, which the measured time includes) + ``2mn``
  (bf16 output); its roofline runs at the GPU's FP8 peak (the bf16 peak on a
  GPU without one).
* ``attention_decode_fp8``: as ``attention_decode``, the cached K and V one byte
  per element.
* ``moe_experts`` (one MoE layer on one GPU, see
  :mod:`lmmsim.profiler.aiconfigurator_moe` for what the measured time holds):
  ``assign`` = ``tokens x topk / moe_ep`` token-expert pairs on this GPU (its
  share under balanced routing), ``touched`` = the local experts a batch hits
  (``E/ep x (1 - (1 - topk/E)^tokens)``, uniform routing), ``inter_local`` =
  ``inter / moe_tp``. FLOPs ``6 assign hidden inter_local`` (gate/up and down);
  bytes = the touched experts' weights (``3 hidden inter_local`` each, 1 or 2
  bytes) + the activations' traffic. FP8 FLOPs count half (FP8 tensor cores run
  at twice the bf16 rate on Hopper and Blackwell), so one roofline at the bf16
  peak serves both dtypes. Logs of every size, ``log_assign, log_touched,
  log_flops, log_weight_bytes, log_bytes``, plus ``fp8`` (0/1) and ``alpha`` (the
  routing's power-law exponent, 0 for balanced: the measured GPU is the most
  loaded EP rank, so skewed routing costs more than ``assign`` says).
* ``moe_alltoall`` (DeepEP dispatch / combine, ``tokens`` per EP rank): bytes a
  rank sends, ``tokens x hidden x 2 x`` the other ranks a token's ``topk``
  experts expect to reach (``(ep-1)(1 - (1 - 1/ep)^topk)``); logs of the sizes
  and ``combine`` (0/1). A link class, like the all-reduce.

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
LINK_CLASSES = ("allreduce", "p2p", "moe_alltoall")
#: Numeric codes of the text shape columns (opdata.TEXT_COLUMNS): the features' inputs.
ROUTING_ALPHA = {r: 0.0 if r == "balanced" else float(r.rsplit("_", 1)[1]) for r in opdata.MOE_ROUTINGS}
_CODES = {"dtype": dict(zip(opdata.MOE_DTYPES, (0.0, 1.0))), "routing": ROUTING_ALPHA,
          "phase": dict(zip(opdata.A2A_PHASES, (0.0, 1.0)))}


def code(column: str, value) -> float:
    """The number a text shape value stands for (``dtype`` fp8 -> 1, ``routing`` -> its
    power-law exponent, ``phase`` combine -> 1); ValueError naming the valid values."""
    table = _CODES[column]
    try:
        return table[value]
    except KeyError:
        raise ValueError(f"{column} {value!r}: choose from {', '.join(table)}") from None


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
    return _prefill_features(new_tokens, context, num_heads, num_kv_heads, head_dim, causal, _log, _ceil)


def attention_prefill_scalar(new_tokens, context, num_heads, num_kv_heads, head_dim, causal=True) -> dict:
    """:func:`attention_prefill_features` of one call (Python numbers): the same dict, every value
    from the same expressions in the same order, with math.log and math.ceil called directly
    (no array test per value: half the time, on every memo miss of prefill attention)."""
    return _prefill_features(new_tokens, context, num_heads, num_kv_heads, head_dim, causal, math.log, _ceil_scalar)


def _ceil_scalar(x) -> float:
    return float(math.ceil(x))


def _prefill_features(new_tokens, context, num_heads, num_kv_heads, head_dim, causal, log, ceil) -> dict:
    c = causal * 1.0
    flops, nbytes, _ = attention_prefill_work(new_tokens, context, num_heads, num_kv_heads, head_dim, c)
    q_tiles = ceil(new_tokens / ATTENTION_TILE)
    k_tiles = ceil(context / ATTENTION_TILE)
    # Block pairs the mask keeps: a causal chunk's query block i sees the prefix's blocks plus
    # i + 1 of its own (exact when the prefix is a whole number of blocks).
    pairs = q_tiles * k_tiles - c * q_tiles * (q_tiles - 1) / 2.0
    return {"flops": flops, "bytes": nbytes, "count": 1.0, "log_new_tokens": log(new_tokens),
            "log_context": log(context), "log_num_heads": log(num_heads), "log_num_kv_heads": log(num_kv_heads),
            "log_head_dim": log(head_dim), "causal": c, "log_flops": log(flops), "log_bytes": log(nbytes),
            "log_q_tiles": log(q_tiles), "ctas": q_tiles * num_heads, "log_ctas": log(q_tiles * num_heads),
            "log_tile_work": log(pairs * num_heads * head_dim), "log_prefix": log(context / new_tokens),
            "log_gqa": log(num_heads / num_kv_heads)}


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


def gemm_fp8_work(m, n, k):
    return 2.0 * m * n * k, k * n + 4.0 * m * k + B * m * n, 1.0


def gemm_fp8_features(m, n, k) -> dict:
    flops, nbytes, _ = gemm_fp8_work(m, n, k)
    return {"flops": flops, "bytes": nbytes, "count": 1.0, "log_m": _log(m), "log_n": _log(n),
            "log_k": _log(k), "log_flops": _log(flops), "log_bytes": _log(nbytes)}


def attention_decode_fp8_work(batch, context_sum, num_heads, num_kv_heads, head_dim):
    flops = 4.0 * num_heads * head_dim * context_sum
    return flops, head_dim * (2.0 * context_sum * num_kv_heads + 2 * B * batch * num_heads), 1.0


def attention_decode_fp8_features(batch, context_sum, num_heads, num_kv_heads, head_dim) -> dict:
    f = attention_decode_features(batch, context_sum, num_heads, num_kv_heads, head_dim)
    flops, nbytes, _ = attention_decode_fp8_work(batch, context_sum, num_heads, num_kv_heads, head_dim)
    f.update(bytes=nbytes, log_bytes=_log(nbytes))
    return f


def _moe_sizes(tokens, hidden, inter, num_experts, topk, moe_tp, moe_ep, fp8):
    """(assign, touched, inter_local, weight_bytes, activation_bytes) of one GPU (module docstring)."""
    inter_local = inter / moe_tp
    local_experts = num_experts / moe_ep
    assign = tokens * topk / moe_ep
    touched = local_experts * (1.0 - (1.0 - topk / num_experts) ** tokens)
    weight_bytes = touched * 3.0 * hidden * inter_local * (2.0 - fp8)
    # input read + output written (all tokens), per pair: gathered row, gate|up written and
    # read, activation written and read, down output written and summed (bf16)
    act_bytes = 2 * B * tokens * hidden + assign * B * (3.0 * hidden + 5.0 * inter_local)
    return assign, touched, inter_local, weight_bytes, act_bytes


def moe_experts_work(tokens, hidden, inter, num_experts, topk, moe_tp, moe_ep, fp8=0.0, alpha=0.0):
    assign, _, inter_local, weight_bytes, act_bytes = _moe_sizes(tokens, hidden, inter, num_experts, topk,
                                                                 moe_tp, moe_ep, fp8)
    return 6.0 * assign * hidden * inter_local / (1.0 + fp8), weight_bytes + act_bytes, 1.0


def moe_experts_features(tokens, hidden, inter, num_experts, topk, moe_tp, moe_ep, fp8=0.0, alpha=0.0) -> dict:
    assign, touched, inter_local, weight_bytes, act_bytes = _moe_sizes(tokens, hidden, inter, num_experts, topk,
                                                                       moe_tp, moe_ep, fp8)
    flops = 6.0 * assign * hidden * inter_local / (1.0 + fp8)
    log = _logger(tokens, hidden, inter, num_experts, topk, moe_tp, moe_ep, fp8, alpha)
    return {"flops": flops, "bytes": weight_bytes + act_bytes, "count": 1.0, "log_tokens": log(tokens),
            "log_hidden": log(hidden), "log_inter_local": log(inter_local),
            "log_local_experts": log(num_experts / moe_ep), "log_topk": log(topk), "log_ep": log(moe_ep),
            "log_assign": log(assign), "log_touched": log(touched), "log_flops": log(flops),
            "log_weight_bytes": log(weight_bytes), "log_bytes": log(weight_bytes + act_bytes),
            "fp8": fp8 * 1.0, "alpha": alpha * 1.0}


def moe_alltoall_work(tokens, hidden, topk, ep, combine=0.0):
    remote = (ep - 1.0) * (1.0 - (1.0 - 1.0 / ep) ** topk)
    return 0.0, B * tokens * hidden * remote, 1.0


def moe_alltoall_features(tokens, hidden, topk, ep, combine=0.0) -> dict:
    _, nbytes, _ = moe_alltoall_work(tokens, hidden, topk, ep, combine)
    log = _logger(tokens, hidden, topk, ep, combine)
    return {"flops": 0.0, "bytes": nbytes, "count": 1.0, "log_tokens": log(tokens), "log_hidden": log(hidden),
            "log_topk": log(topk), "log_ep": log(ep), "log_bytes": log(nbytes), "combine": combine * 1.0}


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
    estimators: tuple[str, ...] | None = None  # candidates to choose from; None: all (estimators.ESTIMATORS)
    forest_params: dict | None = None  # None: estimators.FOREST_PARAMS
    # ``features`` of one call in Python numbers, faster (the same dict); None: ``features`` itself.
    scalar_features: Callable[..., dict] | None = None

    def call_features(self) -> Callable[..., dict]:
        """The features of one call, as a predictor computes them on a memo miss."""
        return self.scalar_features or self.features


#: The FP8 / MoE classes' forests: 16 trees, leaves of 6 rows or more, so that their arrays
#: stay small in the wheel (~0.4 MB per class and GPU instead of 2 MB).
SMALL_FOREST = {"n_estimators": 16, "max_depth": 12, "min_samples_leaf": 6}


# Decode attention over a bf16 or an FP8 cache: the same features and domain.
DECODE_FEATURES = (
    ("log_batch", "log_context_sum", "log_num_heads", "log_num_kv_heads", "log_head_dim", "log_flops",
     "log_bytes", "log_mean_context", "log_gqa"),
    True,
    Domain(cells=("log_head_dim",), octave="log_batch",
           box=("log_batch", "log_mean_context", "log_num_heads", "log_num_kv_heads")),
)

CLASSES: dict[str, ClassSpec] = {
    "gemm": ClassSpec(gemm_work, gemm_features, ("log_m", "log_n", "log_k", "log_flops", "log_bytes"), True),
    "attention_prefill": ClassSpec(
        attention_prefill_work, attention_prefill_features,
        ("log_new_tokens", "log_context", "log_num_heads", "log_num_kv_heads", "log_head_dim", "causal",
         "log_flops", "log_bytes", "log_q_tiles", "log_ctas", "log_tile_work", "log_prefix", "log_gqa"),
        True,
        Domain(cells=("causal", "log_head_dim"), octave="log_new_tokens",
               box=("log_new_tokens", "log_prefix", "log_num_heads", "log_gqa", "log_tile_work")),
        work_features=(*WORK, "ctas"), scalar_features=attention_prefill_scalar,
    ),
    "attention_decode": ClassSpec(attention_decode_work, attention_decode_features, *DECODE_FEATURES),
    "elementwise": ClassSpec(elementwise_work, elementwise_features, ("log_bytes",), False),
    "allreduce": ClassSpec(allreduce_work, allreduce_features, ("log_num_bytes", "log_world", "log_steps"), False),
    "p2p": ClassSpec(p2p_work, p2p_features, ("log_bytes",), False),
    "gemm_fp8": ClassSpec(gemm_fp8_work, gemm_fp8_features,
                          ("log_m", "log_n", "log_k", "log_flops", "log_bytes"), True, forest_params=SMALL_FOREST),
    "attention_decode_fp8": ClassSpec(attention_decode_fp8_work, attention_decode_fp8_features, *DECODE_FEATURES,
                                      forest_params=SMALL_FOREST),
    # Inside: the dtype and routing measured, every size within the measured range; a
    # (hidden, inter, experts, topk) combination the table lacks is inside (module docstring).
    "moe_experts": ClassSpec(
        moe_experts_work, moe_experts_features,
        ("log_tokens", "log_hidden", "log_inter_local", "log_local_experts", "log_topk", "log_ep", "log_assign",
         "log_touched", "log_flops", "log_weight_bytes", "log_bytes", "fp8", "alpha"),
        True,
        Domain(cells=("fp8", "alpha"), box=("log_tokens", "log_hidden", "log_inter_local", "log_local_experts",
                                            "log_topk", "log_ep", "log_assign")),
        # No polynomials: fitted without one of the table's (hidden, inter, experts, topk) shapes,
        # poly3 missed it by a median 59% (p90 ~1e6 %), poly2 by 16% (p90 54%), the forest over
        # these features by 11% (p90 36%) (H200 table; the shipped forest: median 10%, p90 34%,
        # `python bench/fp8_moe_accuracy.py h200 --shapes`).
        estimators=("roofline", "forest"), forest_params=SMALL_FOREST,
    ),
    "moe_alltoall": ClassSpec(
        moe_alltoall_work, moe_alltoall_features,
        ("log_tokens", "log_hidden", "log_topk", "log_ep", "log_bytes", "combine"), False,
        Domain(cells=("combine",), box=("log_tokens", "log_hidden", "log_topk", "log_ep")),
        forest_params=SMALL_FOREST,
    ),
}


def _bool_column(col: pd.Series) -> np.ndarray:
    if col.dtype == bool:
        return col.to_numpy(float)
    return col.astype(str).str.strip().str.lower().isin(("true", "1", "1.0", "yes")).to_numpy(float)


def usable_rows(op_class: str, df: pd.DataFrame) -> pd.DataFrame:
    """Rows with a positive finite time and positive work (what the predictor would not answer 0 for)."""
    t = pd.to_numeric(df["time_ms"], errors="coerce")
    ok = np.isfinite(t) & (t > 0)
    cols = {c: pd.to_numeric(df[c], errors="coerce") for c in opdata.SHAPE_COLUMNS[op_class]
            if c not in opdata.TEXT_COLUMNS}
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
    elif op_class in opdata.EXTRA_FITTED_CLASSES:  # every size positive, every name a valid one
        for c in opdata.SHAPE_COLUMNS[op_class]:
            ok &= df[c].isin(list(_CODES[c])) if c in _CODES else cols[c] > 0
    return df[ok.fillna(False).to_numpy(bool)].reset_index(drop=True)


def class_features(op_class: str, df: pd.DataFrame) -> dict[str, np.ndarray]:
    """Every feature of ``op_class`` over the rows of ``df`` (arrays of len(df))."""
    args = [_bool_column(df[c]) if c == "causal" else
            df[c].map(_CODES[c]).to_numpy(float) if c in _CODES else df[c].to_numpy(float)
            for c in opdata.SHAPE_COLUMNS[op_class]]
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
    if op_class == "gemm_fp8" and gpu.peak_fp8_tflops:
        return gpu.peak_fp8_tflops * 1e12, gpu.hbm_bytes_per_s
    return gpu.peak_flops, gpu.hbm_bytes_per_s

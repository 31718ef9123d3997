"""Convert Vidur's public operator profiles into an lmmsim profile folder.

Vidur (microsoft/vidur, MIT licence) publishes real A100 / H100 timings under
``data/profiling/``::

    compute/<gpu>/<org>/<model>/mlp.csv        non-attention operators of one layer
    compute/<gpu>/<org>/<model>/attention.csv  attention kernels (where profiled)
    network/<topology>/all_reduce.csv          NCCL all-reduce by size and world
    network/<topology>/send_recv.csv           NCCL send/recv between two GPUs

:func:`import_vidur` turns them into the classes of :mod:`lmmsim.costmodel.opdata`
with the same per-GPU shape conventions as
:class:`~lmmsim.costmodel.composed.ComposedStepCostModel`, so a predictor
fitted on them answers exactly the calls the simulator makes.

What each Vidur column measures (read from the Vidur sources):

* Times are milliseconds of GPU kernel time (sum of the durations of the CUDA
  kernels launched inside the timed region; CPU launch gaps excluded).
  ``time_stats.<op>.{min,max,mean,median,std}`` aggregate the repeats
  (``vidur/profiling/common/timer_stats_store.py``,
  ``vidur/profiling/utils/record_function_tracer.py``). ``time_ms`` here is
  the median; Vidur has no percentiles, so ``time_ms_p10`` / ``time_ms_p90``
  stay empty and min / max go to ``time_ms_min`` / ``time_ms_max``.
* ``mlp.csv`` (``vidur/profiling/mlp/mlp_impl.py``, ``mlp_wrapper.py``): one
  decoder block in fp16 at ``num_tokens`` tokens, sharded for
  ``num_tensor_parallel_workers`` (column-parallel QKV / up, row-parallel O /
  down, ``reduce_results=False`` so no collective is timed). Each timer wraps
  one call: ``attn_pre_proj`` / ``attn_post_proj`` / ``mlp_up_proj`` /
  ``mlp_down_proj`` the ``F.linear`` of the QKV, O, gate+up and down
  projections (sarathi ``ColumnParallelLinear`` / ``RowParallelLinear``);
  ``emb`` the ``F.embedding`` row gather of ``VocabParallelEmbedding`` (the
  TP masking around it is not timed); ``input_layernorm`` /
  ``post_attention_layernorm`` a plain (unfused) norm; ``attn_rope`` the
  in-place rotary on Q and K; ``mlp_act`` SiLU-and-mul (gated) or GELU;
  ``add`` the residual add ``residual + hidden``. 20 repeats per row
  (record_function, Vidur's default for mlp; the CSV does not record it).
* ``attention.csv`` (``vidur/profiling/attention/attention_wrapper.py``,
  ``sequence_proxy.py``, ``attention_input.py`` and sarathi-serve's
  ``flash_attention_wrapper.py``): per sequence, ``kv_cache_size`` tokens are
  already cached and ``prefill_chunk_size`` new tokens (prefill, one
  sequence) or 1 new token (decode, ``batch_size`` sequences) are processed by
  ``flash_attn_with_kvcache``, which appends the new K/V to the paged cache
  and attends over ``kv_cache_size + new`` keys. ``attn_prefill`` /
  ``attn_decode`` time that kernel (KV append included);
  ``attn_input_reshape`` is views only (always 0) and ``attn_output_reshape``
  a copy of the output into the batch buffer (median 2-3 % of the kernel,
  up to ~20 % for the smallest); they are
  kept as extra columns, not in ``time_ms``: vLLM's FlashAttention backend
  writes its output in place and the composition costs attention as one
  kernel. 5 repeats per row (Kineto).
* ``all_reduce.csv`` / ``send_recv.csv`` (``vidur/profiling/collectives/``):
  ``size`` is bytes (fp16 buffer of ``size / 2`` elements, reported ``*2``),
  ``num_workers`` the world, ``devices_per_node`` the GPUs used per node (so
  ``num_workers / devices_per_node`` nodes); each timed sample is the median
  NCCL kernel time of 11 back-to-back calls, 3 samples per row, rank 0 only.
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path

import pandas as pd

from lmmsim.catalog import BYTES_PER_PARAM_BF16
from lmmsim.costmodel import opdata
from lmmsim.errors import UserError

B = BYTES_PER_PARAM_BF16  # Vidur profiles in fp16: same 2 bytes per element as bf16

SOURCE = "Vidur public profiles (microsoft/vidur, MIT licence, commit 7d47513)"

DEVICES = {
    "a100": "NVIDIA A100 80GB",
    "h100": "NVIDIA H100 (DGX H100, H100 SXM 80GB)",
}
#: Catalog GPU each compute folder is closest to (``meta["hardware"]``, the fitter's default).
HARDWARE = {"a100": "a100-sxm-80gb", "h100": "h100-sxm-80gb"}
NETWORK_DEVICES = {
    "a100_dgx": "DGX A100: 8x A100 80GB, all-to-all NVLink (NVSwitch)",
    "a100_pairwise_nvlink": "Azure Standard_NC96ads_A100_v4: 4x A100 80GB, NVLink between pairs, slower link across pairs",
    "h100_dgx": "DGX H100: 8x H100, all-to-all NVLink (NVSwitch)",
    "h100_pairwise_nvlink": "4x H100, NVLink between pairs",
    "a40_pairwise_nvlink": "A40s, NVLink between pairs",
}

# Vidur mlp.csv metric -> (class, op). Order = the block's execution order.
_MLP_OPS = (
    ("emb", "elementwise", "embedding"),
    ("input_layernorm", "elementwise", "rmsnorm"),
    ("attn_pre_proj", "gemm", "qkv"),
    ("attn_rope", "elementwise", "rotary"),
    ("attn_post_proj", "gemm", "o"),
    ("post_attention_layernorm", "elementwise", "rmsnorm"),
    ("mlp_up_proj", "gemm", "gate_up"),
    ("mlp_act", "elementwise", "act"),
    ("mlp_down_proj", "gemm", "down"),
    ("add", "elementwise", "add"),
)


# Columns each Vidur file must have (shapes: every cell a number), and its flag columns.
_MLP_SHAPE = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "num_tokens", "num_tensor_parallel_workers")
_ATTENTION_SHAPE = ("n_embd", "n_q_head", "n_kv_head", "num_tensor_parallel_workers", "batch_size",
                    "prefill_chunk_size", "kv_cache_size")
_NETWORK_SHAPE = ("num_workers", "size")

#: The files an import may write (checked against a user's files before anything is read).
OUTPUT_FILES = tuple(opdata.csv_path(Path(), c).name for c in opdata.FITTED_CLASSES) + ("meta.json",)


def _read(path: Path, shape: tuple[str, ...], flags: tuple[str, ...] = (), medians=()) -> pd.DataFrame:
    """One Vidur CSV, checked: readable, with rows, its shape and flag columns, the
    ``time_stats.<metric>.median`` of every metric in ``medians``, all times numbers
    (an empty cell is a missing median: the row is dropped and counted)."""
    required = (*shape, *flags, *(f"time_stats.{m}.median" for m in medians))
    df = opdata.read_table(path, required=required, complete=(*shape, "devices_per_node"), flags=flags)
    if df.empty:
        raise UserError(str(path), f"holds a header but no rows (columns {', '.join(map(str, df.columns[:6]))}, ...)")
    times = [c for c in df.columns if str(c).startswith("time_stats.")]
    return opdata.check_numeric(path, df, numeric=times)


def _read_mlp(path: Path) -> pd.DataFrame:
    df = _read(path, _MLP_SHAPE, flags=("use_gated_mlp",))
    if not any(f"time_stats.{metric}.median" in df.columns for metric, _, _ in _MLP_OPS):
        raise UserError(str(path), "no operator timings: none of the columns time_stats.<op>.median for op in "
                                   + ", ".join(metric for metric, _, _ in _MLP_OPS))
    return df


def _read_attention(path: Path) -> pd.DataFrame:
    df = _read(path, _ATTENTION_SHAPE, flags=("is_prefill",))
    prefill = _bool(df["is_prefill"])
    need = [m for m, rows in (("attn_prefill", prefill), ("attn_decode", ~prefill)) if rows.any()]
    missing = [f"time_stats.{m}.median" for m in need if f"time_stats.{m}.median" not in df.columns]
    if missing:
        raise UserError(str(path), f"missing column(s) {', '.join(missing)} (it has rows of that kind)")
    return df


def _stat(df: pd.DataFrame, metric: str, stat: str) -> pd.Series:
    col = f"time_stats.{metric}.{stat}"
    return df[col].astype(float) if col in df.columns else pd.Series(float("nan"), index=df.index)


def _times(df: pd.DataFrame, metric: str) -> dict:
    return {
        "time_ms": _stat(df, metric, "median"),
        "time_ms_p10": float("nan"),
        "time_ms_p90": float("nan"),
        "time_ms_min": _stat(df, metric, "min"),
        "time_ms_max": _stat(df, metric, "max"),
    }


def _bool(series: pd.Series) -> pd.Series:
    if series.dtype == bool:
        return series
    return series.astype(str).str.strip().str.lower().isin(("true", "1", "1.0"))


class _Dropped:
    """Counts of rows left out, per class and reason (goes to meta.json)."""

    def __init__(self):
        self.counts: dict[str, dict[str, int]] = {}

    def add(self, op_class: str, reason: str, n: int) -> None:
        if n:
            per = self.counts.setdefault(op_class, {})
            per[reason] = per.get(reason, 0) + int(n)


def _keep_timed(df: pd.DataFrame, op_class: str, dropped: _Dropped) -> pd.DataFrame:
    """Drop rows whose median is missing (NaN) or not positive."""
    t = df["time_ms"]
    missing = t.isna()
    dropped.add(op_class, "median missing", missing.sum())
    nonpos = ~missing & (t <= 0)
    dropped.add(op_class, "median not positive", nonpos.sum())
    return df[~missing & ~nonpos]


# ------------------------------------------------------------------ compute
def _convert_mlp(df: pd.DataFrame, source: str, dropped: _Dropped) -> dict[str, list[pd.DataFrame]]:
    """One mlp.csv -> gemm and elementwise rows (shapes per GPU, composed.py conventions)."""
    tokens = df["num_tokens"].astype(int)
    h = df["n_embd"].astype(int)
    tp = df["num_tensor_parallel_workers"].astype(int)
    n_head = df["n_head"].astype(int)
    n_kv = df["n_kv_head"].astype(int)
    hd = h // n_head
    q_width = (n_head // tp) * hd  # Vidur asserts heads % tp == 0
    kv_width = (n_kv // tp) * hd
    ffn = df["n_expanded_embd"].astype(int) // tp
    gated = _bool(df["use_gated_mlp"])
    up_width = ffn * gated.map({True: 2, False: 1}).astype(int)
    act = tokens * h * B  # one [tokens, hidden] fp16 activation

    # A block without post_attention_layernorm is a parallel (phi-2 style) block:
    # its norm is a LayerNorm and its `add` times two adds (attn + mlp + residual).
    parallel_block = "time_stats.post_attention_layernorm.median" not in df.columns or bool(
        df["time_stats.post_attention_layernorm.median"].isna().all()
    )

    gemm_shapes = {
        "qkv": (tokens, q_width + 2 * kv_width, h),
        "o": (tokens, h, q_width),
        "gate_up": (tokens, up_width, h),
        "down": (tokens, h, ffn),
    }
    elementwise_bytes = {
        "embedding": 2 * act,  # gather rows, write (composed.py: embed)
        "rmsnorm": 2 * act,  # unfused norm: read x, write y (composed.py: encoder LayerNorm)
        "rotary": 2 * tokens * (q_width + kv_width) * B,  # in place on Q and K: read + write
        "act": tokens * (up_width + ffn) * B,  # read gate+up (or up), write ffn
        "add": 3 * act,  # residual add: read both, write (composed.py: encoder residual add)
    }

    out: dict[str, list[pd.DataFrame]] = {"gemm": [], "elementwise": []}
    for metric, op_class, op in _MLP_OPS:
        if f"time_stats.{metric}.median" not in df.columns:
            continue
        if metric == "add" and parallel_block:
            dropped.add("elementwise", "parallel-block add (two kernels in one timer)", len(df))
            continue
        common = {"op": op, "vidur_op": metric, "source": source, "tp": tp, "dtype": "float16"}
        if op_class == "gemm":
            m, n, k = gemm_shapes[op]
            rows = pd.DataFrame({"m": m, "n": n, "k": k, **_times(df, metric), **common})
        else:
            label = "layernorm" if (op == "rmsnorm" and parallel_block) else op
            if op == "act":  # Vidur's mlp_act: SiLU-and-mul when gated, else GELU (phi-2)
                label = (up_width == 2 * ffn).map({True: "silu_mul", False: "gelu"})
            rows = pd.DataFrame({
                "num_bytes": elementwise_bytes[op], **_times(df, metric), **common,
                "op": label, "tokens": tokens, "hidden": h,
            })
        out[op_class].append(_keep_timed(rows, op_class, dropped))
    return out


def _convert_attention(df: pd.DataFrame, source: str, dropped: _Dropped) -> dict[str, list[pd.DataFrame]]:
    """One attention.csv -> attention_prefill and attention_decode rows."""
    tp = df["num_tensor_parallel_workers"].astype(int)
    n_q = df["n_q_head"].astype(int)
    heads = n_q // tp
    kv_heads = df["n_kv_head"].astype(int) // tp
    head_dim = df["n_embd"].astype(int) // n_q
    kv = df["kv_cache_size"].astype(int)
    chunk = df["prefill_chunk_size"].astype(int)
    batch = df["batch_size"].astype(int)
    is_prefill = _bool(df["is_prefill"])

    extra = {
        "kv_cache_size": kv,
        "prefill_chunk_size": chunk,
        "batch_size": batch,
        "tp": tp,
        "source": source,
        "dtype": "float16",
        "time_ms_input_reshape": _stat(df, "attn_input_reshape", "median"),
        "time_ms_output_reshape": _stat(df, "attn_output_reshape", "median"),
    }
    for col in ("block_size", "max_model_len", "attention_backend"):
        if col in df.columns:
            extra[col] = df[col]

    prefill = pd.DataFrame({
        "new_tokens": chunk,
        "context": kv + chunk,  # keys attended: cached + the chunk itself
        "num_heads": heads,
        "num_kv_heads": kv_heads,
        "head_dim": head_dim,
        "causal": 1,
        **_times(df, "attn_prefill"),
        **extra,
    })[is_prefill]
    multi = prefill["batch_size"] != 1
    dropped.add("attention_prefill", "prefill batch_size != 1", multi.sum())
    prefill = prefill[~multi]

    decode = pd.DataFrame({
        "batch": batch,
        "context_sum": batch * (kv + 1),  # each query attends its kv_cache_size cached keys + its own
        "num_heads": heads,
        "num_kv_heads": kv_heads,
        "head_dim": head_dim,
        **_times(df, "attn_decode"),
        "context_each": kv + 1,
        **extra,
    })[~is_prefill]
    return {
        "attention_prefill": [_keep_timed(prefill, "attention_prefill", dropped)],
        "attention_decode": [_keep_timed(decode, "attention_decode", dropped)],
    }


# ------------------------------------------------------------------ network
def _convert_collective(df: pd.DataFrame, metric: str, op_class: str, topology: str, dropped: _Dropped,
                        include_multinode: bool) -> pd.DataFrame:
    world = df["num_workers"].astype(int)
    per_node = df["devices_per_node"].astype(int) if "devices_per_node" in df.columns else world
    nodes = (world + per_node - 1) // per_node
    rows = pd.DataFrame({
        "num_bytes": df["size"].astype(int),  # Vidur reports bytes (fp16 elements x 2)
        **({"world": world} if op_class == "allreduce" else {}),
        **_times(df, metric),
        "num_workers": world,
        "devices_per_node": per_node,
        "num_nodes": nodes,
        "source": topology,
        "dtype": "float16",
    })
    if not include_multinode:
        multi = rows["num_nodes"] > 1
        dropped.add(op_class, "spans several nodes", multi.sum())
        rows = rows[~multi]
    return _keep_timed(rows, op_class, dropped)


# ------------------------------------------------------------------ driver
def _profile_method(frames: list[pd.DataFrame], default: str) -> str:
    found = set()
    for df in frames:
        if "profile_method" in df.columns:
            found.update(str(v).replace("ProfileMethod.", "").lower() for v in df["profile_method"].dropna().unique())
    return ", ".join(sorted(found)) if found else default


def import_vidur(src: Path, out: Path, *, gpu: str, network: str | None = None,
                 include_multinode: bool = False) -> dict[str, int]:
    """Convert a Vidur ``data/profiling``-style tree into the profile folder ``out``.

    ``gpu`` picks ``src/compute/<gpu>/`` (every ``mlp.csv`` and ``attention.csv``
    below it); ``network`` picks ``src/network/<network>/`` (default
    ``<gpu>_dgx`` when it exists, else no collectives). Collective rows that
    span several nodes are left out unless ``include_multinode`` (they then
    carry ``num_nodes`` > 1, which the fitted classes do not model).

    Writes one CSV per class (:func:`opdata.write_class`) and ``meta.json``;
    returns ``{class: number of rows written}`` for the classes written.
    """
    src, out = Path(src), Path(out)
    compute = src / "compute" / gpu
    if not compute.is_dir():
        have = sorted(p.name for p in (src / "compute").iterdir() if p.is_dir()) if (src / "compute").is_dir() else []
        raise UserError("--gpu", f"{compute} does not exist (have: {', '.join(have) or 'none'})")
    if network is None:
        default = f"{gpu}_dgx"
        network = default if (src / "network" / default).is_dir() else None
    elif not (src / "network" / network).is_dir():
        raise UserError("--network", f"{src / 'network' / network} does not exist")

    acc = _Converted()
    mlp_frames, attention_frames = _read_compute(compute, gpu, acc)
    network_frames = _read_network(src, gpu, network, include_multinode, acc)
    counts = _write_classes(out, src, acc)
    notes = acc.notes + _notes(bool(attention_frames), network, include_multinode)
    meta = {
        "source": SOURCE,
        "source_path": str(src),
        "gpu": gpu,
        "device": DEVICES.get(gpu, gpu.upper()),
        "hardware": HARDWARE.get(gpu),
        "dtype": "float16",
        "profile_method": {
            "mlp": _profile_method(mlp_frames, "record_function (Vidur's default for mlp profiling; not in mlp.csv)"),
            "attention": _profile_method(attention_frames, "kineto") if attention_frames else None,
            "network": "kineto (NCCL kernels)" if network_frames else None,
        },
        "models": acc.models,
        "network_topology": network,
        "network_device": NETWORK_DEVICES.get(network) if network else None,
        "imported_by": "lmmsim import-vidur",
        "date": _dt.date.today().isoformat(),
        "rows": counts,
        "dropped_rows": acc.dropped.counts,
        "notes": notes,
    }
    if gpu == "a100":
        meta["notes"].append("Vidur does not say which A100 80GB form factor (SXM4 or PCIe) the compute "
                             "profiles ran on; hardware names the SXM4 catalog entry")
    opdata.write_meta(out, meta)
    return counts


class _Converted:
    """What an import has converted so far: frames per class, model folders, dropped rows, notes."""

    def __init__(self):
        self.parts: dict[str, list[pd.DataFrame]] = {}
        self.models: list[str] = []
        self.dropped = _Dropped()
        self.notes: list[str] = []

    def add(self, converted: dict[str, list[pd.DataFrame]]) -> None:
        for cls, frames in converted.items():
            self.parts.setdefault(cls, []).extend(frames)


def _read_compute(compute: Path, gpu: str, acc: _Converted) -> tuple[list[pd.DataFrame], list[pd.DataFrame]]:
    """Every ``mlp.csv`` then every ``attention.csv`` under ``compute``; returns the raw tables read."""
    mlp_frames: list[pd.DataFrame] = []
    attention_frames: list[pd.DataFrame] = []
    mlp_paths, attention_paths = sorted(compute.rglob("mlp.csv")), sorted(compute.rglob("attention.csv"))
    if not mlp_paths and not attention_paths:
        raise UserError(str(compute), "holds no mlp.csv or attention.csv (Vidur's layout: "
                                      f"compute/{gpu}/<org>/<model>/mlp.csv and .../attention.csv)")
    for path in mlp_paths:
        source = path.parent.relative_to(compute).as_posix()
        df = _read_mlp(path)
        mlp_frames.append(df)
        acc.models.append(source)
        acc.add(_convert_mlp(df, source, acc.dropped))
        if "time_stats.post_attention_layernorm.median" not in df.columns:
            acc.notes.append(f"{source}: parallel attention+MLP block (no post-attention norm); its norm rows are "
                             "labelled op=layernorm and its `add` (two adds in one timer) is left out")
    for path in attention_paths:
        source = path.parent.relative_to(compute).as_posix()
        df = _read_attention(path)
        attention_frames.append(df)
        if source not in acc.models:
            acc.models.append(source)
        acc.add(_convert_attention(df, source, acc.dropped))
    if not attention_frames:
        acc.notes.append(f"no attention.csv under compute/{gpu}: no attention classes")
    return mlp_frames, attention_frames


def _read_network(src: Path, gpu: str, network: str | None, include_multinode: bool,
                  acc: _Converted) -> list[pd.DataFrame]:
    """``all_reduce.csv`` and ``send_recv.csv`` of ``network`` (if any); returns the raw tables read."""
    network_frames: list[pd.DataFrame] = []
    if network is None:
        acc.notes.append(f"no network/{gpu}_dgx and no --network given: no allreduce / p2p rows")
        return network_frames
    folder = src / "network" / network
    for fname, metric, cls in (("all_reduce.csv", "all_reduce", "allreduce"), ("send_recv.csv", "send_recv", "p2p")):
        path = folder / fname
        if not path.exists():
            acc.notes.append(f"network/{network}/{fname} missing: no {cls} rows")
            continue
        df = _read(path, _NETWORK_SHAPE, medians=(metric,))
        network_frames.append(df)
        acc.parts.setdefault(cls, []).append(
            _convert_collective(df, metric, cls, network, acc.dropped, include_multinode))
    return network_frames


def _write_classes(out: Path, src: Path, acc: _Converted) -> dict[str, int]:
    """One CSV per class with rows; ``{class: rows}`` (a UserError when every row was dropped)."""
    counts: dict[str, int] = {}
    for cls in ("gemm", "elementwise", "attention_prefill", "attention_decode", "allreduce", "p2p"):
        frames = [f for f in acc.parts.get(cls, []) if len(f)]
        if not frames:
            continue
        df = pd.concat(frames, ignore_index=True)
        opdata.write_class(out, cls, df)
        counts[cls] = len(df)
    if not counts:
        raise UserError(str(src), "nothing to import: every row was dropped ("
                        + "; ".join(f"{c}: {why}" for c, per in acc.dropped.counts.items() for why in per) + ")")
    return counts


def _notes(attention: bool, network: str | None, include_multinode: bool) -> list[str]:
    """meta.json's notes on the conversion (after those on what was missing)."""
    notes = [
        ("times: ms of GPU kernel time; time_ms = Vidur median, time_ms_min/max = Vidur min/max; "
         "Vidur has no percentiles, so time_ms_p10/p90 are empty"),
        ("shapes per GPU as lmmsim.costmodel.composed uses them: qkv (tokens, (heads+2*kv_heads)*head_dim/tp, "
         "hidden), o (tokens, hidden, heads*head_dim/tp), gate_up (tokens, (2 if gated else 1)*ffn/tp, hidden), "
         "down (tokens, hidden, ffn/tp)"),
        ("elementwise num_bytes (fp16 = 2 bytes): embedding 2*T*H*2 (gather + write); norm 2*T*H*2 (Vidur's norm "
         "is unfused, read + write; the simulator's fused add+norm is 4*T*H*2 and is not measured by Vidur); "
         "rotary 2*T*(q+kv width)*2 (in place); act T*(up_width+ffn)*2; add 3*T*H*2"),
        ("repeated shapes are kept: the same (m, n, k) from several models (see `source`), and Vidur's token / "
         "size grids list their range boundaries (e.g. 2048, 4096 tokens) twice"),
    ]
    if attention:
        notes += [
            ("attention: context = kv_cache_size + prefill_chunk_size (prefill, causal, one sequence); decode "
             "context_sum = batch_size * (kv_cache_size + 1) (the new token's K/V is appended and attended); "
             "heads = n_q_head/tp, kv heads = n_kv_head/tp, head_dim = n_embd/n_q_head"),
            ("attention time_ms = attn_prefill / attn_decode (flash_attn_with_kvcache, KV append included); the "
             "output copy (attn_output_reshape, median 2-3 %, up to ~20 % on tiny kernels) and input views (attn_input_reshape, 0) are extra "
             "columns, not in time_ms"),
        ]
    if network is not None:
        notes.append("collectives: num_bytes = Vidur `size` (bytes per GPU buffer); each sample is the median of "
                     "11 NCCL kernels, 3 samples per row; rows spanning several nodes "
                     + ("kept (num_nodes column)" if include_multinode else "left out"))
    return notes

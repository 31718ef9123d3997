"""Convert NVIDIA aiconfigurator's measured operator tables into an lmmsim profile folder.

aiconfigurator (package ``aiconfigurator-core``, Apache-2.0, NVIDIA) ships
kernel timings it collected on real GPUs under its installed package::

    systems/data/<gpu>/<op>/<backend>/<version>/<table>.parquet   (+ collection_meta.yaml)

lmmsim uses them as calibration *data* only: this module reads the parquet
tables with pandas and never imports aiconfigurator itself (nor does the
simulator; the package is the optional ``calibrate`` extra). What each table
holds, as read from the tables (units checked, see below):

* ``gemm/<backend>/<v>/gemm_perf.parquet``: ``m, n, k``, ``gemm_dtype``,
  ``kernel_source``, ``latency`` (ms). One row per GEMM ``[m, k] x [k, n]``.
* ``attention/<backend>/<v>/context_attention_perf.parquet``: prefill of
  ``batch_size`` sequences of ``isl`` tokens each (no cached prefix:
  ``step`` is 0), ``num_heads``, ``num_key_value_heads``, ``head_dim``,
  ``kv_cache_dtype``, ``window_size``, ``kernel_source``, ``latency`` (ms).
* ``attention/<backend>/<v>/generation_attention_perf.parquet``: one decode
  step of ``batch_size`` sequences, each with ``step`` tokens already cached
  (``isl`` = 1 new token), same head columns.
* ``encoder_attention/<backend>/<v>/encoder_attention_perf.parquet``: the
  non-causal ViT attention of ``batch_size`` sequences of ``isl`` tokens,
  ``num_heads`` (no GQA), ``head_dim``.
* ``comm/<backend>/<v>/custom_allreduce_perf.parquet`` (vLLM's custom
  all-reduce, ``kernel_source`` ``vLLM_custom_graph`` inside a CUDA graph or
  ``vLLM_custom_eager``) and ``comm/nccl/<v>/nccl_perf.parquet`` (NCCL
  ``all_reduce`` and other collectives): ``num_gpus``, ``message_size``,
  ``latency`` (ms).

Mapping onto :mod:`lmmsim.costmodel.opdata` (every row keeps ``source``: the
table, and ``batch_size``: the original batch):

* **batch folded into heads.** ``b`` sequences of equal length in one varlen
  kernel are costed by lmmsim's composition as *one* sequence with ``b`` times
  the heads (:meth:`lmmsim.costmodel.composed.ComposedStepCostModel._encode`),
  so a context row ``(b, s, h, g, d)`` becomes ``attention_prefill(new_tokens=s,
  context=s, num_heads=b*h, num_kv_heads=b*g, head_dim=d, causal=True)`` and an
  encoder row ``(b, s, h, d)`` becomes ``attention_prefill(s, s, b*h, b*h, d,
  causal=False)``. A generation row ``(b, step, h, g, d)`` becomes
  ``attention_decode(batch=b, context_sum=b*(step+1), num_heads=h,
  num_kv_heads=g, head_dim=d)``: each new token attends its ``step`` cached
  keys and its own.
* **bf16** in the dense classes: ``gemm_dtype`` bfloat16 (``torch.nn.functional.linear``),
  ``attn_dtype`` and ``kv_cache_dtype`` bfloat16; FP8 rows go to the FP8 classes (below), FP4 ones nowhere.
* **no sliding windows**: only ``window_size == 0``. lmmsim models an encoder's
  windowed attention as separate short sequences, and does not model LLM
  sliding-window attention at all.
* **one attention kernel per GPU**, the one vLLM 0.24 selects by default on
  that architecture (:data:`DEFAULT_KERNELS`; ``kernel=`` overrides the LLM
  attention kernel): FlashAttention 3 on Hopper, FlashInfer with TRT-LLM
  kernels on datacenter Blackwell (the B200 / GB200 tables hold no FA3 rows),
  FlashAttention 2 on Ada and on the RTX PRO 6000 (SM 12.0: the only kernel
  its tables hold), FlashAttention 2 (``vllm_flash_attn``) on Ampere. The
  encoder table holds one kernel per GPU (the ViT FlashAttention vLLM uses).
* **all-reduce: the faster of vLLM's two paths.** vLLM runs small messages
  through its custom all-reduce (the CUDA-graph variant: vLLM captures decode
  steps in graphs) and large ones through NCCL; the switch point is vLLM's
  ``CustomAllreduce`` ``max_size`` (8 MiB by default,
  ``vllm/distributed/device_communicators/custom_all_reduce.py``), lowered per
  architecture and world when symmetric memory is enabled
  (``CUSTOM_ALL_REDUCE_MAX_SIZES``), with a symmetric-memory all-reduce for mid
  sizes that these tables do not hold. Those limits were tuned so that the custom
  path runs where it is faster, so each (world, size) keeps the faster of the
  ``vLLM_custom_graph`` and NCCL ``all_reduce`` rows (``kernel`` says which).
  This also avoids an artificial step at a fixed limit that the measurements do
  not show for this vLLM version. vLLM does not enable the custom all-reduce
  across more than two GPUs without NVLink, so on PCIe-only GPUs
  (:data:`PCIE_ONLY`) worlds above 2 keep only NCCL rows.
  ``message_size`` counts bf16 *elements* (``num_bytes`` = 2 x it): the H100
  8-GPU NCCL rows then reach ~445 GB/s bus bandwidth at 256 M elements, close
  to NVLink 4's 450 GB/s per direction; read as bytes, they would reach only 222 GB/s.
* classes the tables lack (``elementwise``, ``p2p``) are not written; ``lmmsim
  fit PROFILE --derive-from profiles/ops/h100-sxm-80gb/fit`` supplies them as
  rooflines fitted on H100 data, applied at this GPU's peaks.
* ``gemm_fp8``, ``attention_decode_fp8``, ``moe_experts``, ``moe_alltoall``: what those
  tables measure and how they map is :mod:`lmmsim.profiler.aiconfigurator_moe`'s docstring.
* ``base=`` starts from another profile folder (e.g. a Vidur import): its
  classes that this import does not write are copied over (with ``append``,
  its rows of the imported classes are kept as well), and its ``meta.json`` is
  kept under ``base`` in the new one.
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import importlib.util
import os
import shutil
from pathlib import Path

import pandas as pd

from lmmsim.costmodel import opdata
from lmmsim.errors import UserError, choices
from lmmsim.profiler import aiconfigurator_moe

PACKAGE = "aiconfigurator-core"
LICENCE = "Apache-2.0"
#: Folder holding ``<gpu>/<op>/<backend>/<version>/`` instead of the installed package's (tests).
DATA_ENV = "LMMSIM_AICONFIGURATOR_DATA"

BACKENDS = ("vllm", "sglang", "trtllm")

#: lmmsim catalog name -> aiconfigurator folder. Folder names are accepted as ``gpu`` too.
GPU_FOLDERS = {
    "a100-sxm-80gb": "a100_sxm",
    "h100-sxm-80gb": "h100_sxm",
    "h200": "h200_sxm",
    "b200": "b200_sxm",
    "gb200": "gb200",
    "l40s": "l40s",
    "rtx-pro-6000": "rtx_pro_6000_server",
}
_CATALOG_NAMES = {folder: name for name, folder in GPU_FOLDERS.items()}

#: Default kernel per GPU folder and table: what vLLM 0.24 runs there by default (module docstring).
DEFAULT_KERNELS = {
    "a100_sxm": {"context": "vllm_flash_attn", "generation": "vllm_flash_attn"},
    "h100_sxm": {"context": "vllm_flash_attn_fa3", "generation": "vllm_flash_attn_fa3"},
    "h200_sxm": {"context": "vllm_flash_attn_fa3", "generation": "vllm_flash_attn_fa3"},
    "b200_sxm": {"context": "vllm_flashinfer_trtllmprefill", "generation": "vllm_flashinfer_trtllmdecode"},
    "gb200": {"context": "vllm_flashinfer_trtllmprefill", "generation": "vllm_flashinfer_trtllmdecode"},
    "l40s": {"context": "vllm_flash_attn_fa2", "generation": "vllm_flash_attn_fa2"},
    "rtx_pro_6000_server": {"context": "vllm_flash_attn_fa2", "generation": "vllm_flash_attn_fa2"},
}
#: GPUs whose servers have no NVLink: vLLM's custom all-reduce only between two of them.
PCIE_ONLY = ("l40s", "rtx_pro_6000_server", "l4", "a100_pcie", "h100_pcie", "a30", "b60")

B = 2  # bf16 bytes per element
GEMM_KERNEL_BF16 = "torch.nn.functional.linear"
CLASSES = ("gemm", "attention_prefill", "attention_decode", "allreduce", *aiconfigurator_moe.CLASSES)  # it can write
#: The files an import may write (checked against a user's files before anything is read).
OUTPUT_FILES = tuple(opdata.csv_path(Path(), c).name for c in opdata.ALL_FITTED_CLASSES) + ("meta.json",)


# ------------------------------------------------------------------ locating the data
def data_root(root: Path | str | None = None) -> tuple[Path, str | None]:
    """The ``systems/data`` folder to read and the package version it belongs to.

    ``root`` (or the :data:`DATA_ENV` variable) points at a tree of the same
    layout instead (version then None). Else the installed package's folder,
    found without importing the package.
    """
    key = "data root"
    if root is None and os.environ.get(DATA_ENV):
        root, key = os.environ[DATA_ENV], DATA_ENV
    if root is not None:
        if not Path(root).is_dir():
            raise UserError(key, f"{root} is not a folder (it should hold <gpu>/<op>/<backend>/<version>/)")
        return Path(root), None
    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is None or not spec.submodule_search_locations:
        raise UserError("import-aiconfigurator", f"the {PACKAGE} package is not installed; "
                        f"pip install 'lmmsim[calibrate]' (or {PACKAGE}==0.12.0), or set {DATA_ENV}")
    folder = Path(next(iter(spec.submodule_search_locations))) / "systems" / "data"
    if not folder.is_dir():
        raise UserError("import-aiconfigurator", f"{folder} does not exist: this {PACKAGE} has no systems/data")
    try:
        version = importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        version = None
    return folder, version


def resolve_gpu(root: Path, gpu: str) -> str:
    """The aiconfigurator folder for a catalog name or folder name; else a UserError listing both."""
    folder = GPU_FOLDERS.get(gpu, gpu)
    if not (root / folder).is_dir():
        have = sorted(p.name for p in root.iterdir() if p.is_dir())
        names = sorted({_CATALOG_NAMES.get(h, h) for h in have} | set(have))
        raise UserError("--gpu", f"unknown GPU {gpu!r}; choose from {choices(names)}")
    return folder


def _vkey(v: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else 0 for p in v.split("."))


def _versions(folder: Path) -> list[str]:
    """Version folders under ``folder``, oldest first (numerically: 0.9 before 0.24)."""
    return sorted((p.name for p in folder.iterdir() if p.is_dir()), key=_vkey) if folder.is_dir() else []


_COMPUTE_OPS = ("gemm", "attention", "encoder_attention")


def _check_backend(gpu_dir: Path, backend: str) -> None:
    have = sorted({p.parent.name for op in _COMPUTE_OPS for p in (gpu_dir / op).glob("*/*") if p.is_dir()})
    if backend not in have:
        raise UserError("--backend", f"{gpu_dir.name} has no {backend!r} tables; choose from {choices(have)}")


def _compute_version(gpu_dir: Path, backend: str, version: str | None) -> str:
    have = sorted({v for op in _COMPUTE_OPS for v in _versions(gpu_dir / op / backend)}, key=_vkey)
    if version is None:
        return have[-1]
    if version not in have:
        raise UserError("--version", f"{gpu_dir.name}/{backend} has no tables for version {version!r}; "
                                     f"choose from {choices(have)}")
    return version


def _comm_version(folder: Path, version: str | None) -> str | None:
    """The version folder to use: ``version`` if there, else the newest older one, else the newest."""
    have = _versions(folder)
    if not have:
        return None
    if version is None or version in have:
        return version or have[-1]
    older = [v for v in have if _vkey(v) < _vkey(version)]
    return older[-1] if older else have[-1]


def _read_meta_yaml(path: Path) -> dict:
    from lmmsim.yamlio import read_yaml

    meta = path.parent / "collection_meta.yaml"
    if not meta.exists():
        return {}
    doc = read_yaml(meta, "aiconfigurator collection_meta.yaml")
    return doc if isinstance(doc, dict) else {}


def _read_parquet(path: Path, required: tuple[str, ...]) -> pd.DataFrame:
    try:
        df = pd.read_parquet(path)
    except (OSError, ValueError) as err:
        raise UserError(str(path), f"not a readable parquet table ({str(err).splitlines()[0] if str(err) else err})") from None
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise UserError(str(path), f"missing column(s) {', '.join(missing)}; it has {', '.join(map(str, df.columns))}")
    return df


class _Dropped:
    """Counts of rows left out, per table and reason (goes to meta.json)."""

    def __init__(self):
        self.counts: dict[str, dict[str, int]] = {}

    def keep(self, table: str, df: pd.DataFrame, mask, reason: str) -> pd.DataFrame:
        mask = pd.Series(mask, index=df.index).fillna(False).astype(bool)
        n = int((~mask).sum())
        if n:
            per = self.counts.setdefault(table, {})
            per[reason] = per.get(reason, 0) + n
        return df[mask]


def _bf16(df: pd.DataFrame, col: str) -> pd.Series:
    return df[col].astype(str).str.lower().isin(("bfloat16", "bf16"))


def _timed(df: pd.DataFrame, table: str, dropped: _Dropped) -> pd.DataFrame:
    t = pd.to_numeric(df["latency"], errors="coerce")
    return dropped.keep(table, df, t.notna() & (t > 0), "latency missing or not positive")


def _pick_kernel(df: pd.DataFrame, path: str, kernel: str | None, default: str | None,
                 dropped: _Dropped) -> tuple[pd.DataFrame, str]:
    """The rows of one attention kernel: ``kernel`` if given (else a UserError listing the table's),
    else the GPU's default, else (a GPU without a default) the kernel with the most rows."""
    have = sorted(df["kernel_source"].astype(str).unique())
    want = kernel or default
    if want not in have:
        if kernel is not None:
            raise UserError("--kernel", f"{path} has no rows of kernel {kernel!r}; choose from {choices(have)}")
        want = have[0] if len(have) == 1 else max(have, key=lambda k: int((df["kernel_source"] == k).sum()))
    return dropped.keep(path, df, df["kernel_source"].astype(str) == want, f"other kernels than {want}"), want


# ------------------------------------------------------------------ per table
def _gemm(df: pd.DataFrame, rel: str, dropped: _Dropped) -> pd.DataFrame:
    df = dropped.keep(rel, df, _bf16(df, "gemm_dtype"), "not bfloat16")
    kernels = set(df["kernel_source"].astype(str))
    if GEMM_KERNEL_BF16 in kernels and len(kernels) > 1:
        df = dropped.keep(rel, df, df["kernel_source"] == GEMM_KERNEL_BF16, f"bf16 kernels other than {GEMM_KERNEL_BF16}")
    df = _timed(df, rel, dropped)
    return pd.DataFrame({"m": df["m"].astype(int), "n": df["n"].astype(int), "k": df["k"].astype(int),
                         "time_ms": df["latency"].astype(float), "time_ms_p10": float("nan"),
                         "time_ms_p90": float("nan"), "kernel": df["kernel_source"].astype(str),
                         "source": rel, "dtype": "bfloat16"})


def _attention_filter(df: pd.DataFrame, rel: str, dropped: _Dropped) -> pd.DataFrame:
    df = dropped.keep(rel, df, _bf16(df, "attn_dtype"), "attn_dtype not bfloat16")
    if "kv_cache_dtype" in df.columns:
        df = dropped.keep(rel, df, _bf16(df, "kv_cache_dtype"), "kv_cache_dtype not bfloat16")
    if "window_size" in df.columns:
        df = dropped.keep(rel, df, df["window_size"] == 0, "sliding window (window_size > 0)")
    return _timed(df, rel, dropped)


def _context(df: pd.DataFrame, rel: str, kernel: str, dropped: _Dropped) -> pd.DataFrame:
    if "step" in df.columns:  # a cached prefix would make context > new tokens; none seen, kept out if any
        df = dropped.keep(rel, df, df["step"] == 0, "cached prefix (step > 0)")
    b, s = df["batch_size"].astype(int), df["isl"].astype(int)
    return pd.DataFrame({
        "new_tokens": s, "context": s,
        "num_heads": b * df["num_heads"].astype(int), "num_kv_heads": b * df["num_key_value_heads"].astype(int),
        "head_dim": df["head_dim"].astype(int), "causal": 1,
        "time_ms": df["latency"].astype(float), "time_ms_p10": float("nan"), "time_ms_p90": float("nan"),
        "batch_size": b, "heads_per_seq": df["num_heads"].astype(int), "kernel": kernel, "source": rel,
        "dtype": "bfloat16",
    })


def _encoder(df: pd.DataFrame, rel: str, dropped: _Dropped) -> pd.DataFrame:
    b, s, h = df["batch_size"].astype(int), df["isl"].astype(int), df["num_heads"].astype(int)
    return pd.DataFrame({
        "new_tokens": s, "context": s, "num_heads": b * h, "num_kv_heads": b * h,
        "head_dim": df["head_dim"].astype(int), "causal": 0,
        "time_ms": df["latency"].astype(float), "time_ms_p10": float("nan"), "time_ms_p90": float("nan"),
        "batch_size": b, "heads_per_seq": h, "kernel": df["kernel_source"].astype(str), "source": rel,
        "dtype": "bfloat16",
    })


def _generation(df: pd.DataFrame, rel: str, kernel: str, dropped: _Dropped) -> pd.DataFrame:
    df = dropped.keep(rel, df, df["isl"] == 1, "more than one new token (isl > 1)")
    b, step = df["batch_size"].astype(int), df["step"].astype(int)
    return pd.DataFrame({
        "batch": b, "context_sum": b * (step + 1),
        "num_heads": df["num_heads"].astype(int), "num_kv_heads": df["num_key_value_heads"].astype(int),
        "head_dim": df["head_dim"].astype(int),
        "time_ms": df["latency"].astype(float), "time_ms_p10": float("nan"), "time_ms_p90": float("nan"),
        "batch_size": b, "context_each": step + 1, "kernel": kernel, "source": rel, "dtype": "bfloat16",
    })


def _allreduce(custom: pd.DataFrame | None, custom_rel: str | None, nccl: pd.DataFrame | None,
               nccl_rel: str | None, pcie_only: bool, dropped: _Dropped) -> pd.DataFrame:
    """One row per (world, size): the faster of vLLM's custom all-reduce (graph variant, where vLLM
    can enable it) and NCCL (module docstring)."""
    parts = []
    if nccl is not None:
        nccl = dropped.keep(nccl_rel, nccl, nccl["op_name"] == "all_reduce", "not all_reduce")
        nccl = dropped.keep(nccl_rel, nccl, nccl["nccl_dtype"].astype(str).isin(("half", "bfloat16")),
                            "not a 16-bit dtype")
        parts.append(_timed(nccl, nccl_rel, dropped).assign(kernel="nccl", source=nccl_rel))
    if custom is not None:
        # graph and eager variants (vLLM_custom_graph / _eager, SGLang's alike; TRT-LLM has one kernel):
        # the engines capture decode steps in CUDA graphs, so the graph variant is what runs
        eager = custom["kernel_source"].astype(str).str.lower().str.contains("eager")
        custom = dropped.keep(custom_rel, custom, ~eager, "eager variant (decode steps run in CUDA graphs)")
        custom = _timed(custom, custom_rel, dropped)
        parts.append(custom.assign(kernel=custom["kernel_source"].astype(str), source=custom_rel))
    if not parts:
        return pd.DataFrame()
    rows = pd.concat([pd.DataFrame({"num_bytes": p["message_size"].astype("int64") * B,
                                    "world": p["num_gpus"].astype(int), "time_ms": p["latency"].astype(float),
                                    "kernel": p["kernel"], "source": p["source"]}) for p in parts],
                     ignore_index=True)
    # vLLM never runs its custom all-reduce across more than two GPUs without NVLink
    rows = dropped.keep("allreduce", rows, (rows["kernel"] == "nccl") | (not pcie_only) | (rows["world"] <= 2),
                        "custom all-reduce over PCIe between more than 2 GPUs (vLLM disables it)")
    # of what vLLM can run at a (world, size), the faster (module docstring)
    best = rows.sort_values("time_ms", kind="stable").drop_duplicates(["world", "num_bytes"])
    dropped.keep("allreduce", rows, rows.index.isin(best.index), "slower than the other all-reduce at that size")
    rows = best.assign(time_ms_p10=float("nan"), time_ms_p90=float("nan"), dtype="bfloat16")
    return rows.sort_values(["world", "num_bytes"]).reset_index(drop=True)


# ------------------------------------------------------------------ driver
def import_aiconfigurator(out: Path, *, gpu: str, backend: str = "vllm", version: str | None = None,
                          kernel: str | None = None, classes=None, base: Path | None = None, append: bool = False,
                          root: Path | str | None = None, command: str | None = None) -> dict[str, int]:
    """Write the aiconfigurator tables of one GPU as a profile folder ``out`` (module docstring).

    ``gpu``: catalog name (:data:`GPU_FOLDERS`) or aiconfigurator folder.
    ``version``: the backend version of the compute tables (default the newest);
    collectives use the same version's custom all-reduce table where there is
    one (else the newest older one) and the newest NCCL table with all-reduce
    rows. ``classes``: a subset of :data:`CLASSES` (default its first four). ``base``: a profile folder
    whose other classes are copied in; with ``append``, its rows of the classes
    imported here are kept too, ahead of the new ones (``source`` tells them apart). ``root``: a data tree instead of the
    installed package's (:func:`data_root`). Returns ``{class: rows written}``.
    """
    out = Path(out)
    root, package_version = data_root(root)
    folder = resolve_gpu(root, gpu)
    gpu_dir = root / folder
    if backend not in BACKENDS:
        raise UserError("--backend", f"unknown backend {backend!r}; choose from {choices(BACKENDS)}")
    _check_backend(gpu_dir, backend)
    version = _compute_version(gpu_dir, backend, version)
    wanted = _wanted_classes(classes)
    base, base_meta = _open_base(base, append)

    tables = _Tables(root, gpu_dir, backend, version)
    frames, kernels, comm = _read_frames(tables, wanted, kernel, DEFAULT_KERNELS.get(folder, {}),
                                         folder in PCIE_ONLY)
    counts, appended = _write_frames(out, frames, base, append)
    if not counts:
        raise UserError(str(gpu_dir), f"nothing to import for {', '.join(wanted)} from {backend} {version} "
                                      "(no table, or every row left out: see the bf16 / window rules)")
    copied = _copy_base_classes(out, base, counts)
    notes = tables.notes + _notes(folder, counts, appended, copied, base)
    meta = {
        "source": f"NVIDIA aiconfigurator measured operator tables ({PACKAGE} {package_version or 'unknown version'}, "
                  f"{LICENCE})",
        "package": {"name": PACKAGE, "version": package_version, "licence": LICENCE},
        "data_root": None if package_version else str(root),
        "backend": backend,
        "backend_version": version,
        "runtime_versions": sorted({f"{r.get('framework', '?')} {r.get('version', '?')}"
                                    for r in tables.sources.values() if r}),
        "gpu": folder,
        "device": ", ".join(sorted(tables.devices)) or folder,
        "hardware": _CATALOG_NAMES.get(folder) or (base_meta or {}).get("hardware"),
        "dtype": "bfloat16" + (", fp8" if set(counts) & {"gemm_fp8", "attention_decode_fp8", "moe_experts"} else ""),
        "kernels": kernels,
        "collectives": comm,
        "source_files": sorted(tables.sources),
        "imported_by": "lmmsim import-aiconfigurator",
        "command": command,
        "date": _dt.date.today().isoformat(),
        "rows": {**counts, **{c: "from base" for c in copied}},
        "dropped_rows": tables.dropped.counts,
        "notes": notes,
    }
    if base_meta is not None:
        meta["base"] = {"path": str(base), "classes": copied, "appended_rows": appended, "meta": base_meta}
    opdata.write_meta(out, meta)
    return counts


def _wanted_classes(classes) -> tuple[str, ...]:
    wanted = tuple(CLASSES[:4] if classes is None else classes)  # by default the dense ones; FP8 / MoE by name
    unknown = [c for c in wanted if c not in CLASSES]
    if unknown or not wanted:
        raise UserError("--classes", f"unknown class(es) {', '.join(unknown) or '(none given)'}; "
                                     f"choose from {choices(CLASSES)}")
    return wanted


def _open_base(base: Path | None, append: bool) -> tuple[Path | None, dict | None]:
    """``base`` as a Path and its meta.json (None, None without one); checks ``append`` has one."""
    if append and base is None:
        raise UserError("--append", "needs --base (the profile whose rows to keep)")
    if base is None:
        return None, None
    base = Path(base)
    if not base.is_dir():
        raise UserError("--base", f"{base} is not a profile folder")
    return base, opdata.read_meta(base)


class _Tables:
    """One GPU's tables of one backend version, and what was read of them: the source files (with their
    collection_meta runtime), the devices named, rows dropped and notes on missing tables."""

    def __init__(self, root: Path, gpu_dir: Path, backend: str, version: str):
        self.root, self.gpu_dir, self.backend, self.version = root, gpu_dir, backend, version
        self.dropped = _Dropped()
        self.sources: dict[str, dict] = {}  # relative path -> collection_meta runtime
        self.devices: set[str] = set()
        self.notes: list[str] = []

    def read(self, op: str, name: str, required: tuple[str, ...], ver: str | None = None,
             store: str | None = None) -> tuple[pd.DataFrame | None, str | None]:
        """``(table, path relative to the root)``, or ``(None, None)`` when the file does not exist."""
        path = self.gpu_dir / op / (store or self.backend) / (ver or self.version) / f"{name}.parquet"
        if not path.exists():
            return None, None
        rel = path.relative_to(self.root).as_posix()
        df = _read_parquet(path, required)
        self.sources[rel] = _read_meta_yaml(path).get("runtime", {})
        if "device" in df.columns and len(df):
            self.devices.update(map(str, df["device"].dropna().unique()))
        return df, rel


_HEAD_COLS = ("batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim", "attn_dtype",
              "kernel_source", "latency")


def _read_frames(t: _Tables, wanted: tuple[str, ...], kernel: str | None, defaults: dict[str, str],
                 pcie_only: bool) -> tuple[dict[str, list[pd.DataFrame]], dict[str, str], dict]:
    """``(frames per class, attention kernel per table, collective tables)`` of the ``wanted`` classes."""
    frames: dict[str, list[pd.DataFrame]] = {}
    kernels: dict[str, str] = {}
    comm = {}
    if "gemm" in wanted:
        df, rel = t.read("gemm", "gemm_perf", ("m", "n", "k", "gemm_dtype", "kernel_source", "latency"))
        if df is None:
            t.notes.append(f"no gemm/{t.backend}/{t.version}/gemm_perf.parquet: no gemm rows")
        else:
            frames["gemm"] = [_gemm(df, rel, t.dropped)]
    if "attention_prefill" in wanted:
        _read_prefill(t, kernel, defaults, frames, kernels)
    if "attention_decode" in wanted:
        df, rel = t.read("attention", "generation_attention_perf", (*_HEAD_COLS, "step"))
        if df is not None:
            df = _attention_filter(df, rel, t.dropped)
            df, kernels["generation"] = _pick_kernel(df, rel, kernel, defaults.get("generation"), t.dropped)
            frames["attention_decode"] = [_generation(df, rel, kernels["generation"], t.dropped)]
        else:
            t.notes.append(f"no attention/{t.backend}/{t.version}/generation_attention_perf.parquet: no decode rows")
    if "allreduce" in wanted:
        comm = _read_allreduce(t, pcie_only, frames)
    aiconfigurator_moe.read_frames(t, wanted, t.gpu_dir.name, defaults.get("generation"), frames, kernels)
    return frames, kernels, comm


def _read_prefill(t: _Tables, kernel: str | None, defaults: dict[str, str], frames: dict, kernels: dict) -> None:
    """attention_prefill rows: the causal context table, then the non-causal encoder (ViT) table."""
    df, rel = t.read("attention", "context_attention_perf", _HEAD_COLS)
    if df is not None:
        df = _attention_filter(df, rel, t.dropped)
        df, kernels["context"] = _pick_kernel(df, rel, kernel, defaults.get("context"), t.dropped)
        frames.setdefault("attention_prefill", []).append(_context(df, rel, kernels["context"], t.dropped))
    else:
        t.notes.append(f"no attention/{t.backend}/{t.version}/context_attention_perf.parquet: no causal prefill rows")
    df, rel = t.read("encoder_attention", "encoder_attention_perf",
                     ("batch_size", "isl", "num_heads", "head_dim", "attn_dtype", "kernel_source", "latency"))
    if df is not None:
        df = _attention_filter(df, rel, t.dropped)
        kernels["encoder"] = ", ".join(sorted(df["kernel_source"].astype(str).unique()))
        frames.setdefault("attention_prefill", []).append(_encoder(df, rel, t.dropped))
    else:
        t.notes.append(f"no encoder_attention/{t.backend}/{t.version} table: no non-causal (ViT) prefill rows")


def _read_allreduce(t: _Tables, pcie_only: bool, frames: dict) -> dict:
    """allreduce rows from the custom all-reduce and NCCL tables; returns which tables were used."""
    gpu_dir = t.gpu_dir
    cv = _comm_version(gpu_dir / "comm" / t.backend, t.version)
    custom, custom_rel = t.read("comm", "custom_allreduce_perf",
                                ("kernel_source", "num_gpus", "message_size", "latency"), ver=cv) if cv else (None, None)
    nccl, nccl_rel = None, None
    for nv in reversed(_versions(gpu_dir / "comm" / "nccl")):  # newest table that holds all-reduce rows
        path = gpu_dir / "comm" / "nccl" / nv / "nccl_perf.parquet"
        if path.exists() and (_read_parquet(path, ("op_name",))["op_name"] == "all_reduce").any():
            nccl, nccl_rel = t.read("comm", "nccl_perf", ("op_name", "nccl_dtype", "num_gpus", "message_size",
                                                          "latency"), ver=nv, store="nccl")
            break
    rows = _allreduce(custom, custom_rel, nccl, nccl_rel, pcie_only, t.dropped)
    if len(rows):
        frames["allreduce"] = [rows]
    return {"custom_allreduce": custom_rel, "nccl": nccl_rel}


def _write_frames(out: Path, frames: dict[str, list[pd.DataFrame]], base: Path | None,
                  append: bool) -> tuple[dict[str, int], dict[str, int]]:
    """One CSV per class with rows (base rows first with ``append``); ``(rows written, base rows kept)``."""
    counts: dict[str, int] = {}
    appended: dict[str, int] = {}
    for cls, parts in frames.items():
        parts = [p for p in parts if len(p)]
        if not parts:
            continue
        if append and base is not None and opdata.read_class(base, cls) is not None:
            earlier = opdata.read_class(base, cls)
            appended[cls] = len(earlier)
            parts = [earlier, *parts]
        df = pd.concat(parts, ignore_index=True)
        opdata.write_class(out, cls, df)
        counts[cls] = len(df)
    return counts, appended


def _copy_base_classes(out: Path, base: Path | None, counts: dict[str, int]) -> list[str]:
    """Copy the base profile's fitted classes this import did not write; returns their names."""
    if base is None:
        return []
    copied = [c for c in opdata.ALL_FITTED_CLASSES if c not in counts and opdata.csv_path(base, c).exists()]
    for cls in copied:
        shutil.copyfile(opdata.csv_path(base, cls), opdata.csv_path(out, cls))
    return copied


def _notes(folder: str, counts: dict[str, int], appended: dict[str, int], copied: list[str],
           base: Path | None) -> list[str]:
    """meta.json's notes on the conversion (after those on missing tables)."""
    notes = [
        "times: ms of kernel latency as aiconfigurator measured it (one figure per shape: time_ms_p10/p90 empty)",
        ("attention_prefill: context rows (b, s, h, g, d) -> (new_tokens=s, context=s, num_heads=b*h, "
         "num_kv_heads=b*g, head_dim=d, causal=1); encoder rows (b, s, h, d) -> (s, s, b*h, b*h, d, causal=0); "
         "batch folded into heads as lmmsim.costmodel.composed costs equal-length units in one varlen kernel"),
        "attention_decode: generation rows (b, step, h, g, d) -> (batch=b, context_sum=b*(step+1), h, g, d)",
        "dense classes bf16 only (FP8 rows: the FP8 / MoE classes); window_size 0 only (sliding windows not modelled)",
    ]
    if "allreduce" in counts:
        notes.append("allreduce: num_bytes = message_size (bf16 elements) * 2; per (world, size) the faster of vLLM's "
                     "custom all-reduce (CUDA-graph variant) and NCCL all_reduce (column kernel)"
                     + ("; worlds above 2 NCCL only (no NVLink: vLLM disables its custom all-reduce)"
                        if folder in PCIE_ONLY else ""))
    notes += [n for n in aiconfigurator_moe.NOTES if n.split(":")[0] in counts]
    if appended:
        notes.append("rows of the base profile kept ahead of the imported ones: "
                     + ", ".join(f"{c} {n}" for c, n in appended.items()))
    if copied:
        notes.append(f"classes {', '.join(copied)} copied from the base profile {base} (see `base`)")
    missing = [c for c in opdata.FITTED_CLASSES if c not in counts and c not in copied]
    if missing:
        notes.append(f"not in this profile: {', '.join(missing)} (fit with --derive-from another GPU's fit for them)")
    return notes

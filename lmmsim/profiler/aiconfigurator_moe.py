"""aiconfigurator's FP8 and mixture-of-experts tables as lmmsim operator classes.

Part of ``lmmsim import-aiconfigurator`` (:mod:`lmmsim.profiler.aiconfigurator_import`
reads the files and calls :func:`read_frames`); this module converts four more
tables of a GPU's vLLM 0.24.0 data into the classes ``gemm_fp8``,
``attention_decode_fp8``, ``moe_experts`` and ``moe_alltoall``
(:mod:`lmmsim.costmodel.opdata`). What the tables measure was read from
aiconfigurator's collectors (``collector/vllm/collect_moe.py``,
``collector/vllm/collect_gemm.py``, the DeepEP collector contracts; aiconfigurator,
Apache-2.0) and checked against the numbers.

GEMM, FP8 (``gemm/vllm/0.24.0/gemm_perf.parquet``, ``gemm_dtype`` fp8)
---------------------------------------------------------------------
The collector times vLLM's own ``RowParallelLinear`` with ``Fp8Config``
(per-tensor weight scale, static activation scale): the W8A8 path of an FP8
checkpoint or of ``--quantization fp8``. vLLM picks the kernel
(``_POSSIBLE_FP8_KERNELS``, CUDA order Marlin -> FlashInfer -> CUTLASS ->
torch); the table's only kernel for these rows is
``CutlassFP8ScaledMMLinearKernel`` on H100, H200 and B200, i.e. what vLLM ran.
The time includes quantising the bf16 input to FP8. Block-scaled FP8
(``fp8_block``: DeepSeek's and Qwen's 128x128 checkpoints, DeepGEMM / CUTLASS
block kernels) is a different scheme and is not imported.

Decode attention, FP8 KV cache (``generation_attention_perf``, ``kv_cache_dtype`` fp8)
-------------------------------------------------------------------------------
The generation rows with bf16 queries over an FP8 cache
(``--kv-cache-dtype fp8``), same kernel per GPU and same mapping as the bf16
``attention_decode`` class (FlashAttention 3 on Hopper, FlashInfer's TRT-LLM
decode kernel on Blackwell).

MoE experts (``moe/vllm/0.24.0/moe_perf.parquet``)
-------------------------------------------------
* **What is timed.** One GPU's share of one MoE layer: the collector builds
  ``num_experts / moe_ep_size`` local experts (vLLM's ``determine_expert_map``),
  each ``inter_size / moe_tp_size`` wide, and times vLLM's fused-experts call on
  ``num_tokens`` hidden states whose top-k expert ids (over all ``num_experts``)
  are computed beforehand. ``latency`` (ms) therefore holds the sort/align of
  token-expert pairs, the grouped gate|up GEMM, SiLU-and-mul, the grouped down
  GEMM and the weighted sum of the top-k outputs (plus, for FP8, quantising
  the activations), and **excludes** the router GEMM and top-k, every
  all-to-all / all-gather / reduce-scatter, and shared experts.
* **``num_tokens`` is the batch before dispatch**: every token the layer sees,
  routed over all experts, of which this GPU computes the pairs that land on its
  experts. That is what each GPU runs under tensor-parallel MoE (every GPU has
  the whole batch) and under vLLM's default expert-parallel all-to-all
  (``allgather_reducescatter``: every rank receives the tokens of all DP
  ranks); it is *not* the per-rank count after a DeepEP dispatch.
* **Routing.** ``balanced`` spreads pairs round-robin over the experts.
  ``power_law_<a>`` draws per-expert counts from a power law of exponent ``a``
  and moves the EP rank with the most pairs to rank 0, the one measured (the
  time is the mean over 5 draws): the straggler a layer waits for.
* **Kernel per GPU** (:data:`MOE_KERNELS`), what vLLM 0.24 selects by default:
  bf16 ``UnquantizedFusedMoE``: Triton on Hopper (the only bf16 kernel of
  the H100 / H200 tables), FlashInfer TRT-LLM on Blackwell (first in vLLM's
  backend priority, and most of the B200 rows).
* **FP8 is the block-scaled scheme** (``moe_dtype`` fp8_block, vLLM's
  ``Fp8MoE``): the scheme of the FP8 MoE checkpoints (Qwen3-30B-A3B-FP8,
  Qwen3-VL-30B-A3B-FP8, DeepSeek; aiconfigurator's vLLM 0.24 SM90 facts list
  ``moe: Fp8MoE`` for them). vLLM's FP8-MoE oracle (``fused_moe/oracle/fp8.py``)
  prefers, on Hopper for block FP8, Triton under tensor parallelism and
  FlashInfer CUTLASS under expert parallelism, and the tables follow that split
  exactly (Triton rows only at ``moe_ep_size`` 1, CUTLASS ones only above);
  Blackwell runs FlashInfer TRT-LLM's monolithic kernel (the oracle's first).
  The per-tensor rows (``moe_dtype`` fp8, ModelOpt's method, FlashInfer CUTLASS
  on Hopper) are left out: on H200 they measure 2-3x *slower* than bf16 at
  the same shapes (e.g. 13.4 vs 4.6 ms for 192 tokens of a 256 x 6144 x 2048
  layer, where block FP8 takes 2.5 ms), which would make an FP8 model slower
  than its bf16 original. So MoE FP8 is block-scaled while ``gemm_fp8`` is
  per-tensor (the table's block GEMMs cover fewer shapes); the two schemes'
  GEMMs differ by kernel, not by bytes moved. The 4-bit rows are not imported.
* Mapped one to one: ``moe_experts(tokens=num_tokens, hidden=hidden_size,
  inter=inter_size, num_experts, topk, moe_tp=moe_tp_size, moe_ep=moe_ep_size,
  dtype=bf16|fp8 (from bfloat16|fp8_block), routing=distribution)``.

MoE all-to-all (``comm/vllm/0.24.0/moe_a2a_perf.parquet``)
---------------------------------------------------------
DeepEP dispatch and combine inside vLLM 0.24 on one 8-GPU node (``ep_size``
8), ``num_tokens`` **per DP rank** (the collector sizes DeepEP's buffers by the
tokens per DP rank; and the H200 dispatch of 4096 tokens of 7168 takes 1.13 ms,
~240 GB/s out of each rank in bf16 if the tokens are per rank, ~30 GB/s, far
below NVLink, if they were one batch split over the 8), ``latency`` in
**microseconds** (the collector's unit for this table; written here as ms).
vLLM 0.24's *default* expert-parallel backend is ``allgather_reducescatter``,
which these tables do not measure; DeepEP is opt-in (``--all2all-backend``).
Of its two modes the collector pairs ``deepep_ht`` (high throughput, 20 SMs)
with prefill and ``deepep_ll`` (low latency, CUDA-graph capable, buffers
sized for a fixed small token count per rank; rows only up to 256 tokens) with
decode, the split of a prefill/decode-disaggregated deployment. An lmmsim DP+EP
pool runs prefill chunks and decodes in the same steps, and one vLLM engine
runs one backend for all of them, so only one can be justified: **deepep_ht
for both phases** (it covers 16 to 65536 tokens per rank, a mixed step's range).
:func:`read_frames`' ``a2a_backend="deepep_ll"`` imports the other mode instead (a
decode-only engine); ``lmmsim import-aiconfigurator`` has no option for it.
``num_experts`` is not a column of the class (the method takes no such argument):
the 256- and 384-expert rows are both kept, as repeats of a shape.
"""

from __future__ import annotations

import pandas as pd

from lmmsim.errors import UserError, choices

CLASSES = ("gemm_fp8", "attention_decode_fp8", "moe_experts", "moe_alltoall")
GEMM_KERNEL_FP8 = "CutlassFP8ScaledMMLinearKernel"
A2A_BACKENDS = ("deepep_ht", "deepep_ll")

_HOPPER = {("bf16", False): "vllm_unquantizedfusedmoe_triton_tritonexperts",
           ("bf16", True): "vllm_unquantizedfusedmoe_triton_tritonexperts",
           ("fp8", False): "vllm_fp8moe_triton_tritonexperts",
           ("fp8", True): "vllm_fp8moe_flashinfer_cutlass_flashinferexperts"}
_BLACKWELL = {("bf16", ep): "vllm_unquantizedfusedmoe_flashinfer_trtllm_trtllmbf16experts" for ep in (False, True)} | {
    ("fp8", ep): "vllm_fp8moe_flashinfer_trtllm_trtllmfp8expertsmonolithic" for ep in (False, True)}
#: MoE kernel per GPU folder, (dtype, expert parallel?): vLLM 0.24's default (module docstring);
#: other GPUs: the kernel with the most rows.
MOE_KERNELS = {"h100_sxm": _HOPPER, "h200_sxm": _HOPPER, "b200_sxm": _BLACKWELL, "gb200": _BLACKWELL}
#: aiconfigurator's ``moe_dtype`` -> lmmsim's ``dtype``.
MOE_DTYPES = {"bfloat16": "bf16", "fp8_block": "fp8"}
NAN = float("nan")


def _positive(df: pd.DataFrame, rel: str, dropped) -> pd.DataFrame:
    t = pd.to_numeric(df["latency"], errors="coerce")
    return dropped.keep(rel, df, t.notna() & (t > 0), "latency missing or not positive")


def _times(ms: pd.Series, rel: str, kernel) -> dict:
    return {"time_ms": ms.astype(float), "time_ms_p10": NAN, "time_ms_p90": NAN, "kernel": kernel, "source": rel}


def gemm_fp8(df: pd.DataFrame, rel: str, dropped) -> pd.DataFrame:
    """The per-tensor FP8 rows of the GEMM table (module docstring)."""
    df = dropped.keep(rel, df, df["gemm_dtype"].astype(str) == "fp8", "gemm_fp8: not per-tensor fp8")
    if GEMM_KERNEL_FP8 in set(df["kernel_source"].astype(str)):
        df = dropped.keep(rel, df, df["kernel_source"] == GEMM_KERNEL_FP8, f"gemm_fp8: other kernels than {GEMM_KERNEL_FP8}")
    df = _positive(df, rel, dropped)
    return pd.DataFrame({"m": df["m"].astype(int), "n": df["n"].astype(int), "k": df["k"].astype(int),
                         **_times(df["latency"], rel, df["kernel_source"].astype(str)), "dtype": "fp8"})


def decode_fp8(df: pd.DataFrame, rel: str, kernel: str | None, dropped) -> pd.DataFrame:
    """Generation rows over an FP8 KV cache, ``kernel``'s (or the most common), as ``attention_decode`` maps them."""
    keep = (df["attn_dtype"].astype(str) == "bfloat16") & (df["kv_cache_dtype"].astype(str) == "fp8")
    df = dropped.keep(rel, df, keep, "attention_decode_fp8: not bf16 queries over an fp8 cache")
    if "window_size" in df.columns:
        df = dropped.keep(rel, df, df["window_size"] == 0, "attention_decode_fp8: sliding window")
    have = df["kernel_source"].astype(str)
    if kernel not in set(have):
        kernel = have.value_counts().idxmax() if len(df) else kernel
    df = dropped.keep(rel, df, have == kernel, f"attention_decode_fp8: other kernels than {kernel}")
    df = _positive(dropped.keep(rel, df, df["isl"] == 1, "attention_decode_fp8: isl > 1"), rel, dropped)
    b, step = df["batch_size"].astype(int), df["step"].astype(int)
    return pd.DataFrame({"batch": b, "context_sum": b * (step + 1), "num_heads": df["num_heads"].astype(int),
                         "num_kv_heads": df["num_key_value_heads"].astype(int), "head_dim": df["head_dim"].astype(int),
                         **_times(df["latency"], rel, kernel), "batch_size": b, "context_each": step + 1,
                         "dtype": "fp8_kv"})


def moe_experts(df: pd.DataFrame, rel: str, folder: str, dropped) -> tuple[pd.DataFrame, dict[str, str]]:
    """``(rows, kernel per dtype and parallelism)`` of the MoE table: bf16 and block-FP8 rows of
    the default kernels (module docstring)."""
    df = dropped.keep(rel, df, df["moe_dtype"].astype(str).isin(list(MOE_DTYPES)), "moe: not bfloat16 / fp8_block")
    parts, kernels = [], {}
    for moe_dtype, dtype in MOE_DTYPES.items():
        for ep in (False, True):
            rows = df[(df["moe_dtype"].astype(str) == moe_dtype) & ((df["moe_ep_size"] > 1) == ep)]
            if not len(rows):
                continue
            have = rows["kernel_source"].astype(str)
            want = MOE_KERNELS.get(folder, {}).get((dtype, ep))
            name = f"{dtype}_{'ep' if ep else 'tp'}"
            kernels[name] = want if want in set(have) else have.value_counts().idxmax()
            parts.append(rows[have == kernels[name]])
    kept = pd.concat(parts) if parts else df.iloc[:0]
    dropped.keep(rel, df, df.index.isin(kept.index), "moe: other kernels than vLLM's default for the dtype")
    kept = _positive(kept, rel, dropped)
    out = pd.DataFrame({"tokens": kept["num_tokens"].astype(int), "hidden": kept["hidden_size"].astype(int),
                        "inter": kept["inter_size"].astype(int), "num_experts": kept["num_experts"].astype(int),
                        "topk": kept["topk"].astype(int), "moe_tp": kept["moe_tp_size"].astype(int),
                        "moe_ep": kept["moe_ep_size"].astype(int),
                        "dtype": kept["moe_dtype"].astype(str).map(MOE_DTYPES), "routing": kept["distribution"],
                        **_times(kept["latency"], rel, kept["kernel_source"].astype(str))})
    return out.reset_index(drop=True), kernels


def moe_alltoall(df: pd.DataFrame, rel: str, backend: str, dropped) -> pd.DataFrame:
    """DeepEP dispatch / combine rows of ``backend`` (latency us -> ms; module docstring)."""
    if backend not in A2A_BACKENDS:
        raise UserError("a2a_backend", f"unknown all-to-all backend {backend!r}; choose from {choices(A2A_BACKENDS)}")
    df = dropped.keep(rel, df, df["comm_backend"].astype(str) == backend, f"moe_alltoall: not {backend}")
    df = dropped.keep(rel, df, df["phase"].astype(str).isin(("dispatch", "combine")), "moe_alltoall: other phase")
    df = _positive(df, rel, dropped)
    return pd.DataFrame({"tokens": df["num_tokens"].astype(int), "hidden": df["hidden_size"].astype(int),
                         "topk": df["topk"].astype(int), "ep": df["ep_size"].astype(int),
                         "phase": df["phase"].astype(str), **_times(df["latency"] / 1000.0, rel, backend),
                         "num_experts": df["num_experts"].astype(int), "node_num": df["node_num"].astype(int),
                         "sms": df["sms"].astype(int)}).reset_index(drop=True)


def read_frames(t, wanted, folder: str, generation_kernel: str | None, frames: dict, kernels: dict,
                a2a_backend: str = "deepep_ht") -> None:
    """Add the ``wanted`` classes of this module to ``frames`` (and their kernels to ``kernels``);
    ``t`` reads one GPU's tables (:class:`lmmsim.profiler.aiconfigurator_import._Tables`)."""
    where = f"{t.backend}/{t.version}"
    if "gemm_fp8" in wanted:
        df, rel = t.read("gemm", "gemm_perf", ("m", "n", "k", "gemm_dtype", "kernel_source", "latency"))
        rows = gemm_fp8(df, rel, t.dropped) if df is not None else None
        _add(t, frames, "gemm_fp8", rows, f"gemm/{where}/gemm_perf.parquet (fp8 rows)")
    if "attention_decode_fp8" in wanted:
        df, rel = t.read("attention", "generation_attention_perf",
                         ("batch_size", "isl", "step", "num_heads", "num_key_value_heads", "head_dim", "attn_dtype",
                          "kv_cache_dtype", "kernel_source", "latency"))
        rows = decode_fp8(df, rel, generation_kernel, t.dropped) if df is not None else None
        if rows is not None and len(rows):
            kernels["generation_fp8_kv"] = str(rows["kernel"].iloc[0])
        _add(t, frames, "attention_decode_fp8", rows, f"attention/{where}/generation_attention_perf.parquet (fp8 KV)")
    if "moe_experts" in wanted:
        df, rel = t.read("moe", "moe_perf", ("kernel_source", "moe_dtype", "num_tokens", "hidden_size", "inter_size",
                                             "topk", "num_experts", "moe_tp_size", "moe_ep_size", "distribution",
                                             "latency"))
        rows = None
        if df is not None:
            rows, moe_kernels = moe_experts(df, rel, folder, t.dropped)
            kernels.update({f"moe_{d}": k for d, k in moe_kernels.items()})
        _add(t, frames, "moe_experts", rows, f"moe/{where}/moe_perf.parquet")
    if "moe_alltoall" in wanted:
        df, rel = t.read("comm", "moe_a2a_perf", ("comm_backend", "phase", "ep_size", "node_num", "hidden_size",
                                                  "topk", "num_experts", "num_tokens", "sms", "latency"))
        rows = moe_alltoall(df, rel, a2a_backend, t.dropped) if df is not None else None
        if rows is not None:
            kernels["moe_alltoall"] = a2a_backend
        _add(t, frames, "moe_alltoall", rows, f"comm/{where}/moe_a2a_perf.parquet")


def _add(t, frames: dict, cls: str, rows: pd.DataFrame | None, table: str) -> None:
    if rows is None:
        t.notes.append(f"no {table}: no {cls} rows")
    else:
        frames[cls] = [rows]


NOTES = [
    "gemm_fp8: per-tensor fp8 GEMM rows (vLLM Fp8Config, CutlassFP8ScaledMMLinearKernel), input quantisation included",
    "attention_decode_fp8: generation rows with kv_cache_dtype fp8, mapped as attention_decode",
    ("moe_experts: one GPU's expert computation of one MoE layer; tokens = the batch before dispatch; router, "
     "all-to-all and shared experts excluded; bf16 and block-fp8 (fp8_block) rows of vLLM's default kernels"),
    "moe_alltoall: DeepEP dispatch/combine, tokens per DP rank, latency us -> time_ms (see aiconfigurator_moe)",
]

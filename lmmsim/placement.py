"""Deployment planning: which GPUs each worker gets, and what fits in their memory.

GPUs are numbered ``0 .. hardware.count - 1``. Pools are placed in order
(encoder, llm, prefill, decode): a pool without explicit ``gpu_ids`` takes the
next free GPUs, ``dp x tp x pp`` per LLM worker (stage by stage) and ``tp`` per
encoder worker. A GPU listed for two workers is shared; the deployment must
then say how (``gpu_sharing``).

KV cache per LLM GPU, as vLLM V1 sizes it (``vllm/v1/worker/gpu_worker.py``,
``Worker.determine_available_memory``: ``total x gpu_memory_utilization -
peak torch memory of a profile run (weights included) - non-torch
allocations``)::

    kv = memory x gpu_memory_utilization
         - weights        (LLM layers of this stage over TP, embedding and LM head
                           included, tied once: ``LlmSpec.num_params``; plus the
                           encoder in a monolithic engine. A MoE model's routed experts
                           are spread over all dp x tp GPUs of the stage, FP8 halves the
                           linear layers: ``LlmSpec.weight_bytes_per_gpu``)
         - peak activation (:func:`activation_reserve_bytes`)
         - non-torch      (:func:`non_torch_bytes`)
         - embedding buffer on receivers, weights of any worker sharing the GPU

then rounded down to whole blocks (``kv // (block_size x kv bytes per token)``,
as ``vllm/v1/core/kv_cache_utils.py`` does). CUDA graphs are captured after the
KV cache is allocated, from what ``gpu_memory_utilization`` leaves over, so
they are not subtracted (vLLM <= 0.11). ``deployment.activation_reserve_gib``
replaces peak activation + non-torch. A deployment whose KV cache cannot hold
one ``max_model_len`` request is rejected.

With ``dp`` attention ranks (vLLM DP + EP) each rank keeps the KV of its own requests
(the full KV heads over its ``tp`` GPUs), so the worker's capacity is ``dp`` times one
GPU's; a request still has to fit on one rank. ``kv_cache_dtype: fp8`` halves the bytes
per token (the cost model's ``kv_bytes_per_token_per_gpu``).

Checked case (``tests/test_kv_capacity.py``): Llama-3.1-8B, one H100-80GB, TP1,
``gpu_memory_utilization`` 0.9, vLLM's ``vllm serve`` defaults on H100
(``max_num_batched_tokens`` 8192, ``max_num_seqs`` 1024): vLLM logged weights
14.99 GiB, peak activation 4.76 GiB, non-torch 0.13 GiB, available KV cache
51.38 GiB of 71.26 GiB requested (79.18 GiB device) -- llm-d/llm-d-benchmark
``config_explorer/empirical-vllm-memory-results.md`` -- i.e. "GPU KV cache
size" 51.38 GiB / 128 KiB = 420,904 tokens. This module gives, on the same
79.18 GiB device, weights 14.96 / peak activation 4.76 / non-torch 0.13 GiB and
51.42 GiB = 421,216 tokens (+0.07%). (The catalog's H100 has 80 GiB, the
datasheet figure; the device reports 79.18 GiB to CUDA, so a catalog run gives
about 6,000 tokens more.)
"""

from __future__ import annotations

from dataclasses import dataclass

from lmmsim import catalog
from lmmsim.errors import UserError

GIB = 2**30
# Non-torch memory per GPU (CUDA context, cuBLAS workspaces; with TP also NCCL
# and custom all-reduce buffers) that vLLM's profile run finds outside torch's
# allocator. Measured by vLLM on H100-80GB (llm-d/llm-d-benchmark
# config_explorer/empirical-vllm-memory-results.md): 0.13-0.14 GiB at TP1
# (Llama-3.1-8B, Qwen3-0.6B/32B, gpt-oss-20b), 0.55 GiB at TP2 (Llama-3.3-70B).
NON_TORCH_TP1_BYTES = 0.13 * GIB
NON_TORCH_TP_BYTES = 0.55 * GIB
# Encoder workers (not profiled by this module): the TP1 figure.
RUNTIME_OVERHEAD_BYTES = NON_TORCH_TP1_BYTES
# Peak bytes per logit of vLLM's profile-run sampler pass (``_dummy_sampler_run``
# over max_num_seqs rows of the full vocabulary, fp32 logits plus the top-k /
# top-p sort, softmax, scatter and sampling temporaries of
# vllm/v1/sample/ops/topk_topp_sampler.py). From vLLM's logged peak activation
# (same llm-d source, max_num_seqs 1024): Qwen3-0.6B 5.56 GiB / (1024 x 151936)
# = 38.4 B; the others agree within 1.5% (Llama-3.1-8B 4.76 GiB / 128256 vocab:
# 39.0 B; gpt-oss-20b 7.38 GiB / 201088: 38.5 B; Qwen3-32B 5.64 GiB: 38.9 B).
SAMPLER_BYTES_PER_LOGIT = 5.56 * GIB / (1024 * 151936)
# vLLM's fused MoE runs its workspaces over at most this many tokens at a time
# (vllm/envs.py VLLM_FUSED_MOE_CHUNK_SIZE, default 32768; fused_moe.py fused_experts
# loops over chunks of it and sizes the caches by ``min(M, CHUNK_SIZE)``).
FUSED_MOE_CHUNK_TOKENS = 32768
POOL_ORDER = ("encoder", "llm", "prefill", "decode")


@dataclass
class MemoryPlan:
    """Per-GPU memory of one LLM worker (bytes). ``activation_bytes`` is the whole
    reserve (peak activation + non-torch, or the override); ``non_torch_bytes`` the
    non-torch part of it."""

    usable_bytes: float
    weight_bytes: float
    activation_bytes: float
    kv_bytes: float
    kv_bytes_per_token: float
    block_size: int
    num_blocks: int
    max_model_len: int
    non_torch_bytes: float = 0.0

    @property
    def kv_capacity_tokens(self) -> int:
        return self.num_blocks * self.block_size


def activation_reserve_bytes(model: catalog.ModelSpec, tp: int, token_budget: int, max_running: int, *,
                             dp: int = 1, ep: int = 1) -> float:
    """Peak torch memory above the weights of vLLM's profile run (bytes per GPU).

    vLLM V1's ``profile_run`` (``vllm/v1/worker/gpu_model_runner.py``) runs one
    forward pass of ``max_num_batched_tokens`` (``token_budget``) tokens, then the
    sampler over ``max_num_seqs`` (``max_running``) rows; the peak is the larger
    of the two, plus the forward's output hidden states still held while sampling:

    * forward: hidden states and residual (2 x T x hidden) and, at the MLP, the
      gate|up output (T x 2 x ffn / tp) and its activation (T x ffn / tp), bf16;
    * sampler: ``max_running x vocab x`` :data:`SAMPLER_BYTES_PER_LOGIT` (full
      vocabulary on every rank: the logits are gathered before sampling);
    * a MoE layer: hidden states and residual plus vLLM's fused-MoE workspaces
      (``vllm/model_executor/layers/fused_moe/fused_moe.py``, ``fused_experts``: one buffer
      of ``M x topk x max(2 I, hidden)`` shared by the gate|up and down outputs, one of
      ``M x topk x I`` for the activation; ``I = expert_intermediate_size / moe_tp``), bf16,
      for the ``M`` tokens entering the layer: a rank's ``token_budget`` with ``dp == 1``,
      all ranks' ``dp x token_budget`` with DP (a conservative bound: they are gathered
      before the experts in vLLM's all-gather dispatch), at most
      :data:`FUSED_MOE_CHUNK_TOKENS` (the workspaces are sized per chunk).
    """
    llm = model.llm
    b = catalog.BYTES_PER_PARAM_BF16
    ffn = -(-llm.intermediate_size // tp)
    up = (2 if llm.gated_mlp else 1) * ffn
    forward = token_budget * (2 * llm.hidden_size + up + ffn) * b
    if llm.moe is not None:
        moe = llm.moe
        inter = -(-moe.expert_intermediate_size // (dp * tp // ep))
        pairs = min(dp * token_budget, FUSED_MOE_CHUNK_TOKENS) * moe.experts_per_token
        moe_peak = 2 * token_budget * llm.hidden_size * b + pairs * (max(2 * inter, llm.hidden_size) + inter) * b
        forward = max(forward if llm.num_moe_layers < llm.num_layers else 0, moe_peak)
    sampler = max_running * llm.vocab_size * SAMPLER_BYTES_PER_LOGIT + token_budget * llm.hidden_size * b
    return max(forward, sampler)


def non_torch_bytes(tp: int) -> float:
    """Non-torch memory per GPU of a ``tp``-way worker (see :data:`NON_TORCH_TP_BYTES`)."""
    return NON_TORCH_TP1_BYTES if tp == 1 else NON_TORCH_TP_BYTES


def place_workers(pools: dict, count: int, keys: dict[str, str] | None = None) -> dict[str, list[tuple[int, ...]]]:
    """GPU ids of every worker, by pool name. ``keys`` maps a pool to its
    scenario key for error messages (default ``deployment.<pool>``)."""
    placement: dict[str, list[tuple[int, ...]]] = {}
    next_free = 0
    demand = []
    for name in POOL_ORDER:
        pool = pools.get(name)
        if pool is None:
            continue
        per = pool.gpus_per_worker
        key = (keys or {}).get(name, f"deployment.{name}")
        demand.append(f"{name} {pool.workers}x{per}")
        ids_list = []
        for w in range(pool.workers):
            if pool.gpu_ids is not None:
                if len(pool.gpu_ids) != pool.workers:
                    raise UserError(f"{key}.gpu_ids",
                                    f"needs one list per worker ({pool.workers}), got {len(pool.gpu_ids)}")
                ids = tuple(pool.gpu_ids[w])
                if len(ids) != per:
                    raise UserError(f"{key}.gpu_ids.{w}",
                                    f"needs {per} GPU ids (dp x tp x pp), got {len(ids)}")
                bad = [g for g in ids if g >= count]
                if bad:
                    raise UserError(f"{key}.gpu_ids.{w}",
                                    f"GPU {bad[0]} does not exist; valid ids: 0..{count - 1}")
                twice = sorted({g for g in ids if ids.count(g) > 1})
                if twice:  # one worker's TP x PP ranks each need their own GPU
                    raise UserError(f"{key}.gpu_ids.{w}", f"GPU {twice[0]} appears twice; a worker's dp x tp x pp "
                                                          "GPUs must all differ")
            else:
                ids = tuple(range(next_free, next_free + per))
                next_free += per
            ids_list.append(ids)
        placement[name] = ids_list
    if next_free > count:
        raise UserError("deployment", f"needs {next_free} GPUs ({', '.join(demand)}) but hardware.count is {count}")
    return placement


def shared_gpus(placement: dict[str, list[tuple[int, ...]]]) -> dict[int, list[tuple[str, int]]]:
    """GPU id -> the (pool, worker) pairs on it, for GPUs held by more than one worker."""
    holders: dict[int, list[tuple[str, int]]] = {}
    for pool, workers in placement.items():
        for w, ids in enumerate(workers):
            for g in set(ids):
                holders.setdefault(g, []).append((pool, w))
    return {g: h for g, h in holders.items() if len(h) > 1}


def plan_llm_memory(
    dep, batching, model: catalog.ModelSpec, gpu: catalog.GpuSpec, *, tp: int, pp: int,
    kv_bytes_per_token_tp: float, include_encoder: bool, extra_bytes_per_gpu: float = 0.0, pool: str = "llm",
    dp: int = 1, ep: int = 1,
) -> MemoryPlan:
    """KV capacity of one LLM worker; raises a UserError if it cannot hold one max-length request.

    Weights per GPU (:meth:`~lmmsim.catalog.LlmSpec.weight_bytes_per_gpu`)::

        non-expert bytes / (tp x pp) + router bytes / pp + expert bytes / (ep x moe_tp x pp)

    with ``ep x moe_tp = dp x tp``: attention, dense MLPs, shared experts, embedding and LM
    head split over tp and replicated on the dp ranks; routed experts split over all
    ``dp x tp`` GPUs of a stage; FP8 (``deployment.dtype``) stores the linear layers in one
    byte. ``num_blocks`` is the worker's (``dp`` ranks), ``kv_bytes`` one GPU's."""
    usable = gpu.memory_bytes * dep.gpu_memory_utilization
    weights = model.llm.weight_bytes_per_gpu(tp=tp, pp=pp, dp=dp, dtype=getattr(dep, "dtype", "bf16"))
    if include_encoder and model.encoder is not None:
        weights += model.encoder.num_params * catalog.BYTES_PER_PARAM_BF16 / tp
    if dep.activation_reserve_gib is not None:
        act = dep.activation_reserve_gib * GIB
        non_torch = 0.0
    else:
        non_torch = non_torch_bytes(dp * tp)  # with DP, EP all-to-all buffers as a TP group's
        act = activation_reserve_bytes(model, tp, batching.token_budget, batching.max_running, dp=dp, ep=ep) + non_torch
    kv_per_token = kv_bytes_per_token_tp / pp
    kv = usable - weights - act - extra_bytes_per_gpu
    max_len = dep.max_model_len or model.llm.max_context
    num_blocks = int(kv // (dep.block_size * kv_per_token)) if kv > 0 else 0
    if num_blocks * dep.block_size < max_len:
        need = (weights + act + extra_bytes_per_gpu + max_len * kv_per_token) / GIB
        shape = (f"dp={dp}, " if dp > 1 else "") + f"tp={tp}" + (f", pp={pp}" if pp > 1 else "") + (
            f", ep={ep}" if ep > 1 else "")
        raise UserError(
            "deployment",
            f"{pool} worker: {model.name} on {gpu.name} with {shape} does not fit: weights {weights / GIB:.1f} GiB + "
            f"activations {act / GIB:.1f} GiB" + (f" + buffers {extra_bytes_per_gpu / GIB:.1f} GiB"
                                                   if extra_bytes_per_gpu else "")
            + f" + KV for max_model_len {max_len} tokens {max_len * kv_per_token / GIB:.1f} GiB = {need:.1f} GiB > "
            f"{dep.gpu_memory_utilization} x {gpu.memory_gib:g} GiB per GPU; raise tp or pp, pick a larger GPU "
            f"or lower deployment.max_model_len",
        )
    return MemoryPlan(usable, weights, act, max(kv, 0.0), kv_per_token, dep.block_size, dp * num_blocks, max_len,
                      non_torch)


def check_encoder_memory(dep, model: catalog.ModelSpec, gpu: catalog.GpuSpec, tp: int) -> float:
    """Encoder weights per GPU; raises if they do not fit."""
    weights = model.encoder.num_params * catalog.BYTES_PER_PARAM_BF16 / tp
    if weights + RUNTIME_OVERHEAD_BYTES > gpu.memory_bytes * dep.gpu_memory_utilization:
        raise UserError("deployment.encoder", f"{model.name}'s encoder ({weights / GIB:.1f} GiB per GPU at tp={tp}) "
                        f"does not fit on {gpu.name}")
    return weights

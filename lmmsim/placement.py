"""Deployment planning: which GPUs each worker gets, and what fits in their memory.

GPUs are numbered ``0 .. hardware.count - 1``. Pools are placed in order
(encoder, llm, prefill, decode): a pool without explicit ``gpu_ids`` takes the
next free GPUs, ``tp x pp`` per LLM worker (stage by stage) and ``tp`` per
encoder worker. A GPU listed for two workers is shared; the deployment must
then say how (``gpu_sharing``).

Memory per LLM GPU = ``memory x gpu_memory_utilization`` minus weights (the
LLM's layers of this stage over TP, plus the encoder in a monolithic engine),
an activation reserve, embedding buffer on receivers, and the weights of any
worker sharing the GPU; the rest holds KV blocks. A deployment whose KV cache
cannot hold one ``max_model_len`` request is rejected.
"""

from __future__ import annotations

from dataclasses import dataclass

from lmmsim import catalog
from lmmsim.errors import UserError

GIB = 2**30
# CUDA context, NCCL buffers, CUDA graphs and allocator slack per GPU; vLLM
# measures this at start-up, we take a fixed figure (approximate).
RUNTIME_OVERHEAD_BYTES = 1.0 * GIB
POOL_ORDER = ("encoder", "llm", "prefill", "decode")


@dataclass
class MemoryPlan:
    """Per-GPU memory of one LLM worker (bytes)."""

    usable_bytes: float
    weight_bytes: float
    activation_bytes: float
    kv_bytes: float
    kv_bytes_per_token: float
    block_size: int
    num_blocks: int
    max_model_len: int

    @property
    def kv_capacity_tokens(self) -> int:
        return self.num_blocks * self.block_size


def activation_reserve_bytes(model: catalog.ModelSpec, tp: int, token_budget: int, max_running: int) -> float:
    """Peak activation memory of one step, estimated (vLLM profiles it instead).

    Largest transient tensors: the MLP intermediate of a full-budget step
    (gate and up outputs), hidden states, and fp32 logits of the sampled rows.
    """
    llm = model.llm
    mlp = token_budget * 2 * (llm.intermediate_size // tp) * 2
    hidden = token_budget * 4 * llm.hidden_size * 2
    logits = max_running * (llm.vocab_size // tp) * 4
    return mlp + hidden + logits + RUNTIME_OVERHEAD_BYTES


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
                                    f"needs {per} GPU ids (tp x pp), got {len(ids)}")
                bad = [g for g in ids if g >= count]
                if bad:
                    raise UserError(f"{key}.gpu_ids.{w}",
                                    f"GPU {bad[0]} does not exist; valid ids: 0..{count - 1}")
                twice = sorted({g for g in ids if ids.count(g) > 1})
                if twice:  # one worker's TP x PP ranks each need their own GPU
                    raise UserError(f"{key}.gpu_ids.{w}", f"GPU {twice[0]} appears twice; a worker's tp x pp "
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
) -> MemoryPlan:
    """KV capacity of one LLM worker; raises a UserError if it cannot hold one max-length request."""
    usable = gpu.memory_bytes * dep.gpu_memory_utilization
    weights = model.llm.num_params * catalog.BYTES_PER_PARAM_BF16 / (tp * pp)
    if include_encoder and model.encoder is not None:
        weights += model.encoder.num_params * catalog.BYTES_PER_PARAM_BF16 / tp
    if dep.activation_reserve_gib is not None:
        act = dep.activation_reserve_gib * GIB
    else:
        act = activation_reserve_bytes(model, tp, batching.token_budget, batching.max_running)
    kv_per_token = kv_bytes_per_token_tp / pp
    kv = usable - weights - act - extra_bytes_per_gpu
    max_len = dep.max_model_len or model.llm.max_context
    num_blocks = int(kv // (dep.block_size * kv_per_token)) if kv > 0 else 0
    if num_blocks * dep.block_size < max_len:
        need = (weights + act + extra_bytes_per_gpu + max_len * kv_per_token) / GIB
        shape = f"tp={tp}" + (f", pp={pp}" if pp > 1 else "")
        raise UserError(
            "deployment",
            f"{pool} worker: {model.name} on {gpu.name} with {shape} does not fit: weights {weights / GIB:.1f} GiB + "
            f"activations {act / GIB:.1f} GiB" + (f" + buffers {extra_bytes_per_gpu / GIB:.1f} GiB"
                                                   if extra_bytes_per_gpu else "")
            + f" + KV for max_model_len {max_len} tokens {max_len * kv_per_token / GIB:.1f} GiB = {need:.1f} GiB > "
            f"{dep.gpu_memory_utilization} x {gpu.memory_gib:g} GiB per GPU; raise tp or pp, pick a larger GPU "
            f"or lower deployment.max_model_len",
        )
    return MemoryPlan(usable, weights, act, max(kv, 0.0), kv_per_token, dep.block_size, num_blocks, max_len)


def check_encoder_memory(dep, model: catalog.ModelSpec, gpu: catalog.GpuSpec, tp: int) -> float:
    """Encoder weights per GPU; raises if they do not fit."""
    weights = model.encoder.num_params * catalog.BYTES_PER_PARAM_BF16 / tp
    if weights + RUNTIME_OVERHEAD_BYTES > gpu.memory_bytes * dep.gpu_memory_utilization:
        raise UserError("deployment.encoder", f"{model.name}'s encoder ({weights / GIB:.1f} GiB per GPU at tp={tp}) "
                        f"does not fit on {gpu.name}")
    return weights

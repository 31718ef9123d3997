"""The one place that turns a validated scenario into runtime objects.

Resolves catalog names, checks that the deployment fits in GPU memory, builds
the cost model, the request list, the engines and the router, and hands back a
ready :class:`~lmmsim.engine.simulation.Simulation`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lmmsim import catalog, policies
from lmmsim.costmodel.composed import ComposedStepCostModel
from lmmsim.costmodel.roofline import RooflinePredictor
from lmmsim.engine.kv_cache import BlockPool
from lmmsim.engine.replica import Replica
from lmmsim.engine.scheduler import ContinuousBatchingScheduler
from lmmsim.engine.simulation import Simulation
from lmmsim.errors import UserError, choices
from lmmsim.workload.generator import generate_requests
from lmmsim.workload.request import Request

GIB = 2**30
# CUDA context, NCCL buffers, CUDA graphs and allocator slack per GPU; vLLM
# measures this at start-up, we take a fixed figure (approximate).
RUNTIME_OVERHEAD_BYTES = 1.0 * GIB


@dataclass
class MemoryPlan:
    """Per-GPU memory of one engine replica (bytes)."""

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


def plan_memory(scn, model: catalog.ModelSpec, gpu: catalog.GpuSpec, cost) -> MemoryPlan:
    dep = scn.deployment
    batching = scn.policy.batching
    usable = gpu.memory_bytes * dep.gpu_memory_utilization
    weights = cost.weight_bytes_per_gpu
    if dep.activation_reserve_gib is not None:
        act = dep.activation_reserve_gib * GIB
    else:
        act = activation_reserve_bytes(model, dep.tp, batching.token_budget, batching.max_running)
    kv_per_token = cost.kv_bytes_per_token_per_gpu
    kv = usable - weights - act
    max_len = dep.max_model_len or model.llm.max_context
    num_blocks = int(kv // (dep.block_size * kv_per_token)) if kv > 0 else 0
    if num_blocks * dep.block_size < max_len:
        need = (weights + act + max_len * kv_per_token) / GIB
        raise UserError(
            "deployment",
            f"{model.name} on {gpu.name} with tp={dep.tp} does not fit: weights {weights / GIB:.1f} GiB + "
            f"activations {act / GIB:.1f} GiB + KV for max_model_len {max_len} tokens "
            f"{max_len * kv_per_token / GIB:.1f} GiB = {need:.1f} GiB > "
            f"{dep.gpu_memory_utilization} x {gpu.memory_gib:g} GiB per GPU; raise tp, pick a larger GPU "
            f"or lower deployment.max_model_len",
        )
    return MemoryPlan(usable, weights, act, max(kv, 0.0), kv_per_token, dep.block_size, num_blocks, max_len)


def _check_deployment(scn, model: catalog.ModelSpec, gpu: catalog.GpuSpec) -> None:
    dep = scn.deployment
    needed = dep.replicas * dep.tp * dep.pp
    if needed > scn.hardware.count:
        raise UserError(
            "deployment",
            f"needs replicas x tp x pp = {dep.replicas} x {dep.tp} x {dep.pp} = {needed} GPUs "
            f"but hardware.count is {scn.hardware.count}",
        )
    heads = model.llm.num_heads
    if heads % dep.tp:
        valid = [t for t in (1, 2, 4, 8, 16) if heads % t == 0]
        raise UserError(
            "deployment.tp",
            f"{model.name} has {heads} attention heads, not divisible by tp={dep.tp}; valid: {valid}",
        )


@dataclass
class BuiltRun:
    scenario: object
    model: catalog.ModelSpec
    gpu: catalog.GpuSpec
    cost: object
    memory: MemoryPlan
    requests: list[Request]
    rejected: frozenset[int]
    encoder_budget: int
    simulation: Simulation

    @property
    def num_gpus(self) -> int:
        return self.scenario.hardware.count


def build(scn, base_dir: Path = Path("."), *, progress=None, step_log: bool = False, requests=None) -> BuiltRun:
    """Build a ready-to-run simulation; ``requests`` replaces the generated workload."""
    model = catalog.get_model(scn.model)
    gpu = catalog.get_gpu(scn.hardware.gpu)
    if scn.hardware.interconnect not in gpu.links:
        raise UserError(
            "hardware.interconnect",
            f"{scn.hardware.interconnect!r} not available on {gpu.name}; valid: {choices(gpu.links)}",
        )
    _check_deployment(scn, model, gpu)
    dep = scn.deployment
    link = gpu.links[scn.hardware.interconnect]
    cost = ComposedStepCostModel(model, gpu, dep.tp, RooflinePredictor(gpu, link))
    memory = plan_memory(scn, model, gpu, cost)

    if requests is None:
        requests = generate_requests(scn.workload, model, scn.seed, base_dir)
    max_len = memory.max_model_len
    rejected = frozenset(
        r.request_id for r in requests if r.num_prompt_tokens + r.num_output_tokens > max_len
    )
    batching = scn.policy.batching
    largest_item = max(
        (seg.length for r in requests if r.request_id not in rejected for seg in r.media_segments), default=0
    )
    encoder_budget = max(batching.encoder_budget_tokens or batching.token_budget, largest_item)
    log = [] if step_log else None

    def make_replica(env, index, on_finish, barrier_at):
        scheduler = ContinuousBatchingScheduler(
            queue=policies.create("queue", scn.policy.queue),
            pool=BlockPool(memory.num_blocks, memory.block_size),
            token_budget=batching.token_budget,
            max_running=batching.max_running,
            encoder_budget=encoder_budget,
        )
        gpu_ids = tuple(range(index * dep.tp, (index + 1) * dep.tp))
        return Replica(
            env, index, scheduler, cost, gpu_ids, on_finish, barrier_at,
            fast_forward=scn.sim.fast_forward, step_log=log,
        )

    simulation = Simulation(
        requests,
        make_replica,
        dep.replicas,
        policies.create("router", scn.policy.router),
        rejected=rejected,
        horizon_s=scn.sim.horizon_s,
        progress=progress,
    )
    return BuiltRun(scn, model, gpu, cost, memory, requests, rejected, encoder_budget, simulation)

"""What a topology assembler needs, planned before the simulation starts, and the engine factory."""

from __future__ import annotations

from dataclasses import dataclass, field

from lmmsim import catalog, policies
from lmmsim.engine.kv_cache import BlockPool
from lmmsim.engine.media_cache import MediaCache
from lmmsim.engine.pipeline import PipelineEngine
from lmmsim.engine.prefix_cache import PrefixBlockPool
from lmmsim.engine.replica import Replica, until_next_event
from lmmsim.engine.steplog import StepLog, StepRecord
from lmmsim.placement import MemoryPlan


def worker_name(pool: str, index: int, monolithic: bool) -> str:
    return f"{'replica' if monolithic else pool}{index}"


@dataclass
class Parts:
    """A planned deployment: everything but the SimPy objects, which exist per run."""

    scn: object
    model: catalog.ModelSpec
    link: catalog.LinkSpec
    pools: dict  # pool name -> pool config (with local_prefill when EAServe adds it)
    placement: dict[str, list[tuple[int, ...]]]
    shared: dict  # GPU id -> [(pool, worker)] holding it
    sharing: object  # the deployment's gpu_sharing config, or None
    predictor: object
    costs: dict  # pool name -> step cost model
    memory: dict[str, MemoryPlan]
    encoder_budget: int
    queue_ctx: dict = field(default_factory=dict)  # what the prepare phase computed for the queue policy
    sm_table: object = None  # EAServe's SM table (prepared), or None
    log: StepLog | None = None
    host: object = None  # the host preprocessing stage (lmmsim.assembly.host_stage), or None

    @property
    def monolithic(self) -> bool:
        return self.scn.deployment.kind == "monolithic"

    @property
    def kv_bytes_per_token(self) -> int:
        """KV bytes one token's cache moves in a P->D transfer (all layers and heads; halved
        with an FP8 cache, ``deployment.kv_cache_dtype``)."""
        full = self.model.llm.kv_bytes_per_token
        return full // 2 if self.scn.deployment.kv_cache_dtype == "fp8" else full

    @property
    def hidden_bytes(self) -> int:
        return self.model.llm.hidden_size * catalog.BYTES_PER_PARAM_BF16

    def log_transfer(self, name, start_at, end_at, num_bytes, tag) -> None:
        self.log.append(StepRecord(f"link:{name}", start_at, end_at, "transfer", (tag,) if tag is not None else (),
                                   0, 1))

    @property
    def on_transfer(self):
        return self.log_transfer if self.log is not None else None


def encoder_cache(parts: Parts, dp: int = 1) -> MediaCache | None:
    """A new, empty encoder cache for one engine that runs the encoder (None: the model has
    none). Capacity ``deployment.encoder_cache_tokens``, by default the encoder budget --
    vLLM's ``max(max_num_batched_tokens, largest item)`` when neither is set; ``dp`` ranks
    (vLLM DP + EP) each have their own, pooled here as one of ``dp`` times the size."""
    if parts.model.encoder is None:
        return None
    tokens = parts.scn.deployment.encoder_cache_tokens
    return MediaCache(dp * (parts.encoder_budget if tokens is None else tokens))


def make_engine(parts: Parts, colocation, env, pool_name: str, index: int, on_finish, barrier_at, *, media,
                prefill_only=False, on_handoff=None, on_batch=None, fast_forward=False, outside_events_stop=False):
    """One LLM worker of ``pool_name``: a replica, or a pipeline of ``pp`` stages
    (``outside_events_stop``: work reaches the pipeline from other events than arrivals)."""
    scn, pool = parts.scn, parts.pools[pool_name]
    batching = scn.policy.batching
    ids = parts.placement[pool_name][index]
    name = worker_name(pool_name, index, parts.monolithic)
    queue = policies.create("queue", scn.policy.queue, **parts.queue_ctx)
    choice = policies.create("batching", batching, queue=queue)  # scheduler by kind and queue capabilities
    scheduler = choice.cls(
        queue=queue,
        # decode workers receive their KV: prefix caching is the prefill side's (vLLM P/D)
        pool=(PrefixBlockPool if scn.deployment.prefix_caching and pool_name != "decode" else BlockPool)(
            parts.memory[pool_name].num_blocks, scn.deployment.block_size),
        # dp attention ranks (vLLM DP + EP) each have their own scheduler and budgets; one
        # engine stands for all of them (lmmsim.costmodel.moe), so it holds dp x each budget
        token_budget=batching.token_budget * pool.dp,
        max_chunk_tokens=batching.token_budget,  # a chunk runs on one rank, within its budget
        max_running=batching.max_running * pool.dp,
        encoder_budget=parts.encoder_budget * pool.dp,
        num_slots=pool.pp,
        media=media,
        prefill_only=prefill_only,
        prefill_throttle=((batching.min_prefill_tokens * pool.dp, batching.token_budget * pool.dp)
                          if choice.throttled else None),
        encoder_cache=encoder_cache(parts, pool.dp) if media == "local" else None,
        encode_before_prefill=getattr(batching, "encode_before_prefill", False),
        **choice.extra,
    )
    cost = parts.costs[pool_name]
    if pool.pp == 1:
        run = colocation.runner(name, ids)
        if not parts.monolithic and run is None and scn.sim.fast_forward:
            # fed by transfers (embeddings, KV), not only arrivals: its decode stretches stop before
            # the simulation's next event of any kind, so nothing can reach it mid-stretch
            # (lmmsim.engine.replica.until_next_event); a prefill-only worker never decodes
            fast_forward, barrier_at = True, until_next_event(env, barrier_at)
        return Replica(env, index, scheduler, cost, ids, on_finish, barrier_at, fast_forward=fast_forward,
                       step_log=parts.log, name=name, on_handoff=on_handoff, on_batch=on_batch, run=run)
    per_stage = pool.dp * pool.tp  # a stage's dp x tp GPUs, stage by stage
    stage_ids = [ids[s * per_stage:(s + 1) * per_stage] for s in range(pool.pp)]
    hidden_bytes, p2p_s = parts.hidden_bytes, parts.predictor.p2p_s
    return PipelineEngine(env, index, name, scheduler, cost, pool.pp, stage_ids,
                          lambda tokens: p2p_s(tokens * hidden_bytes), on_finish,
                          chunk_pipelining=pool.chunk_pipelining, on_handoff=on_handoff,
                          step_log=parts.log, on_batch=on_batch, barrier_at=barrier_at, fast_forward=fast_forward,
                          outside_events_stop=outside_events_stop,
                          stage_runs=[colocation.runner(f"{name}/stage{k}", st) for k, st in enumerate(stage_ids)])

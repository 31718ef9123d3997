"""The one place that turns a validated scenario into runtime objects.

Resolves catalog names, places workers on GPUs and checks their memory
(:mod:`lmmsim.placement`), builds the cost models, the request list, the
engines, encoders, links and routers, and hands back a ready
:class:`~lmmsim.engine.simulation.Simulation`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from lmmsim import catalog, policies
from lmmsim.costmodel.composed import ComposedStepCostModel
from lmmsim.costmodel.roofline import RooflinePredictor
from lmmsim.engine.disaggregation import DisaggregatedFrontend, EmbeddingInbox, egress
from lmmsim.engine.encoder import EncoderWorker
from lmmsim.engine.frontends import MonolithicFrontend
from lmmsim.engine.gpu_share import SharedGpu
from lmmsim.engine.kv_cache import BlockPool
from lmmsim.engine.pipeline import PipelineEngine
from lmmsim.engine.replica import Replica
from lmmsim.engine.priority_scheduler import PriorityScheduler
from lmmsim.engine.schedulable_tokens import SchedulableTokenScheduler
from lmmsim.engine.scheduler import ContinuousBatchingScheduler
from lmmsim.engine.simulation import Simulation
from lmmsim.engine.steplog import StepLog, StepRecord
from lmmsim.errors import UserError, choices
from lmmsim.rps.admission import admission_model, edf_deadline
from lmmsim.costmodel.engine_overheads import EngineOverheads
from lmmsim.placement import GIB, MemoryPlan, check_encoder_memory, place_workers, plan_llm_memory, shared_gpus
from lmmsim.workload.generator import generate_requests
from lmmsim.workload.request import Request

LLM_POOLS = ("llm", "prefill", "local_prefill", "decode")


@dataclass
class BuiltRun:
    scenario: object
    model: catalog.ModelSpec
    gpu: catalog.GpuSpec
    placement: dict[str, list[tuple[int, ...]]]
    memory: dict[str, MemoryPlan]  # per LLM pool
    requests: list[Request]
    rejected: dict[int, str]  # request id -> why it is refused at arrival
    encoder_budget: int
    simulation: Simulation
    step_log: StepLog | None = None
    costs: dict = field(default_factory=dict)
    cost_model: dict = field(default_factory=dict)
    admission: object = None  # RPS-Serve's fitted profile/estimator/classifier (lmmsim.rps.admission)

    @property
    def num_gpus(self) -> int:
        return self.scenario.hardware.count

    @property
    def max_model_len(self) -> int:
        return next(iter(self.memory.values())).max_model_len


def _check_llm_pool(name: str, key: str, pool, model: catalog.ModelSpec) -> None:
    heads = model.llm.num_heads
    if heads % pool.tp:
        valid = [t for t in (1, 2, 4, 8, 16) if heads % t == 0]
        raise UserError(f"{key}.tp", f"{model.name} has {heads} attention heads, not divisible by tp={pool.tp}; "
                        f"valid: {valid}")
    if pool.pp > model.llm.num_layers:
        raise UserError(f"{key}.pp", f"{model.name} has {model.llm.num_layers} layers; pp must not exceed it")


def make_predictor(choice: str, gpu: catalog.GpuSpec, link, base_dir: Path):
    """The operator predictor a run uses, and a description for its summary."""
    if choice == "roofline" or (choice == "auto" and gpu.fitted_profile is None):
        return RooflinePredictor(gpu, link), {"kind": "roofline-v0", "gpu": gpu.name}
    if choice == "auto":
        folder = catalog.profiles_dir() / gpu.fitted_profile
        key = f"profiles/gpus/{gpu.name}.yaml: fitted_profile"
    else:
        folder = Path(choice) if Path(choice).is_absolute() else base_dir / choice
        key = "hardware.cost_model"
    if not (folder / "model.json").exists():
        raise UserError(key, f"{folder} holds no fitted model (model.json); run `lmmsim fit` or use 'roofline'")
    from lmmsim.costmodel.fitted import FittedPredictor

    predictor = FittedPredictor(folder, gpu, link)
    shown = f"profiles/{gpu.fitted_profile}" if choice == "auto" else choice  # no machine-specific paths
    info = {"kind": "fitted", "gpu": gpu.name, "fit": shown,
            "fallback_classes": sorted(predictor.fallback_classes)}
    return predictor, info


def _worker_name(pool: str, index: int, monolithic: bool) -> str:
    return f"{'replica' if monolithic else pool}{index}"


# Local prefill keeps this SM share when a batch would take every SM (set_shares cannot
# stop a running kernel, and it may start a step during the call); our choice, 5%.
MIN_RUNNING_SM_SHARE = 0.05


def _sm_table(lp, encoder_cost, requests, dispatch, call_overhead_s: float = 0.0):
    """EAServe's SM table (easerve.txt 3.4) for this workload: the encoder cost of the
    workload's most common media item, probed at ``lp.sm_levels`` for batches of 1 to
    the dispatch bound (requests; 16 without one) items. The latency probed is a whole
    call's, host-side time (``call_overhead_s``, SM-independent) included, as a real
    profile of encode-only passes measures it."""
    from collections import Counter

    from lmmsim.easerve.sm_table import build_sm_table, encode_latency_from_parts, parts_from_cost_model

    works = Counter(seg.item.encoder for r in requests for seg in r.media_segments)
    if not works:
        return None
    work = works.most_common(1)[0][0]
    max_batch = getattr(dispatch, "max_batch", None) or 16
    gpu_latency = encode_latency_from_parts(parts_from_cost_model(encoder_cost, work))
    latency = (lambda b, x: call_overhead_s + gpu_latency(b, x)) if call_overhead_s else gpu_latency
    return build_sm_table(latency, levels=lp.sm_levels, max_batch=max_batch, tolerance=lp.sm_tolerance)


def _check_sharing(shared: dict, sharing, can_share: bool = True) -> None:
    """GPUs held by two workers need a sharing mode; only an encoder and one LLM worker may share
    (``can_share``: the deployment has a ``gpu_sharing`` key; p_d has none, no encoder to share with)."""
    for g, holders in sorted(shared.items()):
        names = " and ".join(f"{p} worker {w}" for p, w in holders)
        if not can_share:
            raise UserError("deployment", f"GPU {g} is given to {names}; give each worker its own GPUs "
                            f"(their KV caches would compete)")
        if sharing is None:
            raise UserError("deployment.gpu_sharing", f"GPU {g} is given to {names}; set deployment.gpu_sharing "
                            f"(mode: time_slice or sm_split) to let them share it, or give each its own GPUs")
        llm_holders = [h for h in holders if h[0] != "encoder"]
        if len(llm_holders) > 1 or len(holders) > 2:
            raise UserError("deployment", f"GPU {g} is given to {names}; only an encoder worker and one LLM "
                            f"worker may share a GPU (their KV caches would compete)")
        if sharing.mode == "sm_split":
            missing = [p for p, _ in holders if p not in sharing.sm_shares]
            if missing:
                raise UserError("deployment.gpu_sharing.sm_shares", f"needs a share for {missing[0]!r} (GPU {g})")


def refusals(requests, max_model_len: int, disaggregated, bytes_per_token: float) -> dict[int, str]:
    """Requests refused at arrival, with the reason, as vLLM refuses a prompt it can never
    serve: longer than ``max_model_len`` (prompt + output), or -- with remote encoders
    (``disaggregated``: the deployment config) -- embeddings the receiver's buffer can
    never hold: after_encode admission holds all of a request's embeddings at once,
    streaming one item at a time (:mod:`lmmsim.engine.disaggregation`)."""
    out: dict[int, str] = {}
    buffer = disaggregated.embedding_buffer_gib * GIB if disaggregated is not None else None
    whole = disaggregated is not None and disaggregated.admission == "after_encode"
    for r in requests:
        total = r.num_prompt_tokens + r.num_output_tokens
        if total > max_model_len:
            out[r.request_id] = f"{total} prompt + output tokens exceed max_model_len {max_model_len}"
        elif buffer is not None and r.media_segments:
            tokens = r.num_mm_tokens if whole else max(seg.length for seg in r.media_segments)
            if tokens * bytes_per_token > buffer:
                what = "its embeddings" if whole else "one item's embeddings"
                out[r.request_id] = (f"{what} ({tokens * bytes_per_token / GIB:.3g} GiB) exceed "
                                     f"deployment.embedding_buffer_gib ({buffer / GIB:g})")
    return out


def build(scn, base_dir: Path = Path("."), *, progress=None, step_log: bool = False, requests=None) -> BuiltRun:
    """Build a ready-to-run simulation; ``requests`` replaces the generated workload."""
    model = catalog.get_model(scn.model)
    gpu = catalog.get_gpu(scn.hardware.gpu)
    if scn.hardware.interconnect not in gpu.links:
        raise UserError(
            "hardware.interconnect",
            f"{scn.hardware.interconnect!r} not available on {gpu.name}; valid: {choices(gpu.links)}",
        )
    link = gpu.links[scn.hardware.interconnect]
    dep = scn.deployment
    batching = scn.policy.batching
    monolithic = dep.kind == "monolithic"
    pools = dep.pools()
    keys = {"llm": "deployment"} if monolithic else {}
    if "encoder" in pools and model.encoder is None:
        # An encoder pool with nothing to encode would hold GPUs idle: say which kind fits.
        fits = "p_d (prefill + decode pools, KV P->D)" if dep.kind == "e_p_d" else "monolithic or p_d"
        raise UserError("deployment.kind", f"{model.name} has no encoder, so {dep.kind}'s encoder pool would "
                        f"idle; valid for a text-only model: {fits}")
    placement = place_workers(pools, scn.hardware.count, keys)
    local_pool = dep.local_prefill_pool(placement["encoder"]) if getattr(dep, "local_prefill", None) else None
    if local_pool is not None:  # EAServe: prefill workers on the encoder GPUs
        pools = {**pools, "local_prefill": local_pool}
        placement["local_prefill"] = [tuple(ids) for ids in local_pool.gpu_ids]
    shared = shared_gpus(placement)
    sharing = dep.sharing() if hasattr(dep, "sharing") else getattr(dep, "gpu_sharing", None)
    _check_sharing(shared, sharing, can_share=hasattr(dep, "gpu_sharing"))

    predictor, cost_model_info = make_predictor(scn.hardware.cost_model, gpu, link, base_dir)
    costs: dict = {}
    memory: dict[str, MemoryPlan] = {}
    # p_d: the prefill workers encode their requests' media themselves (no encoder pool)
    local_encode = {"llm"} if monolithic else {"prefill"} if "encoder" not in pools else set()
    for name in LLM_POOLS:
        pool = pools.get(name)
        if pool is None:
            continue
        key = keys.get(name, f"deployment.{name}")
        _check_llm_pool(name, key, pool, model)
        costs[name] = ComposedStepCostModel(model, gpu, pool.tp, predictor, overheads=EngineOverheads.from_config(
            scn.engine, max_running=batching.max_running, predictor=predictor))
        receives_embeddings = "encoder" in pools and name in ("llm", "prefill", "local_prefill")
        buffer = dep.embedding_buffer_gib * GIB / (pool.tp * pool.pp) if receives_embeddings else 0.0
        if any(pn == "encoder" for holders in shared.values() for pn, _ in holders) and any(
                (name, w) in holders for holders in shared.values() for w in range(pool.workers)):
            # an encoder co-located on this pool's GPUs keeps its weights there
            buffer += model.encoder.num_params * catalog.BYTES_PER_PARAM_BF16 / pools["encoder"].tp
        memory[name] = plan_llm_memory(
            dep, batching, model, gpu, tp=pool.tp, pp=pool.pp,
            kv_bytes_per_token_tp=costs[name].kv_bytes_per_token_per_gpu,
            include_encoder=name in local_encode, extra_bytes_per_gpu=buffer, pool=name,
        )
    if "encoder" in pools:
        check_encoder_memory(dep, model, gpu, pools["encoder"].tp)
        costs["encoder"] = ComposedStepCostModel(model, gpu, pools["encoder"].tp, predictor, encoder_only=True)

    if requests is None:
        requests = generate_requests(scn.workload, model, scn.seed, base_dir)
        if not requests:  # a run of nothing has no metrics; say so rather than report NaNs
            w = scn.workload
            why = (f"no arrival before duration_s {w.duration_s:g}" if w.duration_s is not None
                   else "the trace holds no request")
            raise UserError("workload", f"generates no requests ({why}); lengthen duration_s or check the trace")
    max_len = next(iter(memory.values())).max_model_len
    hidden_bytes = model.llm.hidden_size * catalog.BYTES_PER_PARAM_BF16
    rejected = refusals(requests, max_len, dep if "encoder" in pools else None, hidden_bytes)
    largest_item = max(
        (seg.length for r in requests if r.request_id not in rejected for seg in r.media_segments), default=0
    )
    encoder_budget = max(getattr(batching, "encoder_budget_tokens", None) or batching.token_budget, largest_item)
    log = StepLog() if step_log else None
    router_cfg = scn.policy.router
    queue_cfg = scn.policy.queue
    queue_ctx: dict = {}
    admission = None
    if queue_cfg.kind == "rps":
        if batching.kind == "schedulable_tokens":
            raise UserError("policy.queue.kind", "rps orders requests by priority; use it with batching "
                            "chunked_prefill or token_throttling, not schedulable_tokens")
        if queue_cfg.priority == "edf":
            queue_ctx = {"deadline": edf_deadline(scn)}
        else:
            admission = admission_model(scn, base_dir)
            queue_ctx = {"classify": admission.classify}

    def make_engine(env, pool_name, index, on_finish, barrier_at, *, media, prefill_only=False,
                    on_handoff=None, on_batch=None, fast_forward=False):
        pool = pools[pool_name]
        ids = placement[pool_name][index]
        name = _worker_name(pool_name, index, monolithic)
        scheduler_cls, extra = ContinuousBatchingScheduler, {}
        if batching.kind == "schedulable_tokens":
            scheduler_cls, extra = SchedulableTokenScheduler, {"inter_request": batching.inter_request}
        queue = policies.create("queue", queue_cfg, **queue_ctx)
        if hasattr(queue, "sort_key"):  # a queue that scores requests: priority order and preemption
            scheduler_cls = PriorityScheduler
        scheduler = scheduler_cls(
            queue=queue,
            pool=BlockPool(memory[pool_name].num_blocks, dep.block_size),
            token_budget=batching.token_budget,
            max_running=batching.max_running,
            encoder_budget=encoder_budget,
            num_slots=pool.pp,
            media=media,
            prefill_only=prefill_only,
            prefill_throttle=(batching.min_prefill_tokens, batching.token_budget)
            if batching.kind == "token_throttling" or getattr(batching, "token_throttling", False) else None,
            **extra,
        )
        cost = costs[pool_name]
        if pool.pp == 1:
            return Replica(env, index, scheduler, cost, ids, on_finish, barrier_at, fast_forward=fast_forward,
                           step_log=log, name=name, on_handoff=on_handoff, on_batch=on_batch,
                           run=runner(env, name, ids))
        stage_ids = [ids[s * pool.tp:(s + 1) * pool.tp] for s in range(pool.pp)]
        return PipelineEngine(env, index, name, scheduler, cost, pool.pp, stage_ids,
                              lambda tokens: predictor.p2p_s(tokens * hidden_bytes), on_finish,
                              chunk_pipelining=pool.chunk_pipelining, on_handoff=on_handoff,
                              step_log=log, on_batch=on_batch,
                              stage_runs=[runner(env, f"{name}/stage{k}", st) for k, st in enumerate(stage_ids)])

    arbiters: dict = {}  # GPU id -> SharedGpu, per simulation environment
    sm_table = None
    lp = getattr(dep, "local_prefill", None)
    if lp is not None and lp.sm_partitioning == "dynamic":
        sm_table = _sm_table(lp, costs["encoder"], requests, pools["encoder"].dispatch,
                             pools["encoder"].call_overhead_s)

    def arbiter(env, g):
        if g not in arbiters:
            shares = None
            if sharing.mode == "sm_split":
                shares = {}
                for pn, w in shared[g]:
                    shares[_worker_name(pn, w, monolithic)] = sharing.sm_shares[pn]
            arbiters[g] = SharedGpu(env, g, sharing.mode, shares, memory_interference=sharing.memory_interference)
        return arbiters[g]

    def runner(env, worker: str, ids):
        """How a worker's batch runs: None if its GPUs are its own, else through the
        arbiters of its shared GPUs; a TP group spread over several shared GPUs
        moves in lock step, so its batch ends when the slowest GPU's part ends."""
        gs = [g for g in ids if g in shared]
        if not gs:
            return None
        tenant = worker.split("/")[0]
        arbs = [arbiter(env, g) for g in gs]
        if len(arbs) == 1:
            arb = arbs[0]
            return lambda compute_s, memory_s: arb.run(tenant, compute_s, memory_s)
        return lambda compute_s, memory_s: env.all_of([a.run(tenant, compute_s, memory_s) for a in arbs])

    def log_transfer(name, start_at, end_at, num_bytes, tag):
        log.append(StepRecord(f"link:{name}", start_at, end_at, "transfer", (tag,) if tag is not None else (),
                              0, 1))

    on_transfer = log_transfer if log is not None else None

    def make_frontend(env, on_finish, barrier_at):
        if monolithic:
            engines = [
                make_engine(env, "llm", i, on_finish, barrier_at, media="local", fast_forward=scn.sim.fast_forward)
                for i in range(dep.replicas)
            ]
            return MonolithicFrontend(engines, policies.create("router", router_cfg))

        # Disaggregated. Engines other than the monolithic ones get work from
        # transfers, not only arrivals, so they never fast-forward.
        first = "llm" if "llm" in pools else "prefill"
        enc_pool = pools.get("encoder")  # None: p_d, the prefill workers encode locally
        frontend_box: list = []

        def on_batch_for(i):
            return lambda plan: frontend_box[0].on_batch(i, plan)

        def on_handoff_for(i):
            return lambda seq: frontend_box[0].on_prefilled(i, seq)

        llm = [
            make_engine(env, first, i, on_finish, barrier_at, media="remote" if enc_pool else "local",
                        prefill_only=first == "prefill", on_handoff=on_handoff_for(i) if first == "prefill" else None,
                        on_batch=on_batch_for(i) if enc_pool else None)
            for i in range(pools[first].workers)
        ]
        local_target: list[int] = []
        n_remote = len(llm)
        if "local_prefill" in pools:  # EAServe: after the remote prefill workers
            llm += [make_engine(env, "local_prefill", j, on_finish, barrier_at, media="remote", prefill_only=True,
                                on_handoff=on_handoff_for(n_remote + j), on_batch=on_batch_for(n_remote + j))
                    for j in range(pools["local_prefill"].workers)]
            for ids in placement["encoder"]:
                local_target.append(n_remote + next(j for j, lids in enumerate(placement["local_prefill"])
                                                    if ids[0] in lids))
        decode = []
        if "decode" in pools:
            def finish_for(d):
                def finished(seq):
                    on_finish(seq)
                    frontend_box[0].on_decode_finish(d)
                return finished

            decode = [make_engine(env, "decode", d, finish_for(d), barrier_at, media="remote")
                      for d in range(pools["decode"].workers)]
        def split_for(e):
            """EAServe's dynamic SM split on encoder e's GPUs: per batch the smallest
            SM level that covers it, the rest to local prefill; between batches all
            SMs to local prefill."""
            if sm_table is None:
                return None
            enc = f"encoder{e}"
            local = _worker_name("local_prefill", local_target[e] - n_remote, False)
            arbs = [arbiter(env, g) for g in placement["encoder"][e]]

            def split(batch):
                if batch is None:
                    shares = {enc: 0.0, local: 1.0}
                else:
                    # local prefill keeps a sliver of SMs: a kernel of its cannot stop
                    # mid-flight, and it may start a step while the call runs
                    share = min(sm_table.share_for(len({id(it.seq) for it in batch})), 1.0 - MIN_RUNNING_SM_SHARE)
                    shares = {enc: share, local: round(1.0 - share, 12)}
                for a in arbs:
                    a.set_shares(shares)
            return split

        if enc_pool is None:  # p_d: e_p_d's machinery with no encoders, inboxes or embedding links
            frontend = DisaggregatedFrontend(
                env, encoders=[], llm_engines=llm, inboxes=[], encoder_senders=[],
                router=policies.create("router", router_cfg), streaming=False, decode_engines=decode,
                kv_senders=[egress(env, link, pools[first].tp * pools[first].pp, f"prefill{p}->decode",
                                   dep.max_in_flight_kv_transfers, on_transfer) for p in range(len(llm))],
                kv_bytes_per_token=model.llm.kv_bytes_per_token,
                decode_router=policies.create("router", router_cfg), first_token_at_decode=dep.first_token == "decode")
            frontend_box.append(frontend)
            return frontend

        encoders = [
            EncoderWorker(env, e, f"encoder{e}", costs["encoder"], policies.create("encode_dispatch", enc_pool.dispatch),
                          placement["encoder"][e], (lambda e: lambda batch, s, t: frontend_box[0].on_encoded(e, batch))(e),
                          step_log=log, run=runner(env, f"encoder{e}", placement["encoder"][e]), split=split_for(e),
                          call_overhead_s=enc_pool.call_overhead_s)
            for e in range(enc_pool.workers)
        ]
        enc_senders = [egress(env, link, enc_pool.tp, f"encoder{e}->{first}", enc_pool.max_in_flight_sends,
                              on_transfer) for e in range(enc_pool.workers)]
        prefill_gpus = [pools[first].tp * pools[first].pp] * pools[first].workers
        if "local_prefill" in pools:
            prefill_gpus += [pools["local_prefill"].tp] * pools["local_prefill"].workers
        kv_senders = [egress(env, link, n, f"prefill{p}->decode", dep.max_in_flight_kv_transfers, on_transfer)
                      for p, n in enumerate(prefill_gpus)] if decode else None
        inboxes = [EmbeddingInbox(env, e, dep.embedding_buffer_gib * GIB, hidden_bytes,
                                  admit_when_complete=dep.admission == "after_encode",
                                  resend=lambda enc, items: frontend_box[0].send_embeddings(enc, items))
                   for e in llm]
        frontend = DisaggregatedFrontend(
            env, encoders=encoders, llm_engines=llm, inboxes=inboxes, encoder_senders=enc_senders,
            router=policies.create("router", router_cfg), streaming=dep.admission == "streaming",
            decode_engines=decode, kv_senders=kv_senders, kv_bytes_per_token=model.llm.kv_bytes_per_token,
            decode_router=policies.create("router", router_cfg) if decode else None,
            envelope=enc_pool.envelope_transfer,
            offload=policies.create("offload", dep.local_prefill.offload) if local_target else None,
            local_target=local_target,
        )
        frontend.arbiters = arbiters
        frontend_box.append(frontend)
        return frontend

    simulation = Simulation(requests, make_frontend, rejected=rejected, horizon_s=scn.sim.horizon_s,
                            progress=progress)
    return BuiltRun(scn, model, gpu, placement, memory, requests, rejected, encoder_budget, simulation, log, costs,
                    cost_model_info, admission)

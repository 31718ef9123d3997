"""The one place that turns a validated scenario into runtime objects.

Resolves catalog names, places workers on GPUs and checks their memory
(:mod:`lmmsim.placement`), builds the cost models and the request list,
prepares the policies (:mod:`lmmsim.prepare`) and hands back a ready
:class:`~lmmsim.engine.simulation.Simulation` whose engines, encoders, links
and routers the deployment kind's topology (:mod:`lmmsim.assembly`) assembles.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

from lmmsim import catalog
from lmmsim.assembly import TOPOLOGIES
from lmmsim.assembly.host_stage import host_profile_folder, host_stage
from lmmsim.assembly.parts import Parts
from lmmsim.costmodel.composed import ComposedStepCostModel
from lmmsim.costmodel.encoder_call import encoder_call_costs, encoder_variant
from lmmsim.costmodel.engine_overheads import EngineOverheads
from lmmsim.costmodel.fitted import FittedPredictor
from lmmsim.costmodel.roofline import RooflinePredictor
from lmmsim.engine.closed_loop import ClosedLoop
from lmmsim.engine.simulation import Simulation
from lmmsim.engine.steplog import StepLog
from lmmsim.errors import UserError, choices
from lmmsim.placement import GIB, MemoryPlan, check_encoder_memory, place_workers, plan_llm_memory, shared_gpus
from lmmsim.prepare import prepare
from lmmsim.workload.generator import generate_requests, stream_requests, think_times
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
    host: object = None  # the host preprocessing stage (lmmsim.assembly.host_stage), or None
    sink: object = None  # sim.keep_requests false: where ended requests go (lmmsim.metrics.stream)

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
    _check_expert_parallel(key, pool, model)


def _check_expert_parallel(key: str, pool, model: catalog.ModelSpec) -> None:
    """``ep`` divides ``dp x tp`` and the experts; a dense model has neither (lmmsim.costmodel.moe)."""
    ep, dp, tp = getattr(pool, "ep", 1), getattr(pool, "dp", 1), pool.tp
    moe = model.llm.moe
    if moe is None:
        if ep > 1:
            raise UserError(f"{key}.ep", f"{model.name} is a dense model (no experts); valid: 1")
        if dp > 1:
            raise UserError(f"{key}.dp", f"{model.name} is a dense model: its DP ranks would be independent "
                            f"engines; use more workers/replicas instead; valid: 1")
        return
    valid = [e for e in range(1, dp * tp + 1) if (dp * tp) % e == 0 and moe.num_experts % e == 0]
    if ep not in valid:
        raise UserError(f"{key}.ep", f"must divide dp x tp = {dp * tp} and {model.name}'s {moe.num_experts} "
                        f"experts; valid: {valid}")


def _check_dtype(dep, gpu: catalog.GpuSpec) -> None:
    """FP8 weights need FP8 tensor cores (``GpuSpec.peak_fp8_tflops``)."""
    if getattr(dep, "dtype", "bf16") == "fp8" and gpu.peak_fp8_tflops is None:
        able = sorted(name for name, g in catalog.gpus().items() if g.peak_fp8_tflops is not None)
        raise UserError("deployment.dtype", f"fp8 needs FP8 tensor cores, which {gpu.name} lacks; valid: bf16, "
                        f"or a GPU with them: {', '.join(able)}")


def fit_folder(choice: str, gpu: catalog.GpuSpec, base_dir: Path) -> tuple[Path, str] | None:
    """The fit folder ``hardware.cost_model`` = ``choice`` names, and the key to blame when it
    holds no fit; None for the roofline v0 (also :mod:`lmmsim.provenance`'s input list)."""
    if choice == "roofline" or (choice == "auto" and gpu.fitted_profile is None):
        return None
    if choice == "auto":
        folder = catalog.find(gpu.fitted_profile)
        key = f"{catalog.entry_path('gpu', gpu.name) or f'profiles/gpus/{gpu.name}.yaml'}: fitted_profile"
    else:
        folder = Path(choice) if Path(choice).is_absolute() else base_dir / choice
        key = "hardware.cost_model"
    return folder, key


def make_predictor(choice: str, gpu: catalog.GpuSpec, link, base_dir: Path):
    """The operator predictor a run uses, and a description for its summary."""
    found = fit_folder(choice, gpu, base_dir)
    if found is None:
        return RooflinePredictor(gpu, link), {"kind": "roofline-v0", "gpu": gpu.name}
    folder, key = found
    if choice != "auto" and not Path(choice).is_absolute() and not folder.exists():
        raise UserError(key, f"{folder} not found: a relative cost_model is read from the scenario file's "
                             f"folder ({base_dir}), not the working directory")
    if not (folder / "model.json").exists():
        raise UserError(key, f"{folder} holds no fitted model (model.json); run `lmmsim fit` or use 'roofline'")
    predictor = FittedPredictor(folder, gpu, link)
    shown = f"profiles/{gpu.fitted_profile}" if choice == "auto" else choice  # no machine-specific paths
    info = {"kind": "fitted", "gpu": gpu.name, "fit": shown,
            "fallback_classes": sorted(predictor.fallback_classes)}
    return predictor, info


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


def build(scn, base_dir: Path = Path("."), *, progress=None, step_log: bool = False, requests=None,
          spill_near: Path | None = None) -> BuiltRun:
    """Build a ready-to-run simulation; ``requests`` replaces the generated workload;
    ``spill_near``: the folder a ``sim.keep_requests: false`` run spills into (its output's).

    Steps: resolve the catalog; lay the pools out on GPUs; plan cost models and
    memory; generate (or take) the requests and refuse the impossible ones;
    prepare the policies (:mod:`lmmsim.prepare`); the topology of
    ``deployment.kind`` (:data:`lmmsim.assembly.TOPOLOGIES`) assembles the
    engines when the simulation starts.
    """
    model, gpu, link = _resolve(scn)
    pools, placement, shared, sharing = _layout(scn, model)
    predictor, cost_model_info = make_predictor(scn.hardware.cost_model, gpu, link, base_dir)
    costs, memory = _plan_costs(scn, model, gpu, pools, shared, predictor,
                                host_profile_folder(scn.host.profile, base_dir))
    keep = scn.sim.keep_requests
    requests = _requests(scn, model, base_dir, keep) if requests is None else requests
    max_len = next(iter(memory.values())).max_model_len
    hidden_bytes = model.llm.hidden_size * catalog.BYTES_PER_PARAM_BF16
    disaggregated = scn.deployment if "encoder" in pools else None
    if isinstance(requests, list):
        rejected = refusals(requests, max_len, disaggregated, hidden_bytes)
        largest = _largest_item(requests, rejected)
    else:  # built on demand: one pass, not two
        rejected, largest = _screen(requests, max_len, disaggregated, hidden_bytes)
    encoder_budget = _encoder_budget(scn.policy.batching, largest)
    prepared = prepare(scn, base_dir, pools, costs, requests, simulate_requests)
    if step_log and not keep:
        raise UserError("sim.keep_requests", "a trace (--trace) needs every request at the end; valid: true "
                        "with a trace, or no trace with false")
    log = StepLog() if step_log else None
    sink = None if keep else _sink(scn, spill_near)
    host = host_stage(scn, model, base_dir, pools, log)
    parts = Parts(scn, model, link, pools, placement, shared, sharing, predictor, costs, memory, encoder_budget,
                  prepared.queue_ctx, prepared.sm_table, log, host)
    simulation = Simulation(requests, functools.partial(TOPOLOGIES[scn.deployment.kind], parts), rejected=rejected,
                            horizon_s=scn.sim.horizon_s, progress=progress,
                            make_host=host.make_front if host is not None else None,
                            closed_loop=_closed_loop(scn), sink=sink)
    return BuiltRun(scn, model, gpu, placement, memory, requests, rejected, encoder_budget, simulation, parts.log,
                    costs, cost_model_info, prepared.admission, host, sink)


def _sink(scn, near: Path | None):
    """A bounded-memory run's request sink, writing into a fresh spill folder (lmmsim.metrics.stream)
    inside ``near`` (the system's temporary folder if None)."""
    from lmmsim.metrics.stream import ItlStream, RequestSink, SummarySketch, spill_folder

    folder = spill_folder(near)
    exact = scn.sim.exact_summary
    sketch = None if exact else SummarySketch(scn.slo.ttft_by_modality(), scn.slo.tpot_bound_s)
    return RequestSink(folder / "requests.parquet", bool(getattr(scn.deployment, "prefix_caching", False)),
                       ItlStream(folder, exact), sketch)


def _closed_loop(scn) -> ClosedLoop | None:
    """The closed-loop arrival side of a ``workload.arrival.kind: closed_loop`` run, else None."""
    think = think_times(scn.workload, scn.seed)
    return None if think is None else ClosedLoop(scn.workload.arrival.concurrency, think)


def simulate_requests(scn, base_dir: Path, requests) -> tuple[list, dict]:
    """Run ``scn`` on ``requests``: (engine states in request order, refused ids -> reason).
    What the prepare phase hands a policy that needs simulations of its own (RPS-Serve's profiler)."""
    built = build(scn, Path(base_dir), requests=requests)
    return built.simulation.run().seqs, built.rejected


def _resolve(scn):
    """The scenario's model, GPU and tensor-parallel link from the catalog."""
    model = catalog.get_model(scn.model)
    gpu = catalog.get_gpu(scn.hardware.gpu)
    if scn.hardware.interconnect not in gpu.links:
        raise UserError(
            "hardware.interconnect",
            f"{scn.hardware.interconnect!r} not available on {gpu.name}; valid: {choices(gpu.links)}",
        )
    return model, gpu, gpu.links[scn.hardware.interconnect]


def _layout(scn, model):
    """Pools (with EAServe's local prefill pool), their GPUs, the GPUs two workers share
    and the deployment's sharing config; refuses an encoder pool with nothing to encode."""
    dep = scn.deployment
    pools = dep.pools()
    if "encoder" in pools and model.encoder is None:
        # An encoder pool with nothing to encode would hold GPUs idle: say which kind fits.
        fits = "p_d (prefill + decode pools, KV P->D)" if dep.kind == "e_p_d" else "monolithic or p_d"
        raise UserError("deployment.kind", f"{model.name} has no encoder, so {dep.kind}'s encoder pool would "
                        f"idle; valid for a text-only model: {fits}")
    placement = place_workers(pools, scn.hardware.count, _pool_keys(dep))
    local_pool = dep.local_prefill_pool(placement["encoder"]) if getattr(dep, "local_prefill", None) else None
    if local_pool is not None:  # EAServe: prefill workers on the encoder GPUs
        pools = {**pools, "local_prefill": local_pool}
        placement["local_prefill"] = [tuple(ids) for ids in local_pool.gpu_ids]
    shared = shared_gpus(placement)
    sharing = dep.sharing() if hasattr(dep, "sharing") else getattr(dep, "gpu_sharing", None)
    _check_sharing(shared, sharing, can_share=hasattr(dep, "gpu_sharing"))
    return pools, placement, shared, sharing


def _pool_keys(dep) -> dict:
    """The YAML key each pool's settings live under (monolithic: the deployment itself)."""
    return {"llm": "deployment"} if dep.kind == "monolithic" else {}


def _plan_costs(scn, model, gpu, pools, shared, predictor, host_folder):
    """Step cost models and memory plans of every pool; raises if a worker does not fit.
    ``host_folder``: the host profile, whose eager-layer timings price encoder calls."""
    dep, batching = scn.deployment, scn.policy.batching
    keys = _pool_keys(dep)
    _check_dtype(dep, gpu)
    costs: dict = {}
    memory: dict[str, MemoryPlan] = {}
    # p_d: the prefill workers encode their requests' media themselves (no encoder pool)
    local_encode = {"llm"} if dep.kind == "monolithic" else {"prefill"} if "encoder" not in pools else set()
    sharing_workers = {(pn, w) for holders in shared.values() for pn, w in holders}
    encoder_shares = any(pn == "encoder" for pn, _ in sharing_workers)
    for name in LLM_POOLS:
        pool = pools.get(name)
        if pool is None:
            continue
        _check_llm_pool(name, keys.get(name, f"deployment.{name}"), pool, model)
        if dep.prefix_caching and getattr(pool, "dp", 1) > 1:  # one engine stands for the ranks
            raise UserError("deployment.prefix_caching", "not modelled with dp > 1: each vLLM DP rank has its "
                            "own prefix cache, which one engine standing for the ranks would pool; valid: false, "
                            "or dp 1")
        costs[name] = ComposedStepCostModel(model, gpu, pool.tp, predictor, overheads=EngineOverheads.from_config(
            scn.engine, max_running=batching.max_running, predictor=predictor), **_llm_numerics(dep, pool))
        receives_embeddings = "encoder" in pools and name in ("llm", "prefill", "local_prefill")
        buffer = dep.embedding_buffer_gib * GIB / pool.gpus_per_worker if receives_embeddings else 0.0  # dp x tp x pp
        if encoder_shares and any((name, w) in sharing_workers for w in range(pool.workers)):
            # an encoder co-located on this pool's GPUs keeps its weights there
            buffer += model.encoder.num_params * catalog.BYTES_PER_PARAM_BF16 / pools["encoder"].tp
        memory[name] = plan_llm_memory(
            dep, batching, model, gpu, tp=pool.tp, pp=pool.pp,
            kv_bytes_per_token_tp=costs[name].kv_bytes_per_token_per_gpu,
            include_encoder=name in local_encode, extra_bytes_per_gpu=buffer, pool=name, dp=pool.dp, ep=pool.ep,
        )
    if "encoder" in pools:
        check_encoder_memory(dep, model, gpu, pools["encoder"].tp)
        costs["encoder"] = ComposedStepCostModel(model, gpu, pools["encoder"].tp, predictor, encoder_only=True)
    for name in local_encode | ({"encoder"} & set(pools)):
        if name in costs:
            costs[name].encoder_call = encoder_call_costs(model, gpu, pools[name].tp, scn.engine, host_folder,
                                                          scn.host.cpu_speed, encoder_variant(model))
    return costs, memory


def _llm_numerics(dep, pool) -> dict:
    """Cost-model settings of an LLM pool: expert / data parallelism, FP8, the MoE routing model and
    the DP ranks' token exchange."""
    return {"ep": pool.ep, "dp": pool.dp, "dtype": dep.dtype, "kv_cache_dtype": dep.kv_cache_dtype,
            "routing": dep.moe_routing, "all2all": dep.moe_all2all}


def _requests(scn, model, base_dir, keep: bool = True) -> list[Request]:
    """The scenario's requests: a list, or built on demand when requests are not kept."""
    make = generate_requests if keep else stream_requests
    requests = make(scn.workload, model, scn.seed, base_dir)
    if not requests:  # a run of nothing has no metrics; say so rather than report NaNs
        w = scn.workload
        why = (f"no arrival before duration_s {w.duration_s:g}" if w.duration_s is not None
               else "the trace holds no request")
        raise UserError("workload", f"generates no requests ({why}); lengthen duration_s or check the trace")
    return requests


def _encoder_budget(batching, largest_item: int) -> int:
    """Encoder tokens per step: the configured budget (default the token budget), raised
    to the largest media item an admitted request holds, as vLLM does."""
    return max(getattr(batching, "encoder_budget_tokens", None) or batching.token_budget, largest_item)


def _largest_item(requests, rejected) -> int:
    """The largest media item (LLM tokens) of the requests not refused."""
    return max((seg.length for r in requests if r.request_id not in rejected for seg in r.media_segments), default=0)


def _screen(requests, max_len: int, disaggregated, hidden_bytes: float) -> tuple[dict[int, str], int]:
    """:func:`refusals` and :func:`_largest_item` in one pass over requests built on demand."""
    rejected: dict[int, str] = {}
    largest = 0
    for r in requests:
        one = refusals((r,), max_len, disaggregated, hidden_bytes)
        if one:
            rejected.update(one)
        elif r.media_segments:
            largest = max(largest, _largest_item((r,), rejected))
    return rejected, largest

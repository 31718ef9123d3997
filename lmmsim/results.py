"""Run a scenario and write the results contract.

``DIR/requests.parquet`` (one row per request), ``DIR/summary.json`` and
``DIR/scenario.resolved.yaml``; ``DIR/requests.csv`` too with ``--format csv``.
An existing non-empty ``DIR`` is written into only with ``force``, and then only
lmmsim's own files there are replaced (:mod:`lmmsim.outputs`).

With ``sim.keep_requests: false`` the run writes requests.parquet as it goes, into a
temporary spill folder (:mod:`lmmsim.metrics.stream`; rows in the order requests ended;
beside the output folder, :func:`spill_place`): :class:`RunOutput` then holds its path
instead of the frame, and :func:`write_results` links it into ``DIR`` (copies it across
file systems). The spill folder goes with the run's sink (``built.sink``).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from lmmsim.build import build
from lmmsim.costmodel.fitcache import save_predictions
from lmmsim.costmodel.fitted import extrapolated_share
from lmmsim.engine.media_cache import combined_stats
from lmmsim.outputs import OutputDir, atomic_path
from lmmsim.provenance import describe  # version, git revision, hashes of the inputs read
from lmmsim.metrics.itl import token_gaps
from lmmsim.metrics.records import requests_frame
from lmmsim.metrics.summary import clean_json, summarize
from lmmsim.scenario import dump_scenario
from lmmsim.tracing import write_chrome_trace


@dataclass
class RunOutput:
    requests: pd.DataFrame | None  # None with sim.keep_requests false: see requests_path
    summary: dict
    built: object
    requests_path: Path | None = None  # sim.keep_requests false: the written requests.parquet


def run_scenario(scn, base_dir: Path = Path("."), *, progress=None, requests=None, trace: bool = False,
                 spill_near: Path | None = None) -> RunOutput:
    """Simulate ``scn`` and compute its per-request frame and summary
    (``trace``: also keep every step for a timeline, in ``built.step_log``; ``spill_near``:
    where a ``sim.keep_requests: false`` run writes its requests as it goes, see :func:`spill_place`)."""
    built = build(scn, base_dir, progress=progress, requests=requests, step_log=trace, spill_near=spill_near)
    try:
        result = built.simulation.run()
    except BaseException:
        if built.sink is not None:  # a stuck or interrupted run leaves no spill folder behind
            shutil.rmtree(built.sink.path.parent, ignore_errors=True)
        raise
    if built.sink is not None:
        out = _bounded_output(scn, base_dir, built, result)
    else:
        gaps = token_gaps(result.seqs)
        df = requests_frame(result.seqs, gaps)
        summary = summarize(df, itl=gaps, **_summary_inputs(scn, built, result))
        out = RunOutput(df, _complete_summary(summary, scn, base_dir, built, result), built)
    save_predictions()  # with $LMMSIM_PREDICTION_CACHE: what this run evaluated (its summary's too)
    return out


def _bounded_output(scn, base_dir: Path, built, result) -> RunOutput:
    """A ``sim.keep_requests: false`` run: its summary from the written file (exact) or from
    the sketches taken as requests ended (lmmsim.metrics.stream)."""
    from lmmsim.metrics.stream import FileColumns
    from lmmsim.metrics.summary import summarize_columns

    sink = built.sink
    inputs = _summary_inputs(scn, built, result)
    if scn.sim.exact_summary:
        columns = FileColumns(sink.path)
        summary = summarize_columns(columns, columns.names, columns.num_not_arrived, itl=sink.itl, **inputs)
        del columns
    else:
        summary = sink.sketch.summary(itl=sink.itl, **inputs)
    return RunOutput(None, _complete_summary(summary, scn, base_dir, built, result), built, requests_path=sink.path)


def _summary_inputs(scn, built, result) -> dict:
    """What the summary needs besides the requests: GPU busy time, SLOs, engine counters."""
    busy = [0.0] * built.num_gpus
    arbiters = getattr(result.frontend, "arbiters", {})
    for worker in result.frontend.workers:
        for gpu_id, seconds in worker.gpu_busy_s().items():
            if gpu_id not in arbiters:
                busy[gpu_id] += seconds
    for gpu_id, arbiter in arbiters.items():  # shared GPUs: busy when any tenant runs
        busy[gpu_id] = arbiter.busy_s
    engines = result.frontend.llm_engines
    return dict(gpu_busy_s=busy, end_at=result.end_at, ttft_slo=scn.slo.ttft_by_modality(),
                tpot_slo=scn.slo.tpot_bound_s, num_preemptions=sum(e.scheduler.num_preemptions for e in engines),
                prefix_cache_evictions=sum(getattr(e.scheduler.pool, "evictions", 0) for e in engines))


def _complete_summary(summary: dict, scn, base_dir: Path, built, result) -> dict:
    """The summary's run blocks: simulator counters, deployment, caches, costs, host, admission."""
    engines = result.frontend.llm_engines
    summary["sim_wall_time_s"] = result.wall_s
    summary["sim_events"] = result.num_events
    summary["sim_steps"] = sum(e.num_steps for e in engines)
    summary["sim_end_at_s"] = result.end_at
    summary["deployment"] = deployment_summary(built, result.frontend)
    caches = encoder_caches(result.frontend)
    if caches:
        summary["encoder_cache"] = combined_stats(caches)
    summary["cost_model"] = {**built.cost_model, "extrapolated_share": _extrapolated_share(built)}
    summary["engine_costs"] = engine_costs_summary(built)
    if built.host is not None:
        summary["host"] = host_summary(built.host, result.end_at)
    if built.admission is not None:  # RPS-Serve: how requests were classified
        queues = [e.scheduler.queue for e in result.frontend.llm_engines if hasattr(e.scheduler.queue, "class_counts")]
        counts = [sum(c) for c in zip(*(q.class_counts() for q in queues))] if queues else []
        summary["admission"] = {**built.admission.report, "requests_per_class": counts}
    summary["provenance"] = describe(scn, base_dir)
    return clean_json(summary)


def _parquet_to_csv(source: Path, target: Path) -> None:
    """requests.csv from a written requests.parquet, one row group at a time."""
    import pyarrow.parquet as pq

    file = pq.ParquetFile(source)
    with open(target, "w", newline="") as out:
        for g in range(file.num_row_groups):
            file.read_row_group(g).to_pandas().to_csv(out, index=False, header=g == 0)


def host_summary(stage, end_at: float) -> dict:
    """The host preprocessing stage: where it runs, what prices it, and per pool its
    processes, their busy share over the run and how long jobs queued for one (seconds).
    With ``encode_worker`` placement, ``share_of_encode_worker_time``: host seconds over
    host + GPU seconds of the encoder workers."""
    out = {**stage.describe(), "api_server": _pool_summary(stage.front, end_at)}
    if stage.encoder_pools:
        pools = [pool for _, pool in stage.encoder_pools]
        host_s = sum(p.busy_s for p in pools)
        gpu_s = sum(w.busy_s for w, _ in stage.encoder_pools)
        out["encode_worker"] = {**_pool_summary(pools, end_at),
                                "share_of_encode_worker_time": host_s / (host_s + gpu_s) if host_s + gpu_s else None}
    return out


def _pool_summary(pools, end_at: float) -> dict:
    pools = pools if isinstance(pools, list) else [pools]
    workers = sum(p.workers for p in pools)
    # numpy, not a list of every wait: a bounded-memory run's pools keep them in arrays
    waits = pd.Series(np.concatenate([np.asarray(p.wait_s, dtype=float) for p in pools]), dtype=float)
    return {"workers": workers,
            "busy_share": sum(p.busy_s for p in pools) / (workers * end_at) if end_at > 0 else None,
            "wait_s": {"mean": waits.mean() if len(waits) else None,
                       "p99": waits.quantile(0.99) if len(waits) else None}}


def encoder_caches(frontend) -> list:
    """The encoder caches of a run's workers (lmmsim.engine.media_cache), one per engine
    that runs the encoder: replicas / prefill workers encoding locally, encoder workers."""
    caches = []
    for worker in frontend.workers:
        owner = getattr(worker, "scheduler", worker)
        if getattr(owner, "encoder_cache", None) is not None:
            caches.append(owner.encoder_cache)
    return caches


def engine_costs_summary(built) -> dict:
    """The engine terms in force (lmmsim.costmodel.engine_overheads) and, per LLM pool, the
    named breakdown of a batch-1 decode step (1,000 tokens of context) in ms."""
    out: dict = {}
    for name in built.memory:
        cost = built.costs.get(name)
        if cost is None or not hasattr(cost, "llm_step_breakdown"):
            continue
        out.setdefault("terms", cost.overheads.describe())
        out.setdefault("decode_b1_ctx1000_ms", {})[name] = {
            k: v * 1e3 for k, v in cost.llm_step_breakdown((), 1, 1000, 1).items()}
    return out


def _extrapolated_share(built) -> dict[str, float] | None:
    """``cost_model.extrapolated_share``: per operator class, the share of the predicted
    time that came from calls outside the fitted data, weighted by predicted time over
    the distinct shapes the operator predictor evaluated (not by how often they were
    used; :class:`~lmmsim.costmodel.fitted.FittedPredictor`, "Extrapolated share").
    Classes without data on this GPU count as 1. None for a roofline v0 run."""
    return extrapolated_share(getattr(c, "predictor", None) for c in built.costs.values())


#: What ``lmmsim validate`` predicts to estimate the extrapolated share without running:
#: the first PROBE_REQUESTS requests, prompts cut in PROBE_CHUNK-token chunks (the default
#: chunked-prefill token budget), and decode batches of PROBE_BATCHES sequences.
PROBE_REQUESTS = 256
PROBE_CHUNK = 2048
PROBE_BATCHES = (1, 8, 32, 128)


def probe_extrapolated_share(built) -> dict[str, float] | None:
    """The extrapolated share (:func:`_extrapolated_share`) of a typical step set, cheap
    enough for ``lmmsim validate``: through every cost model of the run, each of the first
    :data:`PROBE_REQUESTS` requests' media items encoded alone, its prompt prefilled in
    :data:`PROBE_CHUNK`-token chunks (one chunk per step), and decode steps of
    :data:`PROBE_BATCHES` sequences at the median prompt length + 128 tokens. Only the
    predictor's counters move (nothing is simulated); the run's own figure, written to
    summary.json, weighs what the run really asked for."""
    requests = list(built.requests[:PROBE_REQUESTS])
    prompts = sorted(r.num_prompt_tokens for r in requests) or [PROBE_CHUNK]
    context = prompts[len(prompts) // 2] + 128
    has_encoder_pool = "encoder" in built.costs
    for name, cost in built.costs.items():
        if getattr(cost, "predictor", None) is None:
            continue
        # Media are encoded by the encoder pool when there is one, else by the LLM pools.
        if cost.model.encoder is not None and (name == "encoder" or not has_encoder_pool):
            for r in requests:
                for seg in r.media_segments:
                    cost.encode_s([seg.item.encoder])
        if name == "encoder":
            continue
        for n in sorted(set(prompts)):
            for start in range(0, n, PROBE_CHUNK):
                chunk = min(PROBE_CHUNK, n - start)
                cost.llm_step_s([(chunk, start + chunk)], 0, 0, 1)
        for b in PROBE_BATCHES:
            cost.llm_step_s([], b, b * context, b)
    return _extrapolated_share(built)


def deployment_summary(built, frontend) -> dict:
    """Per pool: its workers' GPUs and memory plan, and what the run used."""
    pools: dict = {}
    for name, workers in built.placement.items():
        entry: dict = {"workers": len(workers), "gpu_ids": [list(ids) for ids in workers]}
        plan = built.memory.get(name)
        if plan is not None:
            entry.update({
                "weights_gib_per_gpu": plan.weight_bytes / 2**30,
                "activation_reserve_gib_per_gpu": plan.activation_bytes / 2**30,
                "kv_cache_gib_per_gpu": plan.kv_bytes / 2**30,
                "kv_blocks_per_worker": plan.num_blocks,
                "kv_capacity_tokens_per_worker": plan.kv_capacity_tokens,
                "non_torch_gib_per_gpu": plan.non_torch_bytes / 2**30,
            })
        pools[name] = entry
    engines = frontend.llm_engines
    for name in ("llm", "prefill", "decode"):
        if name in pools:
            mine = [e for e in engines if e.name.startswith(("replica", name))]
            pools[name]["peak_kv_blocks_used"] = [e.scheduler.pool.peak_used for e in mine]
    encoders = getattr(frontend, "encoders", [])
    if encoders:
        pools["encoder"]["batches"] = [e.num_batches for e in encoders]
        pools["encoder"]["items"] = [e.num_items for e in encoders]
    out = {"kind": built.scenario.deployment.kind, "max_model_len": built.max_model_len,
           "encoder_budget_tokens": built.encoder_budget, "pools": pools}
    if hasattr(frontend, "num_kv_transfers"):
        out["num_kv_transfers"] = frontend.num_kv_transfers
        out["peak_embedding_buffer_gib"] = [i.buffer.peak / 2**30 for i in frontend.inboxes]
    return out


#: Every file a run may write into its folder (the run contract and its extras).
RUN_FILES = ("requests.parquet", "summary.json", "scenario.resolved.yaml", "requests.csv",
             "admission_profile.csv", "trace.json")


def spill_place(out: Path) -> Path:
    """Where a run bound for ``out`` spills (``sim.keep_requests: false``): beside ``out``, in
    its nearest existing ancestor folder. Not the system's temporary folder: a 10M-request run
    writes gigabytes there, often a RAM-backed tmpfs, and on the same file system as ``out``
    the finished requests.parquet is linked into place instead of copied."""
    place = Path(out).resolve().parent
    while not place.is_dir():
        place = place.parent
    return place


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        target.unlink(missing_ok=True)
        os.link(source, target)
    except OSError:  # another file system, or none that links
        shutil.copyfile(source, target)


def prepare_output_dir(out: Path, force: bool) -> OutputDir:
    """Check ``out`` before simulating (``lmmsim.outputs``: without ``force`` it must be
    absent or empty; with it, no user file may sit where a run file goes)."""
    folder = OutputDir(out, force=force)
    folder.check(*RUN_FILES)
    return folder


def write_results(run: RunOutput, scn, out: Path, *, force: bool = False, csv: bool = False) -> None:
    """Write the run contract into ``out``, each file to a temporary sibling renamed
    into place. Files an earlier run wrote there and this one does not (a trace, a
    CSV) are removed; nothing else in ``out`` is touched."""
    folder = prepare_output_dir(out, force)

    def put(name: str, write) -> None:
        with atomic_path(folder.file(name)) as tmp:
            write(tmp)

    if run.requests is None:  # written during the run (sim.keep_requests false)
        put("requests.parquet", lambda p: _link_or_copy(run.requests_path, p))
        if csv:
            put("requests.csv", lambda p: _parquet_to_csv(run.requests_path, p))
    else:
        put("requests.parquet", lambda p: run.requests.to_parquet(p, index=False))
        if csv:
            put("requests.csv", lambda p: run.requests.to_csv(p, index=False))
    put("summary.json", lambda p: p.write_text(json.dumps(run.summary, indent=2) + "\n"))
    put("scenario.resolved.yaml", lambda p: p.write_text(dump_scenario(scn)))
    admission = getattr(run.built, "admission", None)
    if admission is not None and admission.profile is not None:  # the Workload Profiler's runs
        put("admission_profile.csv", lambda p: admission.profile.to_csv(p, index=False))
    if run.built.step_log is not None:
        put("trace.json", lambda p: write_chrome_trace(run.built.step_log, p, title=scn.name,
                                                         requests=run.requests))
    folder.remove_unclaimed()

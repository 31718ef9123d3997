"""The prepare phase: policy state computed from the scenario's own data, before assembly.

A policy that needs more than its config learns it here, once per run:
RPS-Serve's queue (its profiler's isolated runs, impact estimator and
classifier; or EDF deadlines from the SLOs) and EAServe's SM table (probed
on the encoder's cost model for the workload's most common item). The
simulations RPS-Serve's profiler needs come through ``simulate``
(:func:`lmmsim.build.simulate_requests`), so no policy package imports the
builder that prepares it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from lmmsim.errors import UserError
from lmmsim.policies.batching import SchedulableTokensConfig
from lmmsim.policies.rps_queue import RpsQueueConfig
from lmmsim.rps.admission import admission_model, edf_deadline


@dataclass
class Prepared:
    queue_ctx: dict = field(default_factory=dict)  # keyword arguments of the queue policy
    admission: object = None  # RPS-Serve's fitted profile/estimator/classifier (lmmsim.rps.admission)
    sm_table: object = None  # EAServe's SM table, or None


def prepare_queue(scn, base_dir, simulate) -> tuple[dict, object]:
    """The queue policy's prepared arguments, and RPS-Serve's admission model (or None)."""
    queue_cfg, batching = scn.policy.queue, scn.policy.batching
    if not isinstance(queue_cfg, RpsQueueConfig):  # a registered subclass gets the classifier too
        return {}, None
    if isinstance(batching, SchedulableTokensConfig):  # before profiling: it would fail only after it
        raise UserError("policy.queue.kind", "rps orders requests by priority; use it with batching "
                        "chunked_prefill or token_throttling, not schedulable_tokens")
    if queue_cfg.priority == "edf":
        return {"deadline": edf_deadline(scn)}, None
    admission = admission_model(scn, base_dir, simulate)
    return {"classify": admission.classify}, admission


def prepare_sm_table(dep, pools: dict, costs: dict, requests):
    """EAServe's SM table (easerve.txt 3.4) when local prefill partitions SMs dynamically, else None.

    The encoder cost of the workload's most common media item, probed at
    ``sm_levels`` for batches of 1 to the dispatch bound (requests; 16 without
    one) items. Only the GPU work is probed: host time of a call (copies, kernel
    issue, ``call_overhead_s``) does not depend on the SM share, and counting it
    would flatten every level's latency towards the same constant, so that the
    table would hand encode the smallest share whatever its kernels need.
    """
    lp = getattr(dep, "local_prefill", None)
    if lp is None or lp.sm_partitioning != "dynamic":
        return None
    from lmmsim.easerve.sm_table import build_sm_table, encode_latency_from_parts, parts_from_cost_model

    works = Counter(seg.item.encoder for r in requests for seg in r.media_segments)
    if not works:
        return None
    enc_pool = pools["encoder"]
    work = works.most_common(1)[0][0]
    max_batch = getattr(enc_pool.dispatch, "max_batch", None) or 16
    latency = encode_latency_from_parts(parts_from_cost_model(costs["encoder"], work))
    return build_sm_table(latency, levels=lp.sm_levels, max_batch=max_batch, tolerance=lp.sm_tolerance)


def prepare(scn, base_dir, pools: dict, costs: dict, requests, simulate) -> Prepared:
    queue_ctx, admission = prepare_queue(scn, base_dir, simulate)
    return Prepared(queue_ctx, admission, prepare_sm_table(scn.deployment, pools, costs, requests))

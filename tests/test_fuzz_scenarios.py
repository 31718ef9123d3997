"""Property-based fuzz test of whole simulation runs, through the public Python API.

Hypothesis draws small *valid* scenarios -- every system preset, every
deployment kind (monolithic, e_pd, e_p_d, p_d, with or without a preset under
it), every catalog model and GPU, small mixed text/image/video/audio
workloads, poisson/gamma/deterministic arrivals, queue/batching/dispatch
policies, both admission modes, small embedding buffers, small token
budgets, tight KV caches and optional horizons -- runs each with
``validate_scenario`` + ``run_scenario`` and checks properties of the result
(:func:`violations`). A scenario lmmsim rightly refuses (a ``UserError`` from
validation or from building) is rejected, not failed; the strategies size
GPU counts and GPUs to the model so that most draws build.

Properties checked on every run (each violation is reported with the
scenario YAML, so a failure can be replayed with ``lmmsim run``):

* status: each request is ``finished``; or ``rejected`` with a non-empty
  ``reject_reason`` (every request longer than max_model_len must be);
  or -- only with ``sim.horizon_s`` -- ``unfinished`` if it arrived before
  the horizon, ``not_arrived`` if it arrived after it. A run whose event
  queue empties with requests stuck (``StuckRunError``) is a failure.
* time order of finished requests (see :func:`_time_order` for which
  columns may be NaN and how admission changes the order);
* token conservation: prompt = text + media tokens, the frame matches the
  generated requests, finished requests generated exactly
  ``num_output_tokens`` and computed ``prompt + output - 1`` tokens, per-row
  preemptions add up to the summary's, summary counts add up;
* KV: every LLM engine's peak block use <= its pool's capacity (which is
  the memory plan's); when nothing is unfinished every pool is back to 0
  blocks used, every queue/running list/encoder queue/KV-wait list is
  empty, every embedding buffer is back to 0 bytes and its awaiting count
  to 0, the encoders encoded exactly the finished requests' media items
  (once each) and e_p_d made one KV transfer per finished request with more
  than one output token;
* steps (the run's step log): every busy interval lies inside the run, an
  LLM step carries 1..token_budget tokens and at most max_running
  sequences, and the intervals of one engine / pipeline stage / encoder
  never overlap;
* determinism: a sample of the examples (and a few fixed scenarios) is run
  twice, the second time without the step log; requests frames and
  summaries must be identical.

Generation leans on the corners: hypothesis ``target()`` steers towards
preemptions, evicted embeddings and a full KV cache (:func:`pressure`), and
a quarter of the runs get a KV cache of only 1-3 x max_model_len tokens
(:func:`tighten_kv`).

Knobs (environment): ``LMMSIM_FUZZ_EXAMPLES`` (default 50),
``LMMSIM_FUZZ_RANDOM=1`` to drop ``derandomize`` (then ``--hypothesis-seed``
picks the run), e.g.::

    LMMSIM_FUZZ_EXAMPLES=1000 LMMSIM_FUZZ_RANDOM=1 \\
        python -m pytest tests/test_fuzz_scenarios.py -p no:xdist -q --hypothesis-seed=7
"""

from __future__ import annotations

import copy
import functools
import math
import os
import traceback
from pathlib import Path

import pandas as pd
import pytest
import yaml
from hypothesis import HealthCheck, given, note, reject, settings, target
from hypothesis import strategies as st
from pydantic import TypeAdapter

from lmmsim import catalog
from lmmsim.build import build
from lmmsim.deployments import DeploymentConfig
from lmmsim.errors import StuckRunError, UserError
from lmmsim.results import run_scenario
from lmmsim.scenario import validate_scenario
from lmmsim.systems import get_system, systems

BASE_DIR = Path(__file__).resolve().parent.parent
GIB = 2**30
NUM_EXAMPLES = int(os.environ.get("LMMSIM_FUZZ_EXAMPLES", "50"))
DERANDOMIZE = os.environ.get("LMMSIM_FUZZ_RANDOM", "0") in ("", "0")

MODELS = catalog.models()
GPUS = catalog.gpus()
SYSTEM_NAMES = sorted(systems())
MM_MODELS = sorted(n for n, m in MODELS.items() if m.encoder is not None)
ALL_MODELS = sorted(MODELS)
STATUSES = {"finished", "rejected", "unfinished", "not_arrived"}


# ============================================================ sizing helpers
def _pow2_ceil(x: float) -> int:
    p = 1
    while p < x:
        p *= 2
    return p


def llm_group_min(model, gpu, max_len: int) -> int:
    """Smallest power-of-two tp x pp whose per-GPU share of the weights and of a
    ``max_len`` KV cache leaves room for runtime, activations and embedding
    buffers (approximate; a miss is a UserError, which is rejected)."""
    usable = gpu.memory_bytes * 0.9 - 5.0 * GIB
    if usable <= 0:
        return 1 << 10
    need = model.weight_bytes + max_len * model.llm.kv_bytes_per_token
    return _pow2_ceil(need / usable)


def valid_tp(model, tp: int) -> bool:
    return model.llm.num_heads % tp == 0


def splits(model, g: int) -> list[tuple[int, int]]:
    """(tp, pp) with tp x pp == g that the model accepts."""
    out = []
    tp = 1
    while tp <= g:
        pp = g // tp
        if valid_tp(model, tp) and pp <= model.llm.num_layers:
            out.append((tp, pp))
        tp *= 2
    return out


_DEP = TypeAdapter(DeploymentConfig)


@functools.lru_cache(maxsize=None)
def preset_counts(system: str, model_name: str, g: int) -> tuple[int, ...]:
    """``hardware.count`` values (smallest first) at which ``system``'s preset
    deployment gives every LLM worker >= g GPUs with a tp the model accepts."""
    model = MODELS[model_name]
    out = []
    for n in range(1, 11):
        dep = _DEP.validate_python(get_system(system).defaults_for(n)["deployment"])
        pools = dep.pools()
        if sum(p.workers * p.gpus_per_worker for p in pools.values()) > n:
            continue
        llm_pools = [p for name, p in pools.items() if name != "encoder"]
        lp = getattr(dep, "local_prefill", None)
        groups = [(p.tp, p.pp) for p in llm_pools] + ([(lp.tp, 1)] if lp is not None else [])
        if all(tp * pp >= g and valid_tp(model, tp) and pp <= model.llm.num_layers for tp, pp in groups):
            out.append(n)
    return tuple(out[:2])


def preset_kind(system: str) -> str:
    return get_system(system).defaults_for(4)["deployment"]["kind"]


def preset_queue_kind(system: str) -> str:
    return get_system(system).defaults_for(4)["policy"]["queue"]["kind"]


# ================================================================ strategies
def weighted(*pairs):
    """sampled_from with integer weights: weighted((x, 3), (y, 1))."""
    return st.sampled_from([x for x, w in pairs for _ in range(w)])


@st.composite
def length_dist(draw, values: list[int]):
    """A length distribution over the scale of ``values`` (a few typical
    lengths; hypothesis favours a list's first element, so it leads)."""
    kind = draw(st.sampled_from(["fixed", "uniform", "lognormal"]))
    if kind == "fixed":
        return {"kind": "fixed", "value": draw(st.sampled_from(values))}
    if kind == "uniform":
        a, b = sorted((draw(st.sampled_from(values)), draw(st.sampled_from(values))))
        return {"kind": "uniform", "low": a, "high": b}
    return {"kind": "lognormal", "mean": draw(st.sampled_from(values)), "sigma": draw(st.sampled_from([0.2, 0.8])),
            "max": max(values)}


TEXT_TOKENS = [300, 1, 40, 1000, 2500]
OUTPUT_TOKENS = [64, 1, 8, 200]
AUDIO_SECONDS = [5, 1, 20, 45]


@st.composite
def mix_class(draw, name: str, modality: str):
    cls = {"name": name, "weight": draw(st.sampled_from([1, 2, 5])), "text_tokens": draw(length_dist(TEXT_TOKENS))}
    if modality == "image":
        cls["images"] = {"count": draw(weighted((1, 3), (2, 1), (3, 1))),
                         "width": draw(st.sampled_from([448, 28, 224, 800, 1024])),
                         "height": draw(st.sampled_from([448, 28, 224, 600, 1024]))}
    elif modality == "video":
        cls["video"] = {"frames": draw(st.sampled_from([8, 1, 2, 4, 16])),
                        "width": draw(st.sampled_from([224, 112, 384])),
                        "height": draw(st.sampled_from([224, 112, 384]))}
    elif modality == "audio":
        cls["audio"] = {"seconds": draw(st.one_of(st.sampled_from([5.0, 0.5, 31.0, 60.0]),
                                                  length_dist(AUDIO_SECONDS)))}
    if modality != "text":
        cls["layout"] = draw(st.sampled_from(["media_first", "text_first", "interleaved"]))
    if draw(st.integers(0, 3)) == 0:
        cls["output_tokens"] = draw(length_dist(OUTPUT_TOKENS))
    return cls


TRACE = BASE_DIR / "scenarios" / "traces" / "quickstart-100.jsonl"  # text, image and video requests


@st.composite
def workload(draw, model):
    n = draw(st.sampled_from([20, 40, 8, 1, 3, 12, 30, 2, 5]))
    if {"image", "video"} <= set(model.modalities) and TRACE.exists() and draw(st.integers(0, 7)) == 0:
        return {"num_requests": n, "arrival": {"kind": "trace", "path": str(TRACE),
                                               "speedup": draw(st.sampled_from([1.0, 10.0, 100.0]))}}
    rate = draw(st.sampled_from([32.0, 200.0, 8.0, 2.0, 0.5]))
    kind = draw(st.sampled_from(["poisson", "gamma", "deterministic"]))
    arrival = {"kind": kind, "rate": rate}
    if kind == "gamma":
        arrival["cv"] = draw(st.sampled_from([3.0, 0.5, 1.0]))
    modalities = draw(st.lists(st.sampled_from(model.modalities[::-1]), min_size=1, max_size=3))
    mix = [draw(mix_class(f"c{i}_{m}", m)) for i, m in enumerate(modalities)]
    size = {"num_requests": n}
    if draw(st.integers(0, 5)) == 0:  # a duration instead: about n arrivals, possibly none
        size = {"duration_s": round(n / rate, 6)}
    return {**size, "arrival": arrival, "mix": mix, "output_tokens": draw(length_dist(OUTPUT_TOKENS))}


@st.composite
def encode_dispatch(draw):
    kind = draw(st.sampled_from(["per_request", "fixed", "embedding_batch", "queue_length", "poisson_gap"]))
    if kind == "per_request":
        return {"kind": kind}
    if kind == "fixed":
        return {"kind": kind, "max_items": draw(st.integers(1, 8)),
                "max_tokens": draw(st.sampled_from([None, 64, 1000, 5000])),
                "timeout_s": draw(st.sampled_from([0.0, 0.002, 0.02]))}
    if kind == "embedding_batch":
        return {"kind": kind, "embedding_batch_tokens": draw(st.sampled_from([None, 1, 300, 1024, 4096]))}
    if kind == "queue_length":
        lo = draw(st.integers(1, 4))
        return {"kind": kind, "min_requests": lo, "max_batch": draw(st.sampled_from([None, lo, lo + 3])),
                "max_age_s": draw(st.sampled_from([0.0, 0.01, 0.05]))}
    return {"kind": kind, "max_batch": draw(st.integers(1, 10)), "quantile": draw(st.sampled_from([0.5, 0.8])),
            "max_age_s": draw(st.sampled_from([0.0, 0.01, 0.05]))}


@st.composite
def encoder_pool(draw, workers: int | None = None, tp: int | None = None):
    return {"workers": workers or draw(weighted((1, 3), (2, 1))), "tp": tp or draw(weighted((1, 3), (2, 1))),
            "dispatch": draw(encode_dispatch()),
            "max_in_flight_sends": draw(st.sampled_from([None, 1, 4])),
            "envelope_transfer": draw(st.booleans()),
            "call_overhead_s": draw(weighted((0.0, 3), (0.001, 1)))}


@st.composite
def llm_pool(draw, model, g: int, workers: int | None = None):
    tp, pp = draw(st.sampled_from(splits(model, g)))
    pool = {"workers": workers or draw(weighted((1, 3), (2, 1))), "tp": tp, "pp": pp}
    if pp > 1:
        pool["chunk_pipelining"] = draw(st.booleans())
    return pool


def _gpus(pool: dict, per_worker: int) -> int:
    return pool["workers"] * per_worker


@st.composite
def custom_deployment(draw, kind: str, model, g: int):
    """A deployment of ``kind`` written out in full; returns (mapping, hardware.count)."""
    if kind == "monolithic":
        tp, pp = draw(st.sampled_from(splits(model, g)))
        dep = {"kind": kind, "replicas": draw(weighted((1, 3), (2, 1))), "tp": tp, "pp": pp}
        if pp > 1:
            dep["chunk_pipelining"] = draw(st.booleans())
        return dep, dep["replicas"] * g
    if kind == "e_pd":
        if draw(st.integers(0, 4)) == 0:  # encoder co-located on the LLM worker's GPU 0
            enc = draw(encoder_pool(workers=1, tp=1))
            llm = draw(llm_pool(model, g, workers=1))
            enc["gpu_ids"] = [[0]]
            llm["gpu_ids"] = [list(range(g))]
            mode = draw(st.sampled_from(["time_slice", "sm_split"]))
            sharing = {"mode": mode}
            if mode == "sm_split":
                share = draw(st.sampled_from([0.2, 0.5, 0.8]))
                sharing["sm_shares"] = {"encoder": share, "llm": round(1 - share, 3)}
            return {"kind": kind, "encoder": enc, "llm": llm, "gpu_sharing": sharing}, g
        enc = draw(encoder_pool())
        llm = draw(llm_pool(model, g))
        return {"kind": kind, "encoder": enc, "llm": llm, "gpu_sharing": None}, _gpus(enc, enc["tp"]) + _gpus(llm, g)
    if kind == "p_d":  # no encoder pool: a multimodal model's prefill workers encode locally
        prefill = draw(llm_pool(model, g))
        decode = draw(llm_pool(model, g))
        return {"kind": kind, "prefill": prefill, "decode": decode,
                "max_in_flight_kv_transfers": draw(st.sampled_from([None, 1, 4])),
                "first_token": draw(st.sampled_from(["prefill", "decode"]))}, _gpus(prefill, g) + _gpus(decode, g)
    enc = draw(encoder_pool())
    prefill = draw(llm_pool(model, g))
    decode = draw(llm_pool(model, g))
    dep = {"kind": kind, "encoder": enc, "prefill": prefill, "decode": decode, "gpu_sharing": None,
           "max_in_flight_kv_transfers": draw(st.sampled_from([None, 1, 4])), "local_prefill": None}
    if _gpus(enc, enc["tp"]) % g == 0 and valid_tp(model, g) and draw(st.integers(0, 2)) == 0:
        offload = draw(st.sampled_from(["deficit", "random", "windowed"]))
        part = draw(st.sampled_from(["none", "static", "dynamic"]))
        dep["local_prefill"] = {"tp": g, "offload": {"kind": offload,
                                                     "remote_fraction": draw(st.sampled_from([0.0, 0.5, 1.0]))},
                                "sm_partitioning": part}
    return dep, _gpus(enc, enc["tp"]) + _gpus(prefill, g) + _gpus(decode, g)


@st.composite
def rps_queue(draw, preset_is_rps: bool):
    q = {"kind": "rps", "profile_requests": draw(st.sampled_from([6, 10, 16]))}
    if not preset_is_rps or draw(st.booleans()):
        classifier = draw(st.sampled_from(["naive", "kmeans"]))
        q["classifier"] = classifier
        q["num_classes"] = 3 if classifier == "naive" else draw(st.integers(2, 4))
        q["priority"] = draw(weighted(("rps", 3), ("static-only", 1), ("aging-only", 1), ("edf", 1)))
        q["preemption"] = draw(weighted((True, 3), (False, 1)))
    return q


@st.composite
def policy(draw, system: str):
    queue_kind = preset_queue_kind(system) if draw(weighted((True, 3), (False, 1))) else \
        draw(weighted(("fcfs", 3), ("rps", 1)))
    queue = draw(rps_queue(preset_queue_kind(system) == "rps")) if queue_kind == "rps" else {"kind": "fcfs"}
    kinds = ["chunked_prefill", "token_throttling"] + ([] if queue_kind == "rps" else ["schedulable_tokens"])
    batching = {}
    if draw(st.booleans()):
        batching["kind"] = draw(st.sampled_from(kinds))
    elif queue_kind == "rps":
        batching["kind"] = draw(st.sampled_from(kinds))  # the preset's may be schedulable_tokens
    budget = draw(weighted((2048, 3), (32, 1), (64, 1), (256, 2), (1024, 1), (8192, 1)))
    batching["token_budget"] = budget
    batching["max_running"] = min(budget, draw(st.sampled_from([256, 1, 3, 16])))
    if draw(st.integers(0, 3)) == 0:
        batching["encoder_budget_tokens"] = draw(st.sampled_from([1, 256, 4096]))
    kind = batching.get("kind") or get_system(system).defaults_for(4)["policy"]["batching"]["kind"]
    if kind in ("token_throttling", "schedulable_tokens") and draw(st.booleans()):
        batching["min_prefill_tokens"] = draw(st.sampled_from([1, 64, 256]))
    if kind == "schedulable_tokens" and draw(st.booleans()):
        batching["inter_request"] = draw(st.booleans())
        batching["token_throttling"] = draw(st.booleans())
    pol = {"queue": queue, "batching": batching}
    if draw(st.booleans()):
        pol["router"] = {"kind": draw(st.sampled_from(["round_robin", "least_loaded"]))}
    return pol


@st.composite
def host_stage(draw, kind: str):
    """Host preprocessing: where it runs, how many processes, measured or constant (slow) costs."""
    places = ["auto", "api_server", "none"] + (["encode_worker"] if kind in ("e_pd", "e_p_d") else [])
    host = {"placement": draw(st.sampled_from(places)), "workers": draw(weighted((1, 3), (2, 1), (4, 1)))}
    if draw(st.integers(0, 3)) == 0:
        host["encode_worker_processes"] = draw(st.sampled_from([1, 2]))
    if draw(st.integers(0, 3)) == 0:  # a slow host: queues in front of the GPUs
        host.update(per_request_s=draw(st.sampled_from([0.0, 0.01])), per_item_s=draw(st.sampled_from([0.05, 0.3])))
    elif draw(st.integers(0, 3)) == 0:
        host["cpu_speed"] = draw(st.sampled_from([0.1, 3.0]))
    return host


@st.composite
def scenario_cases(draw):
    """(raw scenario mapping, KV target factor or None)."""
    system = draw(st.sampled_from(SYSTEM_NAMES))
    use_preset = draw(weighted((True, 2), (False, 1)))
    kind = preset_kind(system) if use_preset else draw(st.sampled_from(["monolithic", "e_pd", "e_p_d", "p_d"]))
    # prefer small models: most draws then fit, build and run fast
    names = ALL_MODELS if kind in ("monolithic", "p_d") else MM_MODELS
    small = [n for n in names if MODELS[n].weight_bytes < 20e9]
    model_name = draw(st.one_of(st.sampled_from(small), st.sampled_from(names)))
    model = MODELS[model_name]
    lens = [m for m in (4096, 2048, 8192, 16384) if m <= model.llm.max_context]
    max_len = draw(st.sampled_from(lens + ([None] if model.llm.max_context <= 32768 else [])))
    fit_len = max_len or model.llm.max_context
    gpus = [n for n in sorted(GPUS) if llm_group_min(model, GPUS[n], fit_len) <= 4]
    if not gpus:
        reject()
    gpu_name = draw(st.sampled_from(gpus))
    gpu = GPUS[gpu_name]
    g_min = llm_group_min(model, gpu, fit_len)
    g = draw(weighted((g_min, 4), (2 * g_min, 1)))
    if not splits(model, g):
        g = g_min
    if not splits(model, g):
        reject()

    counts = preset_counts(system, model_name, g) if use_preset and preset_kind(system) == kind else ()
    if counts:
        count = draw(st.sampled_from(counts))
        dep: dict = {}
    else:
        dep, count = draw(custom_deployment(kind, model, g))
        count += draw(weighted((0, 6), (1, 1)))  # now and then a GPU no worker uses
    if max_len is not None:
        dep["max_model_len"] = max_len
    if draw(st.integers(0, 3)) == 0:
        dep["block_size"] = draw(st.sampled_from([1, 8, 32]))
    if kind not in ("monolithic", "p_d"):  # keys of an encoder pool and its embedding buffer
        if draw(weighted((True, 2), (False, 1))):
            dep["admission"] = draw(st.sampled_from(["streaming", "after_encode"]))
        if draw(weighted((True, 2), (False, 1))):
            # 0.01 GiB holds about one large image of a 7B model (hidden 3584 x 2 B per token):
            # small buffers that still fit most requests make transfers wait on each other
            dep["embedding_buffer_gib"] = draw(st.sampled_from([0.01, 0.003, 0.03, 0.1, 1e-3, 4.0]))
        if counts and draw(st.integers(0, 2)) == 0:  # a preset's encoder pool, another dispatch rule
            dep["encoder"] = {"dispatch": draw(encode_dispatch())}

    raw = {
        "name": "fuzz",
        "seed": draw(st.integers(0, 2**16)),
        "system": system,
        "model": model_name,
        "hardware": {"gpu": gpu_name, "count": count, "interconnect": draw(st.sampled_from(sorted(gpu.links))),
                     "cost_model": draw(weighted(("roofline", 4), ("auto", 1)))},
        "deployment": dep,
        "policy": draw(policy(system)),
        "workload": draw(workload(model)),
    }
    wl = raw["workload"]
    if raw["policy"]["batching"]["token_budget"] < 256:  # tiny budgets under preemption run thousands
        if wl.get("num_requests", 0) > 12:                   # of steps: keep those runs short
            wl["num_requests"] = 12
        if "duration_s" in wl:
            wl["duration_s"] = min(wl["duration_s"], round(12 / wl["arrival"]["rate"], 6))
    raw["host"] = draw(host_stage(kind))
    if raw["policy"]["queue"].get("priority") == "edf" or system == "rps-serve-edf" or draw(st.integers(0, 3)) == 0:
        raw["slo"] = {"ttft_s": {"text": 1.0, "image": 2.0, "video": 4.0, "audio": 2.0}, "tpot_s": 0.1}
    sim: dict = {}
    if draw(st.integers(0, 3)) == 0:
        wl = raw["workload"]
        factor = draw(st.sampled_from([0.2, 0.6, 1.0, 2.0]))
        span = wl.get("duration_s") or wl["num_requests"] / wl["arrival"].get("rate", 1.0)
        sim["horizon_s"] = round(factor * span, 6) or 1e-3
    if draw(st.integers(0, 4)) == 0:
        sim["fast_forward"] = False
    if sim:
        raw["sim"] = sim
    kv_factor = draw(weighted((None, 2), (1.0, 1), (1.5, 1), (3.0, 1)))
    return raw, kv_factor


# =================================================================== running
def tighten_kv(raw: dict, factor: float) -> dict:
    """``raw`` with ``deployment.activation_reserve_gib`` set so that the LLM pool
    with the least KV memory holds about ``factor x max_model_len`` tokens (the
    others at least that): a small KV cache, so preemption and KV waits happen.
    Unchanged if that is not reachable."""
    probe = copy.deepcopy(raw)
    probe.setdefault("policy", {})["queue"] = {"kind": "fcfs"}  # no RPS profiling for a memory probe
    scn = validate_scenario(probe)
    try:
        built = build(scn, BASE_DIR)
    except UserError:
        return raw
    reserve = math.inf
    for plan in built.memory.values():
        target = math.ceil(factor * plan.max_model_len / plan.block_size) * plan.block_size
        slack = 2 * plan.block_size * plan.kv_bytes_per_token  # floor rounding margin
        reserve = min(reserve, plan.activation_bytes + plan.kv_bytes - target * plan.kv_bytes_per_token - slack)
    if not (reserve >= 0):
        return raw
    out = copy.deepcopy(raw)
    out.setdefault("deployment", {})["activation_reserve_gib"] = reserve / GIB
    return out


def _raised_by_simulation(exc: BaseException) -> bool:
    """Did ``exc`` come from inside the simulation run (not from building it)?"""
    return any(f.name == "run" and f.filename.endswith(os.path.join("engine", "simulation.py"))
               for f in traceback.extract_tb(exc.__traceback__))


class Rejected(Exception):
    """The drawn scenario is rightly refused by lmmsim."""


def execute(raw: dict, trace: bool = True):
    """Validate and run ``raw`` (``trace``: keep the step log, for the step
    properties); :class:`Rejected` for a UserError from validation or building.
    Returns (scenario, RunOutput)."""
    try:
        scn = validate_scenario(raw)
    except UserError as exc:
        raise Rejected(str(exc)) from None
    try:
        run = run_scenario(scn, BASE_DIR, trace=trace)
    except UserError as exc:
        if _raised_by_simulation(exc):
            raise AssertionError(f"UserError raised while the simulation ran (not at build): {exc}") from exc
        raise Rejected(str(exc)) from None
    return scn, run


def prepare(raw: dict, kv_factor: float | None) -> dict:
    if kv_factor is None:
        return raw
    try:
        return tighten_kv(raw, kv_factor)
    except UserError as exc:
        raise Rejected(str(exc)) from None


# ================================================================ properties
def _nan(x) -> bool:
    return x != x


def _time_order(row, req, kind: str, admission: str | None) -> list[str]:
    """Ordering constraints on one finished request's timeline.

    Always (none of these NaN for a finished request):
        arrived_at <= prefill_started_at <= first_token_at <= finished_at,
        first_token_at == finished_at when num_output_tokens == 1.
    A request with media also has both encode columns (text-only: both NaN), and
        arrived_at <= encode_started_at <= encode_finished_at <= first_token_at
    (the first token needs every position's embedding). How encode relates to
    prefill_started_at depends on where the encoder runs:
      * monolithic (vLLM encoder cache): items are encoded in the step whose chunk
        first covers them, so encode_started_at >= prefill_started_at (text before
        the first item may prefill first), with equality when the prompt starts
        with a media item (the first chunk must encode it);
      * disaggregated, admission after_encode: the request joins the LLM queue only
        when all its embeddings arrived, so encode_finished_at <= prefill_started_at;
      * disaggregated, admission streaming (RServe): it joins at arrival and each
        chunk stops before the first missing embedding, so prefill may start before
        encoding finishes -- or, when the prompt starts with text, before it starts;
        when the prompt starts with a media item, encode_started_at <= prefill_started_at.
    """
    bad = []
    a, ps, ft, fin = row.arrived_at, row.prefill_started_at, row.first_token_at, row.finished_at
    es, ef = row.encode_started_at, row.encode_finished_at
    rid = row.request_id
    if any(_nan(x) for x in (ps, ft, fin)):
        return [f"time: finished request {rid} has NaN prefill_started/first_token/finished ({ps}, {ft}, {fin})"]
    if not (a <= ps <= ft <= fin):
        bad.append(f"time: request {rid}: arrived {a!r} <= prefill_started {ps!r} <= first_token {ft!r} "
                   f"<= finished {fin!r} fails")
    if row.num_output_tokens == 1 and ft != fin:
        bad.append(f"time: request {rid} has one output token but first_token {ft!r} != finished {fin!r}")
    media = req.media_segments
    if not media:
        if not (_nan(es) and _nan(ef)):
            bad.append(f"time: text request {rid} has encode times ({es}, {ef})")
        return bad
    if _nan(es) or _nan(ef):
        return bad + [f"time: finished request {rid} with media has NaN encode times ({es}, {ef})"]
    if not (a <= es <= ef <= ft):
        bad.append(f"time: request {rid}: arrived {a!r} <= encode_started {es!r} <= encode_finished {ef!r} "
                   f"<= first_token {ft!r} fails")
    starts_with_media = req.segments[0].item is not None
    if kind in ("monolithic", "p_d"):  # p_d: the prefill worker encodes inside its steps, as monolithic
        if not ps <= es:
            bad.append(f"time: monolithic request {rid}: encode_started {es!r} < prefill_started {ps!r}")
        if starts_with_media and es != ps:
            bad.append(f"time: monolithic request {rid} starts with media but encode_started {es!r} != "
                       f"prefill_started {ps!r}")
    elif admission == "after_encode":
        if not ef <= ps:
            bad.append(f"time: after_encode request {rid}: prefill_started {ps!r} < encode_finished {ef!r}")
    elif starts_with_media and not es <= ps:
        bad.append(f"time: streaming request {rid} starts with media but prefill_started {ps!r} < "
                   f"encode_started {es!r}")
    return bad


def _host_order(row, req, placement: str | None) -> list[str]:
    """Host preprocessing on a finished request: none without a host stage; else
    arrived <= preprocess_started <= preprocess_finished <= first_token, and with the API-server
    placement (everything preprocessed before the deployment sees the request)
    preprocess_finished <= prefill_started and <= encode_started."""
    s, f, rid = row.preprocess_started_at, row.preprocess_finished_at, row.request_id
    if placement is None:
        return [] if _nan(s) and _nan(f) else [f"host: request {rid} has preprocess times without a host stage"]
    if _nan(s) or _nan(f) or not (row.arrived_at <= s <= f <= row.first_token_at):
        return [f"host: request {rid}: arrived {row.arrived_at!r} <= preprocess {s!r}..{f!r} <= first_token "
                f"{row.first_token_at!r} fails"]
    if placement == "api_server" and not (f <= row.prefill_started_at and (not req.media_segments
                                                                            or f <= row.encode_started_at)):
        return [f"host: request {rid} was prefilled or encoded before its preprocessing ended at {f!r}"]
    return []


def _pool_of(engine_name: str) -> str:
    base = engine_name.rstrip("0123456789")
    return "llm" if base == "replica" else base


def violations(scn, run) -> list[str]:
    """Every property violation of one run, each a line starting with its property."""
    bad: list[str] = []
    df = run.requests
    summary = run.summary
    built = run.built
    sim = built.simulation
    reqs = built.requests
    seqs = sim.seqs
    horizon = scn.sim.horizon_s
    max_len = built.max_model_len
    kind = scn.deployment.kind
    admission = getattr(scn.deployment, "admission", None)
    by_id = {r.request_id: r for r in reqs}
    seq_by_id = {s.request.request_id: s for s in seqs}

    # ------------------------------------------------------------ shape
    if len(df) != len(reqs) or list(df["request_id"]) != [r.request_id for r in reqs]:
        bad.append(f"frame: {len(df)} rows for {len(reqs)} requests, or not in request order")
        return bad

    # ------------------------------------------------------------ status
    statuses = df["status"]
    unknown = set(statuses) - STATUSES
    if unknown:
        bad.append(f"status: unknown statuses {sorted(unknown)}")
    if "reject_reason" not in df.columns:
        bad.append("status: the requests frame has no 'reject_reason' column (rejected rows need a "
                   "non-empty reason string)")
    else:
        for row in df[statuses == "rejected"].itertuples():
            if not isinstance(row.reject_reason, str) or not row.reject_reason.strip():
                bad.append(f"status: rejected request {row.request_id} has reject_reason {row.reject_reason!r}")
                break
        for row in df[statuses == "finished"].itertuples():
            if isinstance(row.reject_reason, str) and row.reject_reason:
                bad.append(f"status: finished request {row.request_id} has reject_reason {row.reject_reason!r}")
                break
    unfinished = df[statuses == "unfinished"]
    not_arrived = df[statuses == "not_arrived"]
    if horizon is None:
        if len(unfinished):
            ids = list(unfinished["request_id"])
            bad.append(f"status: {len(unfinished)} of {len(df)} requests unfinished without a horizon "
                       f"(deadlock; first ids {ids[:8]}, run ended at {summary.get('sim_end_at_s')!r})")
        if len(not_arrived):
            bad.append(f"status: {len(not_arrived)} requests not_arrived without a horizon")
    else:
        late = unfinished[unfinished["arrived_at"] > horizon]
        if len(late):
            bad.append(f"status: {len(late)} requests arrived after the horizon {horizon} but are 'unfinished' "
                       f"(expected 'not_arrived'; e.g. request {late['request_id'].iloc[0]} at "
                       f"{late['arrived_at'].iloc[0]!r})")
        early = not_arrived[not_arrived["arrived_at"] < horizon]
        if len(early):
            bad.append(f"status: {len(early)} requests arrived before the horizon {horizon} but are 'not_arrived'")
        other_late = df[(df["arrived_at"] > horizon) & ~statuses.isin(["not_arrived", "unfinished"])]
        if len(other_late):
            bad.append(f"status: requests arriving after the horizon have status "
                       f"{sorted(set(other_late['status']))} (expected 'not_arrived')")
        fin = df[statuses == "finished"]
        if len(fin) and (fin["finished_at"] > horizon).any():
            bad.append(f"status: a request finished after the horizon {horizon}")
    too_long = df[(df["num_prompt_tokens"] + df["num_output_tokens"] > max_len)
                  & ((df["arrived_at"] < horizon) if horizon is not None else True)]
    if len(too_long) and (too_long["status"] != "rejected").any():
        row = too_long[too_long["status"] != "rejected"].iloc[0]
        bad.append(f"status: request {row.request_id} is longer than max_model_len {max_len} "
                   f"({row.num_prompt_tokens}+{row.num_output_tokens}) but has status {row.status!r}")
    rej = df[statuses == "rejected"]
    if len(rej) and rej[["prefill_started_at", "first_token_at", "finished_at"]].notna().any().any():
        bad.append("status: a rejected request has prefill/first-token/finish times")
    # the reasons lmmsim refuses a request at arrival: longer than max_model_len, or
    # (disaggregated) embeddings larger than the receiver's embedding buffer
    fits = rej["num_prompt_tokens"] + rej["num_output_tokens"] <= max_len
    spurious = rej[fits & ((rej["num_media_items"] == 0) | (kind in ("monolithic", "p_d")))]
    if len(spurious):
        row = spurious.iloc[0]
        bad.append(f"status: request {row.request_id} ({row.num_prompt_tokens}+{row.num_output_tokens} tokens, "
                   f"{row.num_media_items} media items, {kind}) is rejected without a reason that applies: "
                   f"{row.reject_reason!r}")

    # ------------------------------------------------------------ time order
    placement = (summary.get("host") or {}).get("placement")
    for row in df[statuses == "finished"].itertuples():
        found = _time_order(row, by_id[row.request_id], kind, admission) + _host_order(row, by_id[row.request_id],
                                                                                         placement)
        if found:
            bad.extend(found[:2])
            break
    if len(df) and df["finished_at"].notna().any() and df["finished_at"].max() > summary["sim_end_at_s"]:
        bad.append(f"time: a request finished at {df['finished_at'].max()!r} after the run's end "
                   f"{summary['sim_end_at_s']!r}")

    # ------------------------------------------------------------ tokens
    if (df["num_prompt_tokens"] != df["num_text_tokens"] + df["num_mm_tokens"]).any():
        bad.append("tokens: num_prompt_tokens != num_text_tokens + num_mm_tokens")
    for row in df.itertuples():
        r = by_id[row.request_id]
        if (row.num_prompt_tokens, row.num_mm_tokens, row.num_media_items, row.num_output_tokens) != (
                r.num_prompt_tokens, sum(s.length for s in r.media_segments), len(r.media_segments),
                r.num_output_tokens):
            bad.append(f"tokens: request {row.request_id}'s token columns differ from its request")
            break
        if (row.modality == "text") != (row.num_media_items == 0):
            bad.append(f"tokens: request {row.request_id} has modality {row.modality} and "
                       f"{row.num_media_items} media items")
            break
    for row in df[statuses == "finished"].itertuples():
        s = seq_by_id[row.request_id]
        r = s.request
        if s.num_generated != r.num_output_tokens or s.num_computed != r.num_prompt_tokens + r.num_output_tokens - 1:
            bad.append(f"tokens: finished request {row.request_id} generated {s.num_generated} of "
                       f"{r.num_output_tokens} tokens, computed {s.num_computed} "
                       f"(expected {r.num_prompt_tokens + r.num_output_tokens - 1})")
            break
    if int(df["num_preemptions"].sum()) != summary.get("num_preemptions"):
        bad.append(f"tokens: per-request preemptions sum to {int(df['num_preemptions'].sum())}, summary says "
                   f"{summary.get('num_preemptions')}")
    counts = statuses.value_counts().to_dict()
    keys = {"finished": "num_finished", "rejected": "num_rejected", "unfinished": "num_unfinished",
            "not_arrived": "num_not_arrived"}
    total = 0
    for status, key in keys.items():
        got = summary.get(key, 0 if key == "num_not_arrived" and not counts.get(status) else None)
        if got != counts.get(status, 0):
            bad.append(f"summary: {key} is {got!r} but {counts.get(status, 0)} rows are {status!r}")
        total += got or 0
    if summary.get("num_requests") != len(df) or total != len(df):
        bad.append(f"summary: counts add up to {total}, num_requests {summary.get('num_requests')!r}, "
                   f"{len(df)} rows")

    # ------------------------------------------------------------ KV
    frontend = sim.frontend
    engines = frontend.llm_engines
    all_done = not len(unfinished)
    for e in engines:
        pool = e.scheduler.pool
        name = _pool_of(e.name)
        plan = built.memory.get(name)
        if plan is None:
            bad.append(f"kv: engine {e.name} has no memory plan (pool {name!r})")
            continue
        if pool.num_blocks != plan.num_blocks:
            bad.append(f"kv: engine {e.name} has {pool.num_blocks} blocks, its plan {plan.num_blocks}")
        if not 0 <= pool.peak_used <= pool.num_blocks:
            bad.append(f"kv: engine {e.name} peak {pool.peak_used} blocks > capacity {pool.num_blocks}")
        if not 0 <= pool.num_free <= pool.num_blocks:
            bad.append(f"kv: engine {e.name} has {pool.num_free} free of {pool.num_blocks}")
        if all_done:
            sched = e.scheduler
            if pool.num_used:
                bad.append(f"kv: engine {e.name} still holds {pool.num_used} blocks with nothing unfinished")
            if sched.num_running or len(sched.queue):
                bad.append(f"kv: engine {e.name} still has {sched.num_running} running, {len(sched.queue)} "
                           f"waiting with nothing unfinished")
    for name, entry in summary["deployment"]["pools"].items():
        for peak in entry.get("peak_kv_blocks_used", []):
            if peak > entry["kv_blocks_per_worker"]:
                bad.append(f"kv: summary pool {name} peak {peak} > kv_blocks_per_worker "
                           f"{entry['kv_blocks_per_worker']}")
    if all_done:
        for inbox in getattr(frontend, "inboxes", []):
            buf = inbox.buffer
            waiting = len(buf.waiting)  # transfers awaiting room
            if abs(buf.used) > 1e-6 * max(1.0, buf.capacity) or waiting:
                bad.append(f"kv: embedding buffer of {inbox.engine.name} ends holding {buf.used} bytes, "
                           f"{waiting} transfers waiting, with nothing unfinished")
            awaiting = inbox.num_awaiting  # router load of requests still being encoded
            if awaiting:
                bad.append(f"kv: inbox of {inbox.engine.name} ends with {awaiting} requests awaiting embeddings "
                           f"(router load) with nothing unfinished")
            if getattr(inbox, "trackers", None):
                bad.append(f"kv: inbox of {inbox.engine.name} ends with embedding trackers of requests "
                           f"{sorted(inbox.trackers)[:5]} with nothing unfinished")
        for enc in getattr(frontend, "encoders", []):
            if enc.queue:
                bad.append(f"kv: encoder {enc.name} ends with {len(enc.queue)} items queued")
        if any(getattr(frontend, "_kv_waiting", [])):
            bad.append("kv: requests still wait for a decode KV reservation with nothing unfinished")
        finished = df[statuses == "finished"]
        encoders = getattr(frontend, "encoders", [])
        if encoders and sum(e.num_items for e in encoders) != int(finished["num_media_items"].sum()):
            bad.append(f"tokens: encoders encoded {sum(e.num_items for e in encoders)} items, the finished "
                       f"requests carry {int(finished['num_media_items'].sum())}")
        if getattr(frontend, "decode", None):
            expected = int((finished["num_output_tokens"] > 1).sum())
            if frontend.num_kv_transfers != expected:
                bad.append(f"kv: {frontend.num_kv_transfers} KV transfers to decode, but {expected} finished "
                           f"requests have more than one output token")
    if built.step_log is not None:
        bad += step_violations(scn, built.step_log, summary["sim_end_at_s"])
    bad += busy_violations(built, frontend, summary)
    if horizon is not None and summary["sim_end_at_s"] > horizon:
        bad.append(f"time: the run ended at {summary['sim_end_at_s']!r}, after the horizon {horizon}")
    return bad


def busy_violations(built, frontend, summary) -> list[str]:
    """No GPU is busy longer than the measurement window (the summary clamps
    utilisation at 1, which would hide double counting); busy time as
    :func:`lmmsim.results.run_scenario` adds it up."""
    busy = [0.0] * built.num_gpus
    arbiters = getattr(frontend, "arbiters", {})
    for worker in frontend.workers:
        for gpu_id, seconds in worker.gpu_busy_s().items():
            if gpu_id not in arbiters:
                busy[gpu_id] += seconds
    for gpu_id, arbiter in arbiters.items():
        busy[gpu_id] = arbiter.busy_s
    window = summary.get("window_s")
    if window is None:
        return []
    for gpu_id, seconds in enumerate(busy):
        if not -1e-12 <= seconds <= window * (1 + 1e-9) + 1e-12:
            return [f"steps: GPU {gpu_id} busy {seconds!r} s in a measurement window of {window!r} s"]
    return []


LLM_STEP_KINDS = ("prefill", "decode", "mixed")


def step_violations(scn, log, end_at: float) -> list[str]:
    """Per step record: a busy interval of positive length inside the run (every
    kernel launch costs time); an LLM step carries at most
    ``token_budget`` tokens and ``max_running`` sequences; the intervals of one track
    (an engine, a pipeline stage, an encoder; not a link, whose transfers share it)
    never overlap."""
    bad: list[str] = []
    budget = scn.policy.batching.token_budget
    max_running = scn.policy.batching.max_running
    last_end: dict[str, tuple] = {}
    for rec in sorted(log, key=lambda r: (r.worker, r.start_at, r.end_at)):
        if not 0 <= rec.start_at <= rec.end_at <= end_at:
            bad.append(f"steps: {rec.worker} {rec.kind} step [{rec.start_at!r}, {rec.end_at!r}] outside "
                       f"[0, {end_at!r}]")
            break
        if rec.kind in (*LLM_STEP_KINDS, "encode", "decode_run") and not rec.end_at > rec.start_at:
            bad.append(f"steps: {rec.worker} {rec.kind} step at {rec.start_at!r} takes no time")
            break
        if rec.kind in LLM_STEP_KINDS:
            if not 0 < rec.num_tokens <= budget:
                bad.append(f"steps: {rec.worker} {rec.kind} step at {rec.start_at!r} has {rec.num_tokens} tokens "
                           f"(token_budget {budget})")
                break
            if rec.batch_size > max_running:
                bad.append(f"steps: {rec.worker} {rec.kind} step at {rec.start_at!r} runs {rec.batch_size} "
                           f"sequences > max_running {max_running}")
                break
        if rec.worker.startswith("link:"):
            continue
        prev = last_end.get(rec.worker)
        if prev is not None and rec.start_at < prev[0]:
            bad.append(f"steps: on {rec.worker} a {rec.kind} step starts at {rec.start_at!r} before the previous "
                       f"{prev[1]} step ends at {prev[0]!r}")
            break
        last_end[rec.worker] = (rec.end_at, rec.kind)
    return bad


def comparable_summary(summary: dict) -> dict:
    # wall time, and the event count: a pipeline engine runs ahead only without a step log
    return {k: v for k, v in summary.items() if k not in ("sim_wall_time_s", "sim_events")}


def _frames_differ(a, b) -> str | None:
    try:
        pd.testing.assert_frame_equal(a, b, check_exact=True)
    except AssertionError as exc:
        return " | ".join(str(exc).splitlines()[:6])
    return None


def determinism_violations(raw: dict, first) -> list[str]:
    """Run ``raw`` again (RPS profiles refitted, no step log) and compare with
    ``first``; a monolithic scenario also runs with ``sim.fast_forward`` flipped,
    which must not change any request's timeline (the replica applies
    decode-only stretches as one event, exactly)."""
    from lmmsim.rps import admission

    admission._CACHE.clear()  # refit, so the classifier's fit is compared too
    scn, second = execute(copy.deepcopy(raw), trace=False)  # the step log must not change the run
    diff = _frames_differ(first.requests, second.requests)
    if diff:
        return [f"determinism: requests frames differ between two runs: {diff}"]
    if comparable_summary(first.summary) != comparable_summary(second.summary):
        keys = sorted(k for k in first.summary if first.summary.get(k) != second.summary.get(k))
        return [f"determinism: summaries differ in {keys}"]
    if scn.deployment.kind == "monolithic":
        flipped = copy.deepcopy(raw)
        flipped.setdefault("sim", {})["fast_forward"] = not scn.sim.fast_forward
        _, third = execute(flipped, trace=False)
        diff = _frames_differ(first.requests, third.requests)
        if diff:
            return [f"determinism: fast_forward={not scn.sim.fast_forward} changes the requests frame: {diff}"]
    return []


def pressure(run) -> dict[str, float]:
    """How hard a run pushed the corners (hypothesis steers towards these with target())."""
    frontend = run.built.simulation.frontend
    inboxes = getattr(frontend, "inboxes", [])
    return {
        "preemptions": float(run.summary.get("num_preemptions") or 0),
        "evicted_embeddings": float(sum(i.num_evicted_items for i in inboxes)),
        "peak_kv_fraction": max((e.scheduler.pool.peak_used / e.scheduler.pool.num_blocks
                                 for e in frontend.llm_engines), default=0.0),
    }


def check_case(raw: dict, kv_factor: float | None, repeat: bool, on_run=None) -> list[str]:
    """Prepare, run and check one case: its violations (Rejected if refused;
    StuckRunError becomes a violation; anything else propagates). ``on_run(run)``
    sees the run before it is checked."""
    raw = prepare(raw, kv_factor)
    try:
        scn, run = execute(raw)
    except StuckRunError as exc:
        return [f"stuck: StuckRunError: {exc}"]
    if on_run is not None:
        on_run(run)
    bad = violations(scn, run)
    if repeat and not bad:
        bad += determinism_violations(raw, run)
    return bad


def steer(run) -> None:
    for label, value in pressure(run).items():
        target(value, label=label)


def as_yaml(raw: dict) -> str:
    return yaml.safe_dump(raw, sort_keys=False, default_flow_style=None, width=110)


# ===================================================================== tests
@settings(max_examples=NUM_EXAMPLES, deadline=None, derandomize=DERANDOMIZE, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])
@given(case=scenario_cases(), repeat=weighted((False, 6), (True, 1)))
def test_fuzzed_scenarios_keep_their_invariants(case, repeat):
    raw, kv_factor = case
    note(f"kv_factor={kv_factor}\n" + as_yaml(raw))
    try:
        bad = check_case(raw, kv_factor, repeat, on_run=steer)
    except Rejected:
        reject()
    if bad:
        final = prepare(raw, kv_factor)
        pytest.fail("\n".join(bad) + "\n--- scenario ---\n" + as_yaml(final), pytrace=False)


FIXED = {
    "vllm": """
        system: vllm
        model: qwen2.5-vl-7b
        hardware: {gpu: h100-sxm-80gb, count: 1, cost_model: roofline}
        deployment: {max_model_len: 8192}
        workload:
          num_requests: 20
          arrival: {kind: poisson, rate: 30}
          mix:
          - {name: t, weight: 1, text_tokens: {kind: uniform, low: 10, high: 2000}}
          - {name: i, weight: 1, text_tokens: {kind: fixed, value: 30}, images: {count: 2, width: 448, height: 448},
             layout: interleaved}
          output_tokens: {kind: uniform, low: 1, high: 60}
    """,
    "rserve": """
        system: rserve
        model: qwen2.5-vl-7b
        hardware: {gpu: h100-sxm-80gb, count: 3, cost_model: roofline}
        deployment: {max_model_len: 8192}
        workload:
          num_requests: 20
          arrival: {kind: gamma, rate: 30, cv: 3}
          mix:
          - {name: i, weight: 1, text_tokens: {kind: fixed, value: 300}, images: {count: 3, width: 448, height: 448},
             layout: text_first}
          - {name: v, weight: 1, text_tokens: {kind: fixed, value: 30}, video: {frames: 8, width: 224, height: 224}}
          output_tokens: {kind: fixed, value: 8}
    """,
    "easerve": """
        system: easerve
        model: llava-onevision-qwen2-7b
        hardware: {gpu: h100-sxm-80gb, count: 5, cost_model: roofline}
        deployment: {max_model_len: 8192}
        workload:
          num_requests: 20
          arrival: {kind: deterministic, rate: 50}
          mix:
          - {name: i, weight: 1, text_tokens: {kind: fixed, value: 100}, images: {count: 1, width: 800, height: 600}}
          - {name: t, weight: 1, text_tokens: {kind: lognormal, mean: 500, sigma: 0.8, max: 3000}}
          output_tokens: {kind: uniform, low: 1, high: 40}
    """,
}


@pytest.mark.parametrize("name", sorted(FIXED))
def test_fixed_scenarios_run_deterministically(name):
    raw = yaml.safe_load(FIXED[name])
    scn, run = execute(copy.deepcopy(raw))
    bad = [b for b in violations(scn, run) if "reject_reason" not in b]
    bad += determinism_violations(raw, run)
    assert not bad, "\n".join(bad)
    assert (run.requests["status"] == "finished").all()

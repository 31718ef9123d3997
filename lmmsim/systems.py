"""Named systems: presets of deployment + policies a scenario picks with ``system:``.

Built-in presets register below; a plugin registers its own with
:func:`register_system`, from a module listed under the ``lmmsim.systems``
entry-point group (loaded on the first lookup).

A preset only supplies defaults, computed from ``hardware.count`` (and, where a
preset says so, for a text-only model: ``text_defaults``); every key a scenario
sets overrides them. Each entry says in one line what it is and cites
where it is defined; its ``notes`` list the simplifications we make.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from lmmsim.errors import UserError, choices
from lmmsim.plugins import load_group


@dataclass(frozen=True)
class SystemPreset:
    name: str
    summary: str
    reference: str
    defaults: Callable[[int], dict]  # hardware.count -> default keys
    notes: tuple[str, ...] = field(default=())
    # hardware.count -> default keys for a model without an encoder (None: ``defaults``):
    # a preset whose encoder pool would idle on a text model says what it runs instead
    text_defaults: Callable[[int], dict] | None = None

    def defaults_for(self, num_gpus: int, text_only: bool = False) -> dict:
        if text_only and self.text_defaults is not None:
            return self.text_defaults(num_gpus)
        return self.defaults(num_gpus)


_SYSTEMS: dict[str, SystemPreset] = {}
def register_system(preset: SystemPreset) -> SystemPreset:
    if preset.name in _SYSTEMS:
        raise ValueError(f"system {preset.name!r} registered twice")
    _SYSTEMS[preset.name] = preset
    return preset


def get_system(name: str) -> SystemPreset:
    load_group("lmmsim.systems")
    if name not in _SYSTEMS:
        raise UserError("system", f"unknown system {name!r}; valid: {choices(_SYSTEMS)}")
    return _SYSTEMS[name]


def systems() -> dict[str, SystemPreset]:
    load_group("lmmsim.systems")
    return dict(sorted(_SYSTEMS.items()))


def _pow2_at_most(n: int) -> int:
    p = 1
    while p * 2 <= n:
        p *= 2
    return p


_FCFS = {"queue": {"kind": "fcfs"}, "router": {"kind": "least_loaded"}}

register_system(SystemPreset(
    name="vllm",
    summary="monolithic engine (encoder + LLM), TP over all GPUs, FCFS, continuous batching with chunked prefill",
    reference="Kwon et al., PagedAttention / vLLM, SOSP 2023; vLLM v1 scheduler; chunked prefill after "
    "Agrawal et al., Sarathi-Serve, OSDI 2024",
    defaults=lambda n: {
        "deployment": {"kind": "monolithic", "tp": n},
        "policy": {**_FCFS, "batching": {"kind": "chunked_prefill"}},
    },
    notes=("Encoder runs inside the step on the same GPUs under vLLM's encoder budget.",),
))

register_system(SystemPreset(
    name="vllm-pp",
    summary="monolithic engine with pipeline parallelism over all GPUs and chunked pipelining (CPP)",
    reference="vLLM pipeline parallelism (virtual engines); CPP from Qin et al., Mooncake, FAST 2025",
    defaults=lambda n: {
        "deployment": {"kind": "monolithic", "tp": 1, "pp": n, "chunk_pipelining": True},
        "policy": {**_FCFS, "batching": {"kind": "chunked_prefill"}},
    },
    notes=("Stage time is the full step time over pp (layers split evenly).",
           "One micro-batch slot per stage, each with its own decode batch (vLLM's virtual engines)."),
))

register_system(SystemPreset(
    name="gllm",
    summary="pipeline parallelism with CPP, micro-batches balanced by Token Throttling, FCFS",
    reference="Guo et al., gLLM: Global Balanced Pipeline Parallelism with Token Throttling, 2025 "
    "(baseline in RServe, rserve.txt section 4)",
    defaults=lambda n: {
        "deployment": {"kind": "monolithic", "tp": 1, "pp": n, "chunk_pipelining": True},
        "policy": {**_FCFS, "batching": {"kind": "token_throttling"}},
    },
    notes=("Token Throttling: prefill tokens per micro-batch = pending prefill tokens / pp, clamped to "
           "[min_prefill_tokens, token_budget]; decode balance comes from the per-slot decode batches.",),
))

register_system(SystemPreset(
    name="gllm-epd",
    summary="gLLM with the encoder disaggregated (E + PD): a request is encoded whole, then prefilled",
    reference="RServe paper's gLLM-epd baseline (rserve.txt section 4.1: one encoder GPU + PP LLM)",
    defaults=lambda n: {
        "deployment": {"kind": "e_pd", "encoder": {"workers": 1, "tp": 1, "dispatch": {"kind": "per_request"}},
                       "llm": {"tp": 1, "pp": max(1, n - 1), "chunk_pipelining": True},
                       "admission": "after_encode"},
        "policy": {**_FCFS, "batching": {"kind": "token_throttling"}},
    },
    notes=("One encoder GPU, the rest one PP pipeline.",
           "Embeddings of a request travel as one transfer once its items are encoded."),
))

register_system(SystemPreset(
    name="modserve",
    summary="E + PD: half of the GPUs run the encoder, half prefill+decode, TP inside each",
    reference="Qiu et al., ModServe: Modality- and Stage-Aware Resource Disaggregation, 2025 "
    "(baseline configuration as in RPS-Serve, rps-serve.txt: 2 + 2 GPUs with TP2)",
    defaults=lambda n: {
        "deployment": {"kind": "e_pd",
                       "encoder": {"workers": 1, "tp": max(1, n // 2),
                                   "dispatch": {"kind": "fixed", "max_items": 8, "timeout_s": 0.005}},
                       "llm": {"tp": max(1, n - n // 2)}, "admission": "after_encode"},
        "policy": {**_FCFS, "batching": {"kind": "chunked_prefill"}},
    },
    notes=("Encoder batches up to 8 items or 5 ms; ModServe's modality-aware autoscaling is not modelled.",),
))


def _dynamo(n: int) -> dict:
    rest = max(2, n - 1)
    prefill = _pow2_at_most(max(1, rest // 2))
    decode = _pow2_at_most(max(1, rest - prefill))
    return {
        "deployment": {"kind": "e_p_d", "encoder": {"workers": 1, "tp": 1, "dispatch": {"kind": "per_request"}},
                       "prefill": {"tp": prefill}, "decode": {"tp": decode}, "admission": "after_encode"},
        "policy": {**_FCFS, "batching": {"kind": "chunked_prefill"}},
    }


def _dynamo_text(n: int) -> dict:
    # Dynamo's disaggregated serving of a text LLM: no encoder GPU, the same P/D split of all of them
    prefill = _pow2_at_most(max(1, n // 2))
    decode = _pow2_at_most(max(1, n - prefill))
    return {
        "deployment": {"kind": "p_d", "prefill": {"tp": prefill}, "decode": {"tp": decode}},
        "policy": {**_FCFS, "batching": {"kind": "chunked_prefill"}},
    }


register_system(SystemPreset(
    name="dynamo",
    summary="E + P + D: per-request encode, prefill workers hand KV caches to decode workers "
            "(P + D on a text-only model)",
    reference="NVIDIA Dynamo (disaggregated serving, 2025); the EPD baseline of EAServe (easerve.txt section 4)",
    defaults=_dynamo,
    text_defaults=_dynamo_text,
    notes=("Default allocation: 1 encoder GPU; of the rest, prefill takes the largest power of two <= half, "
           "decode the largest power of two of what remains (override with deployment.*).",
           "On a text-only model (no encoder): kind p_d, prefill the largest power of two <= half of the GPUs, "
           "decode the largest power of two of what remains.",
           "KV transfer = prompt tokens x KV bytes per token over the prefill worker's links."),
))


def _rserve(inter_request: bool):
    def defaults(n: int) -> dict:
        return {
            "deployment": {"kind": "e_pd",
                           "encoder": {"workers": 1, "tp": 1,
                                       "dispatch": {"kind": "embedding_batch", "embedding_batch_tokens": 1024}},
                           "llm": {"tp": 1, "pp": max(1, n - 1), "chunk_pipelining": True},
                           "admission": "streaming"},
            "policy": {**_FCFS, "batching": {"kind": "schedulable_tokens", "inter_request": inter_request}},
        }
    return defaults


_RSERVE_NOTES = (
    "One encoder GPU; the rest one PP pipeline with CPP (PP4 + E1 on 5 GPUs). For TP set "
    "deployment.llm: {tp: 4, pp: 1}; for one LLM GPU use hardware.count: 2.",
    "Knobs: deployment.encoder.dispatch.embedding_batch_tokens (C; null in the scenario file = whole "
    "request, while --set ...=null restores the preset's 1024) and policy.batching.token_budget (B); "
    "policy.batching.token_throttling: true sizes each micro-batch with gLLM's Token Throttling instead of B.",
    "Embeddings of each encoder batch travel as one transfer; positions are released as prefill computes them.",
    "A preempted request keeps its embeddings (no re-encode).",
)

register_system(SystemPreset(
    name="rserve",
    summary="E + PD with streamed encoder batches (Algorithm 1), an embedding tracker and schedulable-token "
            "batching across requests (Algorithm 2), PP + CPP",
    reference="Guo et al., RServe: Overlapping Encoding and Prefill for Efficient LMM Inference "
              "(rserve.txt section 3)",
    defaults=_rserve(True),
    notes=_RSERVE_NOTES,
))

register_system(SystemPreset(
    name="rserve-intra",
    summary="RServe without the inter-request pipeline: one request's prefill tokens per micro-batch",
    reference="RServe-intra ablation (rserve.txt section 4.3.2)",
    defaults=_rserve(False),
    notes=_RSERVE_NOTES,
))


_RPS_QUEUE = {"kind": "rps"}
_RPS_NOTES = (
    "At build time the Workload Profiler runs isolated requests drawn from the scenario's mix on its "
    "deployment (policy.queue.profile_requests, or policy.queue.profile: a CSV of measured runs); the "
    "Impact Estimator and a k-means classifier (policy.queue.num_classes) are fitted to them.",
    "Ablations: policy.queue.classifier: naive; policy.queue.priority: static-only | aging-only | edf.",
    "Aging term (ours; the paper leaves it out): 1 - exp(-k w^p (1 + ln(1 + q))), lmmsim/rps/priority.py.",
)

register_system(SystemPreset(
    name="rps-serve",
    summary="monolithic TP engine with RPS-Serve's modality-aware scheduling: classes by estimated "
            "(latency, memory), priority = static + aging, per-class queues, priority preemption",
    reference="RPS-Serve: Rocks, Pebbles and Sand: Modality-aware Scheduling for Multimodal Large Language "
              "Model Inference (rps-serve.txt section 3)",
    defaults=lambda n: {
        "deployment": {"kind": "monolithic", "tp": n},
        "policy": {"queue": _RPS_QUEUE, "router": {"kind": "least_loaded"},
                   "batching": {"kind": "chunked_prefill"}},
    },
    notes=_RPS_NOTES,
))


def _modserve_rps(n: int) -> dict:
    base = get_system("modserve").defaults_for(n)
    return {**base, "policy": {**base["policy"], "queue": _RPS_QUEUE}}


register_system(SystemPreset(
    name="modserve+rps",
    summary="ModServe's E + PD split with RPS-Serve's scheduling on the prefill/decode engine",
    reference="'ModServe & RPS' baseline of RPS-Serve (rps-serve.txt section 4.1)",
    defaults=_modserve_rps,
    notes=_RPS_NOTES,
))


# RPS-Serve's ablations (rps-serve.txt section 4.3, Fig. 14) by name.
_RPS_ABLATIONS = {
    "naive-classes": ({"classifier": "naive"}, "classes by modality: text -> sand, image/audio -> pebbles, "
                                               "video -> rocks"),
    "static-only": ({"priority": "static-only"}, "static class priorities, no aging"),
    "aging-only": ({"priority": "aging-only"}, "aging term only, no static priorities"),
    "edf": ({"priority": "edf"}, "earliest deadline first, deadline = arrival + the modality's TTFT SLO "
                                 "(needs slo.ttft_s per modality)"),
}


def _rps_ablation(queue_keys: dict):
    def defaults(n: int) -> dict:
        base = get_system("rps-serve").defaults_for(n)
        return {**base, "policy": {**base["policy"], "queue": {**_RPS_QUEUE, **queue_keys}}}
    return defaults


for _name, (_keys, _what) in _RPS_ABLATIONS.items():
    register_system(SystemPreset(
        name=f"rps-serve-{_name}",
        summary=f"RPS-Serve ablation: {_what}",
        reference="RPS-Serve's ablation study (rps-serve.txt section 4.3, Fig. 14)",
        defaults=_rps_ablation(_keys),
        notes=_RPS_NOTES,
    ))


def _easerve(local: bool):
    def defaults(n: int) -> dict:
        encoders = max(1, n // 4)
        rest = max(2, n - encoders)
        prefill_tp = min(2, _pow2_at_most(rest // 2)) if rest >= 2 else 1
        decode_tp = _pow2_at_most(max(1, rest - prefill_tp))
        dep = {
            "kind": "e_p_d",
            "encoder": {"workers": encoders, "tp": 1, "dispatch": {"kind": "poisson_gap", "max_batch": 10},
                        "envelope_transfer": True},
            "prefill": {"tp": prefill_tp}, "decode": {"tp": decode_tp}, "admission": "after_encode",
        }
        if local:
            dep["local_prefill"] = {"tp": 2 if encoders % 2 == 0 else 1,
                                    "offload": {"kind": "deficit", "remote_fraction": 0.55},
                                    "sm_partitioning": "dynamic"}
        return {"deployment": dep, "policy": {**_FCFS, "batching": {"kind": "chunked_prefill"}}}
    return defaults


_EASERVE_NOTES = (
    "Default allocation for n GPUs: n // 4 encoders (TP1), one TP2 prefill worker, the largest power-of-two TP "
    "decode worker that fits the rest (8 GPUs: 2E + 1P(TP2) + 1D(TP4), EAServe Table 6); tune with `lmmsim "
    "search` (HAS).",
    "Encoder batches: poisson_gap (B = 10) -- dispatch at B requests, when no arrival came within the "
    "estimated rate's Poisson gap, or at max_age_s; one envelope transfer per batch and destination.",
    "Local prefill (easerve only): prefill workers on the encoder GPUs, a deficit counter sends "
    "remote_fraction s = 0.55 of the requests to the remote prefill worker; dynamic SM partitioning per "
    "batch from the start-up SM table; HBM bandwidth shared.",
)

register_system(SystemPreset(
    name="easerve",
    summary="E + P + D with Poisson-gap encode micro-batching, envelope transfer, deficit-routed local prefill on "
            "the encoder GPUs and dynamic SM partitioning",
    reference="EAServe: encode-aware EPD serving (easerve.txt section 3)",
    defaults=_easerve(True),
    notes=_EASERVE_NOTES,
))

register_system(SystemPreset(
    name="easerve-s1",
    summary="EAServe with s = 1: every prefill remote, no local prefill (micro-batching and envelopes kept)",
    reference="EAServe's 'Ours (s=1)' configuration (easerve.txt section 4.1)",
    defaults=_easerve(False),
    notes=_EASERVE_NOTES,
))

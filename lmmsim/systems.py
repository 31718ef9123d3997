"""Named systems: presets of deployment + policies a scenario picks with ``system:``.

A preset only supplies defaults; every key a scenario sets overrides it. Each
entry says in one line what it is and cites where it is defined.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lmmsim.errors import UserError, choices


@dataclass(frozen=True)
class SystemPreset:
    name: str
    summary: str
    reference: str
    defaults: dict = field(default_factory=dict)


_SYSTEMS: dict[str, SystemPreset] = {}


def register_system(preset: SystemPreset) -> SystemPreset:
    if preset.name in _SYSTEMS:
        raise ValueError(f"system {preset.name!r} registered twice")
    _SYSTEMS[preset.name] = preset
    return preset


def get_system(name: str) -> SystemPreset:
    if name not in _SYSTEMS:
        raise UserError("system", f"unknown system {name!r}; valid: {choices(_SYSTEMS)}")
    return _SYSTEMS[name]


def systems() -> dict[str, SystemPreset]:
    return dict(sorted(_SYSTEMS.items()))


register_system(
    SystemPreset(
        name="vllm",
        summary="monolithic engine per replica (encoder + LLM, TP), FCFS, continuous batching with chunked prefill",
        reference="Kwon et al., 'Efficient Memory Management for LLM Serving with PagedAttention', SOSP 2023; "
        "vLLM v1 scheduler; chunked prefill after Agrawal et al., Sarathi-Serve, OSDI 2024",
        defaults={
            "deployment": {"kind": "monolithic"},
            "policy": {
                "queue": {"kind": "fcfs"},
                "batching": {"kind": "chunked_prefill"},
                "router": {"kind": "round_robin"},
            },
        },
    )
)

"""Scenario YAML -> validated :class:`Scenario`.

Every key is declared once, here or in the config class of the component it
configures (workload, policies), with ``extra="forbid"`` and a discriminated
union for every ``kind:``. Loading goes:

1. read the YAML mapping, apply ``--set dotted.key=value`` overrides;
2. lay it over the named ``system`` preset (the preset supplies defaults, the
   scenario wins; a sub-mapping whose ``kind`` differs from the preset's
   replaces it whole);
3. validate; the first problem becomes one :class:`UserError` naming the
   dotted key.

Catalog names (model, GPU, interconnect) and the memory fit are checked when
the run is built (:mod:`lmmsim.build`), where the catalogs are at hand.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Literal

import yaml
from pydantic import (BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, PrivateAttr, ValidationError,
                      field_validator)

from lmmsim import policies
from lmmsim.costmodel.engine_overheads import EngineCostsConfig
from lmmsim.deployments import DeploymentConfig, MonolithicDeployment
from lmmsim.engine.media_cache import ProcessorCacheConfig
from lmmsim.config_errors import describe, most_specific
from lmmsim.errors import UserError
from lmmsim.yamlio import read_yaml
from lmmsim.policies.batching import ChunkedPrefillConfig
from lmmsim.policies.queueing import FcfsConfig
from lmmsim.policies.routing import RoundRobinConfig
from lmmsim.systems import get_system
from lmmsim.workload.config import WorkloadConfig
from lmmsim.workload.request import MODALITIES


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HardwareConfig(_Strict):
    gpu: str
    count: PositiveInt = 1
    interconnect: str = "nvlink"
    # "auto": the GPU's fitted operator models if it ships some, else the
    # roofline v0; "roofline": always v0; otherwise a folder written by `lmmsim fit`.
    cost_model: str = "auto"


@functools.lru_cache(maxsize=4)
def _policy_config_for(version: int):
    # Built lazily, and again after a registration, so policies registered by plugins
    # (entry points or the registry API) are part of the unions.
    class PolicyConfig(_Strict):
        queue: policies.config_union("queue") = FcfsConfig()  # type: ignore[valid-type]
        batching: policies.config_union("batching") = ChunkedPrefillConfig()  # type: ignore[valid-type]
        router: policies.config_union("router") = RoundRobinConfig()  # type: ignore[valid-type]

    return PolicyConfig


class SloConfig(_Strict):
    """Service-level objectives. ``ttft_s``: one bound, or one per modality
    (a modality left out has no TTFT bound)."""

    ttft_s: PositiveFloat | dict[Literal[MODALITIES], PositiveFloat] | None = None  # type: ignore[valid-type]
    tpot_s: PositiveFloat | None = None
    # Multiplies every bound (RPS-Serve's "SLO scale" 1x-4x: strict to relaxed).
    scale: PositiveFloat = 1.0

    def ttft_by_modality(self) -> dict[str, float]:
        if self.ttft_s is None:
            return {}
        if isinstance(self.ttft_s, dict):
            return {m: v * self.scale for m, v in self.ttft_s.items()}
        return {m: float(self.ttft_s) * self.scale for m in MODALITIES}

    @property
    def tpot_bound_s(self) -> float | None:
        return None if self.tpot_s is None else self.tpot_s * self.scale


class HostConfig(_Strict):
    """Host (CPU) preprocessing before the GPUs (:mod:`lmmsim.engine.host`,
    :mod:`lmmsim.assembly.host_stage`).

    ``placement``: where media decode + the model's processor run. ``api_server``:
    in the front end's ``workers`` processes (vLLM's ``--api-server-count``, default
    1), which also tokenise every prompt; ``encode_worker``: inside each encoder
    worker, ``encode_worker_processes`` processes each, before its GPU calls (Dynamo's
    encode worker), the front end tokenising only; ``auto`` (default):
    ``encode_worker`` when the deployment has an encoder pool, else ``api_server``;
    ``none``: no host stage. Costs come from the measured profile ``profile`` (a folder
    under ``profiles/host/`` or a path) divided by ``cpu_speed``, the serving CPU's
    speed relative to the profiled one (1: the profiled CPU, a 2-core cloud VM;
    see ``profiles/host/cpu/README.md``). ``per_request_s`` / ``per_item_s``
    replace the measured costs by constants (a what-if knob)."""

    placement: Literal["auto", "api_server", "encode_worker", "none"] = "auto"
    workers: PositiveInt = 1
    encode_worker_processes: PositiveInt = 1
    profile: str = "cpu"
    cpu_speed: PositiveFloat = 1.0
    image_format: Literal["jpeg", "png"] = "jpeg"
    processor: Literal["slow", "fast"] = "slow"
    per_request_s: float | None = Field(None, ge=0)
    per_item_s: float | None = Field(None, ge=0)
    # vLLM's multimodal processor cache (mm_processor_cache_gb): a media id seen recently skips
    # the processor (not the decode); see lmmsim.engine.media_cache
    processor_cache: ProcessorCacheConfig = ProcessorCacheConfig()

    @property
    def constant(self) -> bool:
        return self.per_request_s is not None or self.per_item_s is not None


class SimConfig(_Strict):
    horizon_s: PositiveFloat | None = None  # stop the clock here; later requests are reported unfinished
    fast_forward: bool = True  # apply decode-only stretches as one event (exact)
    # false: bounded memory -- requests built as they arrive, each one's row written to
    # requests.parquet as it ends and its state dropped (lmmsim.metrics.stream)
    keep_requests: bool = True
    # with keep_requests false: the summary read back exactly from the written file (true), or
    # from streaming sketches taken during the run (false: each percentile within 0.2%)
    exact_summary: bool = True


def scenario_cls():
    """The Scenario model with every policy registered so far in its unions."""
    return _scenario_cls_for(policies.registry_version())


@functools.lru_cache(maxsize=4)
def _scenario_cls_for(version: int):
    PolicyConfig = _policy_config_for(version)

    class Scenario(_Strict):
        name: str = "scenario"
        seed: int = Field(0, ge=0)
        system: str = "vllm"
        model: str
        hardware: HardwareConfig
        deployment: DeploymentConfig = MonolithicDeployment()
        policy: PolicyConfig = PolicyConfig()
        workload: WorkloadConfig
        slo: SloConfig = SloConfig()
        sim: SimConfig = SimConfig()
        # Per-step engine costs beyond the kernels (lmmsim.costmodel.engine_overheads).
        engine: EngineCostsConfig = EngineCostsConfig()
        host: HostConfig = HostConfig()
        # Where its relative paths resolve, when loaded by the Python API (lmmsim.api): the
        # scenario file's folder, or the working directory for a dict / YAML text. Not a key.
        _base_dir: Path | None = PrivateAttr(None)

        @field_validator("name")
        @classmethod
        def _one_path_component(cls, name: str) -> str:
            # lmmsim run writes results/<name>/ by default: the name must stay one folder there
            if not name or name in (".", "..") or any(c in name for c in "/\\\0"):
                raise ValueError(f"must be a single folder name (no '/', '\\', '..', not empty); got {name!r}")
            return name

    return Scenario


# ------------------------------------------------------------------- overrides
def apply_override(raw: dict, assignment: str) -> None:
    """Apply one ``dotted.key=value`` (value parsed as YAML) to ``raw`` in place.

    ``key=null`` removes the key, so its default (or the system preset's) applies.
    """
    if "=" not in assignment:
        raise UserError("--set", f"expected dotted.key=value, got {assignment!r}")
    dotted, _, text = assignment.partition("=")
    keys = dotted.strip().split(".")
    if not all(keys):
        raise UserError("--set", f"bad key {dotted!r}")
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        value = text
    node = raw
    for i, key in enumerate(keys[:-1]):
        if isinstance(node, list):
            node = node[_list_index(node, key, keys[: i + 1])]
            continue
        if not isinstance(node.get(key), (dict, list)):
            node[key] = {}
        node = node[key]
    last = keys[-1]
    if isinstance(node, list):
        node[_list_index(node, last, keys)] = value
    elif value is None:
        node.pop(last, None)  # null removes the key: its default applies
    else:
        node[last] = value


def _list_index(node: list, key: str, path: list[str]) -> int:
    if not key.isdigit() or int(key) >= len(node):
        raise UserError("--set", f"{'.'.join(path)}: list index must be 0..{len(node) - 1}")
    return int(key)


def merge_over_preset(preset: dict, raw: dict) -> dict:
    """``raw`` laid over ``preset``; a mapping whose ``kind`` differs replaces the preset's."""
    out = copy.deepcopy(preset)
    for key, value in raw.items():
        base = out.get(key)
        if (
            isinstance(base, dict)
            and isinstance(value, dict)
            and not ("kind" in value and "kind" in base and value["kind"] != base["kind"])
        ):
            out[key] = merge_over_preset(base, value)
        else:
            out[key] = copy.deepcopy(value)
    return out


# ------------------------------------------------------------------ validation
def validate_scenario(raw: dict):
    """Validate a raw scenario mapping (system preset applied here)."""
    if not isinstance(raw, dict):
        raise UserError("scenario", "must be a YAML mapping of keys")
    system = raw.get("system", "vllm")
    preset = get_system(system)
    hardware = raw.get("hardware")
    count = hardware.get("count", 1) if isinstance(hardware, dict) else 1
    merged = merge_over_preset(preset.defaults_for(count if isinstance(count, int) and count > 0 else 1,
                                                   text_only=_text_only(raw.get("model"))), raw)
    merged.setdefault("system", system)
    try:
        scn = scenario_cls().model_validate(merged)
    except ValidationError as exc:
        raise UserError(*describe(most_specific(exc, merged), merged, scenario_cls())) from None
    for path in _coerced_bools(merged, scn.model_dump(), ""):
        raise UserError(path, "expected a number, got a yes/no value (true/false)")
    return scn


def _text_only(name) -> bool:
    """Does catalog model ``name`` lack an encoder? (A preset may default differently for
    it.) False for a name the catalog lacks: the build names that error."""
    if not isinstance(name, str):
        return False
    from lmmsim import catalog

    try:
        return catalog.get_model(name).encoder is None
    except UserError:
        return False


def _coerced_bools(raw, value, path: str):
    """Dotted keys where the YAML gave true/false and validation turned it into a
    number (pydantic reads ``rate: true`` as 1.0; nobody means that)."""
    if isinstance(raw, bool):
        if value is not None and not isinstance(value, bool):
            yield path
    elif isinstance(raw, dict) and isinstance(value, dict):
        for key, sub in raw.items():
            if key in value:
                yield from _coerced_bools(sub, value[key], f"{path}.{key}" if path else str(key))
    elif isinstance(raw, list) and isinstance(value, (list, tuple)):
        for i, (sub, val) in enumerate(zip(raw, value)):
            yield from _coerced_bools(sub, val, f"{path}.{i}")


def examples_dir() -> Path:
    """The example scenarios shipped as package data (``lmmsim/scenarios``; a checkout's
    ``scenarios/`` links to it)."""
    from importlib import resources

    return Path(str(resources.files("lmmsim") / "scenarios"))


def scenario_file(path: str | Path) -> Path:
    """``path`` when it exists; else the shipped example it names -- ``quickstart``,
    ``quickstart.yaml``, ``scenarios/quickstart.yaml`` or ``baselines/text-vllm`` -- so the
    README's commands work from any folder; else ``path`` (whose reading reports it missing)."""
    path = Path(path)
    if path.exists() or path.is_absolute():
        return path
    rel = path.relative_to("scenarios") if path.parts[:1] == ("scenarios",) else path
    for candidate in (rel, rel.with_name(rel.name + ".yaml")):
        if candidate.parts and (examples_dir() / candidate).is_file():
            return examples_dir() / candidate
    return path


def load_scenario(path: str | Path, overrides: list[str] = ()):
    """Read, override and validate a scenario file (or a shipped example by name, see
    :func:`scenario_file`). Returns ``(scenario, base_dir)``; relative paths inside the
    scenario (traces, cost models, host profiles, empirical lengths) are relative to
    ``base_dir``, the scenario file's folder -- not the working directory."""
    path = scenario_file(path)
    if not path.exists():
        raise UserError(str(path), "scenario file not found (`lmmsim list scenarios` lists the shipped examples)")
    if path.is_dir():
        raise UserError(str(path), "is a folder; give a scenario YAML file")
    raw = read_yaml(path, "scenario file")
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise UserError(str(path), "a scenario must be a YAML mapping of keys")
    for assignment in overrides:
        apply_override(raw, assignment)
    return validate_scenario(raw), path.resolve().parent


def dump_scenario(scenario) -> str:
    """The fully resolved scenario as YAML (defaults included)."""
    return yaml.safe_dump(scenario.model_dump(mode="json"), sort_keys=False)

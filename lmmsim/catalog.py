"""Hardware and model catalogs, loaded from ``profiles/gpus/*.yaml`` and ``profiles/models/*.yaml``.

Every numeric figure in a catalog file carries its source in the file's
``sources:`` mapping (dotted field -> citation); ``tests/test_catalog.py``
checks that none is missing. Users add a GPU or model by dropping a YAML file
into those folders (or a folder named by ``LMMSIM_PROFILES``).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, ValidationError

from lmmsim.errors import UserError, choices
from lmmsim.tokenrules import AudioRule, ImageRule, VideoRule
from lmmsim.workload.request import MediaItem

BYTES_PER_PARAM_BF16 = 2


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --------------------------------------------------------------------- hardware
class LinkSpec(_Strict):
    """A point-to-point link: per-direction bandwidth and one-way latency."""

    bandwidth_gbs: PositiveFloat  # GB/s per direction (1e9 bytes)
    latency_us: float = Field(ge=0)


class RooflineEfficiency(_Strict):
    """Parameters of cost model v0 (roofline with size-dependent efficiency).

    Achieved fraction of peak = ``*_max * x / (x + *_half)`` where x is the
    operator's FLOPs (compute) or bytes (memory); every kernel also pays
    ``kernel_launch_us``. Small problems are therefore inefficient, as on real
    GPUs. The calibration issue replaces these with fitted predictors.
    """

    compute_max: float = Field(gt=0, le=1)
    compute_half_flops: float = Field(ge=0)
    memory_max: float = Field(gt=0, le=1)
    memory_half_bytes: float = Field(ge=0)
    kernel_launch_us: float = Field(ge=0)


class GpuSpec(_Strict):
    name: str
    display_name: str
    peak_bf16_tflops: PositiveFloat
    hbm_bandwidth_tbs: PositiveFloat
    memory_gib: PositiveFloat
    num_sms: PositiveInt
    links: dict[str, LinkSpec]  # interconnect name (nvlink, pcie, network) -> link
    efficiency: RooflineEfficiency
    # Fitted operator models (``lmmsim fit``), relative to the profiles folder;
    # used by default when present (scenario key hardware.cost_model).
    fitted_profile: str | None = None
    sources: dict[str, str]

    @property
    def memory_bytes(self) -> float:
        return self.memory_gib * 2**30

    @property
    def peak_flops(self) -> float:
        return self.peak_bf16_tflops * 1e12

    @property
    def hbm_bytes_per_s(self) -> float:
        return self.hbm_bandwidth_tbs * 1e12


# ------------------------------------------------------------------------ models
class LlmSpec(_Strict):
    """Decoder-only LLM backbone dimensions (a HF ``config.json`` subset)."""

    hidden_size: PositiveInt
    num_layers: PositiveInt
    num_heads: PositiveInt
    num_kv_heads: PositiveInt
    head_dim: PositiveInt | None = None  # defaults to hidden_size / num_heads
    intermediate_size: PositiveInt
    vocab_size: PositiveInt
    gated_mlp: bool = True  # SwiGLU / GeGLU: gate + up + down projections
    qkv_bias: bool = False
    tie_word_embeddings: bool = False
    max_context: PositiveInt

    @property
    def dim_head(self) -> int:
        return self.head_dim or self.hidden_size // self.num_heads

    @property
    def num_params(self) -> int:
        h, f, hd = self.hidden_size, self.intermediate_size, self.dim_head
        attn = h * (self.num_heads + 2 * self.num_kv_heads) * hd + self.num_heads * hd * h
        mlp = (3 if self.gated_mlp else 2) * h * f
        per_layer = attn + mlp + 2 * h
        embed = self.vocab_size * h
        head = 0 if self.tie_word_embeddings else self.vocab_size * h
        return self.num_layers * per_layer + embed + head + h

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes per token over all layers (bf16 K and V)."""
        return 2 * self.num_layers * self.num_kv_heads * self.dim_head * BYTES_PER_PARAM_BF16


class ProjectorSpec(_Strict):
    """Encoder -> LLM projector MLP applied to merged encoder tokens."""

    input_dim: PositiveInt
    hidden_dim: PositiveInt
    output_dim: PositiveInt
    num_layers: PositiveInt = 2
    tokens_merged: PositiveInt = 1  # encoder tokens folded into one LLM token before it


class EncoderSpec(_Strict):
    """Vision / audio encoder dimensions."""

    family: Literal["qwen_vit", "siglip", "clip", "intern_vit", "whisper"]
    hidden_size: PositiveInt
    num_layers: PositiveInt
    num_heads: PositiveInt
    intermediate_size: PositiveInt
    gated_mlp: bool = False
    patch_size: PositiveInt
    # Window attention (Qwen2.5-VL): layers not listed attend within windows of
    # ``window_tokens`` patches; listed layers attend over the whole item.
    window_tokens: PositiveInt | None = None
    full_attention_layers: tuple[int, ...] = ()
    projector: ProjectorSpec

    @property
    def num_params(self) -> int:
        h, f = self.hidden_size, self.intermediate_size
        per_layer = 4 * h * h + (3 if self.gated_mlp else 2) * h * f + 4 * h
        p = self.projector
        dims = [p.input_dim] + [p.hidden_dim] * (p.num_layers - 1) + [p.output_dim]
        proj = sum(a * b for a, b in zip(dims, dims[1:]))
        return self.num_layers * per_layer + proj


class MediaRules(_Strict):
    """How each medium becomes encoder work and LLM tokens (None: unsupported)."""

    image: ImageRule | None = None
    video: VideoRule | None = None
    audio: AudioRule | None = None


class ModelSpec(_Strict):
    name: str
    display_name: str
    hf_id: str
    llm: LlmSpec
    encoder: EncoderSpec | None = None
    media: MediaRules = MediaRules()
    sources: dict[str, str]

    @property
    def modalities(self) -> tuple[str, ...]:
        return ("text",) + tuple(m for m in ("image", "video", "audio") if getattr(self.media, m) is not None)

    def _rule(self, modality: str):
        rule = getattr(self.media, modality)
        if rule is None or self.encoder is None:
            raise UserError(
                "model", f"{self.name!r} does not take {modality} input (it takes {choices(self.modalities)})"
            )
        return rule

    def image_item(self, width: int, height: int) -> MediaItem:
        return self._rule("image").item(width, height)

    def video_item(self, frames: int, width: int, height: int) -> MediaItem:
        return self._rule("video").item(frames, width, height)

    def audio_item(self, seconds: float) -> MediaItem:
        return self._rule("audio").item(seconds)

    @property
    def weight_bytes(self) -> int:
        enc = self.encoder.num_params if self.encoder else 0
        return (self.llm.num_params + enc) * BYTES_PER_PARAM_BF16


# ----------------------------------------------------------------------- loading
def profiles_dir() -> Path:
    """The catalog root: ``$LMMSIM_PROFILES`` or the repository's ``profiles/``."""
    env = os.environ.get("LMMSIM_PROFILES")
    if env:
        return Path(env)
    return Path(__file__).resolve().parent.parent / "profiles"


def _load_folder(folder: Path, cls):
    entries = {}
    for path in sorted(folder.glob("*.yaml")):
        try:
            data = yaml.safe_load(path.read_text())
            spec = cls.model_validate(data)
        except (yaml.YAMLError, ValidationError) as exc:
            first = str(exc).splitlines()
            raise UserError(str(path), " ".join(first[:3])) from None
        entries[spec.name] = spec
    return entries


@functools.lru_cache(maxsize=4)
def _gpus(root: str) -> dict[str, GpuSpec]:
    return _load_folder(Path(root) / "gpus", GpuSpec)


@functools.lru_cache(maxsize=4)
def _models(root: str) -> dict[str, ModelSpec]:
    return _load_folder(Path(root) / "models", ModelSpec)


def gpus() -> dict[str, GpuSpec]:
    return _gpus(str(profiles_dir()))


def models() -> dict[str, ModelSpec]:
    return _models(str(profiles_dir()))


def get_gpu(name: str, key: str = "hardware.gpu") -> GpuSpec:
    table = gpus()
    if name not in table:
        raise UserError(key, f"unknown GPU {name!r}; valid: {choices(table)}")
    return table[name]


def get_model(name: str, key: str = "model") -> ModelSpec:
    table = models()
    if name not in table:
        raise UserError(key, f"unknown model {name!r}; valid: {choices(table)}")
    return table[name]

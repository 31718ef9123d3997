"""Hardware and model catalogs, loaded from ``profiles/gpus/*.yaml`` and ``profiles/models/*.yaml``
(package data, ``lmmsim/profiles``; ``profiles/`` at a checkout's root links to it), with each folder
of ``$LMMSIM_PROFILES`` (a search path) laid over them: its entries win by name.

Every numeric figure in a catalog file carries its source in the file's
``sources:`` mapping (dotted field -> citation); ``tests/test_catalog.py``
checks that none is missing. Users add a GPU or model by dropping a YAML file
into those folders (or a folder named by ``LMMSIM_PROFILES``). A file that does
not load is reported (one line: file and field) only by what needs it; the
format is in README "Catalog format".
"""

from __future__ import annotations

import functools
import os
import sys
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, ValidationError

from lmmsim.config_errors import describe
from lmmsim.errors import UserError, choices
from lmmsim.tokenrules import AudioRule, ImageRule, VideoRule
from lmmsim.workload.request import MediaItem
from lmmsim.yamlio import read_yaml

BYTES_PER_PARAM_BF16 = 2
WHISPER_MEL_BINS = 128  # Whisper-large-v3 log-mel channels: the audio encoder's conv-stem input


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


class HostCpuSpec(_Strict):
    """The host CPUs of the reference server a GPU ships in (for sizing host preprocessing;
    lmmsim's host costs come from a measured profile and ``host.cpu_speed``, not from these)."""

    server: str
    cpu: str
    cores_per_node: PositiveInt
    gpus_per_node: PositiveInt

    @property
    def cores_per_gpu(self) -> float:
        return self.cores_per_node / self.gpus_per_node


class GpuSpec(_Strict):
    name: str
    display_name: str
    peak_bf16_tflops: PositiveFloat
    # Dense FP8 tensor-core peak (datasheet, without sparsity); None: the GPU has no FP8
    # tensor cores (A100), and ``deployment.dtype: fp8`` is refused on it.
    peak_fp8_tflops: PositiveFloat | None = None
    hbm_bandwidth_tbs: PositiveFloat
    memory_gib: PositiveFloat
    num_sms: PositiveInt
    links: dict[str, LinkSpec]  # interconnect name (nvlink, pcie, network) -> link
    efficiency: RooflineEfficiency
    # Fitted operator models (``lmmsim fit``), relative to the profiles folder;
    # used by default when present (scenario key hardware.cost_model).
    fitted_profile: str | None = None
    host_cpu: HostCpuSpec | None = None  # the reference server's CPUs, where one is published
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
class MoeSpec(_Strict):
    """Mixture-of-experts FFN of an LLM (a HF ``config.json`` subset).

    MoE layers replace the dense MLP by a router (``hidden -> num_experts`` logits) and
    ``experts_per_token`` of ``num_experts`` gated experts of width
    ``expert_intermediate_size`` per token, plus an always-on shared expert of width
    ``shared_expert_intermediate_size`` (0: none). Layers ``0 .. first_dense_layers - 1``
    keep the dense MLP (``LlmSpec.intermediate_size``; GLM-4.5's ``first_k_dense_replace``);
    after them every ``layer_step``-th layer is MoE (Llama 4's ``interleave_moe_layer_step``),
    the others dense.
    """

    num_experts: PositiveInt
    experts_per_token: PositiveInt
    expert_intermediate_size: PositiveInt
    shared_expert_intermediate_size: int = Field(0, ge=0)
    first_dense_layers: int = Field(0, ge=0)
    layer_step: PositiveInt = 1


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
    qk_norm: bool = False  # per-head RMSNorm on Q and K before rotary (Qwen3, GLM-4.5)
    moe: MoeSpec | None = None  # None: every layer has the dense MLP

    @property
    def dim_head(self) -> int:
        return self.head_dim or self.hidden_size // self.num_heads

    @property
    def num_moe_layers(self) -> int:
        """Layers whose MLP is a MoE block: after ``moe.first_dense_layers`` dense ones, every
        ``moe.layer_step``-th (HF Llama 4: layers ``step - 1, 2 step - 1, ...``); 0 when dense."""
        moe = self.moe
        if moe is None:
            return 0
        return max(0, self.num_layers - moe.first_dense_layers) // moe.layer_step

    @property
    def num_params(self) -> int:
        """All parameters: every layer (a MoE layer's router, all its routed experts and its
        shared expert), norms, the embedding and an untied LM head."""
        h, f, hd = self.hidden_size, self.intermediate_size, self.dim_head
        attn = h * (self.num_heads + 2 * self.num_kv_heads) * hd + self.num_heads * hd * h
        mlp = (3 if self.gated_mlp else 2) * h * f
        per_layer = attn + mlp + 2 * h
        embed = self.vocab_size * h
        head = 0 if self.tie_word_embeddings else self.vocab_size * h
        total = self.num_layers * per_layer + embed + head + h
        if self.qk_norm:
            total += self.num_layers * 2 * hd  # q_norm and k_norm weights (one head_dim vector each)
        if self.moe is not None:
            n = self.num_moe_layers
            # a MoE layer has the router, experts and shared expert instead of the dense MLP
            total += n * (self._router_params_per_layer + self._routed_params_per_layer
                          + self._shared_params_per_layer - mlp)
        return total

    @property
    def active_params(self) -> int:
        """Parameters one token uses: :attr:`num_params` with ``experts_per_token`` of each MoE
        layer's routed experts instead of all of them (equal to it for a dense model)."""
        if self.moe is None:
            return self.num_params
        unused = self.moe.num_experts - self.moe.experts_per_token
        return self.num_params - self.num_moe_layers * unused * self._expert_params

    @property
    def expert_params(self) -> int:
        """Routed experts' parameters over all MoE layers (what expert parallelism splits)."""
        return self.num_moe_layers * self._routed_params_per_layer

    @property
    def router_params(self) -> int:
        """Routers' parameters over all MoE layers (replicated on every GPU, kept bf16)."""
        return self.num_moe_layers * self._router_params_per_layer

    @property
    def linear_params(self) -> int:
        """Parameters of the linear layers an FP8 (W8A8) checkpoint quantises: attention
        QKV/O, dense MLPs, shared and routed experts. Not the embedding, LM head, norms or
        routers, which stay bf16 (vLLM's FP8 checkpoints keep ``lm_head`` and the embedding
        unquantised; Qwen3's FP8 checkpoints also list the ``mlp.gate`` routers as not converted)."""
        h, hd = self.hidden_size, self.dim_head
        attn = h * (self.num_heads + 2 * self.num_kv_heads) * hd + self.num_heads * hd * h
        mlp = (3 if self.gated_mlp else 2) * h * self.intermediate_size
        n_moe = self.num_moe_layers
        moe = self._routed_params_per_layer + self._shared_params_per_layer if n_moe else 0
        return self.num_layers * attn + (self.num_layers - n_moe) * mlp + n_moe * moe

    @property
    def _expert_params(self) -> int:
        """One routed expert (gated: gate, up, down)."""
        m = self.moe
        return (3 if self.gated_mlp else 2) * self.hidden_size * m.expert_intermediate_size if m else 0

    @property
    def _routed_params_per_layer(self) -> int:
        return self.moe.num_experts * self._expert_params if self.moe else 0

    @property
    def _router_params_per_layer(self) -> int:
        return self.hidden_size * self.moe.num_experts if self.moe else 0

    @property
    def _shared_params_per_layer(self) -> int:
        m = self.moe
        return (3 if self.gated_mlp else 2) * self.hidden_size * m.shared_expert_intermediate_size if m else 0

    def weight_bytes_per_gpu(self, *, tp: int, pp: int = 1, dp: int = 1, dtype: str = "bf16") -> float:
        """LLM weight bytes on each GPU of a ``dp x tp x pp`` worker (one stage's share)::

            (non-expert bytes) / (tp x pp)  +  router bytes / pp  +  expert bytes / (dp x tp x pp)

        Non-expert layers (attention, dense MLPs, shared experts, embedding, LM head, norms)
        are split over ``tp`` and replicated on each of the ``dp`` attention ranks; routed
        experts are spread over all ``dp x tp`` GPUs of a stage (``ep`` groups of
        ``moe_tp = dp x tp / ep`` GPUs each hold ``1 / (ep x moe_tp)`` of them, whatever ``ep``);
        routers are replicated. ``dtype`` ``fp8`` stores :attr:`linear_params` in 1 byte, the
        rest in 2. A dense bf16 model: ``num_params x 2 / (tp x pp)``, as before.
        """
        b = BYTES_PER_PARAM_BF16
        wb = 1 if dtype == "fp8" else b
        expert = self.expert_params
        router = self.router_params
        linear = self.linear_params
        non_expert = (self.num_params - router - linear) * b + (linear - expert) * wb  # embedding, head, norms bf16
        return non_expert / (tp * pp) + router * b / pp + expert * wb / (dp * tp * pp)

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes per token over all layers (bf16 K and V; an FP8 cache holds half)."""
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
    # Qwen3-VL's DeepStack: extra patch mergers (each shaped like ``projector``) on the
    # outputs of intermediate ViT layers, whose outputs are added to early LLM layers.
    deepstack_mergers: int = Field(0, ge=0)
    # How patch positions enter: learned absolute embeddings added after the stem, 2-D
    # rotary on Q and K in every layer, or both (Qwen3-VL). None: by family (qwen_vit
    # rotary only, the others learned only).
    position_embedding: Literal["learned", "rotary_2d", "learned_and_rotary_2d"] | None = None

    @property
    def num_params(self) -> int:
        h, f = self.hidden_size, self.intermediate_size
        per_layer = 4 * h * h + (3 if self.gated_mlp else 2) * h * f + 4 * h
        p = self.projector
        dims = [p.input_dim] + [p.hidden_dim] * (p.num_layers - 1) + [p.output_dim]
        proj = sum(a * b for a, b in zip(dims, dims[1:]))
        return self.num_layers * per_layer + (1 + self.deepstack_mergers) * proj  # DeepStack: projector-shaped


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
        """LLM (all experts included) + encoder parameters in bf16."""
        enc = self.encoder.num_params if self.encoder else 0
        return (self.llm.num_params + enc) * BYTES_PER_PARAM_BF16


# ----------------------------------------------------------------------- loading
# Each file is read when its folder is first used and validated only when its
# entry is needed, so one broken file costs only the commands that use it.
# Entries are keyed by their ``name:`` field (a file's name is not checked
# against it); a file whose ``name:`` cannot be read is found by its file name.

MISSING_SOURCES_HINT = 'every catalog file cites its figures, see README "Catalog format"'


def builtin_dir() -> Path:
    """The shipped catalog: package data ``lmmsim/profiles`` (``importlib.resources``), the same
    folder in a checkout (``profiles/`` at the root links to it), an editable install or a wheel."""
    return Path(str(resources.files("lmmsim") / "profiles"))


def search_path() -> list[Path]:
    """Catalog roots, first wins: each ``$LMMSIM_PROFILES`` entry (``os.pathsep``-separated,
    ``:`` on POSIX) laid over the built-in catalog, which is always last."""
    user = [Path(p) for p in os.environ.get("LMMSIM_PROFILES", "").split(os.pathsep) if p]
    return [*user, builtin_dir()]


def profiles_dir() -> Path:
    """Where lmmsim writes catalog data by default (``lmmsim fit``, ``profile``, ``profile-host``):
    the first ``$LMMSIM_PROFILES`` entry, else the built-in catalog. Read with :func:`find`."""
    return search_path()[0]


def find(rel: str | Path) -> Path:
    """``rel`` (e.g. ``ops/h200/fit``, ``host/cpu``) under the first root of :func:`search_path`
    that has it; under :func:`profiles_dir` when none has (the caller reports it missing)."""
    for root in search_path():
        if (root / rel).exists():
            return root / rel
    return profiles_dir() / rel


def subfolders(sub: str) -> list[str]:
    """Names of the folders in ``<root>/<sub>/`` over every root (e.g. host profiles)."""
    return sorted({p.name for root in search_path() if (root / sub).is_dir() for p in (root / sub).iterdir()
                   if p.is_dir()})


def _shown(path: Path) -> Path:
    """``path`` relative to the working directory when under it: errors read ``profiles/...``."""
    try:
        return Path(os.path.abspath(path)).relative_to(Path.cwd())
    except ValueError:
        return path


def _validate(path: Path, data, cls):
    """``cls`` from a file's mapping; the first problem is one UserError naming file and field."""
    if not isinstance(data, dict):
        got = "an empty file" if data is None else f"a {type(data).__name__}"
        raise UserError(str(path), f"a catalog file must be a YAML mapping of keys (got {got})")
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        field, message = describe(exc.errors()[0], data, cls)
        if field == "sources" and message == "required key is missing":
            message += f"; {MISSING_SOURCES_HINT}"
        raise UserError(f"{path}: {field}" if field else str(path), message) from None


class _Entry:
    """One catalog file: read at once, validated on first use, result kept."""

    def __init__(self, path: Path, cls):
        self.path, self._cls = path, cls
        self._spec, self._error, self._data = None, None, None
        try:
            self._data = read_yaml(path, "catalog file")
        except UserError as err:
            self._error = err

    @property
    def name(self) -> str:
        """The ``name:`` it declares, or (unreadable) the file name it is most likely meant by."""
        declared = self._data.get("name") if isinstance(self._data, dict) else None
        return declared if isinstance(declared, str) else self.path.stem

    def spec(self):
        """The validated entry, or the file's UserError (raised every time it is asked for)."""
        if self._spec is None and self._error is None:
            try:
                self._spec = _validate(self.path, self._data, self._cls)
            except UserError as err:
                self._error = err
        if self._error is not None:  # a fresh copy: re-raising one object keeps growing its traceback
            raise UserError(self._error.key, self._error.message) from None
        return self._spec

    def error(self) -> UserError | None:
        try:
            self.spec()
        except UserError as err:
            return err
        return None


class _Folder:
    """The entries of ``<root>/<sub>/*.yaml`` by name over the roots (built-ins first, so a
    user root's entry of the same name wins); ``what`` names them in errors."""

    def __init__(self, folders: list[Path], cls, what: str):
        self.what = what
        self.entries: dict[str, _Entry] = {}
        for folder in folders:
            for path in sorted(folder.glob("*.yaml")):
                entry = _Entry(_shown(path), cls)
                self.entries[entry.name] = entry  # a later file or root of the same name wins

    def good(self) -> dict:
        return {name: e.spec() for name, e in self.entries.items() if e.error() is None}

    def broken(self) -> list[UserError]:
        return [err for e in self.entries.values() if (err := e.error()) is not None]

    def get(self, name: str, key: str):
        entry = self.entries.get(name)
        if entry is not None:
            return entry.spec()
        raise UserError(key, f"unknown {self.what} {name!r}; valid: {choices(self.good())}{self._hint(name)}")

    def _hint(self, name: str) -> str:
        """Point at a broken file called ``<name>.yaml``: it may be the entry the user means."""
        for entry in self.entries.values():
            if entry.path.stem == name and (err := entry.error()) is not None:
                return f"; broken file of that name: {err}"
        return ""


@functools.lru_cache(maxsize=4)
def _gpu_folder(roots: tuple[str, ...]) -> _Folder:
    return _Folder([Path(r) / "gpus" for r in reversed(roots)], GpuSpec, "GPU")


@functools.lru_cache(maxsize=4)
def _model_folder(roots: tuple[str, ...]) -> _Folder:
    return _Folder([Path(r) / "models" for r in reversed(roots)], ModelSpec, "model")


def _roots() -> tuple[str, ...]:
    return tuple(str(r) for r in search_path())


def reload() -> None:
    """Forget every loaded catalog: the next use reads the files again (tests, edited files)."""
    _gpu_folder.cache_clear()
    _model_folder.cache_clear()


def _good_with_warnings(folder: _Folder) -> dict:
    # The whole table is what `lmmsim list` shows: say on stderr which files it leaves out.
    for err in folder.broken():
        print(f"lmmsim: warning: {err}; this entry is skipped", file=sys.stderr)
    return folder.good()


def gpus() -> dict[str, GpuSpec]:
    """Every GPU that loads; a warning line on stderr for each file that does not."""
    return _good_with_warnings(_gpu_folder(_roots()))


def models() -> dict[str, ModelSpec]:
    """Every model that loads; a warning line on stderr for each file that does not."""
    return _good_with_warnings(_model_folder(_roots()))


def get_gpu(name: str, key: str = "hardware.gpu") -> GpuSpec:
    return _gpu_folder(_roots()).get(name, key)


def get_model(name: str, key: str = "model") -> ModelSpec:
    return _model_folder(_roots()).get(name, key)


def entry_path(kind: Literal["gpu", "model"], name: str) -> Path | None:
    """The file catalog entry ``name`` was read from (the winning root's), or None if unknown."""
    folder = (_gpu_folder if kind == "gpu" else _model_folder)(_roots())
    entry = folder.entries.get(name)
    return entry.path if entry is not None else None

"""Costs a real engine pays per step beyond its model's kernels: named, sourced terms.

:class:`ComposedStepCostModel` (``lmmsim.costmodel.composed``) sums the kernels
of one forward pass. A serving engine such as vLLM V1 also pays, per step:

``cudagraph_padding``
    vLLM V1 runs a batch of ``n <= max capture size`` tokens through CUDA
    graphs captured for a fixed list of sizes, padding ``n`` up to the next
    captured size (``vllm/v1/worker/gpu_model_runner.py``:
    ``num_input_tokens = vllm_config.pad_for_cudagraph(num_scheduled_tokens)``;
    piecewise graphs for mixed batches, full graphs for decode-only ones from
    v0.11, padded alike). Default sizes (``vllm/config`` ``_set_cudagraph_sizes``,
    v0.9-v0.11): ``[1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16)`` with
    ``max = min(2 * max_num_seqs, 512)``. Charged as the token-count dependent
    layers (linear layers, norms, rotary, collectives) at the padded count minus
    at the real count; attention and the LM head run on real rows (attention is
    outside the piecewise graphs, ``compute_logits`` runs on the sampled rows).
``collective_launch``
    CPU launch cost per tensor-parallel collective call. Vidur charges 20 us per
    NCCL call (``microsoft/vidur`` ``vidur/config/config.py``,
    ``BaseExecutionTimePredictorConfig.nccl_cpu_launch_overhead_ms = 0.02``,
    added to every all-reduce in
    ``execution_time_predictor/sklearn_execution_time_predictor.py``
    ``_get_tensor_parallel_communication_time``). A step replayed from a CUDA
    graph launches its collectives from the graph (vLLM captures the custom /
    NCCL all-reduce inside the graph, ``graph_capture`` in
    ``vllm/distributed/parallel_state.py``), so the CPU cost applies only to
    steps that run eagerly: ``cudagraphs: false`` (vLLM ``--enforce-eager``,
    Vidur's model) or more tokens than the largest capture size. Calls per
    step: the composition's all-reduces, 2 per decoder layer + 1 for the
    vocabulary-parallel embedding, + 1 logits gather when rows are sampled;
    none when ``tp == 1``.
``step_cpu``
    CPU time per step of the engine's scheduler and input preparation that the
    GPU waits for. vLLM V1 with async scheduling (``--async-scheduling``,
    vllm-project/vllm#19970) overlaps it with the previous step; without it,
    early V1 showed 5-6 ms between decode steps at batch 256 on Llama-2-7B,
    estimated to fall to 0.2-0.3 ms when overlapped (vllm-project/vllm#10634).
    Both figures depend on batch size and vLLM version, and no per-step
    constant has been measured for the versions we model, so it is **off by
    default** (0); set ``engine.step_cpu_us`` from a measurement of your stack.
``kv_write``
    Writing the step's new K and V into the paged cache (vLLM's
    ``reshape_and_cache_flash``, a separate kernel before FlashAttention in
    ``vllm/v1/attention/backends/flash_attn.py``): per layer, read and write
    ``tokens x 2 x kv_heads x head_dim`` bf16, costed as an elementwise kernel
    (op ``kv_write``). ``auto`` (default) charges it unless the attention
    predictor already includes the append: the fits imported from Vidur's
    profiles time ``flash_attn_with_kvcache`` with the KV append inside
    (:mod:`lmmsim.profiler.vidur_import`), and aiconfigurator's vLLM collector
    times the attention backend's ``forward`` on a pre-populated paged cache
    (``collector/vllm``: the backend writes the new K and V before its kernel;
    an assumption from the collector's structure, not a documented statement),
    so ``auto`` is off for both and on for the roofline and for fits profiled
    here (SDPA, no cache write).

Every term is switchable in the scenario's ``engine:`` mapping
(:class:`EngineCostsConfig`); with all off the step cost is the kernels' sum,
bit for bit. :meth:`ComposedStepCostModel.llm_step_breakdown` lists the terms of
one step by name.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, NonNegativeFloat, PositiveInt

from lmmsim.catalog import BYTES_PER_PARAM_BF16
from lmmsim.costmodel.encoder_call import CUDA_LAUNCH_US
from lmmsim.costmodel.split_view import Split

#: vLLM's default largest CUDA-graph capture size (``min(2 * max_num_seqs, 512)``).
VLLM_MAX_CAPTURE_SIZE = 512
#: Vidur's CPU launch cost per NCCL call, in microseconds (see the module docstring).
VIDUR_NCCL_LAUNCH_US = 20.0


class EngineCostsConfig(BaseModel):
    """Scenario key ``engine``: per-step engine costs (see :mod:`lmmsim.costmodel.engine_overheads`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # CUDA graphs for batches up to the largest capture size (vLLM V1 default; false = --enforce-eager).
    cudagraphs: bool = True
    # Largest capture size; default min(2 x policy.batching.max_running, 512) as vLLM.
    cudagraph_max_tokens: PositiveInt | None = None
    # Pad graph-captured steps up to the next capture size.
    cudagraph_padding: bool = True
    # CPU launch cost per TP collective on eagerly run steps (Vidur: 20 us per NCCL call).
    collective_launch_us: NonNegativeFloat = VIDUR_NCCL_LAUNCH_US
    # CPU scheduling / input preparation per step the GPU waits for; 0 unless measured.
    step_cpu_us: NonNegativeFloat = 0.0
    # KV-cache write kernel: true, false, or auto = unless the attention fit includes the append.
    kv_write: Literal["auto"] | bool = "auto"
    # Encoder calls (lmmsim.costmodel.encoder_call): CUDA graphs for the vision/audio tower (vLLM:
    # eager unless configured), host cost per kernel launch, and the processed tensors' PCIe copy.
    encoder_cudagraphs: bool = False
    encoder_launch_us: NonNegativeFloat = CUDA_LAUNCH_US
    encoder_h2d: bool = True


def capture_sizes(max_size: int) -> tuple[int, ...]:
    """vLLM's default CUDA-graph capture sizes up to ``max_size`` (ascending)."""
    sizes = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, max_size + 1, 16))
    return tuple(s for s in sizes if s <= max_size)


def attention_includes_kv_write(predictor) -> bool:
    """Whether ``predictor``'s attention times already contain the KV-cache append:
    a fit imported from Vidur's or aiconfigurator's tables whose attention
    classes are fitted, not roofline fallbacks."""
    folder = getattr(predictor, "fit_folder", None)
    if folder is None:
        return False
    try:
        meta = json.loads((Path(folder) / "model.json").read_text()).get("profile", {}).get("meta", {})
    except (OSError, ValueError):
        return False
    importer = str(meta.get("imported_by", ""))
    if "import-vidur" not in importer and "import-aiconfigurator" not in importer:
        return False
    fallback = set(getattr(predictor, "fallback_classes", ()) or ())
    return not ({"attention_prefill", "attention_decode"} & fallback)


@dataclass(frozen=True)
class EngineOverheads:
    """Runtime values of the engine terms for one engine (plain numbers, no config)."""

    cudagraphs: bool = False
    max_capture: int = 0
    cudagraph_padding: bool = False
    collective_launch_s: float = 0.0
    step_cpu_s: float = 0.0
    kv_write: bool = False
    sizes: tuple[int, ...] = field(default=(), repr=False)

    @classmethod
    def none(cls) -> "EngineOverheads":
        """Every term off: the step cost is the kernels' sum."""
        return cls()

    @classmethod
    def from_config(cls, cfg: EngineCostsConfig, *, max_running: int, predictor=None) -> "EngineOverheads":
        sizes = capture_sizes(cfg.cudagraph_max_tokens or min(2 * max_running, VLLM_MAX_CAPTURE_SIZE))
        kv = cfg.kv_write is True or (cfg.kv_write == "auto" and not attention_includes_kv_write(predictor))
        return cls(cudagraphs=cfg.cudagraphs, max_capture=sizes[-1],
                   cudagraph_padding=cfg.cudagraphs and cfg.cudagraph_padding,
                   collective_launch_s=cfg.collective_launch_us * 1e-6, step_cpu_s=cfg.step_cpu_us * 1e-6,
                   kv_write=kv, sizes=sizes)

    @property
    def active(self) -> bool:
        return bool(self.cudagraph_padding or self.collective_launch_s or self.step_cpu_s or self.kv_write)

    def graph_captured(self, tokens: int) -> bool:
        """A step of ``tokens`` tokens replays a CUDA graph."""
        return self.cudagraphs and 0 < tokens <= self.max_capture

    def padded_tokens(self, tokens: int) -> int:
        """``tokens`` padded to the next capture size (unchanged when not graph-captured or padding is off)."""
        if not (self.cudagraph_padding and self.graph_captured(tokens)):
            return tokens
        return self.sizes[bisect.bisect_left(self.sizes, tokens)]

    def describe(self) -> dict:
        """What a run summary shows of these terms."""
        return {"cudagraphs": self.cudagraphs, "cudagraph_max_tokens": self.max_capture,
                "cudagraph_padding": self.cudagraph_padding, "collective_launch_us": self.collective_launch_s * 1e6,
                "step_cpu_us": self.step_cpu_s * 1e6, "kv_write": self.kv_write}


def step_terms(cm, p, key: int) -> dict:
    """The engine terms of a step of ``abs(key)`` tokens (rows sampled when ``key > 0``) of the step
    cost model ``cm`` (:class:`~lmmsim.costmodel.composed.ComposedStepCostModel`), by name, over
    ``p``: its predictor (seconds) or its split view (:class:`~lmmsim.costmodel.split_view.Split`
    pairs). Each term's source: the module docstring."""
    ov = cm.overheads
    tokens, sampled = abs(key), key > 0
    cpu = (lambda s: s) if p is cm.predictor else (lambda s: Split(0.0, s))  # host time: not SM-bound
    terms = {"cudagraph_padding": 0, "kv_write": 0, "collective_launch": cpu(0.0), "step_cpu": cpu(ov.step_cpu_s)}
    rank = -(-tokens // cm.dp)  # DP ranks pad and capture graphs per rank, in lockstep
    padded = ov.padded_tokens(rank)
    if padded != rank:
        terms["cudagraph_padding"] = cm._dense_cost(p, padded * cm.dp) + cm._dense_cost(p, tokens) * -1
    if ov.kv_write:
        # reshape_and_cache: read the new K and V, write them into the paged cache
        kv_bytes = 2 * rank * cm._kv_heads * cm._head_dim * BYTES_PER_PARAM_BF16
        written = kv_bytes // 2 if cm._kv_fp8 else kv_bytes  # an FP8 cache stores 1 byte per element
        terms["kv_write"] = cm._layers * p.elementwise_s(kv_bytes + written, op="kv_write")
    a2a = 2 * cm.model.llm.num_moe_layers if cm.dp > 1 else 0  # dispatch + combine per MoE layer
    if (cm.tp > 1 or a2a) and ov.collective_launch_s and not ov.graph_captured(rank):
        calls = 2 * cm._layers + 1 + (1 if sampled else 0) + a2a  # per-layer all-reduces, embedding, logits gather
        terms["collective_launch"] = cpu(calls * ov.collective_launch_s)
    return terms

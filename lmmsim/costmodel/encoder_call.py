"""What one encoder call costs beyond its GPU kernels, from mechanisms.

The GPU cost model (``encode_s``) times the encoder's kernels. A served call
also pays, on the host:

``h2d`` (per media item)
    The processed tensors -- pixel patches (3 x patch^2 values per encoder
    token, x 2 frames for Qwen's temporal patch) or Whisper log-mel features
    (128 bins x 2 mel frames per encoder frame) -- in float32, as the Hugging
    Face processors return them, copied to the GPU over PCIe before the forward:
    the link's latency plus bytes over its bandwidth (``profiles/gpus``,
    ``links.pcie``), serially, before the kernels.
``issue`` (per call)
    Issuing the forward's kernels. Run eagerly (vLLM runs its vision towers
    without CUDA graphs unless configured: ``engine.encoder_cudagraphs``), each
    layer costs the host its Python ``forward`` and ATen dispatch -- measured per
    family by ``lmmsim profile-host`` (``encoder_dispatch.csv``: one layer's host
    time on CPU tensors, divided by ``host.cpu_speed``) -- plus one
    ``cudaLaunchKernel`` per kernel op (``kernel_ops_per_layer`` in the same
    file) at ``engine.encoder_launch_us`` each (3.8 us default: NVIDIA's
    "Getting Started with CUDA Graphs" blog, 2019, measured 3.8 us per
    back-to-back launched short kernel, 3.4 us replayed from a graph), plus,
    with ``tp > 1``, two all-reduces per layer at ``engine.collective_launch_us``.
    With CUDA graphs the call is one graph launch (``encoder_launch_us``). The
    host issues asynchronously, so the GPU waits only for what issuing takes
    beyond its kernels: ``max(0, issue - gpu)``. One forward per call is assumed
    (a batch's items concatenated), so issuing does not grow with the batch.

Neither term is fitted to a result; both can be switched off
(``engine.encoder_h2d: false``, ``engine.encoder_launch_us: 0``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lmmsim.catalog import WHISPER_MEL_BINS
from lmmsim.costmodel.host_costs import processor_family
from lmmsim.costmodel.small_csv import read_columns
from lmmsim.errors import UserError

F32 = 4
#: NVIDIA Technical Blog, "Getting Started with CUDA Graphs" (A. Gray, 2019): 3.8 us per short
#: kernel launched back to back in a stream (the launch-bound rate); see the module docstring.
CUDA_LAUNCH_US = 3.8


def processed_bytes(family: str, patch_size: int, work) -> int:
    """Bytes of the processor's output for one item: what crosses PCIe."""
    if family == "whisper":
        # patch_size mel frames per encoder frame: 2 for Whisper (conv stride 2), 8 for AuT
        return work.num_tokens * patch_size * WHISPER_MEL_BINS * F32
    frames = 2 if family == "qwen_vit" else 1
    return work.num_tokens * 3 * frames * patch_size**2 * F32


def dispatch_row(folder: Path, family: str, variant: str | None = None) -> dict | None:
    """The measured eager-layer row for an encoder family (bfloat16, inference mode where recorded):
    its values typed as pandas types them (:mod:`lmmsim.costmodel.small_csv`)."""
    path = Path(folder) / "encoder_dispatch.csv"
    if not path.is_file():
        return None
    cols = read_columns(path)
    rows = [i for i, v in enumerate(cols["family"]) if v == family]
    for col, want in (("encoder", variant), ("dtype", "bfloat16"), ("grad_mode", "inference_mode")):
        if want is not None and col in cols:
            kept = [i for i in rows if cols[col][i] == want]
            rows = kept or rows  # a value nobody recorded keeps the rows
    return {c: v[rows[0]] for c, v in cols.items()} if rows else None


def encoder_variant(model) -> str | None:
    """Which measured layer stands for a family with two (Qwen2.5-VL's and Qwen3-VL's towers)."""
    if model.encoder is None or model.encoder.family != "qwen_vit":
        return None
    return "qwen3_vl" if model.media.image is not None and processor_family(model, "image") == "qwen3_vl" \
        else "qwen2_5_vl"


@dataclass
class EncoderCallCosts:
    """Host seconds of encoder calls for one model on one GPU link (see the module docstring)."""

    family: str
    patch_size: int
    layers: int
    h2d_latency_s: float
    h2d_bytes_per_s: float  # 0: no copy modelled
    issue_s: float  # host time to issue one call's kernels

    def __post_init__(self):
        self._h2d_memo: dict = {}

    def h2d_s(self, work) -> float:
        t = self._h2d_memo.get(work)
        if t is None:
            t = 0.0
            if self.h2d_bytes_per_s:
                t = self.h2d_latency_s + processed_bytes(self.family, self.patch_size, work) / self.h2d_bytes_per_s
            self._h2d_memo[work] = t
        return t

    def host_s(self, works, gpu_s: float) -> float:
        """Time the call adds to its kernels: the copies, then issuing beyond what the GPU hides."""
        if len(works) == 1:  # most calls: the one copy is the sum (0 + t is t; a copy takes t >= 0)
            return self.h2d_s(works[0]) + max(0.0, self.issue_s - gpu_s)
        return sum(self.h2d_s(w) for w in works) + max(0.0, self.issue_s - gpu_s)

    def describe(self) -> dict:
        return {"issue_ms": self.issue_s * 1e3, "layers": self.layers,
                "h2d_gbs": self.h2d_bytes_per_s / 1e9 if self.h2d_bytes_per_s else 0}


def encoder_call_costs(model, gpu, tp: int, cfg, host_folder: Path | None, cpu_speed: float,
                       variant: str | None = None) -> EncoderCallCosts | None:
    """The call costs of ``model``'s encoder at tensor parallelism ``tp`` under the scenario's
    ``engine`` config ``cfg``; ``host_folder``: the host profile with ``encoder_dispatch.csv``."""
    enc = model.encoder
    if enc is None:
        return None
    link = gpu.links.get("pcie")
    h2d_bw = link.bandwidth_gbs * 1e9 if (cfg.encoder_h2d and link is not None) else 0.0
    launch = cfg.encoder_launch_us * 1e-6
    if cfg.encoder_cudagraphs:
        issue = launch
    else:
        row = dispatch_row(host_folder, enc.family, variant) if host_folder is not None else None
        if row is None and launch:
            raise UserError("engine.encoder_launch_us",
                            f"the host profile {host_folder} has no encoder_dispatch.csv row for encoder family "
                            f"{enc.family!r}; run `lmmsim profile-host`, or set engine.encoder_launch_us: 0 or "
                            f"engine.encoder_cudagraphs: true")
        per_layer = 0.0
        if row is not None and launch:
            per_layer = row["time_us"] * 1e-6 / cpu_speed + row["kernel_ops_per_layer"] * launch
            if tp > 1:
                per_layer += 2 * cfg.collective_launch_us * 1e-6
        issue = enc.num_layers * per_layer
    return EncoderCallCosts(enc.family, enc.patch_size, enc.num_layers,
                            link.latency_us * 1e-6 if link is not None else 0.0, h2d_bw, issue)

"""Cost model v0: a roofline with size-dependent efficiency.

Every kernel is limited either by arithmetic or by HBM traffic, whichever
takes longer, and pays a fixed launch cost::

    time = max(flops / (peak * eff_c(flops)), bytes / (hbm * eff_m(bytes))) + launch

The achieved fraction of peak grows with problem size and saturates::

    eff_c(x) = compute_max * x / (x + compute_half_flops)
    eff_m(x) = memory_max  * x / (x + memory_half_bytes)

so a kernel with ``compute_half_flops`` FLOPs reaches half of its best
throughput. This is what makes small batches inefficient on a real GPU (too
few thread blocks to fill the SMs, pipeline warm-up, tail effects), which is
the premise of encoder batching in EAServe. Substituting eff_c into the
compute term gives a simple closed form::

    flops / (peak * eff_c(flops)) = (flops + compute_half_flops) / (peak * compute_max)

i.e. every kernel behaves as if it did ``compute_half_flops`` extra FLOPs at
the best achievable rate; the memory term has the same shape. That is how the
code below evaluates it (no division by a possibly-zero size).

All tensors are bf16 (2 bytes per element). Collectives use the engine's
interconnect :class:`~lmmsim.catalog.LinkSpec`. The calibration work replaces
this class by fitted predictors with the same methods
(:class:`~lmmsim.costmodel.base.OperatorPredictor`).

Compute-bound / memory-bound split
----------------------------------
For GPU sharing (:mod:`lmmsim.engine.gpu_share`) every operator also has a
``*_parts`` twin returning ``(compute_s, memory_s)``: which resource the kernel
is bound by decides where its *whole* time goes. A kernel whose compute term
wins (strictly) is compute-bound, ``(kernel_s, 0.0)``; otherwise (ties and
pure-traffic kernels included) it is memory-bound, ``(0.0, kernel_s)``. So
``sum(x_parts(...)) == x_s(...)`` exactly, for every operator.

* **Launch overhead goes with the kernel's bound.** A kernel is one interval
  on the GPU; its launch/ramp penalty is part of that interval and a kernel
  slowed by SM or HBM contention stays in flight correspondingly longer. A
  third "fixed" bucket would be more precise for launch-dominated kernels, but
  the sharing model only has the two rates, and the launch cost is a few
  microseconds per kernel.
* **Small kernels.** The size-efficiency penalty (``compute_half_flops``)
  is part of the compute term, so a kernel too small to fill the GPU (e.g.
  decode attention of a batch of one) can come out compute-bound although it
  is really occupancy/latency-bound; under an SM partition such a kernel
  slows less than ``1 / g(share)``. Conservative; negligible for batches
  that matter (a 64-sequence decode step is ~98 % memory-bound).
* **Collectives and point-to-point sends are memory-bound**
  (``(0.0, t)``): they are limited by the link (NVLink / PCIe), not by the
  SMs; the sharing model treats link time like HBM time (not isolated by an
  SM partition). NCCL kernels do occupy a few SMs, which this ignores.
"""

from __future__ import annotations

from lmmsim.catalog import GpuSpec, LinkSpec
from lmmsim.costmodel.moe import busiest_rank
from lmmsim.costmodel.transfer import transfer_s

BYTES_BF16 = 2


class RooflinePredictor:
    """Roofline operator predictor for one GPU (implements ``OperatorPredictor``).

    ``interconnect`` is the link between the GPUs of one tensor-parallel group
    (None for a single-GPU engine; collectives over more than one GPU then raise).
    """

    def __init__(self, gpu: GpuSpec, interconnect: LinkSpec | None = None):
        self.gpu = gpu
        self.interconnect = interconnect
        eff = gpu.efficiency
        # Precomputed constants of the closed forms (see module docstring).
        self._compute_rate = gpu.peak_flops * eff.compute_max  # FLOP/s at saturation
        self._compute_half = eff.compute_half_flops
        self._memory_rate = gpu.hbm_bytes_per_s * eff.memory_max  # B/s at saturation
        self._memory_half = eff.memory_half_bytes
        self._launch_s = eff.kernel_launch_us / 1e6
        # FP8 tensor cores: same efficiency curve at the FP8 peak (None: the GPU has none).
        self._fp8_rate = gpu.peak_fp8_tflops * 1e12 * eff.compute_max if gpu.peak_fp8_tflops else None

    # ------------------------------------------------------------------ core
    def kernel_s(self, flops: float, num_bytes: float) -> float:
        """One kernel doing ``flops`` FLOPs and moving ``num_bytes`` HBM bytes."""
        t_compute = (flops + self._compute_half) / self._compute_rate if flops > 0 else 0.0
        t_memory = (num_bytes + self._memory_half) / self._memory_rate if num_bytes > 0 else 0.0
        return (t_compute if t_compute > t_memory else t_memory) + self._launch_s

    def kernel_parts(self, flops: float, num_bytes: float) -> tuple[float, float]:
        """``(compute_s, memory_s)`` of :meth:`kernel_s`: the whole time (launch
        included) goes to the binding term; ``sum(...) == kernel_s(...)`` exactly."""
        t_compute = (flops + self._compute_half) / self._compute_rate if flops > 0 else 0.0
        t_memory = (num_bytes + self._memory_half) / self._memory_rate if num_bytes > 0 else 0.0
        if t_compute > t_memory:
            return (t_compute + self._launch_s, 0.0)
        return (0.0, t_memory + self._launch_s)

    def kernel_fp8_s(self, flops: float, num_bytes: float) -> float:
        """:meth:`kernel_s` with the arithmetic on FP8 tensor cores (W8A8 GEMMs)."""
        return sum(self.kernel_fp8_parts(flops, num_bytes))

    def kernel_fp8_parts(self, flops: float, num_bytes: float) -> tuple[float, float]:
        """``(compute_s, memory_s)`` of :meth:`kernel_fp8_s`."""
        if self._fp8_rate is None:
            raise ValueError(f"{self.gpu.name} has no FP8 tensor cores (peak_fp8_tflops is not set)")
        t_compute = (flops + self._compute_half) / self._fp8_rate if flops > 0 else 0.0
        t_memory = (num_bytes + self._memory_half) / self._memory_rate if num_bytes > 0 else 0.0
        if t_compute > t_memory:
            return (t_compute + self._launch_s, 0.0)
        return (0.0, t_memory + self._launch_s)

    # ------------------------------------------------------------- operators
    def gemm_s(self, m: int, n: int, k: int) -> float:
        """``[m, k] x [k, n]`` bf16 matmul.

        FLOPs: one multiply and one add per (m, n, k) triple -> ``2mnk``.
        Bytes: each operand read once and the result written once ->
        ``2(mk + kn + mn)``; for a decode batch the ``kn`` weight read
        dominates, which is why small-``m`` GEMMs are memory-bound.
        """
        if m <= 0 or n <= 0 or k <= 0:
            return 0.0
        # Inline copies of _gemm_work / _prefill_work / _decode_work in the *_s
        # methods: they run on every memo miss (decode attention on every step);
        # tests pin sum(*_parts) == *_s.
        return self.kernel_s(2.0 * m * n * k, BYTES_BF16 * (m * k + k * n + m * n))

    def gemm_parts(self, m: int, n: int, k: int) -> tuple[float, float]:
        """``(compute_s, memory_s)`` of :meth:`gemm_s` (see the module docstring)."""
        if m <= 0 or n <= 0 or k <= 0:
            return (0.0, 0.0)
        return self.kernel_parts(*_gemm_work(m, n, k))

    def attention_prefill_s(
        self, new_tokens: int, context: int, num_heads: int, num_kv_heads: int, head_dim: int, causal: bool = True
    ) -> float:
        """Attention of ``new_tokens`` queries over ``context`` keys (new ones included).

        FLOPs: per query and key, ``Q.K`` and ``P.V`` each cost ``2 * head_dim``
        -> ``4 * heads * head_dim * sum(keys attended)``. Without a mask every
        query sees all ``context`` keys. With a causal mask query ``i`` of the
        chunk (0-based) sees the ``context - new_tokens`` cached keys plus
        ``i + 1`` new ones, so the average is ``context - (new_tokens - 1) / 2``
        (≈ ``context - new_tokens / 2``): a fresh prefill does about half the
        work of a full square, a small chunk at the end of a long context
        almost all of it.
        Bytes: a fused (FlashAttention-style) kernel reads Q and writes O
        (``new_tokens * heads * head_dim`` each) and reads K and V
        (``context * kv_heads * head_dim`` each) once; the score matrix never
        reaches HBM. A batch of equal-length independent sequences (encoder
        windows, image tiles) has exactly the cost of one sequence with that
        many times the heads, which is how callers batch them into one kernel.
        """
        if new_tokens <= 0:
            return 0.0
        if context < new_tokens:
            raise ValueError(f"attention context ({context}) is shorter than the new tokens ({new_tokens})")
        keys = context - (new_tokens - 1) / 2.0 if causal else float(context)
        flops = 4.0 * num_heads * head_dim * new_tokens * keys
        num_bytes = BYTES_BF16 * head_dim * (2 * new_tokens * num_heads + 2 * context * num_kv_heads)
        return self.kernel_s(flops, num_bytes)

    def attention_prefill_parts(
        self, new_tokens: int, context: int, num_heads: int, num_kv_heads: int, head_dim: int, causal: bool = True
    ) -> tuple[float, float]:
        """``(compute_s, memory_s)`` of :meth:`attention_prefill_s`."""
        if new_tokens <= 0:
            return (0.0, 0.0)
        return self.kernel_parts(*_prefill_work(new_tokens, context, num_heads, num_kv_heads, head_dim, causal))

    def attention_decode_s(
        self, batch: int, context_sum: int, num_heads: int, num_kv_heads: int, head_dim: int
    ) -> float:
        """Decode attention: ``batch`` single-token queries over ``context_sum`` cached tokens.

        Memory-bound: every cached K and V vector is read once
        (``context_sum * 2 * kv_heads * head_dim * 2`` bytes) while each one
        feeds only ``heads / kv_heads`` dot products. FLOPs
        ``4 * heads * head_dim * context_sum`` as for prefill with one query
        per sequence; Q reads and O writes (``batch * heads * head_dim`` each)
        are included though negligible.
        """
        if batch <= 0:
            return 0.0
        flops = 4.0 * num_heads * head_dim * context_sum
        num_bytes = BYTES_BF16 * head_dim * (2 * context_sum * num_kv_heads + 2 * batch * num_heads)
        return self.kernel_s(flops, num_bytes)

    def attention_decode_terms(self, batch: int, num_heads: int, num_kv_heads: int, head_dim: int) -> tuple:
        """The constants of :meth:`attention_decode_s` for one batch shape (``batch > 0``), as a
        decode fast-forward folds them into its step (lmmsim.costmodel.decode_step): ``(flops_per_key,
        bytes_per_unit, kv_per_key, q_out, compute_half, compute_rate, memory_half, memory_rate,
        launch)``, so that with ``flops = flops_per_key * context_sum`` and ``num_bytes =
        bytes_per_unit * (kv_per_key * context_sum + q_out)`` the kernel's terms are evaluated as in
        :meth:`kernel_s` -- the very floats (the products folded are exact small integers)."""
        return (4.0 * num_heads * head_dim, BYTES_BF16 * head_dim, 2 * num_kv_heads, 2 * batch * num_heads,
                self._compute_half, self._compute_rate, self._memory_half, self._memory_rate, self._launch_s)

    def attention_decode_parts(
        self, batch: int, context_sum: int, num_heads: int, num_kv_heads: int, head_dim: int
    ) -> tuple[float, float]:
        """``(compute_s, memory_s)`` of :meth:`attention_decode_s` (memory-bound in practice)."""
        if batch <= 0:
            return (0.0, 0.0)
        return self.kernel_parts(*_decode_work(batch, context_sum, num_heads, num_kv_heads, head_dim))

    def elementwise_s(self, num_bytes: float, op: str | None = None) -> float:
        """Memory-bound kernel (norm, activation, rotary, residual): bytes only.

        Their arithmetic (a few FLOPs per element) never approaches the ridge
        point of a modern GPU, so only the traffic and the launch count. ``op``
        (which kernel) is accepted and ignored: v0 has one efficiency curve
        for every kernel.
        """
        if num_bytes <= 0:
            return 0.0
        return (num_bytes + self._memory_half) / self._memory_rate + self._launch_s

    def elementwise_parts(self, num_bytes: float, op: str | None = None) -> tuple[float, float]:
        """``(0.0, elementwise_s(num_bytes))``: always memory-bound."""
        return (0.0, self.elementwise_s(num_bytes))

    def allreduce_s(self, num_bytes: float, world: int) -> float:
        """Ring all-reduce of ``num_bytes`` (each GPU's buffer) over ``world`` GPUs.

        A ring reduce-scatter followed by an all-gather: each runs ``world - 1``
        steps in which every GPU sends ``bytes / world`` to its neighbour, so a
        GPU sends ``2 (world - 1) / world * bytes`` in total over its own link
        (all links busy in parallel) and the ``2 (world - 1)`` steps each pay
        the link latency. Zero for a single GPU (nothing to reduce).
        """
        if world <= 1 or num_bytes <= 0:
            return 0.0
        link = self._link()
        steps = 2 * (world - 1)
        return steps / world * num_bytes / (link.bandwidth_gbs * 1e9) + steps * link.latency_us / 1e6

    def allreduce_parts(self, num_bytes: float, world: int) -> tuple[float, float]:
        """``(0.0, allreduce_s(...))``: link-bound, counted as memory-bound time."""
        return (0.0, self.allreduce_s(num_bytes, world))

    def p2p_s(self, num_bytes: float) -> float:
        """Send to a neighbouring GPU: latency + bytes / bandwidth (:func:`transfer_s`)."""
        return transfer_s(num_bytes, self._link())

    def p2p_parts(self, num_bytes: float) -> tuple[float, float]:
        """``(0.0, p2p_s(num_bytes))``: link-bound, counted as memory-bound time."""
        return (0.0, self.p2p_s(num_bytes))

    # ------------------------------------------------------- FP8 and MoE
    def gemm_fp8_s(self, m: int, n: int, k: int) -> float:
        """W8A8 FP8 ``[m, k] x [k, n]`` matmul: ``2mnk`` FLOPs at the FP8 peak; weights and
        input activations 1 byte per element, the bf16 output 2 (``mk + kn + 2mn`` bytes)."""
        return sum(self.gemm_fp8_parts(m, n, k))

    def gemm_fp8_parts(self, m: int, n: int, k: int) -> tuple[float, float]:
        """``(compute_s, memory_s)`` of :meth:`gemm_fp8_s`."""
        if m <= 0 or n <= 0 or k <= 0:
            return (0.0, 0.0)
        return self.kernel_fp8_parts(2.0 * m * n * k, m * k + k * n + BYTES_BF16 * m * n)

    def attention_decode_fp8_s(
        self, batch: int, context_sum: int, num_heads: int, num_kv_heads: int, head_dim: int
    ) -> float:
        """:meth:`attention_decode_s` over an FP8 KV cache: the K and V reads are 1 byte per
        element (half); the arithmetic stays bf16 (the kernel dequantises as it loads)."""
        return sum(self.attention_decode_fp8_parts(batch, context_sum, num_heads, num_kv_heads, head_dim))

    def attention_decode_fp8_parts(
        self, batch: int, context_sum: int, num_heads: int, num_kv_heads: int, head_dim: int
    ) -> tuple[float, float]:
        """``(compute_s, memory_s)`` of :meth:`attention_decode_fp8_s`."""
        if batch <= 0:
            return (0.0, 0.0)
        flops = 4.0 * num_heads * head_dim * context_sum
        num_bytes = head_dim * (2 * context_sum * num_kv_heads + BYTES_BF16 * 2 * batch * num_heads)
        return self.kernel_parts(flops, num_bytes)

    def moe_experts_s(self, tokens: int, hidden: int, inter: int, num_experts: int, topk: int,
                      moe_tp: int, moe_ep: int, dtype: str = "bf16", routing: str = "balanced") -> float:
        """The routed experts of one MoE layer on one GPU (gated: gate/up GEMM, activation,
        down GEMM, as vLLM's fused MoE runs them).

        ``tokens`` enter the layer on this EP group before dispatch, each routed to
        ``topk`` of ``num_experts`` experts (aiconfigurator's moe_perf ``num_tokens``);
        experts are split over ``moe_ep`` ranks and each over ``moe_tp`` GPUs
        (``inter / moe_tp`` columns here). The most loaded rank decides
        (:func:`lmmsim.costmodel.moe.busiest_rank`: ``pairs`` token-expert assignments,
        ``touched`` experts that receive at least one token): FLOPs
        ``2 x 3 x pairs x hidden x inter / moe_tp``; bytes: the touched experts' weights
        read once plus the activations in and out of each kernel. ``dtype`` ``fp8``: FP8
        weights and inputs (1 byte), FP8 tensor-core peak; outputs bf16.
        """
        return sum(self.moe_experts_parts(tokens, hidden, inter, num_experts, topk, moe_tp, moe_ep, dtype, routing))

    def moe_experts_parts(self, tokens: int, hidden: int, inter: int, num_experts: int, topk: int,
                          moe_tp: int, moe_ep: int, dtype: str = "bf16", routing: str = "balanced"):
        """``(compute_s, memory_s)`` of :meth:`moe_experts_s`, kernel by kernel."""
        if tokens <= 0:
            return (0.0, 0.0)
        kernels = moe_expert_kernels(tokens, hidden, inter, num_experts, topk, moe_tp, moe_ep, dtype, routing)
        gemm = self.kernel_fp8_parts if dtype == "fp8" else self.kernel_parts
        c = m = 0.0
        for flops, num_bytes in kernels:
            kc, km = gemm(flops, num_bytes) if flops else (0.0, self.elementwise_s(num_bytes))
            c += kc
            m += km
        return (c, m)

    def moe_alltoall_s(self, tokens: int, hidden: int, topk: int, ep: int, phase: str = "dispatch") -> float:
        """DeepEP-style dispatch (``phase`` "dispatch") or combine ("combine") on one rank
        holding ``tokens`` tokens: one bf16 copy per (token, expert) -- DeepEP's
        low-latency kernels send per expert -- of which ``(ep - 1) / ep`` leave the GPU,
        ``tokens x topk x hidden x 2 x (ep - 1) / ep`` bytes over the interconnect, plus
        one link latency (every peer is reached at once). Both phases move the same bytes."""
        if ep <= 1 or tokens <= 0:
            return 0.0
        link = self._link()
        num_bytes = tokens * topk * hidden * BYTES_BF16 * (ep - 1) / ep
        return num_bytes / (link.bandwidth_gbs * 1e9) + link.latency_us / 1e6

    def moe_alltoall_parts(self, tokens: int, hidden: int, topk: int, ep: int, phase: str = "dispatch"):
        """``(0.0, moe_alltoall_s(...))``: link-bound."""
        return (0.0, self.moe_alltoall_s(tokens, hidden, topk, ep, phase))

    def _link(self) -> LinkSpec:
        if self.interconnect is None:
            raise ValueError(f"{self.gpu.name}: a collective over several GPUs needs an interconnect link")
        return self.interconnect


# ------------------------------------------------------------------ work
def moe_expert_kernels(tokens: int, hidden: int, inter: int, num_experts: int, topk: int, moe_tp: int,
                       moe_ep: int, dtype: str, routing: str) -> list[tuple[float, float]]:
    """(FLOPs, bytes) of the kernels of :meth:`RooflinePredictor.moe_experts_s` on the busiest
    rank: the permute (gather of each token's routed copies), the gate/up GEMM, the gated
    activation, the down GEMM and the unpermute (top-k weighted sum back to token order).
    The scope is vLLM's fused-experts call, which aiconfigurator's moe_perf times (sort and
    permute to top-k sum included, router and all-to-alls not), so the roofline and a
    fitted ``moe_experts`` answer for the same kernels. Zero-FLOP entries are elementwise."""
    pairs, touched = busiest_rank(tokens, num_experts, topk, moe_ep, routing)
    i = -(-inter // moe_tp)
    w = 1 if dtype == "fp8" else BYTES_BF16  # weights and GEMM inputs
    return [
        (0.0, 2 * pairs * hidden * BYTES_BF16),  # permute: read and write each routed copy
        (2.0 * pairs * hidden * 2 * i, touched * hidden * 2 * i * w + pairs * (hidden * w + 2 * i * BYTES_BF16)),
        (0.0, pairs * 3 * i * BYTES_BF16),  # read gate|up, write the product
        (2.0 * pairs * i * hidden, touched * i * hidden * w + pairs * (i * w + hidden * BYTES_BF16)),
        (0.0, (pairs + -(-pairs // topk)) * hidden * BYTES_BF16),  # unpermute: read the copies, write tokens
    ]


# (FLOPs, HBM bytes) of one kernel; the formulas are explained in the
# docstrings of the matching RooflinePredictor methods.
def _gemm_work(m: int, n: int, k: int) -> tuple[float, int]:
    return 2.0 * m * n * k, BYTES_BF16 * (m * k + k * n + m * n)


def _prefill_work(
    new_tokens: int, context: int, num_heads: int, num_kv_heads: int, head_dim: int, causal: bool
) -> tuple[float, int]:
    if context < new_tokens:
        raise ValueError(f"attention context ({context}) is shorter than the new tokens ({new_tokens})")
    keys = context - (new_tokens - 1) / 2.0 if causal else float(context)
    flops = 4.0 * num_heads * head_dim * new_tokens * keys
    num_bytes = BYTES_BF16 * head_dim * (2 * new_tokens * num_heads + 2 * context * num_kv_heads)
    return flops, num_bytes


def _decode_work(batch: int, context_sum: int, num_heads: int, num_kv_heads: int, head_dim: int) -> tuple[float, int]:
    flops = 4.0 * num_heads * head_dim * context_sum
    num_bytes = BYTES_BF16 * head_dim * (2 * context_sum * num_kv_heads + 2 * batch * num_heads)
    return flops, num_bytes

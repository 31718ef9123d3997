"""The cost-model interfaces the engine depends on.

Two layers:

* :class:`OperatorPredictor` predicts one operator on one GPU from its shape
  (GEMM, attention, elementwise, collectives). Cost model v0 is a roofline
  (:mod:`lmmsim.costmodel.roofline`); the calibration work plugs fitted
  scikit-learn predictors in behind the same methods.
* :class:`StepCostModel` composes operators per model architecture into what
  an engine asks: the time of one LLM step over a batch, of one encoder batch,
  of a transfer. Implementations memoise, so the engine can call them every
  step; they never call scikit-learn per step.

All times are seconds; all sizes are per GPU (already divided by TP).
"""

from __future__ import annotations

from typing import Protocol, Sequence

from lmmsim.workload.request import EncoderWork


class OperatorPredictor(Protocol):
    def gemm_s(self, m: int, n: int, k: int) -> float:
        """[m, k] x [k, n] bf16 matmul."""

    def attention_prefill_s(
        self, new_tokens: int, context: int, num_heads: int, num_kv_heads: int, head_dim: int, causal: bool = True
    ) -> float:
        """One sequence's attention: ``new_tokens`` queries over ``context`` keys
        (context includes the new tokens)."""

    def attention_decode_s(
        self, batch: int, context_sum: int, num_heads: int, num_kv_heads: int, head_dim: int
    ) -> float:
        """Decode attention of ``batch`` sequences, one query each, reading
        ``context_sum`` cached tokens in total."""

    def elementwise_s(self, num_bytes: float, op: str | None = None) -> float:
        """A memory-bound elementwise kernel (norm, activation, rotary, residual)
        that moves ``num_bytes`` in total.

        ``op`` names the kernel, one of
        :data:`~lmmsim.costmodel.opdata.ELEMENTWISE_OPS` (other names go through
        :func:`~lmmsim.costmodel.opdata.canonical_elementwise_op`); kernels of
        equal traffic differ several-fold in achieved bandwidth. A predictor
        may ignore it (the roofline does); None means "some elementwise kernel"."""

    def allreduce_s(self, num_bytes: float, world: int) -> float:
        """All-reduce of ``num_bytes`` across ``world`` GPUs (0 when world == 1)."""

    def p2p_s(self, num_bytes: float) -> float:
        """Point-to-point send of ``num_bytes`` to a neighbouring GPU."""

    # Operators of FP8 and MoE models. Optional: a predictor without them is answered by the
    # roofline on the same GPU (lmmsim.costmodel.split_view.ExtraOps), so dense bf16 models
    # never call them.
    def gemm_fp8_s(self, m: int, n: int, k: int) -> float:
        """[m, k] x [k, n] W8A8 FP8 matmul (FP8 weights and inputs, bf16 output)."""

    def attention_decode_fp8_s(
        self, batch: int, context_sum: int, num_heads: int, num_kv_heads: int, head_dim: int
    ) -> float:
        """:meth:`attention_decode_s` reading an FP8 KV cache."""

    def moe_experts_s(self, tokens: int, hidden: int, inter: int, num_experts: int, topk: int,
                      moe_tp: int, moe_ep: int, dtype: str, routing: str) -> float:
        """The routed-expert FFN of one MoE layer on one GPU: ``tokens`` enter the layer on
        this EP group (before dispatch), each routed to ``topk`` of ``num_experts`` experts of
        width ``inter``, split over ``moe_ep`` ranks and each over ``moe_tp`` GPUs; ``dtype``
        "bf16" | "fp8"; ``routing`` one of :data:`lmmsim.costmodel.moe.ROUTINGS`."""

    def moe_alltoall_s(self, tokens: int, hidden: int, topk: int, ep: int, phase: str) -> float:
        """MoE dispatch (``phase`` "dispatch") or combine ("combine") all-to-all of one rank
        holding ``tokens`` tokens over ``ep`` ranks (bf16 payload)."""


class StepCostModel(Protocol):
    """Per (model, GPU, TP) costs an engine asks for."""

    def llm_step_s(
        self,
        prefill_chunks: Sequence[tuple[int, int]],
        num_decodes: int,
        decode_context_sum: int,
        num_sampled: int,
    ) -> float:
        """One forward pass of the LLM over a batch.

        ``prefill_chunks``: (new_tokens, context_after_chunk) per prefilling
        sequence; ``num_decodes`` sequences decode one token each, attending to
        ``decode_context_sum`` tokens in total (their contexts including the
        new token); ``num_sampled`` sequences need the LM head (decodes plus
        prefills that complete in this step).
        """

    def encode_s(self, works: Sequence[EncoderWork]) -> float:
        """The encoder (plus projector) over a batch of media items."""

    def encode_host_s(self, works: Sequence[EncoderWork]) -> float:
        """Host time the call adds to :meth:`encode_s` (copies, kernel issue; 0: none modelled)."""

    def encode_call_s(self, works: Sequence[EncoderWork]) -> float:
        """A whole encoder call in an engine step: :meth:`encode_s` + :meth:`encode_host_s`."""

    @property
    def weight_bytes_per_gpu(self) -> float:
        """Model weights resident on each GPU of the engine."""

    @property
    def kv_bytes_per_token_per_gpu(self) -> float:
        """KV-cache bytes one token occupies on each GPU of the engine."""

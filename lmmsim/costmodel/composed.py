"""Step costs composed from operator predictions, per model architecture.

:class:`ComposedStepCostModel` turns a model's layer shapes into the operator
calls one forward pass makes on one GPU of a tensor-parallel group and sums
their predicted times. It knows nothing about a particular predictor: the
roofline (:class:`~lmmsim.costmodel.roofline.RooflinePredictor`) and fitted
predictors plug in alike.

Tensor parallelism follows Megatron-LM, as vLLM implements it:

* QKV and gate/up projections are column-parallel (output features split over
  ``tp``), O and down projections row-parallel (input features split); each
  of the two row-parallel outputs is all-reduced (``tokens x hidden`` bf16)
  when ``tp > 1``.
* Attention heads split over ``tp``; KV heads too, but never below one per
  GPU: with fewer KV heads than GPUs each KV head is replicated.
* The embedding is vocabulary-parallel (each GPU looks up the rows it holds,
  an all-reduce combines them); the LM head is split over the vocabulary and
  applied only to the ``num_sampled`` rows that need a token; the logits are
  then gathered.
* Norms, rotary embedding and the activation are memory-bound elementwise
  kernels. Residual adds are fused into the RMSNorm that follows them
  (vLLM's ``fused_add_rms_norm``), so a decoder layer runs two fused
  add+norm kernels (and the final norm is one too). Biases are folded into
  GEMM epilogues (free). Every elementwise call names its kernel
  (``op=``, one of :data:`~lmmsim.costmodel.opdata.ELEMENTWISE_OPS`): a
  fitted predictor has one model per kernel, the roofline ignores it.

MoE layers, expert and attention data parallelism (``ep``, ``dp``) are composed in
:mod:`lmmsim.costmodel.moe` and :mod:`lmmsim.costmodel.data_parallel`; ``dtype: fp8``
runs the linear layers as W8A8 FP8 GEMMs (the LM head, router and embedding stay bf16,
as in vLLM's FP8 checkpoints), ``kv_cache_dtype: fp8`` reads an FP8 KV cache in decode
attention. A dense bf16 model without QK-norm or DP takes the original composition
below, so its costs do not change. Predictors without the FP8 / MoE operators are
answered by the roofline on the same GPU (:class:`~lmmsim.costmodel.split_view.ExtraOps`).

The encoder runs sharded over the same ``tp`` GPUs, with the same Megatron
split (heads padded up to a multiple of ``tp`` when they do not divide, as
vLLM does for InternViT); its patch embedding is small and replicated.

Speed: the engine asks for ``llm_step_s`` once per simulated step. Everything
except decode attention is memoised — the linear layers, norms and
collectives depend only on the step's total token count, prefill attention
on each chunk's ``(new_tokens, context)``, the LM head on ``num_sampled`` —
so a step costs a few dictionary look-ups plus one predictor call for decode
attention (whose context sum changes every step, so it would not memoise).
Memo tables are cleared when they grow past ``MEMO_LIMIT`` entries, which
bounds memory and never changes a result (every entry is a pure function of
its key).

Engine terms: with ``overheads`` (:class:`~lmmsim.costmodel.engine_overheads.EngineOverheads`,
from the scenario's ``engine:`` mapping) a step also pays CUDA-graph padding,
per-collective CPU launches on eager steps, the KV-cache write and a per-step
CPU time, each sourced in :mod:`lmmsim.costmodel.engine_overheads`. They depend
only on the step's token count and whether it samples, so they are one more
memo look-up per step (no SimPy event). :meth:`ComposedStepCostModel.llm_step_breakdown`
names every term of a step. In the compute / memory split below, host-side
(CPU) terms count as memory-bound time: they do not use SMs.

Compute / memory split (for GPU sharing, :mod:`lmmsim.engine.gpu_share`):
:meth:`ComposedStepCostModel.llm_step_parts` and
:meth:`~ComposedStepCostModel.encode_parts` return ``(compute_s, memory_s)``,
the step's time in compute-bound and in memory-bound kernels, with
``compute_s + memory_s == llm_step_s(...)`` (resp. ``encode_s``) up to float
rounding (the same kernel times, summed in another order). Each kernel goes
whole into one bucket, by its binding roofline term; launch overhead goes with
the kernel; all-reduces, gathers and sends are link-bound and count as
memory-bound (see :mod:`lmmsim.costmodel.roofline`). The composition is
written once: the same code runs over the predictor's ``*_s`` methods (floats,
the totals, unchanged) or over a view whose methods return ``(compute,
memory)`` pairs. The pairs come from the predictor's ``*_parts`` methods when
it has them (:class:`~lmmsim.costmodel.roofline.RooflinePredictor` does); a
predictor without them (a fitted one) keeps its own times and borrows the
roofline's per-kernel classification on the same GPU. The parts have their
own memo tables, so the ``llm_step_s`` / ``encode_s`` paths are untouched.
"""

from __future__ import annotations

import functools
from typing import Sequence

from lmmsim.catalog import BYTES_PER_PARAM_BF16, WHISPER_MEL_BINS, GpuSpec, ModelSpec
from lmmsim.costmodel.base import OperatorPredictor
from lmmsim.costmodel.data_parallel import dp_attention, per_rank, rank_tokens, step_parts as _dp_step_parts, step_s as _dp_step_s
from lmmsim.costmodel.decode_step import DecodeSteps
from lmmsim.costmodel.engine_overheads import EngineOverheads, step_terms
from lmmsim.costmodel.fitcache import prefetch_dense_block, prefetch_fresh_prefills
from lmmsim.costmodel.moe import DEFAULT_ALL2ALL, DEFAULT_ROUTING, layers_cost
from lmmsim.costmodel.split_view import OPS as _OPS
from lmmsim.costmodel.split_view import BorrowedSplit as _BorrowedSplit
from lmmsim.costmodel.split_view import ExtraOps as _ExtraOps
from lmmsim.costmodel.split_view import SplitView as _SplitView
from lmmsim.errors import UserError
from lmmsim.workload.request import EncoderWork

B = BYTES_PER_PARAM_BF16  # activations are bf16 too


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _units_key(works) -> tuple:
    """An encoder batch as ``((seq_len, units), ...)`` by length (empty items left out): its cost's memo key."""
    units: dict[int, int] = {}
    for w in works:
        if w.num_units > 0 and w.seq_len > 0:
            units[w.seq_len] = units.get(w.seq_len, 0) + w.num_units
    return tuple(sorted(units.items()))


class ComposedStepCostModel:
    """LLM step and encoder costs of one engine: ``model`` on ``tp`` x ``gpu``.

    Implements :class:`~lmmsim.costmodel.base.StepCostModel`. All shapes passed
    to ``predictor`` are per GPU.
    """

    MEMO_LIMIT = 1 << 18

    def __init__(self, model: ModelSpec, gpu: GpuSpec, tp: int, predictor: OperatorPredictor, *,
                 encoder_only: bool = False, overheads: EngineOverheads | None = None, ep: int = 1, dp: int = 1,
                 dtype: str = "bf16", kv_cache_dtype: str = "auto", routing: str = DEFAULT_ROUTING,
                 all2all: str = DEFAULT_ALL2ALL):
        # ``encoder_only``: an encoder pool's model; its tp splits the encoder (heads padded
        # when they do not divide), never the LLM, so the LLM's heads are not checked.
        # ``ep``, ``dp``: expert and attention data parallelism (lmmsim.costmodel.moe);
        # ``dtype`` fp8: W8A8 linear layers; ``kv_cache_dtype`` fp8: an FP8 KV cache;
        # ``routing``: the MoE load-imbalance model (lmmsim.costmodel.moe.ROUTINGS); ``all2all``: how
        # dp > 1 ranks exchange tokens around the experts (lmmsim.costmodel.moe.ALL2ALL_BACKENDS).
        llm = model.llm
        if tp < 1:
            raise UserError("deployment.tp", f"must be at least 1, got {tp}")
        if (dp * tp) % ep:
            raise UserError("deployment.ep", f"must divide dp x tp = {dp * tp}; valid: "
                            f"{[e for e in range(1, dp * tp + 1) if (dp * tp) % e == 0]}")
        if llm.num_heads % tp and not encoder_only:
            raise UserError(
                "deployment.tp", f"{model.name}: {llm.num_heads} attention heads do not split evenly over tp={tp}"
            )
        self.model = model
        self.gpu = gpu
        self.tp = tp
        self.predictor = predictor

        # LLM shapes on one GPU.
        self._layers = llm.num_layers
        self._hidden = llm.hidden_size
        self._heads = llm.num_heads // tp
        self._kv_heads = max(1, llm.num_kv_heads // tp)
        self._head_dim = llm.dim_head
        self._ffn = _ceil_div(llm.intermediate_size, tp)
        self._up_width = (2 if llm.gated_mlp else 1) * self._ffn
        self._act_op = "act_gated" if llm.gated_mlp else "act"
        self._vocab = llm.vocab_size
        self._vocab_shard = _ceil_div(llm.vocab_size, tp)
        self.ep, self.dp, self.moe_tp = ep, dp, dp * tp // ep
        self.dtype, self.routing, self.all2all = dtype, routing, all2all
        self._kv_fp8 = kv_cache_dtype == "fp8"
        # Dense bf16 models without QK-norm or DP keep the original composition, unchanged.
        self._plain = llm.moe is None and not llm.qk_norm and dtype == "bf16" and dp == 1

        self._dense_memo: dict[int, float] = {}
        self._prefetched: set[tuple] = set()  # (kind, block): the blocks fitcache's prefetches have seen
        self._prefill_memo: dict[tuple[int, int], float] = {}
        self._head_memo: dict[int, float] = {}
        self._encode_memo: dict[tuple[tuple[int, int], ...], float] = {}
        # Engine terms (lmmsim.costmodel.engine_overheads): one memo look-up per step, keyed
        # by the step's token count (negative when no row is sampled); none when all are off.
        self.overheads = overheads or EngineOverheads.none()
        # host time of encoder calls (lmmsim.costmodel.encoder_call.EncoderCallCosts), or None
        self.encoder_call = None
        self._ov_active = self.overheads.active
        self._engine_memo: dict[int, float] = {}
        self._engine_parts_memo: dict[int, tuple[float, float]] = {}
        self.decode_step_at = DecodeSteps(self)  # batch -> its decode step's cost by context alone
        # Bound method looked up once: the hot path calls it every decode step.
        self._decode_attention = predictor.attention_decode_s
        self._ext_s = _ExtraOps(predictor, gpu)  # FP8 / MoE operators, roofline where the predictor lacks them
        if self._kv_fp8:
            self._decode_attention = self._ext_s.attention_decode_fp8_s

        # Compute / memory split: a pair-valued view of the predictor, own memos.
        if all(hasattr(predictor, op + "_parts") for op in _OPS):
            parts_source = predictor
        else:
            parts_source = _BorrowedSplit(predictor, gpu)
        self._split = _SplitView(parts_source, _ExtraOps.parts(predictor, gpu))
        self._decode_attention_parts = parts_source.attention_decode_parts
        if self._kv_fp8:
            self._decode_attention_parts = _ExtraOps.parts(predictor, gpu)["attention_decode_fp8"]
        if dp > 1:  # the dp ranks split the batch (lmmsim.costmodel.moe): per-rank decode, rank-aware steps
            self._decode_attention = per_rank(self._decode_attention, dp)
            self._decode_attention_parts = per_rank(self._decode_attention_parts, dp)
            self.llm_step_s = functools.partial(_dp_step_s, self)
            self.llm_step_parts = functools.partial(_dp_step_parts, self)
        self._dense_parts_memo: dict[int, tuple[float, float]] = {}
        self._prefill_parts_memo: dict[tuple[int, int], tuple[float, float]] = {}
        self._head_parts_memo: dict[int, tuple[float, float]] = {}
        self._encode_parts_memo: dict[tuple[tuple[int, int], ...], tuple[float, float]] = {}

    # ----------------------------------------------------------- memory sizes
    @property
    def weight_bytes_per_gpu(self) -> float:
        """(LLM + encoder parameters) x 2 bytes / tp; a MoE, DP or FP8 LLM as
        :meth:`~lmmsim.catalog.LlmSpec.weight_bytes_per_gpu` counts it."""
        if self._plain:
            return self.model.weight_bytes / self.tp
        enc = self.model.encoder.num_params * B / self.tp if self.model.encoder else 0.0
        return self.model.llm.weight_bytes_per_gpu(tp=self.tp, dp=self.dp, dtype=self.dtype) + enc

    @property
    def kv_bytes_per_token_per_gpu(self) -> float:
        """K and V of every layer for the KV heads this GPU holds (>= 1, replicated when kv_heads < tp);
        1 byte per element in an FP8 cache. A token lives on one DP rank."""
        return 2 * self._layers * self._kv_heads * self._head_dim * (1 if self._kv_fp8 else B)

    # --------------------------------------------------------------- LLM step
    def llm_step_s(
        self,
        prefill_chunks: Sequence[tuple[int, int]],
        num_decodes: int,
        decode_context_sum: int,
        num_sampled: int,
    ) -> float:
        """One forward pass over a mixed batch (see ``StepCostModel.llm_step_s``)."""
        total = 0.0
        tokens = num_decodes
        if prefill_chunks:
            memo = self._prefill_memo
            for chunk in prefill_chunks:
                try:
                    t = memo.get(chunk)
                except TypeError:  # a list instead of a tuple
                    chunk = tuple(chunk)
                    t = memo.get(chunk)
                if t is None:
                    t = self._prefill_attention(chunk)
                total += t
                tokens += chunk[0]
        if tokens <= 0:
            return 0.0
        t = self._dense_memo.get(tokens)
        if t is None:
            t = self._dense(tokens)
        total += t
        if num_decodes > 0:
            total += self._layers * self._decode_attention(
                num_decodes, decode_context_sum, self._heads, self._kv_heads, self._head_dim
            )
        if num_sampled > 0:
            t = self._head_memo.get(num_sampled)
            if t is None:
                t = self._lm_head(num_sampled)
            total += t
        if self._ov_active:  # the memo's hit inline (every step asks)
            t = self._engine_memo.get(tokens if num_sampled > 0 else -tokens)
            total += self._engine_step_s(tokens, num_sampled) if t is None else t
        return total

    def _engine_step_s(self, tokens: int, num_sampled: int) -> float:
        """The engine terms of a step (memoised by token count, negative when nothing is sampled)."""
        key = tokens if num_sampled > 0 else -tokens
        t = self._engine_memo.get(key)
        return self._store(self._engine_memo, key, sum(step_terms(self, self.predictor, key).values())) if t is None else t

    def llm_step_parts(
        self,
        prefill_chunks: Sequence[tuple[int, int]],
        num_decodes: int,
        decode_context_sum: int,
        num_sampled: int,
    ) -> tuple[float, float]:
        """``(compute_s, memory_s)`` of :meth:`llm_step_s` (same arguments): seconds
        in compute-bound and in memory-bound (HBM or link) kernels; their sum is
        ``llm_step_s(...)`` up to float rounding. Memoised like ``llm_step_s``."""
        c = m = 0.0
        tokens = num_decodes
        if prefill_chunks:
            memo = self._prefill_parts_memo
            for chunk in prefill_chunks:
                try:
                    t = memo.get(chunk)
                except TypeError:  # a list instead of a tuple
                    chunk = tuple(chunk)
                    t = memo.get(chunk)
                if t is None:
                    t = self._store(memo, chunk, self._prefill_attention_cost(self._split, chunk).pair())
                c += t[0]
                m += t[1]
                tokens += chunk[0]
        if tokens <= 0:
            return (0.0, 0.0)
        t = self._dense_parts_memo.get(tokens)
        if t is None:
            t = self._store(self._dense_parts_memo, tokens, self._dense_cost(self._split, tokens).pair())
        c += t[0]
        m += t[1]
        if num_decodes > 0:
            dc, dm = self._decode_attention_parts(
                num_decodes, decode_context_sum, self._heads, self._kv_heads, self._head_dim
            )
            c += self._layers * dc
            m += self._layers * dm
        if num_sampled > 0:
            t = self._head_parts_memo.get(num_sampled)
            if t is None:
                t = self._store(self._head_parts_memo, num_sampled, self._lm_head_cost(self._split, num_sampled).pair())
            c += t[0]
            m += t[1]
        if self._ov_active:
            key = tokens if num_sampled > 0 else -tokens
            t = self._engine_parts_memo.get(key)
            if t is None:
                t = self._store(self._engine_parts_memo, key, sum(step_terms(self, self._split, key).values()).pair())
            c += t[0]
            m += t[1]
        return (c, m)

    def llm_step_breakdown(
        self,
        prefill_chunks: Sequence[tuple[int, int]],
        num_decodes: int,
        decode_context_sum: int,
        num_sampled: int,
    ) -> dict[str, float]:
        """The terms of :meth:`llm_step_s` by name (seconds; they sum to it up to float
        rounding): the kernels (``dense``: linear layers, norms, collectives at the real
        token count; ``prefill_attention``; ``decode_attention``; ``lm_head``) and the
        engine terms of :mod:`lmmsim.costmodel.engine_overheads` (0 when off). Not memoised;
        for reports, not the hot path."""
        p = self.predictor
        tokens = num_decodes + sum(c[0] for c in prefill_chunks)
        out = {"dense": 0.0, "prefill_attention": 0.0, "decode_attention": 0.0, "lm_head": 0.0,
               "cudagraph_padding": 0.0, "kv_write": 0.0, "collective_launch": 0.0, "step_cpu": 0.0}
        if tokens <= 0:
            return out
        out["dense"] = (self._dense_cost(p, tokens) if self.dp == 1
                        else layers_cost(self, p, tokens, rank_tokens(self, tokens, prefill_chunks)))
        att = [self._prefill_attention_cost(p, tuple(c)) for c in prefill_chunks]
        out["prefill_attention"] = sum(att) if self.dp == 1 else dp_attention(att, self.dp)
        if num_decodes > 0:
            out["decode_attention"] = self._layers * self._decode_attention(
                num_decodes, decode_context_sum, self._heads, self._kv_heads, self._head_dim)
        if num_sampled > 0:
            out["lm_head"] = self._lm_head_cost(p, num_sampled)
        if self._ov_active:
            out.update({k: float(v) for k, v in step_terms(self, p, tokens if num_sampled > 0 else -tokens).items()})
        return out

    def prefill_s(self, num_tokens: int) -> float:
        """A single fresh prefill of ``num_tokens`` prompt tokens (one sampled token)."""
        return self.llm_step_s(((num_tokens, num_tokens),), 0, 0, 1)

    def decode_s(self, batch: int, context_each: int) -> float:
        """A decode-only step of ``batch`` sequences, each attending to ``context_each`` tokens."""
        return self.llm_step_s((), batch, batch * context_each, batch)

    # Memo fillers: called on a miss, store and return the value.
    def _dense(self, tokens: int) -> float:
        if self._plain:  # the block's elementwise calls evaluated together (lmmsim.costmodel.fitcache)
            prefetch_dense_block(self, tokens)
        return self._store(self._dense_memo, tokens, self._dense_cost(self.predictor, tokens))

    def _prefill_attention(self, chunk: tuple[int, int]) -> float:
        prefetch_fresh_prefills(self, chunk)  # a fresh prefill's block of prompt lengths together (fitcache)
        if self._prefill_one is None:
            return self._store(self._prefill_memo, chunk, self._prefill_attention_cost(self.predictor, chunk))
        # _prefill_attention_cost's product, the predictor's call with this model's heads fixed
        return self._store(self._prefill_memo, chunk, self._layers * self._prefill_one(*chunk))

    @functools.cached_property
    def _prefill_one(self):
        """``fn(new_tokens, context)``: one causal chunk's attention with this model's heads fixed, where
        the predictor's class offers it (:mod:`lmmsim.costmodel.prefill_shape`: a chunk rarely repeats,
        so most miss every memo), else None. Looked up on the class, so that a wrapper delegating by
        ``__getattr__`` (a recorder) still sees every ``attention_prefill_s`` call."""
        one = getattr(type(self.predictor), "attention_prefill_fn", None)
        return one(self.predictor, self._heads, self._kv_heads, self._head_dim, True) if one is not None else None

    def _lm_head(self, num_sampled: int) -> float:
        return self._store(self._head_memo, num_sampled, self._lm_head_cost(self.predictor, num_sampled))

    # Compositions: ``p`` is the predictor (-> float seconds) or the split view
    # (-> split_view.Split pairs); the arithmetic is written once for both.
    def _dense_cost(self, p, tokens: int):
        """All of a step that depends only on its total token count, over all layers:
        linear layers, all-reduces, norms, rotary, activation, embedding, final norm."""
        if not self._plain:
            return layers_cost(self, p, tokens)
        tp = self.tp
        h, hd = self._hidden, self._head_dim
        q_width = self._heads * hd
        kv_width = self._kv_heads * hd
        act = tokens * h * B  # one [tokens, hidden] bf16 activation
        layer = (
            p.gemm_s(tokens, q_width + 2 * kv_width, h)  # QKV, column-parallel
            + p.elementwise_s(2 * tokens * (q_width + kv_width) * B, op="rotary")  # on Q and K: read + write
            + p.gemm_s(tokens, h, q_width)  # O, row-parallel
            + p.allreduce_s(act, tp)
            + p.elementwise_s(4 * act, op="add_norm")  # fused residual add + RMSNorm: read x, residual; write both
            + p.gemm_s(tokens, self._up_width, h)  # gate + up, column-parallel
            + p.elementwise_s(tokens * (self._up_width + self._ffn) * B, op=self._act_op)  # activation: read, write
            + p.gemm_s(tokens, h, self._ffn)  # down, row-parallel
            + p.allreduce_s(act, tp)
            + p.elementwise_s(4 * act, op="add_norm")  # fused residual add + RMSNorm before the next layer
        )
        # Gather rows, write; combine shards.
        embed = p.elementwise_s(2 * act, op="embedding") + p.allreduce_s(act, tp)
        final_norm = p.elementwise_s(4 * act, op="add_norm")  # the last residual add is fused into it
        return self._layers * layer + embed + final_norm

    def _linear(self, p, x, m: int, n: int, k: int):
        """A linear layer's GEMM: W8A8 FP8 (``x.gemm_fp8_s``) under ``dtype: fp8``, else bf16."""
        return x.gemm_fp8_s(m, n, k) if self.dtype == "fp8" else p.gemm_s(m, n, k)

    def _prefill_attention_cost(self, p, chunk: tuple[int, int]):
        """Causal attention of one prefill chunk, over all layers."""
        new_tokens, context = chunk
        return self._layers * p.attention_prefill_s(
            new_tokens, context, self._heads, self._kv_heads, self._head_dim, True
        )

    def _lm_head_cost(self, p, num_sampled: int):
        """LM head over the vocabulary shard, logits gather, sampling (each DP rank its rows)."""
        if self.dp > 1:
            num_sampled = _ceil_div(num_sampled, self.dp)
        logits = num_sampled * self._vocab * B
        # Ring all-gather = the all-gather half of a ring all-reduce.
        gather = p.allreduce_s(logits, self.tp) / 2
        sampling = p.elementwise_s(num_sampled * self._vocab * 4 * 2, op="softmax")  # fp32: read + write
        return p.gemm_s(num_sampled, self._vocab_shard, self._hidden) + gather + sampling

    # ---------------------------------------------------------------- encoder
    def encode_s(self, works: Sequence[EncoderWork]) -> float:
        """Encoder + projector forward over a batch of media items.

        The batch is reduced to how many attention units of each length it
        holds (the cost does not depend on how units are grouped into items),
        which is also the memo key.
        """
        if len(works) == 1:  # most encoder batches: the key of one item without grouping (the same key)
            w = works[0]
            if not (w.num_units > 0 and w.seq_len > 0):
                return 0.0
            key = ((w.seq_len, w.num_units),)
        else:
            key = _units_key(works)
            if not key:
                return 0.0
        t = self._encode_memo.get(key)
        if t is None:
            t = self._store(self._encode_memo, key, self._encode(self.predictor, key))
        return t

    def encode_host_s(self, works: Sequence[EncoderWork]) -> float:
        """Host time one encoder call adds to its kernels (:mod:`lmmsim.costmodel.encoder_call`)."""
        call = self.encoder_call
        return call.host_s(works, self.encode_s(works)) if call is not None and works else 0.0

    def encode_call_s(self, works: Sequence[EncoderWork]) -> float:
        """A whole encoder call in an engine step: kernels plus the host time they wait for.
        With ``dp`` ranks each encodes its own requests' items, in lockstep: the even share
        of one call over all the items, never less than the call of the largest item alone."""
        whole = self.encode_s(works) + self.encode_host_s(works)
        if self.dp == 1 or len(works) < 2:
            return whole
        return max(whole / self.dp, max(self.encode_s([w]) + self.encode_host_s([w]) for w in works))

    def encode_parts(self, works: Sequence[EncoderWork]) -> tuple[float, float]:
        """``(compute_s, memory_s)`` of :meth:`encode_s`; their sum is ``encode_s(works)``
        up to float rounding. Memoised on the same key as ``encode_s``."""
        key = _units_key(works)
        if not key:
            return (0.0, 0.0)
        t = self._encode_parts_memo.get(key)
        if t is None:
            t = self._store(self._encode_parts_memo, key, self._encode(self._split, key).pair())
        return t

    def _encode(self, p, units: tuple[tuple[int, int], ...]):
        enc = self.model.encoder
        if enc is None:
            raise UserError("model", f"{self.model.name!r} has no encoder")
        tp = self.tp
        h = enc.hidden_size
        heads = _ceil_div(enc.num_heads, tp)  # padded with dummy heads when tp does not divide
        hd = h // enc.num_heads
        width = heads * hd
        ffn = _ceil_div(enc.intermediate_size, tp)
        up_width = (2 if enc.gated_mlp else 1) * ffn
        n = sum(length * count for length, count in units)  # encoder tokens in the batch
        act = n * h * B

        # Stem: turns raw patches / mel frames into tokens; replicated on each GPU.
        if enc.family == "whisper":
            # Two 1-D convolutions (kernel 3, the second with stride 2) as GEMMs.
            stem = p.gemm_s(2 * n, h, 3 * WHISPER_MEL_BINS) + p.gemm_s(n, h, 3 * h)
        else:
            # Linear patch projection: RGB patch_size^2 (x 2 frames for Qwen's temporal patch).
            frames = 2 if enc.family == "qwen_vit" else 1
            stem = p.gemm_s(n, h, 3 * frames * enc.patch_size**2)
        # Position embeddings: learned (added after the stem), 2-D rotary (on Q and K in every
        # layer) or both; by default rotary for the qwen_vit family, learned for the others.
        pos = enc.position_embedding or ("rotary_2d" if enc.family == "qwen_vit" else "learned")
        if pos != "rotary_2d":
            stem += p.elementwise_s(3 * act, op="add")  # add learned position embeddings

        layer = (
            p.elementwise_s(2 * act, op="norm")  # pre-attention LayerNorm
            + p.gemm_s(n, 3 * width, h)  # QKV, column-parallel
            + p.gemm_s(n, h, width)  # O, row-parallel
            + p.allreduce_s(act, tp)
            + p.elementwise_s(3 * act, op="add")  # residual add
            + p.elementwise_s(2 * act, op="norm")  # pre-MLP LayerNorm
            + p.gemm_s(n, up_width, h)  # up (+ gate), column-parallel
            + p.elementwise_s(n * (up_width + ffn) * B, op="act_gated" if enc.gated_mlp else "act")  # activation
            + p.gemm_s(n, h, ffn)  # down, row-parallel
            + p.allreduce_s(act, tp)
            + p.elementwise_s(3 * act, op="add")  # residual add
        )
        if pos != "learned":
            layer += p.elementwise_s(2 * n * 2 * width * B, op="rotary")  # 2-D rotary on Q and K

        # Attention: every unit attends to itself, without a mask. Units of equal
        # length run in one varlen kernel, costed as one sequence with that many
        # times the heads (same FLOPs and bytes, one launch).
        def attention(lengths: dict[int, int]):
            return sum(
                p.attention_prefill_s(length, length, heads * count, heads * count, hd, False)
                for length, count in sorted(lengths.items())
            )

        full = attention(dict(units))
        if enc.window_tokens is None:
            num_full, num_window, windowed = enc.num_layers, 0, 0.0
        else:
            # Window layers attend within windows of window_tokens patches; a unit
            # that does not fill its last window leaves a shorter one.
            num_full = sum(1 for i in set(enc.full_attention_layers) if 0 <= i < enc.num_layers)
            num_window = enc.num_layers - num_full
            windows: dict[int, int] = {}
            wt = enc.window_tokens
            for length, count in units:
                whole, rest = divmod(length, wt)
                if whole:
                    windows[wt] = windows.get(wt, 0) + whole * count
                if rest:
                    windows[rest] = windows.get(rest, 0) + count
            windowed = attention(windows)

        post_norm = p.elementwise_s(2 * act, op="norm")
        t = stem + enc.num_layers * layer + num_full * full + num_window * windowed + post_norm
        t = t + self._projector(p, n)
        if enc.deepstack_mergers:  # Qwen3-VL's DeepStack mergers: projector-shaped MLPs over the same tokens
            t += enc.deepstack_mergers * self._projector(p, n)
        return t

    def _projector(self, p, encoder_tokens: int):
        """Projector MLP over merged tokens, sharded Megatron-style.

        Layers alternate column-parallel (even index) and row-parallel (odd,
        followed by an all-reduce); a projector ending column-parallel
        all-gathers its output. Activations between layers are elementwise.
        """
        proj = self.model.encoder.projector
        tp = self.tp
        m = _ceil_div(encoder_tokens, proj.tokens_merged)
        dims = [proj.input_dim] + [proj.hidden_dim] * (proj.num_layers - 1) + [proj.output_dim]
        t = 0.0
        for i, (d_in, d_out) in enumerate(zip(dims, dims[1:])):
            if i % 2 == 0:
                out_shard = _ceil_div(d_out, tp)
                t += p.gemm_s(m, out_shard, d_in)
                if i < proj.num_layers - 1:
                    t += p.elementwise_s(2 * m * out_shard * B, op="act")  # activation
                elif tp > 1:
                    t += p.allreduce_s(m * d_out * B, tp) / 2  # all-gather of the output
            else:
                t += p.gemm_s(m, d_out, _ceil_div(d_in, tp)) + p.allreduce_s(m * d_out * B, tp)
                if i < proj.num_layers - 1:
                    t += p.elementwise_s(2 * m * d_out * B, op="act")  # activation
        return t

    # ------------------------------------------------------------------ memo
    def _store(self, memo: dict, key, value: float) -> float:
        if len(memo) >= self.MEMO_LIMIT:
            memo.clear()
        memo[key] = value
        return value


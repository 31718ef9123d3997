"""The scenario's ``deployment:`` section: where encoding, prefill and decode run.

Four kinds (DESIGN.md, "Deployments to model"):

* ``monolithic`` -- encoder + prefill + decode in one engine per replica
  (vLLM with TP and/or PP, gLLM, RPS-Serve);
* ``e_pd`` -- an encoder pool on its own GPUs sends embeddings to
  prefill+decode engines (ModServe, gLLM-epd, RServe);
* ``e_p_d`` -- encoder, prefill and decode pools; embeddings go E->P, KV caches
  P->D (Dynamo, EPDServe, EAServe);
* ``p_d`` -- prefill and decode pools, no encoder pool; KV caches go P->D as in
  ``e_p_d`` (DistServe, Splitwise, Dynamo on a text model). With a multimodal
  model the prefill workers encode locally, as a monolithic engine does.

LLM workers are ``tp x pp`` GPUs each; encoder workers ``tp`` GPUs. GPUs are
numbered ``0 .. hardware.count-1`` and handed out in pool order (encoders,
then prefill/LLM, then decode) unless a pool gives ``gpu_ids`` per worker.
Two workers may share a GPU only when ``gpu_sharing`` says how.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveFloat, PositiveInt, model_validator

from lmmsim import policies
from lmmsim.policies.encode_dispatch import PerRequestConfig


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MemorySettings(_Strict):
    """Memory keys every deployment shares (per LLM GPU)."""

    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    block_size: PositiveInt = 16
    max_model_len: PositiveInt | None = None  # default: the model's max context
    activation_reserve_gib: float | None = Field(None, ge=0)  # default: vLLM profile-run estimate (lmmsim.placement)
    # Encoder cache of each engine that runs the encoder (monolithic replica, p_d prefill
    # worker, encoder worker), in LLM tokens: media items with a media_id it still holds
    # skip the encoder (lmmsim.engine.media_cache). None: vLLM's size, the encoder budget;
    # 0: no reuse. Its GPU memory (tokens x hidden x 2 B) is not taken from the KV cache.
    encoder_cache_tokens: NonNegativeInt | None = None
    # Numerics of the LLM workers: ``fp8`` stores the LLM's linear-layer weights in FP8
    # (W8A8 GEMMs, half the weight bytes; embeddings, norms and the encoder stay bf16);
    # ``kv_cache_dtype: fp8`` halves the KV cache per token (vLLM's --kv-cache-dtype fp8).
    dtype: Literal["bf16", "fp8"] = "bf16"
    kv_cache_dtype: Literal["auto", "fp8"] = "auto"
    # vLLM's automatic prefix caching (--enable-prefix-caching): full KV blocks are keyed
    # by their content and reused across requests (lmmsim.engine.prefix_cache). Off by
    # default: synthetic prompts without shared content never hit, and results stay as
    # before; vLLM V1 turns it on by default.
    prefix_caching: bool = False
    # How a MoE model's router spreads tokens over experts (lmmsim.costmodel.moe): evenly, or
    # by the bounded power laws aiconfigurator measures its MoE kernels under. Default 1.2:
    # aiconfigurator's generic MoE family (sdk/models/moe.py), which Qwen3 MoE models use.
    moe_routing: Literal["balanced", "power_law_1.01", "power_law_1.2"] = "power_law_1.2"
    # With dp > 1: how the ranks exchange tokens around the experts, as vLLM's --all2all-backend
    # (lmmsim.costmodel.moe.ALL2ALL_BACKENDS); vLLM's default, or DeepEP's high-throughput kernels.
    moe_all2all: Literal["allgather_reducescatter", "deepep_high_throughput"] = "allgather_reducescatter"


class SharingConfig(_Strict):
    """How workers placed on the same GPU share it.

    ``time_slice``: one runs at a time. ``sm_split``: each pool gets a fixed
    fraction of the SMs (``sm_shares``, by pool name: encoder, llm, prefill,
    decode); compute-bound work slows along a saturating curve of the share,
    memory-bound work is not isolated (:mod:`lmmsim.engine.gpu_share`).
    """

    mode: Literal["time_slice", "sm_split"] = "time_slice"
    sm_shares: dict[Literal["encoder", "llm", "prefill", "decode", "local_prefill"], float] = {}
    memory_interference: float = Field(1.0, ge=0)

    @model_validator(mode="after")
    def _shares_valid(self):
        for pool, share in self.sm_shares.items():
            if not 0 <= share <= 1:
                raise ValueError(f"sm_shares.{pool} must be within [0, 1]")
        if self.mode == "sm_split" and not self.sm_shares:
            raise ValueError("sm_split needs sm_shares, e.g. {encoder: 0.3, prefill: 0.7}")
        return self


class LlmPoolConfig(_Strict):
    """A pool of LLM workers (prefill+decode, prefill-only or decode-only)."""

    workers: PositiveInt = 1
    tp: PositiveInt = 1
    pp: PositiveInt = 1
    # Expert parallelism of a MoE model: the dp x tp GPUs of a stage hold disjoint sets of
    # experts in ep groups, each expert split dp*tp/ep ways (ep == dp*tp: vLLM's
    # --enable-expert-parallel; ep == 1: experts TP-split, vLLM's default). Must divide dp*tp
    # (lmmsim.costmodel.moe). A value in between is TensorRT-LLM's hybrid split, not a vLLM layout.
    ep: PositiveInt = 1
    # Attention data parallelism (vLLM's --data-parallel-size with expert parallelism): a
    # worker is dp x tp x pp GPUs; each of the dp ranks runs attention and the dense layers
    # on its share of the batch with tp-way attention, and a MoE model's experts are spread
    # over the dp x tp GPUs of a stage, tokens moved between ranks by all-to-all
    # (lmmsim.costmodel.data_parallel: one engine, the batch split evenly over the ranks).
    dp: PositiveInt = 1
    # With pp > 1: chunked pipeline parallelism (true) or vanilla PP (false).
    chunk_pipelining: bool = True
    gpu_ids: list[list[NonNegativeInt]] | None = None  # per worker: dp x tp x pp ids, stage by stage

    @property
    def gpus_per_worker(self) -> int:
        return self.dp * self.tp * self.pp


class EncoderPoolConfig(_Strict):
    """A pool of encoder workers (vision / audio encoder + projector)."""

    workers: PositiveInt = 1
    tp: PositiveInt = 1
    gpu_ids: list[list[NonNegativeInt]] | None = None  # per worker: tp ids
    dispatch: policies.config_union("encode_dispatch") = PerRequestConfig()  # type: ignore[valid-type]
    # Embedding transfers one encoder worker keeps in flight (backpressure).
    max_in_flight_sends: PositiveInt | None = 4
    # One transfer per destination LLM worker for all requests of an encoder batch
    # (EAServe's envelope), instead of one per request.
    envelope_transfer: bool = False
    # A what-if knob: extra host seconds per encoder call before its GPU pass, on top
    # of what lmmsim models from mechanisms (the processed tensors' PCIe copy and eager
    # kernel issue, lmmsim.costmodel.encoder_call; media preprocessing is the host
    # stage's, scenario key host). No reproduction uses it. On a GPU shared with local
    # prefill the call keeps its SM share meanwhile (sm_split), with no SM busy;
    # time-sliced, the other tenant runs meanwhile.
    call_overhead_s: float = Field(0.0, ge=0)

    @property
    def gpus_per_worker(self) -> int:
        return self.tp


class MonolithicDeployment(MemorySettings):
    """Encoder, prefill and decode in one engine per replica (vLLM style)."""

    kind: Literal["monolithic"] = "monolithic"
    replicas: PositiveInt = 1
    tp: PositiveInt = 1
    pp: PositiveInt = 1
    ep: PositiveInt = 1  # expert parallelism over each stage's dp x tp GPUs (LlmPoolConfig.ep)
    dp: PositiveInt = 1  # attention data parallelism (LlmPoolConfig.dp)
    chunk_pipelining: bool = True  # with pp > 1: CPP (true) or vanilla PP (false)
    gpu_ids: list[list[NonNegativeInt]] | None = None  # per replica: dp x tp x pp ids, stage by stage

    def pools(self) -> dict[str, LlmPoolConfig]:
        return {"llm": LlmPoolConfig(workers=self.replicas, tp=self.tp, pp=self.pp, ep=self.ep, dp=self.dp,
                                     chunk_pipelining=self.chunk_pipelining, gpu_ids=self.gpu_ids)}


class _Disaggregated(MemorySettings):
    encoder: EncoderPoolConfig = EncoderPoolConfig()
    # after_encode: a request enters the LLM queue once all its embeddings
    # arrived (gLLM-epd, ModServe, Dynamo). streaming: it enters at arrival and
    # each chunk stops before the first embedding still missing.
    admission: Literal["after_encode", "streaming"] = "after_encode"
    # Receiver memory set aside for embeddings in transit or not yet consumed
    # (taken from the KV cache); senders wait when it is full.
    embedding_buffer_gib: PositiveFloat = 2.0
    gpu_sharing: SharingConfig | None = None


class EncodePrefillDecodeDeployment(_Disaggregated):
    """Encoder pool + prefill/decode engines (``e_pd``)."""

    kind: Literal["e_pd"] = "e_pd"
    llm: LlmPoolConfig = LlmPoolConfig()

    def pools(self) -> dict:
        return {"encoder": self.encoder, "llm": self.llm}


class LocalPrefillConfig(_Strict):
    """EAServe's local prefill workers, co-located on the encoder GPUs (easerve.txt 3.3-3.4).

    The encoder GPUs, taken in order, are grouped ``tp`` at a time; each group
    hosts one prefill-only worker sharing those GPUs with their encoders.
    ``offload`` routes each request's prefill to a remote prefill worker
    (fraction ``remote_fraction``) or to the local one of its encoder.
    ``sm_partitioning``: ``none`` (the CUDA time slicing of two processes),
    ``static`` (``static_encoder_share`` of the SMs to the encoder, the rest to
    local prefill) or ``dynamic`` (per encoder batch, the smallest SM level
    whose supported batch size covers it: the table is built at start-up from
    the cost model's latency-vs-share curve, ``sm_levels`` and ``sm_tolerance``).
    HBM bandwidth is never partitioned.
    """

    tp: PositiveInt = 1
    offload: policies.config_union("offload") = Field(  # type: ignore[valid-type]
        default_factory=lambda: policies.registry._table("offload")["deficit"].config_cls(remote_fraction=0.5))
    sm_partitioning: Literal["none", "static", "dynamic"] = "dynamic"
    static_encoder_share: float = Field(0.5, gt=0, lt=1)
    sm_levels: list[float] = [0.2, 0.4, 0.6, 0.8, 1.0]
    sm_tolerance: float = Field(0.1, ge=0)

    @model_validator(mode="after")
    def _levels(self):
        if not self.sm_levels or any(not 0 < x <= 1 for x in self.sm_levels) or max(self.sm_levels) != 1.0:
            raise ValueError("sm_levels must lie in (0, 1] and include 1.0")
        return self


class FullyDisaggregatedDeployment(_Disaggregated):
    """Encoder, prefill and decode pools (``e_p_d``)."""

    kind: Literal["e_p_d"] = "e_p_d"
    prefill: LlmPoolConfig = LlmPoolConfig()
    decode: LlmPoolConfig = LlmPoolConfig()
    # KV-cache transfers one prefill worker keeps in flight (backpressure).
    max_in_flight_kv_transfers: PositiveInt | None = 4
    # EAServe: prefill workers on the encoder GPUs, a share of the requests routed to them.
    local_prefill: LocalPrefillConfig | None = None

    @model_validator(mode="after")
    def _local_fits(self):
        lp = self.local_prefill
        if lp is not None:
            gpus = self.encoder.workers * self.encoder.tp
            if gpus % lp.tp:
                raise ValueError(f"local_prefill.tp ({lp.tp}) must divide the encoder GPUs ({gpus})")
            if self.gpu_sharing is not None:
                raise ValueError("local_prefill sets how the encoder GPUs are shared (sm_partitioning); "
                                 "leave gpu_sharing unset")
        return self

    def pools(self) -> dict:
        return {"encoder": self.encoder, "prefill": self.prefill, "decode": self.decode}

    def local_prefill_pool(self, encoder_gpus: list[tuple[int, ...]]) -> LlmPoolConfig | None:
        """The local prefill pool placed on ``encoder_gpus`` (the encoder workers' GPU ids)."""
        lp = self.local_prefill
        if lp is None:
            return None
        flat = [g for ids in encoder_gpus for g in ids]
        groups = [flat[i:i + lp.tp] for i in range(0, len(flat), lp.tp)]
        return LlmPoolConfig(workers=len(groups), tp=lp.tp, gpu_ids=groups)

    def sharing(self) -> SharingConfig | None:
        """How encoder and local prefill share the encoder GPUs."""
        lp = self.local_prefill
        if lp is None:
            return self.gpu_sharing
        if lp.sm_partitioning == "none":
            return SharingConfig(mode="time_slice")
        # dynamic: the encoder's share is set per batch; while it is idle local prefill has every SM
        share = lp.static_encoder_share if lp.sm_partitioning == "static" else 0.0
        return SharingConfig(mode="sm_split", sm_shares={"encoder": share, "local_prefill": 1.0 - share})


class PrefillDecodeDeployment(MemorySettings):
    """Prefill and decode pools without an encoder pool (``p_d``).

    The runtime is ``e_p_d``'s with no encoder workers
    (:class:`~lmmsim.engine.disaggregation.DisaggregatedFrontend`). A multimodal
    model's media is encoded by the prefill worker itself, inside its steps under
    the encoder budget (vLLM's encoder cache, as in ``monolithic``), so its
    encoder weights sit on the prefill GPUs; decode workers never encode (a
    request they preempt recomputes without re-encoding, as in ``e_p_d``).
    No two workers share a GPU: prefill and decode KV caches would compete.
    """

    kind: Literal["p_d"] = "p_d"
    prefill: LlmPoolConfig = LlmPoolConfig()
    decode: LlmPoolConfig = LlmPoolConfig()
    # KV-cache transfers one prefill worker keeps in flight (backpressure).
    max_in_flight_kv_transfers: PositiveInt | None = 4
    # When the client gets its first token. decode: once the KV cache has landed at the
    # decode worker, which emits it (vLLM's disaggregated prefill, Dynamo), so TTFT
    # includes the KV transfer; prefill: when the prefill worker samples it (DistServe,
    # Splitwise stream it from there; e_p_d counts it so).
    first_token: Literal["prefill", "decode"] = "decode"

    def pools(self) -> dict:
        return {"prefill": self.prefill, "decode": self.decode}


DeploymentConfig = Annotated[
    Union[MonolithicDeployment, EncodePrefillDecodeDeployment, FullyDisaggregatedDeployment,
          PrefillDecodeDeployment],
    Field(discriminator="kind"),
]

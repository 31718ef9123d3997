"""Encoder dispatch rules: which queued media items an encoder worker batches next.

An encoder worker keeps a FIFO of :class:`EncodeItem` (one per media item, a
request's items in prompt order). When it is free it asks its dispatcher
:meth:`EncodeDispatcher.select`, which either removes and returns the items
of the next batch, or returns ``None`` and the time at which to ask again (a
timeout still running). The worker asks again whenever items arrive, and
tells the dispatcher of each arrival first (:meth:`EncodeDispatcher.on_arrival`,
one call per request: a request's items are submitted together). No SimPy
here, so rules are testable on hand-built queues.

Rules: ``per_request`` (Dynamo's pass-through), ``fixed`` (the fixed-timeout
micro-batcher baseline), ``queue_length`` (the queue-length-trigger
baseline), ``poisson_gap`` (EAServe's load-adaptive micro-batching) and
``embedding_batch`` (RServe).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator

from lmmsim.policies.registry import register


@dataclass(slots=True)
class EncodeItem:
    """One media item waiting for an encoder."""

    seq: object  # the request's engine state (``seq.request.request_id`` ...)
    segment: object  # its PromptSegment (``segment.item`` is the MediaItem)
    enqueued_at: float
    target: int = 0  # index of the LLM worker its embeddings go to
    index: int = 0  # its place among the request's media items (prompt order)

    @property
    def num_llm_tokens(self) -> int:
        return self.segment.length


class EncodeDispatcher(ABC):
    @abstractmethod
    def select(self, queue: deque, now: float) -> tuple[list | None, float | None]:
        """Remove and return the next batch from ``queue`` (non-empty), or return
        ``(None, wake_at)``: nothing to run before ``wake_at``."""

    def on_arrival(self, items: list, now: float) -> None:
        """A request's media ``items`` joined the queue at ``now`` (called by the
        worker before it asks :meth:`select`). Default: ignored."""


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PerRequestConfig(_Config):
    kind: Literal["per_request"] = "per_request"


@register("encode_dispatch", PerRequestConfig, "one request's media items at a time (Dynamo's pass-through)")
class PerRequestDispatcher(EncodeDispatcher):
    """All media items of the request at the head of the queue, as one batch."""

    def __init__(self, config: PerRequestConfig | None = None):
        pass

    def select(self, queue: deque, now: float):
        return take_head_request(queue, None), None


def take_head_request(queue: deque, min_tokens: int | None) -> list:
    """Pop the head item and the head request's items after it, stopping once
    the batch holds ``min_tokens`` LLM tokens (None: all of them)."""
    head = queue.popleft()
    batch = [head]
    tokens = head.num_llm_tokens
    while queue and queue[0].seq is head.seq and (min_tokens is None or tokens < min_tokens):
        item = queue.popleft()
        batch.append(item)
        tokens += item.num_llm_tokens
    return batch


class FixedBatchConfig(_Config):
    kind: Literal["fixed"] = "fixed"
    max_items: PositiveInt = 8
    max_tokens: PositiveInt | None = None  # bound on the batch's LLM tokens (an item is never split)
    timeout_s: float = Field(0.005, ge=0)  # longest the oldest item waits for a fuller batch


@register("encode_dispatch", FixedBatchConfig, "batches of up to max_items (or max_tokens), or whatever waited timeout_s")
class FixedBatchDispatcher(EncodeDispatcher):
    """Dispatch when ``max_items`` items (or ``max_tokens`` tokens) are queued, or
    when the oldest item has waited ``timeout_s``; items in FIFO order.

    This is the fixed-timeout micro-batcher baseline of EAServe (easerve.txt
    section 3.2: "a fixed timeout grows mistuned whenever load shifts"). It
    counts items, not requests, and may split a request's items."""

    def __init__(self, config: FixedBatchConfig):
        self.max_items = config.max_items
        self.max_tokens = config.max_tokens
        self.timeout_s = config.timeout_s

    def _full(self, queue: deque) -> bool:
        if len(queue) >= self.max_items:
            return True
        if self.max_tokens is not None:
            return sum(it.num_llm_tokens for it in queue) >= self.max_tokens
        return False

    def select(self, queue: deque, now: float):
        due = queue[0].enqueued_at + self.timeout_s
        if not self._full(queue) and now < due:
            return None, due
        batch = [queue.popleft()]
        tokens = batch[0].num_llm_tokens
        while queue and len(batch) < self.max_items:
            nxt = queue[0].num_llm_tokens
            if self.max_tokens is not None and tokens + nxt > self.max_tokens:
                break
            batch.append(queue.popleft())
            tokens += nxt
        return batch, None


class EmbeddingBatchConfig(_Config):
    kind: Literal["embedding_batch"] = "embedding_batch"
    # RServe's embedding batch size C, in LLM (multimodal) tokens; null: all of
    # a request's items in one batch.
    embedding_batch_tokens: PositiveInt | None = 1024


@register("encode_dispatch", EmbeddingBatchConfig,
          "RServe Algorithm 1: one request at a time, its items in batches of >= C tokens")
class EmbeddingBatchDispatcher(EncodeDispatcher):
    """RServe's encoder scheduling (rserve.txt Algorithm 1).

    Requests are served first come, first served, one at a time. Walking the
    request's media items in prompt order, items join a buffer until it holds
    at least C tokens; the buffer is then encoded as one batch (items are
    indivisible, so a batch may exceed C) and its embeddings leave at once.
    What is left at the end of the request is the last batch. Batches never
    mix requests.

    The worker's queue holds a request's items contiguously and in prompt
    order (the front end submits them so), so the next batch is a prefix of
    the queue's run of head-request items.
    """

    def __init__(self, config: EmbeddingBatchConfig | None = None):
        config = config or EmbeddingBatchConfig()
        self.min_tokens = config.embedding_batch_tokens

    def select(self, queue: deque, now: float):
        return take_head_request(queue, self.min_tokens), None


# ------------------------------------------------------------ request batches
def count_requests(queue: deque, limit: int) -> int:
    """Requests queued (runs of consecutive items of one ``seq``), counting at
    most ``limit``."""
    n = 0
    prev = None
    for it in queue:
        if n == 0 or it.seq is not prev:
            if n == limit:
                break
            n += 1
            prev = it.seq
    return n


def take_requests(queue: deque, max_requests: int) -> list:
    """Pop the items of the first ``max_requests`` requests of the queue (FIFO);
    a request's items always travel together."""
    batch = []
    n = 0
    while queue:
        seq = queue[0].seq
        if n == max_requests:
            break
        n += 1
        while queue and queue[0].seq is seq:
            batch.append(queue.popleft())
    return batch


class QueueLengthConfig(_Config):
    kind: Literal["queue_length"] = "queue_length"
    min_requests: PositiveInt = 8  # dispatch once this many requests are queued
    max_batch: PositiveInt | None = None  # most requests in a batch; null: min_requests
    max_age_s: float = Field(0.05, ge=0)  # safety valve: longest the oldest request waits

    @model_validator(mode="after")
    def _bound(self):
        if self.max_batch is not None and self.max_batch < self.min_requests:
            raise ValueError(f"max_batch ({self.max_batch}) must be >= min_requests ({self.min_requests})")
        return self


@register("encode_dispatch", QueueLengthConfig,
          "queue-length trigger: batch once min_requests requests wait, or the oldest waited max_age_s")
class QueueLengthDispatcher(EncodeDispatcher):
    """The queue-length-trigger baseline of EAServe (easerve.txt section 3.2).

    Dispatch when at least ``min_requests`` requests are queued, or when the
    oldest queued request has waited ``max_age_s`` (the safety valve). A batch
    holds the items of up to ``max_batch`` requests (default ``min_requests``),
    first come first served; a request's items are never split.
    """

    def __init__(self, config: QueueLengthConfig | None = None):
        config = config or QueueLengthConfig()
        self.min_requests = config.min_requests
        self.max_batch = config.max_batch or config.min_requests
        self.max_age_s = config.max_age_s

    def select(self, queue: deque, now: float):
        due = queue[0].enqueued_at + self.max_age_s
        if now < due and count_requests(queue, self.min_requests) < self.min_requests:
            return None, due
        return take_requests(queue, self.max_batch), None


# The Poisson-gap rule's safety valve (our choice; the paper gives no value, PoissonGapDispatcher).
VALVE_S = 2.0


class PoissonGapConfig(_Config):
    kind: Literal["poisson_gap"] = "poisson_gap"
    max_batch: PositiveInt = 8  # the batch bound B, in requests (HAS sets it offline)
    quantile: float = Field(0.8, gt=0, lt=1)  # p: the gap g is the p-quantile of an Exp(rate) gap
    ewma_weight: float = Field(0.2, gt=0, le=1)  # weight of the newest inter-arrival gap in the mean gap
    # safety valve: longest the oldest request waits (above the gap at the rates batching is for;
    # see PoissonGapDispatcher for the choice)
    max_age_s: float = Field(VALVE_S, ge=0)


@register("encode_dispatch", PoissonGapConfig,
          "EAServe: up to max_batch requests; dispatch at B, after a Poisson gap without arrivals, or at max_age_s "
          "(safety valve, default 2 s)")
class PoissonGapDispatcher(EncodeDispatcher):
    """EAServe's load-adaptive micro-batching (easerve.txt section 3.2).

    The batch bound ``max_batch`` (B) counts requests: a batch holds the items
    of up to B requests, first come first served, and a request's items are
    never split across batches. A partial batch is dispatched as soon as any
    of three triggers fires:

    (a) B requests are queued;
    (b) no request arrived within the Poisson gap ``g`` since the last arrival,
        i.e. ``now >= last_arrival + g(rate)``;
    (c) the oldest queued request has waited ``max_age_s`` (safety valve).

    When none fires, :meth:`select` returns the earliest of the pending (b)
    and (c) deadlines; the worker sleeps until then or until a request
    arrives.

    Rate estimate (our choice): an exponentially weighted moving average of
    the inter-arrival gaps of requests at this worker, ``mean_gap <- (1 - w)
    mean_gap + w gap`` with ``w = ewma_weight`` (the first gap initialises
    it), and ``rate = 1 / mean_gap``. The gap EWMA is an unbiased estimate of
    the mean gap; with w = 0.2 its relative standard deviation on Poisson
    arrivals is sqrt(w / (2 - w)) ~ 1/3, so it tracks load shifts within ~5
    arrivals at the price of a noisy threshold. Requests arriving at the same
    instant count as gaps of zero.

    Gap rule (our choice; the paper does not give the formula): ``g(rate) =
    -ln(1 - p) / rate``, the p-quantile of an exponential inter-arrival gap
    (p = ``quantile``, 0.8 by default): under Poisson arrivals the next
    request comes within g with probability p, so waiting longer than g is
    taken as the end of a burst. g is tight under high load and loose under
    low load (where the safety valve (c) bounds the wait). Before two
    arrivals have been seen there is no rate and g = the valve. Override
    :meth:`gap_s` to change the rule.

    Safety valve (our choice; the paper names "the max-age safety valve" that
    "bounds the worst-case TTFT", section 4.5, without a value): ``max_age_s``
    = 2 s by default, a bound *above* the gap, so that the gap rule decides
    wherever batching is worth having. The paper's batch cap B_max = ceil(Λ /
    n_E) (section 3.1: "a worker is unlikely to fill batches much larger than
    its arrival rate") sizes a batch to about one second of a worker's
    arrivals; the valve is twice that horizon. It sits above g = 1.61 /
    rate wherever a worker sees more than 0.8 req/s (the paper's 1-5 req/s
    over 2 encoders: 0.5-2.5 req/s each), and at low load bounds the wait of a
    lone request at 2 s instead of g (32 s at 0.05 req/s). Until issue 17 the
    default was 50 ms, which fired before the gap at every reproduction rate
    (the rule then acted as a fixed 50 ms timeout). ``bench/poisson_gap_valve.py``
    shows which trigger dispatches over rates and valves, and the claims'
    sensitivity to the valve. Override :meth:`valve_s` to make the valve
    depend on the estimate (e.g. a multiple of g).

    ``triggers`` counts the batches each trigger dispatched (``full``,
    ``gap``, ``valve``; a batch both full and due counts as ``full``).
    """

    def __init__(self, config: PoissonGapConfig | None = None):
        config = config or PoissonGapConfig()
        self.max_batch = config.max_batch
        self.quantile = config.quantile
        self.ewma_weight = config.ewma_weight
        self.max_age_s = config.max_age_s
        self.last_arrival: float | None = None
        self.mean_gap: float | None = None  # EWMA of inter-arrival gaps; None before two arrivals
        self.num_arrivals = 0
        self.triggers = {"full": 0, "gap": 0, "valve": 0}

    # ------------------------------------------------------------- estimate
    def on_arrival(self, items: list, now: float) -> None:
        seqs = []
        for it in items:  # one arrival per request among the items (normally one)
            if not seqs or it.seq is not seqs[-1]:
                seqs.append(it.seq)
        for _ in seqs:
            if self.last_arrival is not None:
                gap = now - self.last_arrival
                if self.mean_gap is None:
                    self.mean_gap = gap
                else:
                    self.mean_gap += self.ewma_weight * (gap - self.mean_gap)
            self.last_arrival = now
            self.num_arrivals += 1

    @property
    def rate(self) -> float | None:
        """Estimated arrival rate (requests/s); None before two arrivals."""
        if self.mean_gap is None:
            return None
        return math.inf if self.mean_gap <= 0 else 1.0 / self.mean_gap

    def gap_s(self, rate: float | None) -> float:
        """The Poisson gap g (s): how long to wait for the next arrival at ``rate``."""
        if rate is None:
            return self.valve_s(rate)
        if math.isinf(rate):
            return 0.0
        return -math.log1p(-self.quantile) / rate

    def valve_s(self, rate: float | None) -> float:
        """The safety valve (s): the longest the oldest queued request waits; ``max_age_s``."""
        return self.max_age_s

    # ------------------------------------------------------------- dispatch
    def select(self, queue: deque, now: float):
        valve = queue[0].enqueued_at + self.valve_s(self.rate)  # (c)
        gap = self.last_arrival + self.gap_s(self.rate) if self.last_arrival is not None else math.inf  # (b)
        due = min(valve, gap)
        full = count_requests(queue, self.max_batch) >= self.max_batch  # (a)
        if now < due and not full:
            return None, due
        self.triggers["full" if full else ("gap" if gap <= valve and self.rate is not None else "valve")] += 1
        return take_requests(queue, self.max_batch), None

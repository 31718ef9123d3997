"""Encoder dispatch rules: which queued media items an encoder worker batches next.

An encoder worker keeps a FIFO of :class:`EncodeItem` (one per media item, a
request's items in prompt order). When it is free it asks its dispatcher
:meth:`EncodeDispatcher.select`, which either removes and returns the items
of the next batch, or returns ``None`` and the time at which to ask again (a
timeout still running). The worker asks again whenever items arrive. No SimPy
here, so rules are testable on hand-built queues.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt

from lmmsim.policies.registry import register


@dataclass(slots=True)
class EncodeItem:
    """One media item waiting for an encoder."""

    seq: object  # the request's engine state (``seq.request.request_id`` ...)
    segment: object  # its PromptSegment (``segment.item`` is the MediaItem)
    enqueued_at: float
    target: int = 0  # index of the LLM worker its embeddings go to

    @property
    def num_llm_tokens(self) -> int:
        return self.segment.length


class EncodeDispatcher(ABC):
    @abstractmethod
    def select(self, queue: deque, now: float) -> tuple[list | None, float | None]:
        """Remove and return the next batch from ``queue`` (non-empty), or return
        ``(None, wake_at)``: nothing to run before ``wake_at``."""


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
    when the oldest item has waited ``timeout_s``; items in FIFO order."""

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

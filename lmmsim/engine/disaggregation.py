"""Disaggregated deployments: encoders send embeddings to LLM workers, prefill sends KV to decode.

Flow of a request with media (``e_pd`` and ``e_p_d``):

1. at arrival the front end picks its LLM worker (the queue router) and the
   least-loaded encoder worker, and queues its media items there;
2. when a batch is encoded, each request's embeddings in it travel to its LLM
   worker as one transfer over the encoder's egress link (bandwidth shared by
   concurrent transfers, at most ``max_in_flight_sends`` in flight); the
   receiver sets buffer memory aside before a transfer starts and frees it
   when prefill has consumed the item (its last position computed);
3. ``after_encode`` admission: the request joins the LLM queue once all its
   embeddings arrived; ``streaming``: it joins at arrival and each chunk stops
   before the first embedding still missing.

Text-only requests go straight to their LLM worker.

``e_p_d``: the LLM workers are prefill-only. When a request's first token is
sampled, a decode worker (least loaded) reserves KV blocks for it -- the
request waits at the prefill worker, KV held, until the reservation succeeds
-- then its KV cache (prompt tokens x KV bytes per token) is sent over the
prefill worker's egress link, after which the prefill worker frees its blocks
and the request joins the decode worker's batch.

A worker's egress link is its GPUs' links taken together (one NIC or NVLink
port per GPU): bandwidth x GPUs.
"""

from __future__ import annotations

from collections import deque

from lmmsim.engine.embedding_tracker import EmbeddingTracker
from lmmsim.engine.links import Link, Sender
from lmmsim.policies.encode_dispatch import EncodeItem


class ByteBudget:
    """Receiver memory for embeddings, granted FIFO. A request larger than the
    whole budget is admitted when the budget is empty (alone), so it cannot
    deadlock."""

    def __init__(self, env, capacity_bytes: float):
        self.env = env
        self.capacity = capacity_bytes
        self.used = 0.0
        self.peak = 0.0
        self._waiting: deque = deque()

    def acquire(self, num_bytes: float):
        ev = self.env.event()
        self._waiting.append((num_bytes, ev))
        self._grant()
        return ev

    def release(self, num_bytes: float) -> None:
        self.used -= num_bytes
        self._grant()

    def _grant(self) -> None:
        while self._waiting:
            num_bytes, ev = self._waiting[0]
            if self.used + num_bytes > self.capacity and self.used > 0:
                return
            self._waiting.popleft()
            self.used += num_bytes
            self.peak = max(self.peak, self.used)
            ev.succeed()


class EmbeddingInbox:
    """Embeddings arriving at one LLM worker: an :class:`EmbeddingTracker` per
    request with media, and the receiver memory (:class:`ByteBudget`) they hold."""

    def __init__(self, env, engine, buffer_bytes: float, bytes_per_token: float, admit_when_complete: bool):
        self.engine = engine
        self.buffer = ByteBudget(env, buffer_bytes)
        self.bytes_per_token = bytes_per_token
        self.admit_when_complete = admit_when_complete
        self.trackers: dict[int, EmbeddingTracker] = {}  # request id -> its tracker, until all is consumed
        # Requests routed here whose embeddings are still coming: load the engine
        # does not see yet (after_encode admission), counted for the router.
        self.num_awaiting = 0

    def tracker(self, seq) -> EmbeddingTracker:
        rid = seq.request.request_id
        tracker = self.trackers.get(rid)
        if tracker is None:
            req = seq.request
            tracker = self.trackers[rid] = EmbeddingTracker(req.media_segments, req.num_prompt_tokens,
                                                            self.bytes_per_token)
            if not tracker.complete:
                self.num_awaiting += 1
        return tracker

    def deliver(self, seq, indices: list[int]) -> None:
        tracker = self.tracker(seq)
        was_complete = tracker.complete
        joined = tracker.mark_ready(indices)
        if joined:
            self.engine.scheduler.media_arrived(seq, joined)
        if tracker.complete and not was_complete:
            self.num_awaiting -= 1
        if tracker.complete and self.admit_when_complete:
            self.engine.submit(seq)
            return
        self.engine.notify()

    def consume(self, seq) -> None:
        """Free the embeddings of positions prefill has computed."""
        rid = seq.request.request_id
        tracker = self.trackers.get(rid)
        if tracker is None:
            return
        freed = tracker.release_computed(seq.num_computed)
        if freed:
            self.buffer.release(freed * self.bytes_per_token)
        if tracker.complete and not tracker.held_tokens and seq.num_computed >= seq.request.num_prompt_tokens:
            del self.trackers[rid]

    @property
    def held_bytes(self) -> float:
        """Embedding memory arrived and not yet consumed by prefill."""
        return sum(t.held_bytes for t in self.trackers.values())


class DisaggregatedFrontend:
    """Routes arrivals through encoders to LLM workers, and (``e_p_d``) prefill to decode."""

    def __init__(
        self,
        env,
        *,
        encoders: list,
        llm_engines: list,
        inboxes: list[EmbeddingInbox],
        encoder_senders: list[Sender],
        router,
        streaming: bool,
        decode_engines: list | None = None,
        kv_senders: list[Sender] | None = None,
        kv_bytes_per_token: float = 0.0,
        decode_router=None,
        envelope: bool = False,
        offload=None,
        local_target: list[int] | None = None,
    ):
        self.env = env
        self.encoders = encoders
        self.prefill = llm_engines
        self.inboxes = inboxes
        self.encoder_senders = encoder_senders
        self.router = router
        self.streaming = streaming
        self.decode = decode_engines or []
        self.kv_senders = kv_senders or []
        self.kv_bytes_per_token = kv_bytes_per_token
        self.decode_router = decode_router
        self.envelope = envelope
        # EAServe: ``offload.route()`` True = remote; the engines after the first
        # ``num_remote`` are local prefill workers, ``local_target[e]`` the one on encoder e's GPUs.
        self.offload = offload
        self.local_target = local_target or []
        self.num_remote = len(llm_engines) - len(set(self.local_target))
        self._kv_waiting: list[deque] = [deque() for _ in self.decode]
        self.num_kv_transfers = 0

    @property
    def workers(self) -> list:
        return [*self.encoders, *self.prefill, *self.decode]

    @property
    def llm_engines(self) -> list:
        return [*self.prefill, *self.decode]

    # ------------------------------------------------------------- arrivals
    def arrive(self, seq) -> None:
        engines = self.prefill
        media = seq.request.media_segments
        encoder = min(range(len(self.encoders)), key=lambda i: self.encoders[i].load)
        target = self._prefill_target(seq, encoder)
        if not media:
            engines[target].submit(seq)
            return
        # The tracker starts with the request (text positions ready, media
        # positions reserved), as RServe's does.
        self.inboxes[target].tracker(seq)
        if self.streaming:
            engines[target].submit(seq)
        now = self.env.now
        self.encoders[encoder].submit([EncodeItem(seq, seg, now, target, i) for i, seg in enumerate(media)])

    def _prefill_target(self, seq, encoder: int) -> int:
        """Index of the prefill (or LLM) engine that prefills ``seq``. With local
        prefill workers (EAServe), the offload router sends it remote (a routed
        choice among the remote workers) or to the local worker of ``encoder``."""
        if self.offload is not None and not self.offload.route():
            return self.local_target[encoder]
        remote = self.num_remote
        if remote == 1:
            return 0
        return self.router.route(seq.request, [e.load + box.num_awaiting
                                               for e, box in zip(self.prefill[:remote], self.inboxes)])

    # ------------------------------------------------------ embeddings E -> P
    def on_encoded(self, encoder: int, batch: list[EncodeItem]) -> None:
        """Send the batch's embeddings: one transfer per request, or -- with envelope
        transfer (EAServe) -- one per destination LLM worker, whatever the number of
        requests in it (one link setup latency per envelope)."""
        groups: dict = {}
        for it in batch:
            key = it.target if self.envelope else it.seq.request.request_id
            groups.setdefault(key, []).append(it)
        for items in groups.values():
            self._send_embeddings(encoder, items)

    def _send_embeddings(self, encoder: int, items: list[EncodeItem]) -> None:
        """One transfer carrying ``items`` (all for the same LLM worker)."""
        inbox = self.inboxes[items[0].target]
        per_request: dict = {}
        for it in items:
            per_request.setdefault(id(it.seq), (it.seq, []))[1].append(it.index)
        num_bytes = sum(it.num_llm_tokens for it in items) * inbox.bytes_per_token
        sender = self.encoder_senders[encoder]
        tag = items[0].seq.request.request_id

        def delivered(_done):
            for seq, indices in per_request.values():
                inbox.deliver(seq, indices)

        def start(_event):
            if self.local_target and items[0].target == self.local_target[encoder]:
                delivered(None)  # local prefill on the encoder's own GPU: no link to cross
                return
            sender.send(num_bytes, tag=tag).callbacks.append(delivered)

        inbox.buffer.acquire(num_bytes).callbacks.append(start)

    def on_batch(self, engine_index: int, plan) -> None:
        """After an LLM batch: release embeddings its chunks consumed."""
        inbox = self.inboxes[engine_index]
        for seq, _n, _start in plan.chunks:
            if seq.request.media_segments:
                inbox.consume(seq)

    # ----------------------------------------------------------- KV  P -> D
    def on_prefilled(self, prefill_index: int, seq) -> None:
        decode = self.decode
        d = self.decode_router.route(seq.request, [e.load for e in decode]) if len(decode) > 1 else 0
        if not self._kv_waiting[d] and decode[d].scheduler.reserve(seq):
            self._send_kv(prefill_index, d, seq)
        else:
            self._kv_waiting[d].append((prefill_index, seq))

    def on_decode_finish(self, decode_index: int) -> None:
        """Blocks freed on a decode worker: start the reservations that now fit."""
        waiting = self._kv_waiting[decode_index]
        sched = self.decode[decode_index].scheduler
        while waiting and sched.reserve(waiting[0][1]):
            p, seq = waiting.popleft()
            self._send_kv(p, decode_index, seq)

    def _send_kv(self, p: int, d: int, seq) -> None:
        self.num_kv_transfers += 1
        num_bytes = seq.num_computed * self.kv_bytes_per_token
        prefill, decode = self.prefill[p], self.decode[d]

        def arrived(_event):
            prefill.scheduler.release(seq)
            prefill.notify()
            decode.scheduler.admit_prefilled(seq)
            decode.notify()

        self.kv_senders[p].send(num_bytes, tag=seq.request.request_id).callbacks.append(arrived)


def egress(env, spec, num_gpus: int, name: str, max_in_flight: int | None, on_transfer=None) -> Sender:
    """A worker's egress link (its GPUs' links together) behind an in-flight cap."""
    link_spec = spec.model_copy(update={"bandwidth_gbs": spec.bandwidth_gbs * num_gpus})
    return Sender(env, Link(env, link_spec, name, on_transfer=on_transfer), max_in_flight)

"""Disaggregated deployments: encoders send embeddings to LLM workers, prefill sends KV to decode.

Flow of a request with media (``e_pd`` and ``e_p_d``):

1. at arrival the front end picks its LLM worker (the queue router) and the
   least-loaded encoder worker, and queues its media items there;
2. when a batch is encoded, each request's embeddings in it travel to its LLM
   worker as one transfer over the encoder's egress link (bandwidth shared by
   concurrent transfers, at most ``max_in_flight_sends`` in flight); the
   receiver sets buffer memory aside before a transfer starts and frees it
   position by position as prefill consumes it;
3. ``after_encode`` admission: the request joins the LLM queue once all its
   embeddings arrived; ``streaming``: it joins at arrival and each chunk stops
   before the first embedding still missing.

The embedding buffer never deadlocks (:class:`EmbeddingInbox`):

* with ``after_encode`` a request holds its whole embedding reservation or
  none of it: its first transfer reserves every item's bytes, so an item
  already landed can never wait on buffer room that only the request's own
  admission would free (the other items of a half-delivered request would);
* a transfer larger than the buffer is cut at item boundaries into parts
  that fit (an envelope of several requests, an RServe batch of many items);
* a request that could never fit -- after_encode: all its embeddings at
  once; streaming: one item -- is refused at arrival (``build``), never
  queued; so every reservation fits an empty buffer, and the FIFO grant
  order lets the oldest waiting transfer in as soon as room frees.

Text-only requests go straight to their LLM worker.

``e_p_d``: the LLM workers are prefill-only. When a request's first token is
sampled, a decode worker (least loaded) reserves KV blocks for it -- the
request waits at the prefill worker, KV held, until the reservation succeeds
-- then its KV cache (prompt tokens x KV bytes per token) is sent over the
prefill worker's egress link, after which the prefill worker frees its blocks
and the request joins the decode worker's batch.

``p_d`` is ``e_p_d`` with no encoder workers: every request goes straight to
its prefill worker, which encodes a multimodal request's media itself inside
its steps (``media="local"``, vLLM's encoder cache); no embeddings travel and
no inbox holds them. Once prefilled, the KV path is ``e_p_d``'s. A request
a decode worker preempts recomputes its prompt there without re-encoding, as
``e_p_d``'s do (the scheduler's "keeps its embeddings" simplification). With
``first_token: decode`` (p_d's default) the first token reaches the client
when the KV cache lands, so TTFT includes the transfer; ``e_p_d`` counts it
when the prefill worker samples it.

A worker's egress link is its GPUs' links taken together (one NIC or NVLink
port per GPU): bandwidth x GPUs.
"""

from __future__ import annotations

from collections import deque

from simpy.events import NORMAL

from lmmsim.engine.blocked_order import BlockedOrder, static_order
from lmmsim.engine.embedding_tracker import EmbeddingTracker
from lmmsim.engine.links import Link, Sender
from lmmsim.policies.encode_dispatch import EncodeItem


class ByteBudget:
    """Receiver memory for embeddings, granted FIFO.

    A reservation larger than the whole budget could never be granted: callers
    cut transfers to fit (:meth:`EmbeddingInbox.transfer_parts`) and refuse
    larger requests at arrival. When the oldest waiting reservation does not
    fit, ``on_blocked()`` (if given) may free room and grant a waiter out of
    order with :meth:`grant`; it returns whether it granted one.

    A granted reservation's ``on_grant(None)`` runs in an ordinary event of the
    instant it is granted (as a callback on a succeeded event would). One granted
    on arrival, with none waiting, never enters the waiting line (nor ``order``):
    it would leave it at once.
    """

    def __init__(self, env, capacity_bytes: float, on_blocked=None, order=None):
        self.env = env
        self.capacity = capacity_bytes
        self.used = 0.0
        self.peak = 0.0
        self.on_blocked = on_blocked
        self.waiting: deque = deque()  # (num_bytes, on_grant, owner), oldest first
        self.order = order  # a BlockedOrder told of each reservation waiting and leaving, or None

    def acquire(self, num_bytes: float, on_grant, owner=None) -> None:
        """Reserve ``num_bytes``; ``on_grant(None)`` runs once they are granted."""
        if num_bytes > self.capacity:
            raise ValueError(f"a reservation of {num_bytes:.0f} B exceeds the whole buffer ({self.capacity:.0f} B)")
        if not self.waiting and self.used + num_bytes <= self.capacity:
            self._take(num_bytes, on_grant)
            return
        entry = (num_bytes, on_grant, owner)
        self.waiting.append(entry)
        if self.order is not None:
            self.order.added(entry)
        self._grant()

    def release(self, num_bytes: float, regrant: bool = True) -> None:
        self.used -= num_bytes
        if regrant:
            self._grant()

    def fits(self, num_bytes: float) -> bool:
        return self.used + num_bytes <= self.capacity

    def grant(self, entry) -> None:
        """Grant the waiting ``entry`` now (it must fit)."""
        if self.waiting[0] is entry:
            self.waiting.popleft()
        else:
            self.waiting.remove(entry)
        if self.order is not None:
            self.order.removed(entry)
        self._take(entry[0], entry[1])

    def _take(self, num_bytes: float, on_grant) -> None:
        self.used += num_bytes
        if self.used > self.peak:
            self.peak = self.used
        self.env.call_at(self.env.now, on_grant, None, NORMAL)

    def regrant(self) -> None:
        """Try the waiting reservations again (the owner's view of room changed)."""
        self._grant()

    def _grant(self) -> None:
        while self.waiting:
            head = self.waiting[0]
            if self.fits(head[0]):
                self.grant(head)
            elif self.on_blocked is None or not self.on_blocked():
                return


class EmbeddingInbox:
    """Embeddings arriving at one LLM worker: an :class:`EmbeddingTracker` per
    request with media, and the receiver memory (:class:`ByteBudget`) they hold.

    Streaming admission puts every request in the engine at arrival, so two
    orders meet here: the buffer grants transfers as encoders finish, the
    engine consumes embeddings in its own order (queue policy, admission). A
    request early in the engine's order could then wait forever for room held
    by embeddings of requests behind it (which wait for it, or for the KV
    blocks it holds). So when a reservation is blocked, the buffer evicts
    embeddings of *waiting* requests ranked below the best-ranked blocked
    one (:meth:`ContinuousBatchingScheduler.consumption_rank`), lowest
    first, and their items travel again later (``resend``), as an encoder
    cache drops entries no running request uses. after_encode needs none of
    this: a request holds its whole reservation or none (module docstring).
    """

    def __init__(self, env, engine, buffer_bytes: float, bytes_per_token: float, admit_when_complete: bool,
                 resend=None):
        self.env = env
        self.engine = engine
        streaming = not admit_when_complete
        self.buffer = ByteBudget(env, buffer_bytes, on_blocked=self._make_room if streaming else None,
                                 order=BlockedOrder(engine.scheduler)
                                 if streaming and static_order(engine.scheduler.queue) else None)
        self.bytes_per_token = bytes_per_token
        self.admit_when_complete = admit_when_complete
        # ``resend(items)``: send evicted items again (the front end's transfer path)
        self.resend = resend
        self.trackers: dict[int, EmbeddingTracker] = {}  # request id -> its tracker, until all is consumed
        # after_encode: requests whose whole embedding reservation is taken (a request's
        # first transfer takes it; later ones carry only bytes over the link)
        self._reserved: set[int] = set()
        # streaming: request id -> {media index: (encoder, encode item)}, items landed here (for eviction)
        self._landed: dict[int, dict] = {}
        self.num_evicted_items = 0
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

    def transfer_parts(self, items: list) -> list[tuple[list, float]]:
        """Cut one transfer's ``items`` (encode items bound here) into parts whose
        buffer reservations fit the buffer; returns ``(items, reserve_bytes)`` per part.

        after_encode: a request's first part reserves all of its embeddings (never
        larger than the buffer: larger requests are refused at arrival), later
        ones nothing. streaming: each item reserves its own bytes, and a part
        holds one request's items."""
        reserved = self._reserved  # (the items' requests that were in it before this transfer)
        if len(items) == 1:  # (most transfers: one item, one part)
            covered = bool(reserved) and items[0].seq.request.request_id in reserved
            need = self._reservation(items[0])
            return [(items, 0.0)] if covered else [(items, 0.0 + need)]
        capacity = self.buffer.capacity
        reserved_before = {rid for it in items if (rid := it.seq.request.request_id) in reserved} if reserved else ()
        needs = [(it, self._reservation(it)) for it in items]
        # Items whose room an earlier transfer reserved travel on their own, at once:
        # queued behind another request's reservation they would hold theirs hostage.
        covered = [it for it, _ in needs if it.seq.request.request_id in reserved_before]
        parts: list[tuple[list, float]] = [(covered, 0.0)] if covered else []
        current: list = []
        reserve = 0.0
        for it, need in needs:
            if it.seq.request.request_id in reserved_before:
                continue
            # streaming: one request per part, so a blocked part has one rank (eviction)
            other = current and current[-1].seq is not it.seq
            if current and (reserve + need > capacity or (other and not self.admit_when_complete)):
                parts.append((current, reserve))
                current, reserve = [], 0.0
            current.append(it)
            reserve += need
        if current:
            parts.append((current, reserve))
        return parts

    def _reservation(self, item) -> float:
        """Buffer bytes ``item``'s transfer must set aside (and record the reservation)."""
        if not self.admit_when_complete:
            return self.tracker(item.seq).unreleased_tokens(item.index) * self.bytes_per_token
        rid = item.seq.request.request_id
        if rid in self._reserved:
            return 0.0
        self._reserved.add(rid)
        return item.seq.request.num_mm_tokens * self.bytes_per_token

    def deliver(self, seq, items: list, encoder: int) -> None:
        """The encode ``items`` of ``seq``, sent by ``encoder``, landed here."""
        rid = seq.request.request_id
        tracker = self.trackers.get(rid)
        if tracker is None:
            tracker = self.tracker(seq)
        if not self.admit_when_complete:
            landed = self._landed.get(rid)
            if landed is None:
                landed = self._landed[rid] = {}
            for it in items:
                landed[it.index] = (encoder, it)
        was_complete = tracker.complete
        joined = tracker.mark_ready([it.index for it in items])
        if joined:
            self.engine.scheduler.media_arrived(seq, joined)
        complete = tracker.complete
        if complete and not was_complete:
            self.num_awaiting -= 1
        if complete and self.admit_when_complete:
            self.engine.submit(seq)
            return
        self.engine.notify()
        self.retry()  # what landed may be evictable for a blocked reservation

    def retry(self) -> None:
        """Streaming: reconsider blocked reservations after the evictable set changed
        (embeddings landed, requests preempted back to waiting)."""
        if self.buffer.waiting and self.buffer.on_blocked is not None:
            self.buffer.regrant()

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
            self._reserved.discard(rid)
            self._landed.pop(rid, None)

    # ------------------------------------------------------- eviction (streaming)
    def _make_room(self) -> bool:
        """The oldest reservation does not fit: free room for the blocked reservation
        first in consumption order by evicting items after it in that order, last
        first; grant it if it then fits.

        Consumption order: the engine's rank of the request, then the item's place in
        its prompt. An item may be evicted if its request is waiting (not admitted), or
        if it lies after a gap in its request's embeddings (nothing consumes it before
        the gap fills) -- which also frees a request's own later items for its earlier one."""
        rank = self.engine.scheduler.consumption_rank
        order = self.buffer.order
        entry = (order.first() if order is not None
                 else min(self.buffer.waiting, key=lambda e: (rank(e[2][0]), e[2][1])))
        bound = (rank(entry[2][0]), entry[2][1])
        victims = []
        for rid, landed in self._landed.items():
            tracker = self.trackers[rid]
            seq_rank = None  # one request's items share its rank
            for index, (_enc, it) in landed.items():
                if it.seq.status != "waiting" and index < tracker.num_leading_ready:
                    continue  # consumed in order, nothing ahead of it missing
                if seq_rank is None:
                    seq_rank = rank(it.seq)
                key = (seq_rank, index)
                if key > bound and tracker.unreleased_tokens(index):  # else consumed already (a
                    victims.append((key, rid, index))  # preempted request's): evicting frees nothing
        victims.sort()
        evicted = []
        while victims and not self.buffer.fits(entry[0]):
            _key, rid, index = victims.pop()
            evicted.append(self._evict(rid, index))
        if evicted:  # sent again once this grant round is over (never from inside it)
            self.env.timeout(0).callbacks.append(lambda _e, sent=evicted: self._send_again(sent))
        if not self.buffer.fits(entry[0]):
            return False
        self.buffer.grant(entry)
        return True

    def _evict(self, rid: int, index: int) -> tuple:
        """Drop landed, unconsumed media item ``index`` of request ``rid``; returns
        ``(encoder, encode item)``."""
        tracker = self.trackers[rid]
        landed = self._landed[rid]
        encoder, item = landed.pop(index)
        if not landed:
            del self._landed[rid]
        if tracker.complete:  # its embeddings are coming again: router load, as at arrival
            self.num_awaiting += 1
        self.buffer.release(tracker.evict(index) * self.bytes_per_token, regrant=False)
        self.engine.scheduler.media_evicted(item.seq, tracker.num_leading_ready)
        self.num_evicted_items += 1
        return encoder, item

    def _send_again(self, sent: list) -> None:
        """Evicted items travel again from the encoder that sent them."""
        by_encoder: dict[int, list] = {}
        for encoder, it in sent:
            by_encoder.setdefault(encoder, []).append(it)
        for encoder, items in by_encoder.items():
            self.resend(encoder, items)

    @property
    def held_bytes(self) -> float:
        """Embedding memory arrived and not yet consumed by prefill."""
        return sum(t.held_bytes for t in self.trackers.values())


class PrefillLoads:
    """Read-only view of the prefill workers an offload router chooses between, for
    one request (computed when read): outstanding work of each remote prefill
    worker (requests queued or running, plus embeddings on their way) and of the
    local prefill worker on the request's encoder GPU."""

    __slots__ = ("_frontend", "_encoder")

    def __init__(self, frontend, encoder: int):
        self._frontend = frontend
        self._encoder = encoder

    @property
    def remote_loads(self) -> tuple[int, ...]:
        f = self._frontend
        return tuple(e.load + box.num_awaiting for e, box in zip(f.prefill[:f.num_remote], f.inboxes))

    @property
    def local_load(self) -> int:
        f = self._frontend
        target = f.local_target[self._encoder]
        return f.prefill[target].load + f.inboxes[target].num_awaiting


class DisaggregatedFrontend:
    """Routes arrivals through encoders to LLM workers, and (``e_p_d``, ``p_d``) prefill to decode.
    With no encoders (``p_d``) requests go straight to the prefill workers."""

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
        first_token_at_decode: bool = False,
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
        # p_d's ``first_token: decode``: the client sees the first token when the KV lands
        self.first_token_at_decode = first_token_at_decode
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
        if not self.encoders:  # p_d: the prefill worker encodes any media itself
            engines[self._prefill_target(seq, None)].submit(seq)
            return
        media = seq.request.media_segments
        encoders = self.encoders
        encoder = 0 if len(encoders) == 1 else min(range(len(encoders)), key=lambda i: encoders[i].load)
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
        if self.offload is not None and not self.offload.route(seq.request, PrefillLoads(self, encoder)):
            return self.local_target[encoder]
        if self.num_remote == 1:
            return 0
        if not self.inboxes:  # p_d: nothing is on its way to a prefill worker
            return self.router.route(seq.request, [e.load for e in self.prefill])
        return self.router.route(seq.request, PrefillLoads(self, encoder).remote_loads)

    # ------------------------------------------------------ embeddings E -> P
    def on_encoded(self, encoder: int, batch: list[EncodeItem]) -> None:
        """Send the batch's embeddings: one transfer per request, or -- with envelope
        transfer (EAServe) -- one per destination LLM worker, whatever the number of
        requests in it (one link setup latency per envelope)."""
        if len(batch) == 1:
            self.send_embeddings(encoder, batch)
            return
        groups: dict = {}
        for it in batch:
            key = it.target if self.envelope else it.seq.request.request_id
            groups.setdefault(key, []).append(it)
        for items in groups.values():
            self.send_embeddings(encoder, items)

    def send_embeddings(self, encoder: int, items: list[EncodeItem]) -> None:
        """One transfer carrying ``items`` (all for the same LLM worker), cut into
        parts the receiver's buffer can take."""
        inbox = self.inboxes[items[0].target]
        for part, reserve in inbox.transfer_parts(items):
            self._send_part(encoder, inbox, part, reserve)

    def _send_part(self, encoder: int, inbox: EmbeddingInbox, items: list[EncodeItem], reserve: float) -> None:
        """One transfer: reserve ``reserve`` bytes at the receiver, then cross the link."""
        first = items[0]
        if len(items) == 1:  # (most transfers: one item)
            per_request = ((first.seq, items),)
            num_bytes = first.num_llm_tokens * inbox.bytes_per_token
        else:
            by_seq: dict = {}
            for it in items:
                by_seq.setdefault(id(it.seq), (it.seq, []))[1].append(it)
            per_request = by_seq.values()
            num_bytes = sum(it.num_llm_tokens for it in items) * inbox.bytes_per_token
        sender = self.encoder_senders[encoder]
        tag = first.seq.request.request_id

        def delivered(_end_at):
            for seq, its in per_request:
                inbox.deliver(seq, its, encoder)

        def start(_granted):
            if self.local_target and first.target == self.local_target[encoder]:
                delivered(None)  # local prefill on the encoder's own GPU: no link to cross
                return
            sender.submit(num_bytes, tag, delivered)

        if reserve:
            inbox.buffer.acquire(reserve, start, owner=(first.seq, first.index))
        else:
            start(None)

    def on_batch(self, engine_index: int, plan) -> None:
        """After an LLM batch: release embeddings its chunks consumed."""
        inbox = self.inboxes[engine_index]
        for seq, _n, _start in plan.chunks:
            if seq.request.media_segments:
                inbox.consume(seq)
        if plan.preempted:
            inbox.retry()

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

        def arrived(_end_at):
            prefill.scheduler.release(seq)
            prefill.notify()
            missing = len(seq.request.media_segments) - seq.media_ready
            if missing > 0:  # p_d: encoded at the prefill worker; a recompute here does not re-encode
                decode.scheduler.media_arrived(seq, missing)
            if self.first_token_at_decode:
                seq.first_token_at = self.env.now
            decode.scheduler.admit_prefilled(seq)
            decode.notify()

        self.kv_senders[p].submit(num_bytes, seq.request.request_id, arrived)


def egress(env, spec, num_gpus: int, name: str, max_in_flight: int | None, on_transfer=None) -> Sender:
    """A worker's egress link (its GPUs' links together) behind an in-flight cap."""
    link_spec = spec.model_copy(update={"bandwidth_gbs": spec.bandwidth_gbs * num_gpus})
    return Sender(env, Link(env, link_spec, name, on_transfer=on_transfer), max_in_flight)

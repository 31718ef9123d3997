"""Automatic prefix caching (``deployment.prefix_caching``), as vLLM V1 does it.

vLLM V1's KV cache manager keys every full block of computed KV by a chained hash:
a block's hash covers its parent block's hash, its tokens and "extra keys" (the
``mm_hash`` of each multimodal item overlapping it). Blocks with a hash stay looked
up in a table while they are in use and, once freed, while they sit in the free
block queue -- until an allocation hands them out again (evicting their content).
A new request is looked up block by block from its first token; the leading blocks
found are its computed prefix (at most ``num_tokens - 1`` tokens: the last token is
always recomputed, to sample from), shared by reference count.

lmmsim has no token ids. A request's content is its :func:`content_runs` (runs
``(key, tokens)`` from position 0; two requests whose runs agree up to a position
hold the same text up to it) plus each media item's ``media_id``. So a block's
content is: the run keys it covers with the offsets inside each run, and the
``media_id`` of every media item overlapping it (:func:`block_keys`). A block with
tokens no one else has -- text past the runs, or a media item without a
``media_id`` -- ends the shareable prefix: every later block is the request's own.

The pool (:class:`PrefixBlockPool`) keeps per cached block its key, reference count
and free-queue position; blocks with no content anyone can look up are counted only
(as :class:`~lmmsim.engine.kv_cache.BlockPool` counts them, in the same free queue).
A preempted request's own full blocks (past its shareable prefix, generated tokens
included) are keyed by ``(request_id, block index)`` when it is preempted, so it
finds them again itself -- the resume path of :mod:`lmmsim.engine.resume_cache`,
subsumed. A finished request's own blocks are dropped from the table: no one can hit
them (vLLM keeps their hashes, so its eviction count includes them; lmmsim's
``evictions`` counts only blocks some request could still hit) -- except where the
request names its answer's content (``Request.answer_content``: a conversation's
later turns resend it): then its full blocks of prompt and generated tokens stay keyed,
as vLLM's do, and the next turn hits them (:func:`answer_block_keys`).

Simplifications: when a block's content is already in the table (two requests
computed the same prefix at once), the later block stays private; vLLM keeps both
copies findable, and lookups find the first one either way. Keys are 64-bit Python
hashes of int tuples (a collision, ~n^2 / 2^64 for n blocks, would be a false hit).
Remote media (disaggregated encoders): the encoders still encode every item -- the
frontend dispatches before the prefill worker's lookup -- and a hit stops before the
first item whose embeddings have not arrived. ``encode_before_prefill`` with local
media: items past a hit are encoded with the chunks that reach them.

Source: vLLM's design document "Automatic Prefix Caching" (docs.vllm.ai, design/
prefix_caching: block hash of parent hash, block tokens and extra keys; the free block
queue, LRU with a request's last block first; ``num_tokens - 1``) and its V1 KV cache
manager (``num_cached_tokens`` set at a request's first scheduling). Cost: about 1 us
per KV block over a request's life (keys, table, free queue) -- once per request, and
only with prefix caching on -- plus Python's cyclic garbage collector walking the cached
:class:`Block` objects: on the Mooncake replay (bench/mooncake_prefix_cache.py, 9M blocks)
about 2.4 us per block in all, 0.8 us with the collector off.
"""

from __future__ import annotations

import hashlib
import heapq
from collections import deque

from lmmsim.engine.kv_cache import BlockPool, blocks_for
from lmmsim.engine.resume_cache import first_uncached_media
from lmmsim.workload.request import Request, content_runs


def stable_id(obj) -> int:
    """A 64-bit id of a run key or ``media_id`` that is the same in every process.

    Python's ``hash`` of a str is salted per process (PYTHONHASHSEED), so keys go
    through blake2b of their ``repr`` (ints, strs and tuples of them have a stable
    repr). Block keys then chain with ``hash`` of tuples of ints, which is not salted.
    """
    return int.from_bytes(hashlib.blake2b(repr(obj).encode(), digest_size=8).digest(), "little")


def block_keys(request: Request, block_size: int) -> tuple[int, ...]:
    """Keys of the request's leading full prompt blocks whose content others may share
    (:func:`chain_keys` over its content runs and media)."""
    return chain_keys(content_runs(request), request.media_segments, request.num_prompt_tokens, block_size)


def answer_block_keys(request: Request, block_size: int, num_computed: int) -> tuple[int, ...]:
    """Keys of the leading full blocks of the request's first ``num_computed`` tokens (prompt,
    then generated), its answer keyed by ``request.answer_content``; () when it has none, or
    when its content runs stop short of the prompt's end (the answer's position would be wrong:
    text past the runs is the request's own, so nothing after it is shareable)."""
    if request.answer_content is None:
        return ()
    runs = content_runs(request)
    if sum(n for _, n in runs) != request.num_prompt_tokens:
        return ()
    runs = (*runs, (request.answer_content, request.num_output_tokens))
    return chain_keys(runs, request.media_segments, num_computed, block_size)


def chain_keys(runs, media_segments, num_tokens: int, block_size: int) -> tuple[int, ...]:
    """Keys of the leading full blocks of ``num_tokens`` positions holding ``runs`` and media.

    Block ``b`` covers positions ``[b * block_size, (b + 1) * block_size)``; its key is
    ``hash((parent key, run id, first offset, end offset, ..., media id, ...))`` over the
    runs and media items overlapping it. Stops at the first block holding a token unique
    to the request. Blocks wholly inside one run and clear of media (nearly all) take a
    tight loop; the keys are the same as the general path's.
    """
    spans, covered = [], 0  # (start, end, run id) of each run
    for key, tokens in runs:
        spans.append((covered, covered + tokens, stable_id(key)))
        covered += tokens
    media = [(seg.start, seg.end, seg.item.media_id) for seg in media_segments]
    media_ids: dict = {}
    keys: list[int] = []
    parent = 0
    nb = num_tokens // block_size
    b = ri = mi = 0
    while b < nb:
        s = b * block_size
        while ri < len(spans) and spans[ri][1] <= s:
            ri += 1
        while mi < len(media) and media[mi][1] <= s:
            mi += 1
        if ri < len(spans) and spans[ri][0] <= s:
            rs, re, rid = spans[ri]
            last = min(re, media[mi][0] if mi < len(media) else re, nb * block_size) // block_size
            if last > b:  # blocks b .. last - 1: inside run ri, before the next media item
                for o in range(s - rs, last * block_size - rs, block_size):
                    parent = hash((parent, rid, o, o + block_size))
                    keys.append(parent)
                b = last
                continue
        parts = _block_content(s, s + block_size, spans, ri, media, mi, covered, media_ids)
        if parts is None:
            break
        parent = hash((parent, *parts))
        keys.append(parent)
        b += 1
    return tuple(keys)


def _block_content(s, e, spans, ri, media, mi, covered, media_ids) -> tuple | None:
    """What block ``[s, e)`` holds -- (run id, first offset, end offset) per run and the id
    of each media item overlapping it -- or None if it holds a token unique to the request."""
    parts: list = []
    j = ri
    while j < len(spans) and spans[j][0] < e:
        rs, re, rid = spans[j]
        parts += (rid, max(s, rs) - rs, min(e, re) - rs)
        j += 1
    pos = max(s, covered)  # positions past the runs must lie in media items with an id
    k = mi
    while k < len(media) and media[k][0] < e:
        ms, me, mid = media[k]
        if mid is None or ms > pos:  # no id, or text past the runs before it
            return None
        if mid not in media_ids:
            media_ids[mid] = stable_id(("media", mid))
        parts.append(media_ids[mid])
        pos = max(pos, me)
        k += 1
    return tuple(parts) if pos >= e else None


class Block:
    """A cached block: its content key, its holders, its free-queue position (-1: in use)."""

    __slots__ = ("key", "ref", "pos")

    def __init__(self, key):
        self.key = key
        self.ref = 1
        self.pos = -1


class PrefixBlockPool(BlockPool):
    """A block pool whose full blocks are looked up by content (vLLM V1's block pool).

    Free-queue positions are numbered as in the base pool; a cached free block is
    evicted when the head passes its position, and taken out of the queue (a hole the
    head skips) when a lookup hits it. Per request it keeps the blocks the request
    holds that carry a key (``None`` where its block is a private copy), in order.
    """

    prefix_caching = True

    def __init__(self, num_blocks: int, block_size: int):
        super().__init__(num_blocks, block_size)
        self.cached: dict = {}  # key -> Block, in use or free and not yet evicted
        self.evictions = 0  # cached blocks handed out again (their content lost)
        self._queue: deque = deque()  # (position, Block) of cached blocks entering the free queue, in order
        self._held: dict[int, list] = {}  # request id -> its leading blocks (Block or None)
        self._keys: dict[int, tuple] = {}  # request id -> block_keys, while it is in this engine

    def keys_of(self, request: Request) -> tuple:
        keys = self._keys.get(request.request_id)
        if keys is None:
            keys = self._keys[request.request_id] = block_keys(request, self.block_size)
        return keys

    # ------------------------------------------------------------- lookup
    def match(self, request: Request, max_blocks: int) -> list:
        """The leading cached blocks of ``request`` (at most ``max_blocks``)."""
        keys, cached, rid = self.keys_of(request), self.cached, request.request_id
        hit = []
        for i in range(max_blocks):
            blk = cached.get(keys[i] if i < len(keys) else (rid, i))
            if blk is None:
                break
            hit.append(blk)
        return hit

    @staticmethod
    def num_in_queue(blocks: list) -> int:
        """Of ``blocks`` (a match), those free now: a hit takes them out of the free queue."""
        return sum(1 for b in blocks if not b.ref)

    def take(self, request_id: int, blocks: list) -> None:
        """A request starts with ``blocks`` (a match) as its computed prefix."""
        positions = []
        for blk in blocks:
            if not blk.ref:
                positions.append(blk.pos)
                blk.pos = -1
            blk.ref += 1
        if positions:
            self._take(len(positions))
            positions.sort()
            start = prev = positions[0]
            for p in positions[1:]:  # one hole per run of adjacent positions
                if p != prev + 1:
                    self._hole(start, prev + 1)
                    start = p
                prev = p
            self._hole(start, prev + 1)
        self._held[request_id] = list(blocks)

    def _hole(self, start: int, end: int) -> None:
        heapq.heappush(self._holes, (start, end))

    # --------------------------------------------------------- allocation
    def _advance(self, n: int) -> None:
        super()._advance(n)
        queue, head = self._queue, self.head
        while queue and queue[0][0] < head:
            pos, blk = queue.popleft()
            if blk.pos == pos:  # still free at that position: its content is lost
                blk.pos = -1
                del self.cached[blk.key]
                self.evictions += 1

    def cache_filled(self, request: Request, num_scheduled: int) -> None:
        """The request's blocks up to ``num_scheduled`` tokens are being computed: its
        full shareable ones become findable (vLLM caches full blocks in allocate_slots)."""
        keys = self.keys_of(request)
        upto = min(num_scheduled // self.block_size, len(keys))
        held = self._held.setdefault(request.request_id, [])
        cached = self.cached
        for i in range(len(held), upto):
            key = keys[i]
            if key in cached:
                held.append(None)  # the same content computed twice at once: this copy stays private
                continue
            blk = cached[key] = Block(key)
            held.append(blk)

    def _key_answer(self, request: Request, held: list, full: int) -> None:
        """A finished request whose answer later prompts repeat: key its full blocks past
        those already keyed (the rest of its prompt, then its generated tokens), and re-key by
        content the blocks it got back after a preemption under its own ``(request_id, i)``."""
        if request.answer_content is None:
            return
        resumed = any(b is not None and type(b.key) is tuple for b in held)
        if len(held) >= full and not resumed:
            return
        keys, cached, n = answer_block_keys(request, self.block_size, full * self.block_size), self.cached, len(held)
        for i in range(min(full, len(keys))):  # (a chain broken inside the keyed prompt keys nothing past it)
            key = keys[i]
            if i < n:
                blk = held[i]
                if blk is not None and type(blk.key) is tuple and key not in cached:  # its own key, ref 1
                    del cached[blk.key]
                    blk.key = key
                    cached[key] = blk
                continue
            if key in cached:
                held.append(None)
                continue
            blk = cached[key] = Block(key)  # held (ref 1) until free_request's loop frees it
            held.append(blk)

    # ---------------------------------------------------------------- free
    def shared_blocks(self, request_id: int, matched: list = ()) -> int:
        """Blocks of the request that freeing it does not make free: those others hold too,
        and those in ``matched`` (a waiting request's hit, which takes them straight back)."""
        taken = {id(b) for b in matched}
        return sum(1 for b in self._held.get(request_id, ()) if b is not None and (b.ref > 1 or id(b) in taken))

    def free_request(self, request: Request, num_blocks: int, num_computed: int, keep: bool) -> None:
        """The request gives back its ``num_blocks`` blocks, last block first.

        ``keep`` (preemption): its own full blocks of computed KV past the shareable
        prefix get a key only it looks up. Otherwise its own blocks are dropped from
        the table and its keys forgotten.
        """
        rid = request.request_id
        held = self._held.pop(rid, [])
        cached = self.cached
        if keep:
            full = min(num_computed // self.block_size, num_blocks)
            for i in range(len(held), full):
                key = (rid, i)  # past the shareable prefix (cache_filled keyed those up to here)
                if key in cached:
                    held.append(None)
                    continue
                blk = cached[key] = Block(key)
                held.append(blk)
        else:
            self._keys.pop(rid, None)
            self._key_answer(request, held, min(num_computed // self.block_size, num_blocks))
        tail = self.tail + num_blocks - len(held)  # the private blocks past the keyed ones
        entered = num_blocks - len(held)
        queue = self._queue
        for blk in reversed(held):
            if blk is None:
                tail += 1
                entered += 1
                continue
            blk.ref -= 1
            if blk.ref:
                continue  # another request still holds it
            entered += 1
            if not keep and type(blk.key) is tuple:  # its own block: no one can hit it
                del cached[blk.key]
                tail += 1
                continue
            blk.pos = tail
            queue.append((tail, blk))
            tail += 1
        self.tail = tail
        self.num_free += entered
        if self.num_free > self.num_blocks:
            raise RuntimeError("KV pool freed more blocks than it holds")


class PrefixLookup:
    """The scheduler's side of prefix caching: a mixin of
    :class:`~lmmsim.engine.scheduler.ContinuousBatchingScheduler`, which supplies ``pool``,
    ``block_size``, ``media``, ``encode_before_prefill``, ``_hit`` and ``_fit_media`` (its
    own ``_fit``); ``seq`` is a scheduler ``SeqState`` throughout."""

    def _fit_looked_up(self, seq, num_new: int, enc_left: int, out: list) -> tuple[int, int]:
        """``_fit`` with prefix caching: a waiting request is looked up first, and its chunk
        (the caller's ``min(tokens left, budget)``) shrinks to what is left past the hit."""
        if seq.status == "waiting":
            self._lookup(seq)
            num_new = min(num_new, seq.num_tokens - seq.num_scheduled)
        return self._fit_media(seq, num_new, enc_left, out)

    def _lookup(self, seq) -> None:
        """Prefix caching: the waiting ``seq`` starts at its leading cached blocks, at most
        ``num_tokens - 1`` tokens (vLLM recomputes the last one, to sample from). Remote
        media: not past the first item whose embeddings have not arrived (a chunk could
        not start there; the encoders run every item regardless), and with
        ``encode_before_prefill`` no hit before all have arrived (the first chunk waits)."""
        limit = (seq.num_tokens - 1) // self.block_size
        media = seq.request.media_segments
        if self.media == "remote" and seq.media_ready < len(media):
            ready_until = 0 if self.encode_before_prefill else media[seq.media_ready].start
            limit = min(limit, ready_until // self.block_size)
        blocks = self.pool.match(seq.request, limit)
        self._hit = (seq, blocks)
        cached = len(blocks) * self.block_size
        seq.num_computed = seq.num_scheduled = cached
        seq.next_media = first_uncached_media(media, cached)

    def _unlookup(self, seq) -> None:
        """Not admitted after all: a waiting request holds nothing (looked up again next time)."""
        seq.num_computed = seq.num_scheduled = seq.next_media = 0
        self._hit = None

    def _kv_need(self, seq, n: int) -> int:
        """Free blocks admitting ``seq`` with a first chunk of ``n`` tokens takes: those it
        allocates, plus (prefix caching) the cached free blocks its hit takes out of the queue."""
        need = blocks_for(seq.num_scheduled + n, self.block_size) - seq.num_blocks
        hit = self._hit
        if hit is not None and hit[0] is seq:
            need += self.pool.num_in_queue(hit[1]) - len(hit[1])
        return need

"""Resuming a preempted request from the prefix cache (``policy.queue.resume_cache``).

Without ``deployment.prefix_caching`` lmmsim shares no prefix across requests; this is the
narrow part of vLLM V1's automatic prefix caching (on by default, and in RPS-Serve's
artifact) that its preemption by recompute needs: a preempted request finds its own freed
blocks again. With ``deployment.prefix_caching`` the general lookup of
:mod:`lmmsim.engine.prefix_cache` covers this case too (a preempted request's own blocks
are keyed for it) and the priority scheduler does not use this module's records;
:func:`first_uncached_media` serves both.

How vLLM V1 behaves (KVCacheManager and its block pool's free block queue): every full
block of computed KV carries a hash; freeing a request puts its blocks at the tail of the
free queue, last block first (so its tail blocks are evicted first), without dropping
their hashes; an allocation takes blocks from the head (least recently freed first), and
a cached block loses its content only when it is handed out again. A waiting request is
looked up block by block from its first token: the leading full blocks still cached are
its computed prefix, at most ``num_tokens - 1`` tokens (the last token is always
recomputed, to sample from), and those blocks are taken back out of the free queue. Its
encoder inputs are scheduled only where they overlap the uncached part.

The model (:class:`~lmmsim.engine.kv_cache.BlockPool` numbers free-queue positions):
at preemption, record where the request's blocks enter the queue and how many full
blocks of computed KV it held (:func:`record`); when it is next considered for
admission, its blocks whose positions the head has passed are gone, the rest -- its
leading blocks -- survive (:func:`cached_tokens`). The request then starts at the cached
prefix, its blocks are reclaimed without handing out any other block, and media items
wholly inside the prefix are not encoded again (:func:`first_uncached_media`).
Here, cached blocks of other requests (finished or preempted) are never hit by anyone
else: that is what ``deployment.prefix_caching`` adds.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Freed:
    """A preempted request's blocks as they entered the free queue."""

    start: int  # free-queue position of its first freed block (its last block)
    blocks: int  # blocks freed, positions start .. start + blocks - 1 (the highest: its first block)
    full: int  # leading blocks that held full blocks of computed KV (cacheable)


def record(pool, num_blocks: int, num_computed: int) -> Freed:
    """Call just before the pool frees the preempted request's ``num_blocks`` blocks."""
    return Freed(pool.tail, num_blocks, num_computed // pool.block_size)


def cached_tokens(pool, freed: Freed, num_tokens: int) -> int:
    """Tokens of the request's prefix still cached now: whole blocks only, at most
    ``num_tokens - 1``."""
    blocks = min(pool.surviving(freed.start, freed.blocks), freed.full,
                 (num_tokens - 1) // pool.block_size)
    return max(0, blocks) * pool.block_size


def reclaim(pool, freed: Freed, num_cached: int) -> int:
    """Take the leading ``num_cached`` tokens' blocks back out of the free queue; returns them."""
    blocks = num_cached // pool.block_size
    pool.reclaim(freed.start + freed.blocks - blocks, blocks)
    return blocks


def first_uncached_media(media, num_cached: int) -> int:
    """Index of the first media segment not wholly inside the first ``num_cached`` tokens."""
    idx = 0
    while idx < len(media) and media[idx].start + media[idx].length <= num_cached:
        idx += 1
    return idx

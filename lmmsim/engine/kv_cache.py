"""Paged KV cache as a pool of fixed-size blocks.

Only counts are modelled (which physical block holds what does not change
timing without prefix caching). A sequence holding ``n`` computed tokens owns
``ceil(n / block_size)`` blocks. The pool enforces its capacity: allocating
past it is a bug in the scheduler, so it raises instead of going negative.

Free-queue positions (for resuming a preempted request from the prefix cache,
:mod:`lmmsim.engine.resume_cache`). vLLM V1's block pool keeps free blocks in
one queue: a freed block goes to its tail, an allocation takes blocks from its
head (least recently freed first), and a freed block keeps its cached KV until
it is handed out again. The pool numbers queue positions: ``free`` appends
``n`` positions at the tail (``tail``), ``allocate`` consumes ``n`` from the
head (``head``). Removing a run of positions from the middle of the queue --
a resumed request taking back its own cached blocks (:meth:`reclaim`) --
leaves a hole the head skips. A block at position ``p`` still holds its KV
while ``p >= head`` and it has not been reclaimed. Pure bookkeeping: O(1) per
call plus O(log holes) per hole, no per-block state. With prefix caching on,
:class:`~lmmsim.engine.prefix_cache.PrefixBlockPool` adds per-block state for the
blocks whose content can be looked up, in the same queue.
"""

from __future__ import annotations

import heapq


def blocks_for(num_tokens: int, block_size: int) -> int:
    """Blocks needed to hold ``num_tokens`` tokens."""
    return -(-num_tokens // block_size)


class BlockPool:
    prefix_caching = False  # blocks keyed by content: lmmsim.engine.prefix_cache.PrefixBlockPool

    def __init__(self, num_blocks: int, block_size: int):
        if num_blocks <= 0:
            raise ValueError("num_blocks must be > 0")
        if block_size <= 0:
            raise ValueError("block_size must be > 0")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.num_free = num_blocks
        self.peak_used = 0
        self.head = 0  # free-queue position of the next block handed out
        self.tail = num_blocks  # position the next freed block gets
        self._holes: list[tuple[int, int]] = []  # reclaimed [start, end) runs ahead of the head, a heap

    @property
    def num_used(self) -> int:
        return self.num_blocks - self.num_free

    def allocate(self, n: int) -> None:
        if n > self.num_free:  # _take, inline (every batch allocates)
            raise RuntimeError(f"KV pool over capacity: asked {n}, {self.num_free} free")
        free = self.num_free = self.num_free - n
        if self.num_blocks - free > self.peak_used:
            self.peak_used = self.num_blocks - free
        self._advance(n)

    def _take(self, n: int) -> None:
        if n > self.num_free:
            raise RuntimeError(f"KV pool over capacity: asked {n}, {self.num_free} free")
        self.num_free -= n
        used = self.num_blocks - self.num_free
        if used > self.peak_used:
            self.peak_used = used

    def _advance(self, n: int) -> None:
        """Hand out ``n`` blocks from the free queue's head, skipping reclaimed runs."""
        head, holes = self.head, self._holes
        while holes and holes[0][0] <= head + n:
            start, end = heapq.heappop(holes)
            n -= max(0, start - head)
            head = max(head, end)
        self.head = head + n

    def free(self, n: int) -> None:
        self.num_free += n
        if self.num_free > self.num_blocks:
            raise RuntimeError("KV pool freed more blocks than it holds")
        self.tail += n

    def surviving(self, start: int, n: int) -> int:
        """Of ``n`` blocks freed at positions ``start .. start + n - 1``, how many at the
        run's end (its highest positions) have not been handed out since."""
        return max(0, min(n, start + n - self.head))

    def reclaim(self, start: int, n: int) -> None:
        """Take back ``n`` still-cached blocks at positions ``start .. start + n - 1`` (all
        at or past the head) without handing out any from the head."""
        if n <= 0:
            return
        if start < self.head:
            raise RuntimeError("KV pool reclaimed blocks it no longer caches")
        self._take(n)
        heapq.heappush(self._holes, (start, start + n))

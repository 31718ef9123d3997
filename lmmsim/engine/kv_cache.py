"""Paged KV cache as a pool of fixed-size blocks.

Only counts are modelled (which physical block holds what does not change
timing without prefix caching). A sequence holding ``n`` computed tokens owns
``ceil(n / block_size)`` blocks. The pool enforces its capacity: allocating
past it is a bug in the scheduler, so it raises instead of going negative.
"""

from __future__ import annotations


def blocks_for(num_tokens: int, block_size: int) -> int:
    """Blocks needed to hold ``num_tokens`` tokens."""
    return -(-num_tokens // block_size)


class BlockPool:
    def __init__(self, num_blocks: int, block_size: int):
        if num_blocks <= 0:
            raise ValueError("num_blocks must be > 0")
        if block_size <= 0:
            raise ValueError("block_size must be > 0")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.num_free = num_blocks
        self.peak_used = 0

    @property
    def num_used(self) -> int:
        return self.num_blocks - self.num_free

    def allocate(self, n: int) -> None:
        if n > self.num_free:
            raise RuntimeError(f"KV pool over capacity: asked {n}, {self.num_free} free")
        self.num_free -= n
        used = self.num_blocks - self.num_free
        if used > self.peak_used:
            self.peak_used = used

    def free(self, n: int) -> None:
        self.num_free += n
        if self.num_free > self.num_blocks:
            raise RuntimeError("KV pool freed more blocks than it holds")

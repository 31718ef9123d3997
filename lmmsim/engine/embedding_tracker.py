"""Embedding tracker: which prompt positions of one request have their embeddings
at the LLM worker, and how much embedding memory the request still holds.

RServe (rserve.txt section 3.1) keeps one entry per request: text embeddings
are fetched at arrival (a vocabulary lookup, cost neglected), positions of
multimodal items are reserved and filled as their encoder batches arrive, and
the embeddings of a position are freed once its prefill chunk has run.

Positions follow the prompt order of :class:`~lmmsim.workload.request.Request`
segments, so any interleaving of text and media works (Figure 9 case 0: text,
MM, text, MM; case 1: two consecutive MM items). Items may arrive in any
order; :attr:`ready_prefix` is the first position whose embedding is missing
(the prompt length when none is), the bound on what prefill may compute next.

Memory is counted in tokens x ``bytes_per_token`` and released per position
as prefill computes it (:meth:`release_computed`), so a chunk ending inside an
item frees the part it consumed. Pure Python, no SimPy.
"""

from __future__ import annotations


class EmbeddingTracker:
    __slots__ = ("segments", "num_prompt_tokens", "bytes_per_token", "_bounds", "_ready", "_num_leading_ready",
                 "_held_tokens", "_freed_until")

    def __init__(self, media_segments, num_prompt_tokens: int, bytes_per_token: float):
        self.segments = media_segments  # prompt order, each with .start / .end / .length
        self.num_prompt_tokens = num_prompt_tokens
        self.bytes_per_token = bytes_per_token
        self._bounds = [(seg.start, seg.start + seg.length) for seg in media_segments]  # (start, end) of each
        self._ready = [False] * len(media_segments)
        self._num_leading_ready = 0  # media items 0 .. k-1 all arrived
        self._held_tokens = 0  # media tokens arrived and not yet computed
        self._freed_until = 0  # positions below this have been released

    # ---------------------------------------------------------------- queries
    @property
    def num_leading_ready(self) -> int:
        """Media items, in prompt order, that have arrived with no gap before them."""
        return self._num_leading_ready

    @property
    def ready_prefix(self) -> int:
        """Positions ``0 .. ready_prefix-1`` have their embeddings (text always does)."""
        k = self._num_leading_ready
        return self.segments[k].start if k < len(self.segments) else self.num_prompt_tokens

    @property
    def complete(self) -> bool:
        return self._num_leading_ready == len(self._ready)

    @property
    def held_tokens(self) -> int:
        return self._held_tokens

    @property
    def held_bytes(self) -> float:
        return self._held_tokens * self.bytes_per_token

    def is_ready(self, position: int) -> bool:
        """Readiness tag of one prompt position."""
        for i, seg in enumerate(self.segments):
            if seg.start <= position < seg.end:
                return self._ready[i]
        return 0 <= position < self.num_prompt_tokens

    def schedulable_tokens(self, num_scheduled: int) -> int:
        """RServe's schedulable tokens: ready positions after the ones already
        scheduled (computed or in flight), up to the first missing embedding."""
        return max(0, self.ready_prefix - num_scheduled)

    # -------------------------------------------------------------- mutations
    def mark_ready(self, indices) -> int:
        """Embeddings of media items ``indices`` arrived. Returns how many items
        joined the leading ready run (the scheduler's ``media_arrived`` count)."""
        ready = self._ready
        for i in indices:
            if not ready[i]:
                ready[i] = True
                # the part of an item below the release point is never held
                start, end = self._bounds[i]
                self._held_tokens += end - max(start, min(end, self._freed_until))
        before = self._num_leading_ready
        k = before
        n = len(ready)
        while k < n and ready[k]:
            k += 1
        self._num_leading_ready = k
        return k - before

    def unreleased_tokens(self, index: int) -> int:
        """Tokens of media item ``index`` above the release point: what holding it costs
        (a preempted request's recompute reuses what it consumed before, see the scheduler)."""
        start, end = self._bounds[index]
        return end - max(start, min(end, self._freed_until))

    def evict(self, index: int) -> int:
        """Drop the embeddings of media item ``index`` (arrived, not yet consumed): it
        is missing again. Returns the media tokens freed."""
        if not self._ready[index]:
            return 0
        self._ready[index] = False
        self._num_leading_ready = min(self._num_leading_ready, index)
        freed = self.unreleased_tokens(index)
        self._held_tokens -= freed
        return freed

    def release_computed(self, num_computed: int) -> int:
        """Free the embeddings of positions below ``num_computed`` (their prefill
        ran). Returns the media tokens freed now."""
        if num_computed <= self._freed_until:
            return 0
        freed = 0
        lo, hi = self._freed_until, num_computed
        ready = self._ready
        for i, (start, end) in enumerate(self._bounds):
            if end <= lo:
                continue
            if start >= hi:
                break
            if ready[i]:
                freed += min(end, hi) - max(start, lo)
        self._freed_until = num_computed
        self._held_tokens -= freed
        return freed

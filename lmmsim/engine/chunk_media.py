"""How far a prefill chunk may reach into its request's media: the scheduler's ``media``
modes and ``encode_before_prefill`` (:mod:`lmmsim.engine.scheduler` describes them).

A mixin of :class:`~lmmsim.engine.scheduler.ContinuousBatchingScheduler`: each
``_fit_*`` method takes a request and the chunk it would get, and returns the
chunk cut where its media are not ready (plus the encoder budget it uses).
"""

from __future__ import annotations

from lmmsim.workload.request import PromptSegment


class CacheHit:
    """A chunk's media item served by the encoder cache (``_fit_local`` -> ``_add_chunk``)."""

    __slots__ = ("segment",)

    def __init__(self, segment: PromptSegment):
        self.segment = segment


class ChunkMediaFit:
    """Chunk cutting by media readiness; the scheduler supplies ``encoder_cache``,
    ``encoder_budget`` and ``encode_before_prefill``. ``seq`` is a scheduler
    :class:`~lmmsim.engine.scheduler.SeqState` throughout."""

    def _fit_local(self, seq, num_new: int, enc_left: int, out: list) -> tuple[int, int]:
        """Cut ``num_new`` before the first media item the encoder budget cannot take.

        Appends the items to encode to ``out``, those the encoder cache serves as
        :class:`CacheHit` (they take no budget); returns (num_new, encoder tokens used).
        """
        start = seq.num_scheduled
        end = start + num_new
        used = 0
        media = seq.request.media_segments
        if self.encode_before_prefill and start == 0 and media:
            return self._fit_all_media(seq, num_new, enc_left, out)
        idx = seq.next_media
        while idx < len(media):
            seg: PromptSegment = media[idx]
            if seg.start >= end:
                break
            if self.encoder_cache is not None and self._cached(seg, out):
                out.append(CacheHit(seg))
                idx += 1
                continue
            if used + seg.length > enc_left:
                return seg.start - start, used
            used += seg.length
            out.append(seg)
            idx += 1
        return num_new, used

    def _fit_all_media(self, seq, num_new: int, enc_left: int, out: list) -> tuple[int, int]:
        """``encode_before_prefill``, local media: the first chunk comes with every media
        item of the prompt, or (0, 0) when the encoder budget left cannot take them
        and this step has encoded something already."""
        items: list = []
        used = 0
        for seg in seq.request.media_segments:
            if self.encoder_cache is not None and self._cached(seg, items):
                items.append(CacheHit(seg))
                continue
            used += seg.length
            items.append(seg)
        if used > enc_left and enc_left < self.encoder_budget:
            return 0, 0
        out.extend(items)
        return num_new, min(used, enc_left)

    def _cached(self, seg: PromptSegment, taken: list) -> bool:
        """Will ``seg``'s embeddings come from the encoder cache: held there now, or
        stored by an item with its id taken earlier in this chunk (``taken``)?"""
        key = seg.item.media_id
        if key is None:
            return False
        cache = self.encoder_cache
        if key in cache:
            return True
        return seg.length <= cache.capacity and any(
            type(t) is not CacheHit and t.item.media_id == key for t in taken)

    def _fit_remote(self, seq, num_new: int, enc_left: int, out: list) -> tuple[int, int]:
        """Cut ``num_new`` before the first media item whose embeddings have not arrived."""
        media = seq.request.media_segments
        if seq.media_ready < len(media):
            if self.encode_before_prefill and seq.num_scheduled == 0:
                return 0, 0
            limit = media[seq.media_ready].start
            if seq.num_scheduled + num_new > limit:
                return limit - seq.num_scheduled, 0
        return num_new, 0

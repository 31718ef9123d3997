"""Repeated-media caches: an LRU keyed by a media item's identity, sized in any unit.

Real engines avoid redoing work for a media item they have seen before, keyed
by a hash of its content (vLLM's ``mm_hash``; our :attr:`MediaItem.media_id
<lmmsim.workload.request.MediaItem.media_id>`). Two such caches matter here:

* **Encoder cache** (GPU, per engine). vLLM V1's ``EncoderCacheManager``
  (``vllm/v1/core/encoder_cache_manager.py``) keeps encoder outputs keyed by
  ``mm_hash`` with a capacity counted in encoder embeddings (the item's
  placeholder tokens in the LLM prompt). A finished request only drops its
  reference: the entry becomes *freeable* and stays until an allocation needs
  the room, oldest freeable first, so a later request with the same hash finds
  it (``check_and_update_cache``) and schedules no encoder work for it. Its
  size defaults to ``max(encoder_cache_size or max_num_batched_encoder_embeds
  or max_num_batched_tokens, largest item)`` (``_get_encoder_cache_size``),
  which is this simulator's encoder budget. Engines use it through
  :class:`~lmmsim.engine.scheduler.ContinuousBatchingScheduler` (``encoder_cache``)
  and :class:`~lmmsim.engine.encoder.EncoderWorker`.
* **Processor cache** (CPU, per API-server process). vLLM's multimodal
  processor cache (``mm_processor_cache_gb``, default 4 GiB per API process,
  ``vllm/config/multimodal.py``; LRU, ``mm_processor_cache_type: lru``) holds the
  processed inputs (``pixel_values`` and the like, sized by their tensors'
  bytes) keyed by the item's hash; a hit skips the HF processor for that item.
  :class:`ProcessorCacheConfig` (scenario key ``host.processor_cache``) configures
  the cache :mod:`lmmsim.assembly.host_stage` keeps per media-preprocessing pool, items
  sized by their processed tensors (:func:`lmmsim.costmodel.encoder_call.processed_bytes`).

Simplification against vLLM's encoder cache: every entry may be evicted, also
one a running request still reads. vLLM pins those (and refuses to schedule an
item whose embeddings find no room), so for one capacity its reuse is at most
what this cache gives; scheduling here stays bounded by the encoder budget alone,
which keeps runs without media ids exactly as before.

Pure Python, no SimPy; deterministic (insertion order only).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

from pydantic import BaseModel, ConfigDict, Field

GIB = 2**30


class MediaCache:
    """An LRU map from media identity to size, holding at most ``capacity`` (in any unit).

    * :meth:`access` (lookup, and insert on a miss) is the one-call use;
      :meth:`lookup` and :meth:`insert` are its halves.
    * A caller that decides first and commits later (the scheduler: a chunk may
      not be admitted after all) tests ``key in cache`` (no effect) and then
      records the outcome with :meth:`hit` or :meth:`miss`.
    * ``key`` None is an anonymous item: always a miss, never stored.
    * An item larger than the whole capacity is never stored (``uncacheable``);
      storing one evicts least recently used entries until it fits.
    """

    __slots__ = ("capacity", "used", "hits", "misses", "evictions", "uncacheable", "_entries")

    def __init__(self, capacity: float):
        if not capacity >= 0:
            raise ValueError(f"capacity must be >= 0, got {capacity!r}")
        self.capacity = capacity
        self.used = 0
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self.uncacheable = 0
        self._entries: OrderedDict[Hashable, float] = OrderedDict()  # least recently used first

    def __contains__(self, key) -> bool:
        return key is not None and key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def keys(self) -> list:
        """Cached keys, least recently used first."""
        return list(self._entries)

    # ------------------------------------------------------------- one call
    def access(self, key, size: float) -> bool:
        """Look ``key`` up; on a miss store it (``size`` units). Returns whether it hit."""
        if self.lookup(key):
            return True
        self.insert(key, size)
        return False

    def lookup(self, key) -> bool:
        """Count a hit (the entry becomes most recent) or a miss; nothing is stored."""
        if key is not None and key in self._entries:
            self._entries.move_to_end(key)
            self.hits += 1
            return True
        self.misses += 1
        return False

    def insert(self, key, size: float) -> bool:
        """Store ``key`` (not counted as a hit or miss). Returns whether it is cached now."""
        if key is None:
            return False
        entries = self._entries
        if key in entries:
            entries.move_to_end(key)
            return True
        if size > self.capacity:
            self.uncacheable += 1
            return False
        while self.used + size > self.capacity:
            _old, old_size = entries.popitem(last=False)
            self.used -= old_size
            self.evictions += 1
        entries[key] = size
        self.used += size
        return True

    # ------------------------------------------------- decide now, commit later
    def hit(self, key) -> None:
        """Record a hit decided earlier by ``key in cache``; the entry, if still held,
        becomes most recent (an item of the same batch may have pushed it out since)."""
        self.hits += 1
        if key in self._entries:
            self._entries.move_to_end(key)

    def miss(self, key, size: float) -> None:
        """Record a miss decided earlier and store the item the caller now computes."""
        self.misses += 1
        self.insert(key, size)

    # --------------------------------------------------------------- report
    @property
    def hit_rate(self) -> float | None:
        looked = self.hits + self.misses
        return self.hits / looked if looked else None

    def stats(self) -> dict:
        return {"hits": self.hits, "misses": self.misses, "hit_rate": self.hit_rate,
                "evictions": self.evictions, "uncacheable": self.uncacheable,
                "entries": len(self._entries), "used": self.used, "capacity": self.capacity}


def combined_stats(caches) -> dict | None:
    """Counters summed over several caches (one per engine), None when there are none."""
    caches = list(caches)
    if not caches:
        return None
    hits = sum(c.hits for c in caches)
    misses = sum(c.misses for c in caches)
    return {"hits": hits, "misses": misses, "hit_rate": hits / (hits + misses) if hits + misses else None,
            "evictions": sum(c.evictions for c in caches), "uncacheable": sum(c.uncacheable for c in caches),
            "capacity_per_cache": caches[0].capacity, "caches": len(caches),
            "hits_per_cache": [c.hits for c in caches]}


# ------------------------------------------------------------ processor cache
class ProcessorCacheConfig(BaseModel):
    """The multimodal processor cache of one host (API-server) process.

    ``capacity_gib``: vLLM's ``mm_processor_cache_gb`` (default 4; 0 turns it
    off). An item's size is the bytes of its processed tensors.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    capacity_gib: float = Field(4.0, ge=0)

    def make(self) -> MediaCache:
        """A fresh, empty cache (one per API-server process: vLLM does not share them)."""
        return MediaCache(self.capacity_gib * GIB)

"""Repeated-media caches: LRU semantics by hand, the processor-cache helper, and engine
timelines where a cached item skips exactly its encoder work."""

from __future__ import annotations

import math

import pytest

from lmmsim.catalog import LinkSpec
from lmmsim.costmodel.constant import ConstantStepCost
from lmmsim.engine.disaggregation import DisaggregatedFrontend, EmbeddingInbox, egress
from lmmsim.engine.encoder import EncoderWorker
from lmmsim.engine.frontends import MonolithicFrontend
from lmmsim.engine.kv_cache import BlockPool
from lmmsim.engine.media_cache import MediaCache, ProcessorCacheConfig, combined_stats
from lmmsim.engine.replica import Replica
from lmmsim.engine.scheduler import ContinuousBatchingScheduler
from lmmsim.engine.simulation import Simulation
from lmmsim.policies.encode_dispatch import FixedBatchConfig, FixedBatchDispatcher, PerRequestDispatcher
from lmmsim.policies.queueing import FcfsQueue
from lmmsim.policies.routing import RoundRobinRouter
from lmmsim.workload.request import EncoderWork, MediaItem, Request, build_segments, request_modality

INSTANT = LinkSpec(bandwidth_gbs=math.inf, latency_us=0.0)
ENCODE_S = 0.05
STEP_S = 0.01


# ------------------------------------------------------------------ LRU by hand
def test_lru_evicts_least_recently_used_first():
    cache = MediaCache(10)
    assert not cache.access("a", 4) and not cache.access("b", 4)
    assert cache.access("a", 4)  # hit: a becomes most recent
    assert not cache.access("c", 4)  # 12 > 10: b (least recent) goes, not a
    assert cache.keys() == ["a", "c"]
    assert (cache.hits, cache.misses, cache.evictions, cache.used) == (1, 3, 1, 8)
    assert "b" not in cache and "a" in cache


def test_one_large_item_evicts_as_many_as_it_needs_and_exact_fit_is_kept():
    cache = MediaCache(10)
    for key in "abc":
        cache.insert(key, 3)
    cache.insert("big", 10)  # exactly the capacity: everything else goes
    assert cache.keys() == ["big"] and cache.evictions == 3 and cache.used == 10


def test_items_larger_than_the_capacity_are_never_cached_and_evict_nothing():
    cache = MediaCache(10)
    cache.insert("a", 5)
    assert not cache.access("huge", 11)
    assert not cache.access("huge", 11)  # still a miss: it was never stored
    assert cache.keys() == ["a"] and cache.uncacheable == 2 and cache.evictions == 0
    zero = MediaCache(0)
    assert not zero.access("a", 1) and not zero.access("a", 1) and len(zero) == 0


def test_anonymous_items_always_miss_and_reinserting_does_not_double_count():
    cache = MediaCache(10)
    assert not cache.access(None, 1) and not cache.access(None, 1)
    assert len(cache) == 0 and cache.misses == 2 and None not in cache
    cache.insert("a", 4)
    cache.insert("a", 4)
    assert cache.used == 4


def test_decide_then_commit_counts_like_access():
    cache = MediaCache(10)
    assert "a" not in cache
    cache.miss("a", 6)  # decided a miss, the item is encoded and stored
    assert "a" in cache
    cache.hit("a")
    cache.miss("b", 6)  # pushes a out
    cache.hit("a")  # a hit decided before the eviction still counts, touching nothing
    assert (cache.hits, cache.misses, cache.keys()) == (2, 2, ["b"])
    assert cache.hit_rate == 0.5
    with pytest.raises(ValueError):
        MediaCache(-1)


def test_combined_stats_sum_over_caches():
    a, b = MediaCache(5), MediaCache(5)
    a.access("x", 1)
    a.access("x", 1)
    b.access("y", 1)
    stats = combined_stats([a, b])
    assert (stats["hits"], stats["misses"], stats["caches"], stats["hits_per_cache"]) == (1, 2, 2, [1, 0])
    assert stats["hit_rate"] == pytest.approx(1 / 3)
    assert combined_stats([]) is None


# ---------------------------------------------------------------- processor cache
def item(media_id, tokens=500, modality="image"):
    return MediaItem(modality, tokens, EncoderWork(1, 4 * tokens), media_id=media_id)


def request(rid, at, items, text=100, output=2):
    return Request(rid, at, request_modality(items), "mm", build_segments([*items, text]), output)


def test_processor_cache_config_defaults_to_vllms_size():
    assert ProcessorCacheConfig().make().capacity == 4 * 2**30  # vLLM's mm_processor_cache_gb default
    assert ProcessorCacheConfig(capacity_gib=0).make().capacity == 0


# ------------------------------------------------------------ monolithic timelines
def monolithic(requests, cache_tokens=10**6, token_budget=2048, encoder_budget=2048):
    """One FCFS replica whose scheduler has an encoder cache (None: none)."""
    cost = ConstantStepCost(step_s=STEP_S, encode_item_s=ENCODE_S)
    box = []

    def make_frontend(env, on_finish, barrier_at):
        cache = None if cache_tokens is None else MediaCache(cache_tokens)
        sched = ContinuousBatchingScheduler(FcfsQueue(), BlockPool(10_000, 16), token_budget, 256, encoder_budget,
                                            encoder_cache=cache)
        box.append(sched)
        return MonolithicFrontend([Replica(env, 0, sched, cost, (0,), on_finish, barrier_at)], RoundRobinRouter())

    result = Simulation(requests, make_frontend).run()
    return {s.request.request_id: s for s in result.seqs}, box[0]


def ttft(seq):
    return seq.first_token_at - seq.request.arrived_at


def test_second_identical_request_skips_exactly_the_encode_on_a_replica():
    reqs = [request(0, 0.0, [item("cat")]), request(1, 1.0, [item("cat")])]
    seqs, sched = monolithic(reqs)
    a, b = seqs[0], seqs[1]
    assert a.encode_finished_at - a.encode_started_at == pytest.approx(ENCODE_S)
    assert ttft(a) == pytest.approx(ENCODE_S + STEP_S)
    assert b.encode_started_at == b.encode_finished_at == 1.0  # served from the cache: zero encode time
    assert ttft(b) == pytest.approx(ttft(a) - ENCODE_S)
    assert (sched.encoder_cache.hits, sched.encoder_cache.misses) == (1, 1)
    # anonymous items (or no cache) encode twice, as before
    for reqs2, cache_tokens in (([request(0, 0.0, [item(None)]), request(1, 1.0, [item(None)])], 10**6),
                                (reqs, None)):
        seqs2, _ = monolithic(reqs2, cache_tokens)
        assert ttft(seqs2[1]) == pytest.approx(ttft(seqs2[0])) == pytest.approx(ENCODE_S + STEP_S)


def test_same_id_in_one_step_is_encoded_once():
    # two requests with the same image in the first batch, and one with it twice
    seqs, sched = monolithic([request(0, 0.0, [item("cat")]), request(1, 0.0, [item("cat")])])
    assert seqs[0].first_token_at == seqs[1].first_token_at == pytest.approx(ENCODE_S + STEP_S)
    seqs, _ = monolithic([request(0, 0.0, [item(None)]), request(1, 0.0, [item(None)])])
    assert seqs[0].first_token_at == pytest.approx(2 * ENCODE_S + STEP_S)
    seqs, sched = monolithic([request(0, 0.0, [item("cat"), item("cat")])])
    assert seqs[0].first_token_at == pytest.approx(ENCODE_S + STEP_S)
    assert (sched.encoder_cache.hits, sched.encoder_cache.misses) == (1, 1)


def test_hits_take_no_encoder_budget_and_a_small_cache_forgets():
    # encoder budget 2048: two 1500-token items never share a step, unless cached
    big = [item("a", 1500), item("b", 1500)]
    seqs, _ = monolithic([request(0, 0.0, big), request(1, 5.0, big)], token_budget=4096)
    assert ttft(seqs[0]) == pytest.approx(2 * (ENCODE_S + STEP_S))  # one item per step
    assert ttft(seqs[1]) == pytest.approx(STEP_S)  # both cached: one step, nothing encoded
    # room for one item: b pushed a out, so request 1 encodes a again and takes b from the
    # cache (decided before a's entry pushes b out in turn)
    seqs, sched = monolithic([request(0, 0.0, big), request(1, 5.0, big)], cache_tokens=1500, token_budget=4096)
    assert ttft(seqs[1]) == pytest.approx(ENCODE_S + STEP_S)
    cache = sched.encoder_cache
    assert (cache.hits, cache.misses, cache.evictions, cache.keys()) == (1, 3, 2, ["a"])


# ------------------------------------------------------------- encoder-worker timelines
class _EncodeParts(ConstantStepCost):
    def encode_parts(self, works):
        return self.encode_s(works), 0.0


def e_pd(requests, dispatcher=None, cache_tokens=10**6):
    """One encoder worker (with an encoder cache) feeding one LLM worker, instant link."""
    cost = _EncodeParts(step_s=STEP_S, encode_item_s=ENCODE_S)
    box = []

    def make_frontend(env, on_finish, barrier_at):
        sched = ContinuousBatchingScheduler(FcfsQueue(), BlockPool(10_000, 16), 2048, 256, 10**9, media="remote")
        llm = Replica(env, 0, sched, cost, (0,), on_finish, barrier_at, fast_forward=False,
                      on_batch=lambda plan: box[0].on_batch(0, plan))
        cache = None if cache_tokens is None else MediaCache(cache_tokens)
        enc = EncoderWorker(env, 0, "encoder0", cost, dispatcher or PerRequestDispatcher(), (1,),
                            lambda batch, s, t: box[0].on_encoded(0, batch), encoder_cache=cache)
        front = DisaggregatedFrontend(
            env, encoders=[enc], llm_engines=[llm],
            inboxes=[EmbeddingInbox(env, llm, 1e12, 100.0, admit_when_complete=True)],
            encoder_senders=[egress(env, INSTANT, 1, "e0", 4)], router=RoundRobinRouter(), streaming=False)
        box.append(front)
        return front

    result = Simulation(requests, make_frontend).run()
    return {s.request.request_id: s for s in result.seqs}, result.frontend.encoders[0]


def test_second_identical_request_skips_exactly_the_encode_on_an_encoder_worker():
    seqs, enc = e_pd([request(0, 0.0, [item("cat")]), request(1, 1.0, [item("cat")])])
    a, b = seqs[0], seqs[1]
    assert ttft(a) == pytest.approx(ENCODE_S + STEP_S)
    assert b.encode_started_at == b.encode_finished_at == 1.0
    assert ttft(b) == pytest.approx(ttft(a) - ENCODE_S)
    assert (enc.num_batches, enc.num_items, enc.busy_s) == (1, 1, pytest.approx(ENCODE_S))
    assert (enc.encoder_cache.hits, enc.encoder_cache.misses) == (1, 1)
    seqs, enc = e_pd([request(0, 0.0, [item("cat")]), request(1, 1.0, [item("cat")])], cache_tokens=None)
    assert ttft(seqs[1]) == pytest.approx(ttft(seqs[0])) and enc.num_items == 2


def test_an_item_queued_behind_its_first_copy_waits_for_that_encode_only():
    # both arrive at 0: request 1's copy waits in the queue while request 0's is encoded,
    # then leaves without a GPU pass; both prefill in the same step
    seqs, enc = e_pd([request(0, 0.0, [item("cat")]), request(1, 0.0, [item("cat")])])
    assert seqs[1].encode_started_at == seqs[1].encode_finished_at == pytest.approx(ENCODE_S)
    assert seqs[0].first_token_at == seqs[1].first_token_at == pytest.approx(ENCODE_S + STEP_S)
    assert enc.num_items == 1
    # in one batch (fixed dispatcher), the copy rides along with the first: one item's encode time
    fixed = FixedBatchDispatcher(FixedBatchConfig(max_items=2, timeout_s=0.0))
    seqs, enc = e_pd([request(0, 0.0, [item("cat")]), request(1, 0.0, [item("cat")])], dispatcher=fixed)
    assert (enc.num_batches, enc.num_items, enc.busy_s) == (1, 1, pytest.approx(ENCODE_S))
    assert seqs[1].encode_finished_at == pytest.approx(ENCODE_S)
    assert (enc.encoder_cache.hits, enc.encoder_cache.misses) == (1, 1)
    # capacity 0 is no reuse: the same batch encodes both copies
    fixed = FixedBatchDispatcher(FixedBatchConfig(max_items=2, timeout_s=0.0))
    _, enc = e_pd([request(0, 0.0, [item("cat")]), request(1, 0.0, [item("cat")])], dispatcher=fixed,
                  cache_tokens=0)
    assert (enc.num_items, enc.encoder_cache.hits) == (2, 0)

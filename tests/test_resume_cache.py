"""Resuming a preempted request from the prefix cache (``policy.queue.resume_cache``) on
hand-built requests, no SimPy.

vLLM V1's free block queue: freed blocks go to the tail (a request's last block first), an
allocation takes blocks from the head, a freed block keeps its KV until it is handed out
again. A preempted request resumes at the leading full blocks still cached (at least its last
token recomputed), and re-encodes only the media items not wholly inside them.
"""

from __future__ import annotations

import pytest
from conftest import media_request, text_request

from lmmsim.engine.kv_cache import BlockPool, blocks_for
from lmmsim.engine.priority_scheduler import PriorityScheduler
from lmmsim.engine.resume_cache import first_uncached_media
from lmmsim.engine.scheduler import SeqState
from lmmsim.policies.rps_queue import RpsQueue, RpsQueueConfig

SAND, ROCKS = 0, 2


def scheduler(classes, resume_cache=True, blocks=1000, mode="all"):
    q = RpsQueue(RpsQueueConfig(budget_preemption=mode, resume_cache=resume_cache),
                 classify=lambda r: classes[r.request_id])
    return PriorityScheduler(q, BlockPool(blocks, 16), 64, 16, 10**9)


def run_step(sched, now):
    plan = sched.schedule(now)
    sched.complete(plan, now, now, now + 0.01)
    return plan


def chunks(plan, rid):
    return [(n, start) for s, n, start in plan.chunks if s.request.request_id == rid]


def held(seq) -> int:
    """KV blocks ``seq`` holds between steps (a decode's count lives in its cohort)."""
    if seq.in_decode:
        return blocks_for(seq.dec_base + seq.cohort.step_no, 16)
    return seq.num_blocks


def conserved(sched, *seqs):
    pool = sched.pool
    return pool.num_free + sum(held(s) for s in seqs) == pool.num_blocks


def preempt_rock(sched, rock, sand):
    """The rock computes its first 64 tokens; the sand takes the next step's whole budget."""
    sched.add(rock)
    run_step(sched, 0.0)
    sched.add(sand)
    plan = run_step(sched, 0.1)
    assert plan.preempted == [rock] and rock.num_blocks == 0 and rock.num_computed == 0
    assert conserved(sched, rock, sand)


def test_the_default_is_on():
    assert RpsQueueConfig().resume_cache is True


@pytest.mark.parametrize("resume_cache", [True, False])
def test_no_allocations_in_between_hit_every_full_block(resume_cache):
    sched = scheduler({0: ROCKS, 1: SAND}, resume_cache)
    rock, sand = SeqState(text_request(0, 0.0, 1000, 10)), SeqState(text_request(1, 0.05, 200, 10))
    preempt_rock(sched, rock, sand)
    for t in (0.2, 0.3, 0.4):  # the sand's allocations come from the free blocks ahead of the rock's
        plan = run_step(sched, t)
    assert chunks(plan, 0) == ([(56, 64)] if resume_cache else [(56, 0)])
    assert rock.num_preemptions == 1 and conserved(sched, rock, sand)


@pytest.mark.parametrize("resume_cache", [True, False])
def test_a_decode_recomputes_at_least_its_last_token(resume_cache):
    """48 prompt tokens (3 full blocks) and one sampled: every block hits, token 48 is recomputed."""
    sched = scheduler({0: ROCKS, 1: SAND}, resume_cache)
    rock = SeqState(text_request(0, 0.0, 48, 100))
    sched.add(rock)
    run_step(sched, 0.0)
    assert rock.in_decode
    sand = SeqState(text_request(1, 0.1, 64, 100))
    sched.add(sand)
    plan = run_step(sched, 0.1)
    assert plan.preempted == [rock] and conserved(sched, rock, sand)
    plan = run_step(sched, 0.2)  # the sand decodes: the rock is back
    assert chunks(plan, 0) == ([(1, 48)] if resume_cache else [(49, 0)])
    assert conserved(sched, rock, sand)
    plan = run_step(sched, 0.3)
    assert rock.in_decode and rock.num_generated == 2 and conserved(sched, rock, sand)


@pytest.mark.parametrize("resume_cache", [True, False])
def test_allocations_past_the_free_blocks_ahead_evict_the_tail_blocks_first(resume_cache):
    """12 blocks. The rock's 4 blocks (64 tokens) enter the free queue behind 4 free ones; the
    sand's prompt (150 tokens, 10 blocks) then takes 6: the 4 ahead and the rock's last 2. The
    rock's first 2 blocks survive: it resumes at token 32."""
    sched = scheduler({0: ROCKS, 1: SAND}, resume_cache, blocks=12)
    rock, sand = SeqState(text_request(0, 0.0, 200, 10)), SeqState(text_request(1, 0.05, 150, 1))
    preempt_rock(sched, rock, sand)
    run_step(sched, 0.2)  # sand: 64 more tokens
    plan = run_step(sched, 0.3)  # sand: its last 22; the rock cannot get its 5 blocks
    assert chunks(plan, 1) == [(22, 128)] and not chunks(plan, 0)
    assert sand.status == "finished" and rock.status == "waiting" and rock.num_scheduled == 0
    assert conserved(sched, rock, sand)
    plan = run_step(sched, 0.4)
    assert chunks(plan, 0) == ([(64, 32)] if resume_cache else [(64, 0)])
    assert rock.num_blocks == (6 if resume_cache else 4) and conserved(sched, rock, sand)


def test_every_block_reused_means_full_recompute():
    """The sand's prompt takes all 8 free blocks: the rock's 4 are handed out, none survives."""
    sched = scheduler({0: ROCKS, 1: SAND}, blocks=12)
    rock, sand = SeqState(text_request(0, 0.0, 200, 10)), SeqState(text_request(1, 0.05, 190, 1))
    preempt_rock(sched, rock, sand)
    for t in (0.2, 0.3):
        run_step(sched, t)
    assert sand.status == "finished" and sched.pool.peak_used == 12
    plan = run_step(sched, 0.4)
    assert sand.status == "finished" and chunks(plan, 0) == [(64, 0)]
    assert conserved(sched, rock, sand)


@pytest.mark.parametrize("resume_cache", [True, False])
def test_media_inside_the_cached_prefix_are_not_encoded_again(resume_cache):
    """Images at tokens 10-49 and 60-99; the rock computed 64 tokens (4 full blocks) before it
    was preempted. On resume the first image, inside the prefix, is not encoded again; the
    second, partly after it, is."""
    sched = scheduler({0: ROCKS, 1: SAND}, resume_cache)
    rock = SeqState(media_request(0, 0.0, [10, ("image", 40), 10, ("image", 40), 200], 10))
    sched.add(rock)
    plan = run_step(sched, 0.0)
    assert [seg.start for _s, seg in plan.encodes] == [10, 60]
    sand = SeqState(text_request(1, 0.05, 64, 10))
    sched.add(sand)
    plan = run_step(sched, 0.1)
    assert plan.preempted == [rock] and rock.next_media == 0
    plan = run_step(sched, 0.2)  # the sand decodes (1 token): the rock comes back
    if resume_cache:
        assert chunks(plan, 0) == [(63, 64)] and [seg.start for _s, seg in plan.encodes] == [60]
    else:
        assert chunks(plan, 0) == [(63, 0)] and [seg.start for _s, seg in plan.encodes] == [10, 60]
    assert conserved(sched, rock, sand)


def test_first_uncached_media():
    rock = media_request(0, 0.0, [10, ("image", 40), 10, ("image", 40), 200], 10)
    media = rock.media_segments
    assert [first_uncached_media(media, c) for c in (0, 48, 50, 64, 100, 320)] == [0, 0, 1, 1, 2, 2]


def test_block_pool_free_queue_positions():
    pool = BlockPool(10, 16)
    pool.allocate(6)  # positions 0-5 handed out; 6-9 free
    start = pool.tail
    pool.free(3)  # a request's 3 blocks: positions 10-12 (12 = its first block)
    assert pool.surviving(start, 3) == 3
    pool.allocate(5)  # 6-9, then 10 (its last block)
    assert pool.surviving(start, 3) == 2 and pool.head == 11
    pool.reclaim(start + 1, 2)  # it takes back its first two blocks: a hole at 11-12
    assert pool.num_free == 0
    pool.free(2)  # positions 13-14
    pool.allocate(2)  # the head skips the hole
    assert pool.head == 15 and pool.num_free == 0
    with pytest.raises(RuntimeError):
        pool.reclaim(start, 1)

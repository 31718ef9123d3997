"""Automatic prefix caching (``deployment.prefix_caching``, lmmsim.engine.prefix_cache) on
hand-built requests: block keys, sharing by reference, vLLM V1's free queue (least recently
freed first, a request's last block first), the last-token rule, preemption, media keys, and
one end-to-end run through ``lmmsim.api``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from lmmsim.engine.prefix_cache import PrefixBlockPool, block_keys
from lmmsim.engine.scheduler import ContinuousBatchingScheduler, SeqState
from lmmsim.policies.queueing import FcfsQueue
from lmmsim.workload.request import EncoderWork, MediaItem, Request, build_segments

BS = 16


def req(rid, prompt=None, runs=(), parts=None, output=4, at=0.0) -> Request:
    segments = build_segments(parts if parts is not None else [prompt])
    return Request(rid, at, "image" if parts else "text", "t", segments, output, shared_content=tuple(runs))


def image(tokens, media_id):
    return MediaItem("image", tokens, EncoderWork(1, 4 * tokens), media_id=media_id)


def scheduler(blocks=1000, budget=4096, max_running=8):
    return ContinuousBatchingScheduler(FcfsQueue(), PrefixBlockPool(blocks, BS), budget, max_running, 10**9)


def step(sched, now):
    plan = sched.schedule(now)
    sched.complete(plan, now, now, now + 0.01)
    return plan


def chunks(plan, seq):
    return [(n, start) for s, n, start in plan.chunks if s is seq]


def run_alone(sched, seq, t=0.0):
    """``seq`` runs to completion by itself."""
    sched.add(seq)
    while seq.status != "finished":
        step(sched, t)
        t += 0.1
    return t


# ------------------------------------------------------------------ block keys
def test_block_keys_chain_and_stop_at_the_first_unique_token():
    sys40 = block_keys(req(0, 100, [("sys", 40)]), BS)
    assert len(sys40) == 2  # block 2 (32..48) holds tokens 40..47, the request's own
    both = block_keys(req(1, 100, [("sys", 40), ("user", 60)]), BS)
    assert len(both) == 6 and both[:2] == sys40  # 6 full blocks; the first two the same content
    assert block_keys(req(2, 100, [("other", 40)]), BS)[0] != sys40[0]
    # chained: the same second block after a different first one is a different key
    a = block_keys(req(3, 32, [("a", 16), ("b", 16)]), BS)
    c = block_keys(req(4, 32, [("c", 16), ("b", 16)]), BS)
    assert a[1] != c[1]
    # a run cut short is the same text as the full run up to the cut (Mooncake's last hash id)
    assert block_keys(req(5, 48, [("t", 48)]), BS) == block_keys(req(6, 64, [("t", 64)]), BS)[:3]
    assert block_keys(req(7, 100), BS) == ()  # nothing shared


def test_block_keys_are_the_same_in_every_process():
    code = ("from lmmsim.engine.prefix_cache import block_keys; from lmmsim.workload.request import *;"
            "r = Request(0, 0.0, 'image', 't', build_segments([40, MediaItem('image', 30, EncoderWork(1, 4),"
            " media_id='cat.png'), 30]), 4, shared_content=(('sys', 40), (('turn', 1), 60)));"
            "print(list(block_keys(r, 16)))")
    outs = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        outs.add(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                check=True).stdout)
    assert len(outs) == 1
    keys = json.loads(outs.pop())
    assert len(keys) == 6  # the runs cover all 100 positions: 6 full blocks


def test_media_keys():
    text = [("prompt", 96)]  # the same text around the image in every request
    cat = block_keys(req(0, runs=text, parts=[32, image(32, "cat"), 32]), BS)
    dog = block_keys(req(1, runs=text, parts=[32, image(32, "dog"), 32]), BS)
    assert len(cat) == len(dog) == 6
    assert cat[:2] == dog[:2] and cat[2] != dog[2] and cat[5] != dog[5]  # a miss from the image on
    assert len(block_keys(req(2, runs=text, parts=[32, image(32, None), 32]), BS)) == 2  # no id: unique
    # past the runs, a media item with an id is shared content; text after it is not
    past = block_keys(req(3, runs=[("q", 32)], parts=[32, image(32, "cat"), 32]), BS)
    assert len(past) == 4


def test_media_wholly_inside_the_cached_prefix_is_not_encoded():
    text = [("prompt", 96)]
    for media_id, cached, encoded in (("cat", 80, 0), ("dog", 32, 1)):
        sched = scheduler()
        run_alone(sched, SeqState(req(0, runs=text, parts=[32, image(32, "cat"), 32])))
        b = SeqState(req(1, runs=text, parts=[32, image(32, media_id), 32]))
        sched.add(b)
        plan = sched.schedule(10.0)
        assert b.num_cached_tokens == cached and chunks(plan, b) == [(96 - cached, cached)]
        assert len(plan.encodes) == encoded


# ------------------------------------------------------------------ hits
def test_full_hit():
    sched = scheduler()
    run_alone(sched, SeqState(req(0, 64, [("doc", 64)])))
    b = SeqState(req(1, 80, [("doc", 64)]))  # the whole document cached, 16 tokens of its own
    sched.add(b)
    plan = step(sched, 10.0)
    assert b.num_cached_tokens == 64 and chunks(plan, b) == [(16, 64)]
    assert plan.chunk_shapes == ((16, 80),)  # attention still covers the cached context


def test_partial_hit_shares_the_first_two_of_four_blocks():
    sched = scheduler()
    a = SeqState(req(0, 64, [("sys", 32), ("a", 32)], output=50))
    sched.add(a)
    step(sched, 0.0)  # a prefilled, decoding: it holds its blocks
    b = SeqState(req(1, 64, [("sys", 32), ("b", 32)]))
    sched.add(b)
    free = sched.pool.num_free
    plan = step(sched, 0.1)
    assert b.num_cached_tokens == 32 and chunks(plan, b) == [(32, 32)]
    assert free - sched.pool.num_free == 3  # b's own two blocks and a's decode block (position 64)
    blocks = sched.pool.match(b.request, 4)  # b's last two are cached too, its content ("b", 32)
    assert [blk.ref for blk in blocks] == [2, 2, 1, 1]
    assert sched.pool.match(a.request, 4)[:2] == blocks[:2] and sched.pool.match(a.request, 4)[2] is not blocks[2]


@pytest.mark.parametrize("prompt, cached", [(64, 48), (65, 64)])
def test_the_last_token_is_always_recomputed(prompt, cached):
    sched = scheduler()
    run_alone(sched, SeqState(req(0, prompt, [("doc", prompt)])))
    b = SeqState(req(1, prompt, [("doc", prompt)]))
    sched.add(b)
    plan = step(sched, 10.0)
    assert b.num_cached_tokens == cached and chunks(plan, b) == [(prompt - cached, cached)]


def test_no_hit_without_shared_content():
    sched = scheduler()
    run_alone(sched, SeqState(req(0, 64)))
    b = SeqState(req(1, 64))
    sched.add(b)
    assert chunks(step(sched, 10.0), b) == [(64, 0)] and b.num_cached_tokens == 0


# ------------------------------------------------------------------ the free queue
def computed(pool, request, blocks):
    """``request`` is admitted (no hit) and its ``blocks`` blocks are computed."""
    pool.take(request.request_id, pool.match(request, blocks))
    pool.allocate(blocks)
    pool.cache_filled(request, blocks * BS)


def test_eviction_order_least_recently_freed_first_last_block_first():
    pool = PrefixBlockPool(6, BS)
    a, b = req(0, 48, [("A", 48)]), req(1, 48, [("B", 48)])
    computed(pool, a, 3)
    computed(pool, b, 3)
    pool.free_request(a, 3, 48, keep=False)  # a freed first: its blocks are the least recently freed
    pool.free_request(b, 3, 48, keep=False)
    assert pool.num_free == 6 and len(pool.match(a, 3)) == len(pool.match(b, 3)) == 3
    lengths = []
    for _ in range(6):
        pool.allocate(1)
        lengths.append((len(pool.match(a, 3)), len(pool.match(b, 3))))
    # a's last block goes first, then its others, then b's the same way
    assert lengths == [(2, 3), (1, 3), (0, 3), (0, 2), (0, 1), (0, 0)]
    assert pool.evictions == 6


def test_a_hit_on_a_free_cached_block_takes_it_out_of_the_free_queue():
    pool = PrefixBlockPool(6, BS)
    doc = [("doc", 32)]
    computed(pool, req(0, 32, doc), 2)
    pool.free_request(req(0, 32, doc), 2, 32, keep=False)
    b = req(1, 48, doc)
    hit = pool.match(b, 2)
    assert len(hit) == 2 and pool.num_in_queue(hit) == 2 and pool.num_free == 6
    pool.take(1, hit)
    assert pool.num_free == 4 and all(blk.ref == 1 for blk in hit)
    pool.allocate(4)  # every other block: the hit ones are not handed out
    assert pool.evictions == 0 and pool.match(b, 2) == hit
    with pytest.raises(RuntimeError):
        pool.allocate(1)


def test_without_the_hit_the_same_allocations_evict_the_cached_blocks():
    pool = PrefixBlockPool(6, BS)
    doc = [("doc", 32)]
    computed(pool, req(0, 32, doc), 2)
    pool.free_request(req(0, 32, doc), 2, 32, keep=False)
    pool.allocate(4)  # the never-used blocks come first ...
    assert pool.evictions == 0 and len(pool.match(req(1, 48, doc), 2)) == 2
    pool.allocate(2)  # ... then the cached ones
    assert pool.evictions == 2 and pool.match(req(1, 48, doc), 2) == []


# ------------------------------------------------------------------ preemption
def test_preempting_a_request_holding_shared_blocks():
    """a (64 prompt tokens) decodes; b shares its first 2 blocks. With 7 blocks b's first
    decode block does not fit: b is preempted. a keeps the shared blocks; b's own 2 blocks
    enter the free queue still cached, and b finds all 4 again when it comes back."""
    sched = scheduler(blocks=7)
    pool = sched.pool
    a = SeqState(req(0, 64, [("sys", 32)], output=5))
    b = SeqState(req(1, 64, [("sys", 32)], output=10))
    sched.add(a)
    step(sched, 0.0)
    sched.add(b)
    step(sched, 0.1)  # a's decode takes its 5th block, b hits 2 and allocates 2: none free
    assert b.num_cached_tokens == 32 and pool.num_free == 0
    plan = step(sched, 0.2)
    assert plan.preempted == [b]
    assert pool.num_free == 2  # b's own blocks only: a still holds the shared two
    shared = pool.match(a.request, 2)
    assert len(shared) == 2 and all(blk.ref == 1 for blk in shared)
    own = pool.match(b.request, 4)[2:]  # b's own full blocks, keyed for its resume
    assert len(own) == 2 and all(blk.ref == 0 and blk.pos >= 0 for blk in own)
    step(sched, 0.3)  # b's hit takes 2 free blocks and it needs 1 more: 3 > 2 free, it waits
    assert b.status == "waiting" and a.status == "running"
    step(sched, 0.4)  # a's last token: its blocks are freed
    assert a.status == "finished"
    plan = step(sched, 0.5)
    assert chunks(plan, b) == [(1, 64)]  # every full block found again: only the last token recomputed
    assert b.num_cached_tokens == 32  # the first admission's hit, as vLLM reports it


# ------------------------------------------------------------------ end to end
MONOLITHIC = {
    "name": "prefix", "seed": 0, "system": "vllm", "model": "llava-onevision-qwen2-7b",
    "hardware": {"gpu": "h100-sxm-80gb", "count": 1},
    "deployment": {"kind": "monolithic", "replicas": 1, "block_size": 16},
}


def shipped(name: str) -> dict:
    """A shipped scenario's model, hardware and deployment (its workload is replaced)."""
    import yaml

    from lmmsim.scenario import scenario_file

    raw = yaml.safe_load(scenario_file(name).read_text())
    return {k: raw[k] for k in ("name", "seed", "system", "model", "hardware", "deployment")}


@pytest.mark.parametrize("base", ["monolithic", "text-pd", "baselines/rps-mix-llava72b-dynamo"])
def test_end_to_end_two_requests_sharing_a_1000_token_prefix(tmp_path, base):
    """Monolithic replicas, and the prefill workers of p_d and e_p_d deployments."""
    from lmmsim.api import run

    trace = tmp_path / "mooncake.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 1000, "output_length": 4, "hash_ids": [1, 2]}\n'
                     '{"timestamp": 2000, "input_length": 1500, "output_length": 4, "hash_ids": [1, 2, 3]}\n')
    scenario = {**(MONOLITHIC if base == "monolithic" else shipped(base)),
                "workload": {"arrival": {"kind": "trace", "path": str(trace)}}}
    off = run(scenario)
    on = run(scenario, {"deployment.prefix_caching": True})
    assert "num_cached_tokens" not in off.requests and "prefix_cache" not in off.summary
    # runs (1, 512), (2, 488) vs (1, 512), (2, 512), (3, 476): the first 1000 tokens agree, and the
    # first request's 62 full blocks (992 tokens) are cached; the second may hit all 62 (<= 1499)
    assert on.requests["num_cached_tokens"].tolist() == [0, 992]
    ttft_on, ttft_off = on.requests["ttft_s"].tolist(), off.requests["ttft_s"].tolist()
    assert ttft_on[0] == ttft_off[0] and ttft_on[1] < ttft_off[1]
    stats = on.summary["prefix_cache"]
    assert stats["hit_rate"] == pytest.approx(992 / 2500) and stats["hit_requests_share"] == 0.5


# ------------------------------------------------------------------ the resume path, subsumed
def rps_scheduler(resume_cache, blocks):
    from lmmsim.engine.priority_scheduler import PriorityScheduler
    from lmmsim.policies.rps_queue import RpsQueue, RpsQueueConfig

    q = RpsQueue(RpsQueueConfig(budget_preemption="all", resume_cache=resume_cache),
                 classify=lambda r: {0: 2, 1: 0}[r.request_id])  # 0: a rock, 1: a sand
    return PriorityScheduler(q, PrefixBlockPool(blocks, BS), 64, 16, 10**9)


@pytest.mark.parametrize("resume_cache", [True, False])
def test_a_preempted_request_finds_its_own_blocks_through_the_lookup(resume_cache):
    """tests/test_resume_cache.py's eviction case with prefix caching: 12 blocks; the rock's 4
    blocks enter the free queue behind 4 free ones, the sand's 10 blocks take the 4 ahead and
    the rock's last 2. The rock resumes at token 32 whatever ``resume_cache`` says."""
    sched = rps_scheduler(resume_cache, 12)
    rock, sand = SeqState(req(0, 200, output=10)), SeqState(req(1, 150, output=1, at=0.05))
    sched.add(rock)
    step(sched, 0.0)
    sched.add(sand)
    assert step(sched, 0.1).preempted == [rock]
    step(sched, 0.2)
    plan = step(sched, 0.3)
    assert sand.status == "finished" and not chunks(plan, rock) and rock.num_scheduled == 0
    plan = step(sched, 0.4)
    assert chunks(plan, rock) == [(64, 32)]
    assert rock.num_cached_tokens == 0 and sched.pool.evictions == 2


# ------------------------------------------------------------------ a whole run, tight KV
def simulate_shared(fast_forward: bool, num_blocks: int = 80):
    """40 requests over 3 shared system prompts in a replica with little KV: hits, evictions and
    preemptions all happen. Returns (finished SeqStates, the scheduler)."""
    import random

    from lmmsim.costmodel.constant import ConstantStepCost
    from lmmsim.engine.frontends import MonolithicFrontend
    from lmmsim.engine.replica import Replica
    from lmmsim.engine.simulation import Simulation
    from lmmsim.policies.routing import RoundRobinRouter

    rng = random.Random(7)
    requests = []
    for rid in range(40):
        system = rng.randrange(3)
        own = rng.randrange(1, 200)
        requests.append(req(rid, 300 + own, [(("sys", system), 300)], output=rng.randrange(1, 120),
                            at=rid * 0.05))
    schedulers = []

    def make_frontend(env, on_finish, barrier_at):
        sched = ContinuousBatchingScheduler(FcfsQueue(), PrefixBlockPool(num_blocks, BS), 512, 16, 512)
        schedulers.append(sched)
        return MonolithicFrontend([Replica(env, 0, sched, ConstantStepCost(0.01, 1e-5), (0,), on_finish,
                                           barrier_at, fast_forward=fast_forward)], RoundRobinRouter())

    result = Simulation(requests, make_frontend).run()
    return result.seqs, schedulers[0]


def test_a_tight_run_gives_every_block_back_and_fast_forward_changes_nothing():
    seqs, sched = simulate_shared(fast_forward=True)
    pool = sched.pool
    assert all(s.status == "finished" for s in seqs)
    assert sched.num_preemptions > 0 and pool.evictions > 0
    assert sum(s.num_cached_tokens > 0 for s in seqs) > 10
    assert pool.num_free == pool.num_blocks and not any(b.ref for b in pool.cached.values())
    assert not any(type(key) is tuple for key in pool.cached)  # no finished request's own blocks stay keyed
    stepped, _ = simulate_shared(fast_forward=False)
    times = [(s.first_token_at, s.finished_at, s.num_cached_tokens) for s in seqs]
    assert times == [(s.first_token_at, s.finished_at, s.num_cached_tokens) for s in stepped]


# ------------------------------------------------------------------ a conversation's answers
def test_a_finished_turns_answer_blocks_are_hit_by_the_next_turn():
    """Turn 0: 100 prompt tokens (user run), 50 generated; its KV holds 100 + 49 tokens (the last
    sampled token is never fed back), 9 full blocks. Turn 1 resends user 0 (100), answer 0 (50)
    and 30 new tokens: the 9 blocks (144 tokens) hit. Without ``answer_content`` only the prompt's
    6 full blocks (96 tokens) stay keyed."""
    from dataclasses import replace

    for answer_key, expect in ((("c", 0, "answer"), 144), (None, 96)):
        sched = scheduler()
        t0 = replace(req(0, 100, runs=[(("c", 0, "user"), 100)], output=50), answer_content=answer_key)
        t = run_alone(sched, SeqState(t0))
        t1 = req(1, 180, runs=[(("c", 0, "user"), 100), (("c", 0, "answer"), 50), (("c", 1, "user"), 30)])
        s1 = SeqState(t1)
        sched.add(s1)
        step(sched, t)
        assert s1.num_cached_tokens == expect


def test_no_eviction_for_a_hit_on_the_victims_own_blocks():
    """12 blocks: a rock (class 2, its 4 prompt blocks keyed ("sys", 64)) and a sand decode, 5
    blocks each; 2 free. A new sand of 120 tokens hits the rock's 4 blocks and needs 4 more.
    Evicting the rock frees 5, but 4 of them are the hit's, which takes them straight back:
    2 + 5 - 4 = 3 < 4, so the eviction cannot admit it, and the rock is left running."""
    from lmmsim.engine.priority_scheduler import PriorityScheduler
    from lmmsim.policies.rps_queue import RpsQueue, RpsQueueConfig

    q = RpsQueue(RpsQueueConfig(budget_preemption="none", resume_cache=False),
                 classify=lambda r: {0: 2, 1: 0, 2: 0}[r.request_id])
    sched = PriorityScheduler(q, PrefixBlockPool(12, BS), 512, 16, 10**9)
    rock, other = SeqState(req(0, 64, [("sys", 64)], output=100)), SeqState(req(2, 64, [("c", 64)], output=100))
    sched.add(rock)
    sched.add(other)
    step(sched, 0.0)
    step(sched, 0.1)
    assert sched.pool.num_free == 2
    sand = SeqState(req(1, 120, [("sys", 64)], output=4, at=0.15))
    sched.add(sand)
    plan = step(sched, 0.2)
    assert plan.preempted == [] and rock.status == "running" and sand.status == "waiting"
    assert sched.num_preemptions == 0


def test_an_answer_is_keyed_only_where_the_runs_reach_the_prompts_end():
    """Runs covering 60 of 100 prompt tokens: the answer does not start at token 60 (tokens
    60..99 are the request's own), so nothing past the prompt's shared blocks is keyed."""
    from dataclasses import replace

    from lmmsim.engine.prefix_cache import answer_block_keys

    short = replace(req(0, 100, runs=[("u", 60)], output=50), answer_content=("a",))
    assert answer_block_keys(short, BS, 149) == ()
    whole = replace(req(0, 100, runs=[("u", 60), ("v", 40)], output=50), answer_content=("a",))
    assert len(answer_block_keys(whole, BS, 149)) == 9


def test_a_turn_preempted_in_decode_still_leaves_its_answer_to_the_next_turn():
    """17 blocks: turn 0 (100 prompt tokens, 50 generated) is admitted after a filler and is the
    newest when the decodes run out of blocks: preempted at 48 tokens generated, its own full
    blocks 6..8 keyed for its resume, which finds them. At its finish those blocks are keyed by
    content like the rest, so turn 1 still hits all 9 blocks (144 tokens), not just the prompt's 6."""
    from dataclasses import replace

    sched = scheduler(blocks=17)
    filler = SeqState(req(5, 64, output=60))
    t0 = SeqState(replace(req(0, 100, runs=[(("c", 0, "user"), 100)], output=50), answer_content=("c", 0, "answer")))
    sched.add(filler)
    step(sched, 0.0)
    sched.add(t0)
    t, resumed_with = 0.1, None
    while t0.status != "finished":
        step(sched, t)
        t += 0.1
        if t0.num_preemptions and t0.status == "running" and resumed_with is None:
            resumed_with = t0.num_scheduled
    assert t0.num_preemptions == 1 and resumed_with > 100
    t1 = SeqState(req(1, 180, runs=[(("c", 0, "user"), 100), (("c", 0, "answer"), 50), (("c", 1, "user"), 30)]))
    sched.add(t1)
    step(sched, t)
    assert t1.num_cached_tokens == 144

"""RPS-Serve's budget-exhaustion preemption (``policy.queue.budget_preemption``) on hand-built
requests, no SimPy.

The artifact's scheduler walks running and waiting requests in one priority order while the
token budget lasts and, when it reaches 0, preempts every RUNNING request it did not reach
(KV and encoder cache freed, ``num_computed_tokens = 0``): ``all``. ``prefills`` preempts only
running prefills; ``none`` defers them with their KV kept.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from lmmsim.engine.kv_cache import BlockPool
from lmmsim.engine.priority_scheduler import PriorityScheduler
from lmmsim.engine.scheduler import SeqState
from lmmsim.policies.rps_queue import RpsQueue, RpsQueueConfig

from conftest import media_request, text_request

SAND, PEBBLES, ROCKS = 0, 1, 2
MODES = ("none", "prefills", "all")
BLOCKS = 1000


def scheduler(classes, mode, budget=64, max_running=16, resume_cache=False):
    """Resume from the prefix cache off unless asked: these tests show the preemption itself
    (tests/test_resume_cache.py the resume)."""
    q = RpsQueue(RpsQueueConfig(budget_preemption=mode, resume_cache=resume_cache),
                 classify=lambda r: classes[r.request_id])
    return PriorityScheduler(q, BlockPool(BLOCKS, 16), budget, max_running, 10**9)


def seq(rid, at, prompt=100, output=10):
    return SeqState(text_request(rid, at, prompt, output))


def run_step(sched, now):
    plan = sched.schedule(now)
    sched.complete(plan, now, now, now + 0.01)
    return plan


def chunks(plan):
    return [(s.request.request_id, n, start) for s, n, start in plan.chunks]


def held(sched, *seqs):
    """KV blocks are conserved: free + held by the given requests == the pool."""
    return sched.pool.num_free + sum(s.num_blocks for s in seqs) == BLOCKS


def test_the_default_is_the_artifacts_and_the_mode_is_checked():
    assert RpsQueueConfig().budget_preemption == "all"
    with pytest.raises(ValidationError):
        RpsQueueConfig(budget_preemption="decodes")


@pytest.mark.parametrize("mode", MODES)
def test_a_running_prefill_the_budget_does_not_reach(mode):
    """A rock half-way through its prompt; a sand prompt longer than the budget takes all of it."""
    sched = scheduler({0: ROCKS, 1: SAND}, mode)
    rock, sand = seq(0, 0.0, prompt=1000), seq(1, 0.05, prompt=200)
    sched.add(rock)
    run_step(sched, 0.0)
    assert rock.num_computed == 64 and rock.num_blocks == 4
    sched.add(sand)
    plan = run_step(sched, 0.1)
    assert chunks(plan) == [(1, 64, 0)]  # the sand first, and it exhausts the budget
    if mode == "none":  # deferred: the rock keeps its KV and resumes where it stopped
        assert not plan.preempted and rock.status == "running"
        assert rock.num_computed == 64 and rock.num_blocks == 4
    else:  # preempted by recompute: KV freed, progress lost
        assert plan.preempted == [rock] and rock.status == "waiting" and rock.num_preemptions == 1
        assert rock.num_computed == 0 and rock.num_blocks == 0
    assert held(sched, rock, sand)
    # the sand finishes its prompt (64 + 64 + 64 + 8): the rock comes back
    for t in (0.2, 0.3, 0.4):
        plan = run_step(sched, t)
    assert (1, 8, 192) in chunks(plan)
    rock_chunk = [c for c in chunks(plan) if c[0] == 0]
    if mode == "none":
        assert not rock_chunk or rock_chunk[0][2] == 64  # resumes at token 64
    else:
        assert rock_chunk and rock_chunk[0][2] == 0  # recomputes from the first token
    assert held(sched, rock, sand)


@pytest.mark.parametrize("mode", MODES)
def test_a_decode_the_budget_does_not_reach(mode):
    """A rock decodes; a new sand request with a prompt longer than the budget arrives.
    Only in "all" are decodes ordered by priority: the sand comes first, takes the whole
    budget, and the rock's decode -- not reached -- is preempted."""
    sched = scheduler({0: ROCKS, 1: SAND}, mode)
    rock = seq(0, 0.0, prompt=40, output=100)
    sched.add(rock)
    run_step(sched, 0.0)
    assert rock.in_decode and rock.num_blocks == 3
    sand = seq(1, 0.1, prompt=500, output=5)
    sched.add(sand)
    plan = run_step(sched, 0.1)
    if mode == "all":
        assert chunks(plan) == [(1, 64, 0)]
        assert plan.num_decodes == 0 and plan.preempted == [rock]
        assert rock.status == "waiting" and rock.num_blocks == 0 and rock.num_computed == 0
        assert rock.num_generated == 1  # its sampled token is kept; the KV is recomputed
    else:  # decodes go first and keep their token; nothing is left behind to preempt
        assert plan.num_decodes == 1 and chunks(plan) == [(1, 63, 0)]
        assert not plan.preempted and rock.in_decode and rock.num_blocks == 3
    assert plan.num_tokens == 64
    assert held(sched, rock, sand)


def test_a_decode_ahead_of_the_budget_keeps_its_token_in_all():
    """A sand decodes; a rock prompt longer than the budget waits: the decode is reached
    first (its priority is higher), so it keeps its token and nothing is preempted."""
    sched = scheduler({0: SAND, 1: ROCKS}, "all")
    sand = seq(0, 0.0, prompt=40, output=100)
    sched.add(sand)
    run_step(sched, 0.0)
    rock = seq(1, 0.1, prompt=500, output=5)
    sched.add(rock)
    plan = run_step(sched, 0.1)
    assert plan.num_decodes == 1 and chunks(plan) == [(1, 63, 0)] and not plan.preempted
    assert sand.in_decode and held(sched, sand, rock)


@pytest.mark.parametrize("mode", MODES)
def test_no_preemption_while_the_budget_lasts(mode):
    sched = scheduler({0: ROCKS, 1: SAND, 2: PEBBLES}, mode, budget=256)
    reqs = [seq(0, 0.0, prompt=60, output=50), seq(1, 0.0, prompt=30, output=50), seq(2, 0.0, prompt=50)]
    for r in reqs:
        sched.add(r)
    for t in (0.0, 0.1, 0.2, 0.3):
        plan = run_step(sched, t)
        assert not plan.preempted
    assert sched.num_preemptions == 0 and all(r.in_decode or r.status == "finished" for r in reqs)


@pytest.mark.parametrize("mode", ["prefills", "all"])
def test_a_preempted_media_prefill_encodes_again(mode):
    """The artifact frees the encoder cache of a budget-preempted request: on resume its
    image is encoded again (``next_media`` back to 0)."""
    classes = {0: ROCKS, 1: SAND}
    sched = scheduler(classes, mode)
    rock = SeqState(media_request(0, 0.0, [10, ("image", 40), 200], 10))
    sched.add(rock)
    plan = run_step(sched, 0.0)
    assert [s.request.request_id for s, _seg in plan.encodes] == [0]
    sand = seq(1, 0.05, prompt=64)
    sched.add(sand)
    plan = run_step(sched, 0.1)
    assert plan.preempted == [rock] and rock.next_media == 0
    plan = run_step(sched, 0.2)  # the sand decodes (1 token): the rock starts over, image included
    assert chunks(plan) == [(0, 63, 0)] and plan.num_decodes == 1
    assert [s.request.request_id for s, _seg in plan.encodes] == [0]


def test_budget_preemption_needs_a_scoring_queue_only():
    """Other systems are untouched: a queue without the setting means "none"."""
    class Queue(RpsQueue):
        pass
    q = Queue(RpsQueueConfig(), classify=lambda r: 0)
    del q.budget_preemption
    assert PriorityScheduler(q, BlockPool(10, 16), 64, 4, 0).budget_preemption == "none"
    q.budget_preemption = "sometimes"
    with pytest.raises(ValueError):
        PriorityScheduler(q, BlockPool(10, 16), 64, 4, 0)

"""Engine timelines computed by hand, with constant costs."""

from __future__ import annotations

import math

import pytest

from lmmsim.costmodel.constant import ConstantStepCost
from lmmsim.engine.kv_cache import BlockPool, blocks_for
from lmmsim.engine.scheduler import ContinuousBatchingScheduler, SeqState
from lmmsim.policies.queueing import FcfsQueue

from conftest import media_request, simulate, text_request


def by_id(result):
    return {s.request.request_id: s for s in result.seqs}


def test_single_request_timeline():
    res, _ = simulate([text_request(0, 0.0, 100, 3)], ConstantStepCost(step_s=0.01))
    s = res.seqs[0]
    assert s.status == "finished"
    assert s.prefill_started_at == 0.0
    assert s.first_token_at == pytest.approx(0.01)
    assert s.finished_at == pytest.approx(0.03)
    assert math.isnan(s.encode_started_at)


def test_chunked_prefill_takes_ceil_prompt_over_budget_steps():
    res, log = simulate([text_request(0, 0.0, 5000, 1)], ConstantStepCost(step_s=0.01), token_budget=2048,
                        step_log=True)
    assert res.seqs[0].first_token_at == pytest.approx(0.03)
    assert [entry.num_tokens for entry in log] == [2048, 2048, 904]


def test_two_requests_share_steps_with_token_costs():
    cost = ConstantStepCost(step_s=0.01, per_token_s=1e-5)
    reqs = [text_request(0, 0.0, 100, 3), text_request(1, 0.005, 100, 2)]
    res, _ = simulate(reqs, cost)
    a, b = by_id(res)[0], by_id(res)[1]
    t1 = 0.01 + 100e-5  # A's prefill alone
    t2 = t1 + 0.01 + 101e-5  # A decodes, B prefills (admitted at the step boundary)
    t3 = t2 + 0.01 + 2e-5  # both decode; both finish
    assert a.first_token_at == pytest.approx(t1)
    assert b.prefill_started_at == pytest.approx(t1)
    assert b.first_token_at == pytest.approx(t2)
    assert a.finished_at == pytest.approx(t3)
    assert b.finished_at == pytest.approx(t3)


def test_encoder_runs_inside_the_step_before_the_llm():
    cost = ConstantStepCost(step_s=0.01, encode_item_s=0.05)
    res, _ = simulate([media_request(0, 0.0, [("image", 500), 100], 2)], cost)
    s = res.seqs[0]
    assert s.request.modality == "image"
    assert s.encode_started_at == 0.0
    assert s.encode_finished_at == pytest.approx(0.05)
    assert s.first_token_at == pytest.approx(0.06)
    assert s.finished_at == pytest.approx(0.07)


def test_encoder_budget_cuts_the_chunk_before_an_item_it_cannot_take():
    cost = ConstantStepCost(step_s=0.01, encode_item_s=0.05)
    req = media_request(0, 0.0, [("image", 1500), ("image", 1500), 100], 1)
    res, log = simulate([req], cost, token_budget=2048, encoder_budget=2048, step_log=True)
    # step 1: first image only (1500 tokens), chunk stops before the second;
    # step 2: second image + text (1600 tokens).
    assert [entry.num_tokens for entry in log] == [1500, 1600]
    assert res.seqs[0].first_token_at == pytest.approx(0.06 + 0.06)
    assert res.seqs[0].encode_finished_at == pytest.approx(0.06 + 0.05)


def test_max_running_caps_the_batch():
    reqs = [text_request(i, 0.0, 10, 5) for i in range(3)]
    res, _ = simulate(reqs, ConstantStepCost(step_s=0.01), max_running=2, token_budget=2048)
    s = by_id(res)
    # first two run together (prefill + 4 decodes = 5 steps); the third starts after.
    assert s[0].finished_at == pytest.approx(0.05)
    assert s[1].finished_at == pytest.approx(0.05)
    assert s[2].prefill_started_at == pytest.approx(0.05)
    assert s[2].finished_at == pytest.approx(0.10)


def test_preemption_by_recompute_when_kv_runs_out():
    # 6 blocks of 16 tokens; each request needs 2 blocks for its 20-token
    # prompt and grows to 3 (20 + 30 tokens = 50 > 48 -> 4 blocks).
    reqs = [text_request(0, 0.0, 20, 30), text_request(1, 0.0, 20, 30)]
    res, log = simulate(reqs, ConstantStepCost(step_s=0.01), num_blocks=6, block_size=16, step_log=True)
    s = by_id(res)
    assert all(x.status == "finished" for x in res.seqs)
    assert s[1].num_preemptions >= 1  # the later admitted is the victim
    assert s[0].num_preemptions == 0
    sched = res.replicas[0].scheduler
    assert sched.pool.peak_used <= 6
    assert sched.pool.num_free == 6  # everything returned


def test_preempted_request_recomputes_prompt_and_generated_tokens():
    queue = FcfsQueue()
    pool = BlockPool(4, 4)
    sched = ContinuousBatchingScheduler(queue, pool, token_budget=64, max_running=8, encoder_budget=64)
    a = SeqState(text_request(0, 0.0, 4, 10))
    b = SeqState(text_request(1, 0.0, 4, 10))
    sched.add(a)
    sched.add(b)
    t = 0.0
    plan = sched.schedule(t)
    assert [n for _, n, _ in plan.chunks] == [4, 4]
    sched.complete(plan, t, t, t + 1)
    # both now decode; after 4 tokens each needs a second block: 4 used of 4 -> preempt b
    for step in range(1, 10):
        plan = sched.schedule(float(step))
        sched.complete(plan, float(step), float(step), step + 1.0)
        if b.num_preemptions:
            break
    assert b.num_preemptions == 1 and b.status in ("waiting", "running")
    generated_before = b.num_generated
    assert generated_before >= 1
    # when b is readmitted, its chunk covers prompt + generated tokens
    while b.status == "waiting":
        plan = sched.schedule(t)
        sched.complete(plan, t, t, t + 1)
        t += 1
        for seq, n, _ in plan.chunks:
            if seq is b:
                assert n == 4 + generated_before


def test_rejected_requests_are_reported_not_run():
    reqs = [text_request(0, 0.0, 10, 2), text_request(1, 0.1, 10, 2)]
    res, _ = simulate(reqs, ConstantStepCost(step_s=0.01), rejected={1: "too long"})
    assert [s.status for s in res.seqs] == ["finished", "rejected"]
    assert [s.reject_reason for s in res.seqs] == [None, "too long"]


def test_horizon_leaves_requests_unfinished():
    reqs = [text_request(0, 0.0, 10, 1000)]
    res, _ = simulate(reqs, ConstantStepCost(step_s=0.01), horizon_s=1.0)
    assert res.seqs[0].status == "unfinished"
    assert res.end_at == 1.0


def test_round_robin_over_replicas():
    reqs = [text_request(i, 0.01 * i, 10, 2) for i in range(4)]
    res, _ = simulate(reqs, ConstantStepCost(step_s=0.001), replicas=2)
    assert [s.replica for s in res.seqs] == [0, 1, 0, 1]


def test_blocks_for():
    assert [blocks_for(n, 16) for n in (0, 1, 16, 17, 32)] == [0, 1, 1, 2, 2]
    pool = BlockPool(3, 16)
    pool.allocate(3)
    with pytest.raises(RuntimeError):
        pool.allocate(1)

"""Pipeline parallelism: vanilla PP versus chunked pipeline parallelism (CPP), by hand."""

from __future__ import annotations

import pytest

from lmmsim.costmodel.constant import ConstantStepCost
from lmmsim.engine.clock import SimEnvironment
from lmmsim.engine.kv_cache import BlockPool
from lmmsim.engine.pipeline import PipelineEngine
from lmmsim.engine.scheduler import ContinuousBatchingScheduler, SeqState
from lmmsim.policies.queueing import FcfsQueue

from conftest import text_request

PER_TOKEN_S = 1e-4  # a 1024-token chunk costs 0.1024 s for the whole model


def run_pipeline(requests, *, stages=2, cpp=True, budget=1024, activation_s=0.0, slots=None):
    env = SimEnvironment()
    sched = ContinuousBatchingScheduler(FcfsQueue(), BlockPool(100_000, 16), budget, min(budget, 256),
                                        budget, num_slots=slots or stages)
    done = []
    engine = PipelineEngine(env, 0, "llm0", sched, ConstantStepCost(step_s=0.0, per_token_s=PER_TOKEN_S), stages,
                            [(i,) for i in range(stages)], lambda n: activation_s, done.append,
                            chunk_pipelining=cpp, step_log=[])
    seqs = [SeqState(r) for r in requests]

    def arrivals():
        for seq in seqs:
            yield env.timeout_at(seq.request.arrived_at, late=False)
            engine.submit(seq)

    env.process(arrivals())
    env.run()
    return seqs, engine


def test_vanilla_pp_runs_chunks_one_after_another():
    seqs, _ = run_pipeline([text_request(0, 0.0, 4096, 1)], cpp=False)
    stage = 1024 * PER_TOKEN_S / 2  # T: one chunk on one of two stages
    assert seqs[0].first_token_at == pytest.approx(8 * stage)  # 4 chunks x 2 stages, no overlap


def test_cpp_overlaps_chunks_of_one_request():
    seqs, engine = run_pipeline([text_request(0, 0.0, 4096, 1)], cpp=True)
    stage = 1024 * PER_TOKEN_S / 2
    assert seqs[0].first_token_at == pytest.approx(5 * stage)  # stage 0 busy 4T, then the last chunk's stage 1
    starts = sorted(r.start_at for r in engine.step_log if r.worker == "llm0/stage0")
    assert starts == pytest.approx([0, stage, 2 * stage, 3 * stage])


def test_cpp_with_four_stages_and_activation_sends():
    act = 0.001
    seqs, _ = run_pipeline([text_request(0, 0.0, 4096, 1)], stages=4, cpp=True, activation_s=act)
    stage = 1024 * PER_TOKEN_S / 4
    # stage 0 back to back (4 chunks), then the last chunk crosses 3 more stages and 3 sends
    assert seqs[0].first_token_at == pytest.approx(4 * stage + 3 * (stage + act))
    seqs, _ = run_pipeline([text_request(0, 0.0, 4096, 1)], stages=4, cpp=False, activation_s=act)
    assert seqs[0].first_token_at == pytest.approx(4 * (4 * stage + 3 * act))


def test_decode_tokens_wait_for_the_whole_pipeline():
    # one request, 10-token prompt, 3 output tokens: each token is a full trip
    seqs, _ = run_pipeline([text_request(0, 0.0, 10, 3)], stages=2, cpp=True)
    trip_prefill = 10 * PER_TOKEN_S
    trip_decode = 1 * PER_TOKEN_S
    assert seqs[0].first_token_at == pytest.approx(trip_prefill)
    assert seqs[0].finished_at == pytest.approx(trip_prefill + 2 * trip_decode)


def test_two_requests_fill_the_pipeline_and_conserve_tokens():
    reqs = [text_request(i, 0.001 * i, 3000 + 100 * i, 20) for i in range(6)]
    for cpp in (False, True):
        seqs, engine = run_pipeline(reqs, stages=2, cpp=cpp)
        for s in seqs:
            assert s.status == "finished"
            assert s.num_generated == s.request.num_output_tokens
        assert engine.scheduler.pool.num_free == engine.scheduler.pool.num_blocks
    vanilla, _ = run_pipeline(reqs, stages=2, cpp=False)
    chunked, _ = run_pipeline(reqs, stages=2, cpp=True)
    assert sum(s.first_token_at for s in chunked) < sum(s.first_token_at for s in vanilla)


def test_an_older_prefill_waits_for_a_newer_one_in_flight_instead_of_recomputing():
    # Two slots, 10 blocks of 16 tokens. A (older) and B (newer) each hold 4 blocks after a
    # 64-token chunk; B's batch is in flight when A needs 4 more blocks. vLLM's victim would
    # be B, which cannot be recalled: A waits (no preemption, no admission of C), and gets
    # its blocks from B once B's batch is back. Preempting A here let pipeline slots
    # recompute each other's oldest request forever (a livelock found by the fuzz test).
    sched = ContinuousBatchingScheduler(FcfsQueue(), BlockPool(10, 16), 64, 8, 64, num_slots=2)
    a, b, c = (SeqState(text_request(i, 0.0, 150, 2)) for i in range(3))
    for seq in (a, b, c):
        sched.add(seq)
    plan_a = sched.schedule(0.0, 0)
    plan_b = sched.schedule(0.0, 1)
    assert [s for s, _, _ in plan_a.chunks] == [a] and [s for s, _, _ in plan_b.chunks] == [b]
    sched.complete(plan_a, 0.0, 0.0, 1.0)
    waiting = sched.schedule(1.0, 0)
    assert waiting.is_empty and waiting.kv_blocked and not waiting.preempted
    assert a.status == "running" and a.num_preemptions == 0 and c.status == "waiting"
    sched.complete(plan_b, 0.0, 0.0, 1.5)
    plan = sched.schedule(1.5, 1)
    assert plan.preempted == [b] and [s for s, _, _ in plan.chunks] == [a]

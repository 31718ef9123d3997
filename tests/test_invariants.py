"""Invariants on random workloads: conservation, capacity, budget, fast-forward exactness."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lmmsim.costmodel.constant import ConstantStepCost

from conftest import media_request, simulate, text_request


def random_requests(seed: int, n: int, rate: float, max_prompt: int = 3000, max_out: int = 60):
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1 / rate, n))
    reqs = []
    for i in range(n):
        out = int(rng.integers(1, max_out))
        if rng.random() < 0.3:
            parts = [int(rng.integers(1, 200)), ("image", int(rng.integers(50, 1500))), int(rng.integers(1, 200))]
            reqs.append(media_request(i, float(t[i]), parts, out))
        else:
            reqs.append(text_request(i, float(t[i]), int(rng.integers(1, max_prompt)), out))
    return reqs


class DecodeAwareCost(ConstantStepCost):
    """Constant cost that also grows with decode context, so fast-forward sums vary."""

    def llm_step_s(self, prefill_chunks, num_decodes, decode_context_sum, num_sampled):
        return super().llm_step_s(prefill_chunks, num_decodes, decode_context_sum, num_sampled) + 1e-7 * decode_context_sum


def check_invariants(result, log, *, token_budget, num_blocks, max_running):
    for seq in result.seqs:
        assert seq.status == "finished", seq.status
        r = seq.request
        assert seq.num_generated == r.num_output_tokens  # tokens conserved
        assert seq.num_computed == r.num_prompt_tokens + r.num_output_tokens - 1
        assert r.arrived_at <= seq.prefill_started_at <= seq.first_token_at <= seq.finished_at
        if r.media_segments:
            assert seq.encode_started_at <= seq.encode_finished_at <= seq.first_token_at
    for rep in result.replicas:
        sched = rep.scheduler
        assert sched.pool.peak_used <= num_blocks
        assert sched.pool.num_free == num_blocks  # all blocks returned
        assert sched.num_running == 0 and len(sched.queue) == 0
    for rec in log:
        assert rec.end_at >= rec.start_at
        if rec.kind != "decode_run":  # a single step, not a fast-forwarded stretch
            assert 0 < rec.num_tokens <= token_budget
            assert rec.batch_size <= max_running


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    num_blocks=st.integers(400, 3000),
    token_budget=st.sampled_from([256, 512, 2048]),
    max_running=st.sampled_from([4, 16, 64]),
    rate=st.sampled_from([5.0, 50.0, 500.0]),
)
def test_invariants_hold_on_random_workloads(seed, num_blocks, token_budget, max_running, rate):
    max_running = min(max_running, token_budget)
    reqs = random_requests(seed, 40, rate)
    cost = DecodeAwareCost(step_s=0.005, per_token_s=2e-6, encode_item_s=0.01)
    res, log = simulate(reqs, cost, num_blocks=num_blocks, block_size=16, token_budget=token_budget,
                        max_running=max_running, encoder_budget=max(token_budget, 1500), step_log=True)
    check_invariants(res, log, token_budget=token_budget, num_blocks=num_blocks, max_running=max_running)


def timeline(result):
    return [(s.request.request_id, s.replica, s.prefill_started_at, s.first_token_at, s.finished_at,
             s.encode_started_at, s.encode_finished_at, s.num_preemptions) for s in result.seqs]


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), num_blocks=st.sampled_from([300, 5000]), replicas=st.sampled_from([1, 2]))
def test_fast_forward_equals_stepping_bit_for_bit(seed, num_blocks, replicas):
    reqs = random_requests(seed, 60, rate=8.0, max_prompt=1500, max_out=200)
    cost = DecodeAwareCost(step_s=0.004, per_token_s=1e-6, encode_item_s=0.01)
    kw = dict(num_blocks=num_blocks, token_budget=1024, encoder_budget=1500, max_running=32, replicas=replicas)
    stepped, _ = simulate(reqs, cost, fast_forward=False, **kw)
    jumped, _ = simulate(reqs, cost, fast_forward=True, **kw)
    assert timeline(stepped) == timeline(jumped)  # exact float equality
    busy = [r.busy_s for r in stepped.replicas]
    assert busy == [r.busy_s for r in jumped.replicas]
    assert jumped.num_events <= stepped.num_events


def test_fast_forward_saves_events_on_long_decodes():
    reqs = [text_request(i, 0.5 * i, 100, 500) for i in range(4)]
    cost = DecodeAwareCost(step_s=0.01)
    stepped, _ = simulate(reqs, cost, fast_forward=False)
    jumped, _ = simulate(reqs, cost, fast_forward=True)
    assert timeline(stepped) == timeline(jumped)
    assert jumped.num_events < stepped.num_events / 10

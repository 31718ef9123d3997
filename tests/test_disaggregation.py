"""Disaggregated deployments: equivalence with monolithic in the limit, hand-off, and every system's invariants."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from lmmsim.catalog import LinkSpec
from lmmsim.costmodel.constant import ConstantStepCost
from lmmsim.engine.disaggregation import DisaggregatedFrontend, EmbeddingInbox, egress
from lmmsim.engine.encoder import EncoderWorker
from lmmsim.engine.kv_cache import BlockPool
from lmmsim.engine.replica import Replica
from lmmsim.engine.scheduler import ContinuousBatchingScheduler
from lmmsim.engine.simulation import Simulation
from lmmsim.policies.encode_dispatch import FixedBatchConfig, FixedBatchDispatcher, PerRequestDispatcher
from lmmsim.policies.routing import RoundRobinRouter
from lmmsim.policies.queueing import FcfsQueue
from lmmsim.results import run_scenario
from lmmsim.scenario import load_scenario
from lmmsim.systems import systems

from conftest import media_request, simulate, text_request

INSTANT = LinkSpec(bandwidth_gbs=math.inf, latency_us=0.0)


class _EncodeParts(ConstantStepCost):
    def encode_parts(self, works):
        return self.encode_s(works), 0.0


def disaggregated(requests, cost, *, link=INSTANT, streaming=False, prefill_only=False, decode_workers=0,
                  dispatcher=None, num_blocks=100_000):
    """An e_pd (or e_p_d with ``decode_workers``) deployment built by hand."""

    def make_frontend(env, on_finish, barrier_at):
        box = []

        def engine(i, media, prefill, finish):
            sched = ContinuousBatchingScheduler(FcfsQueue(), BlockPool(num_blocks, 16), 2048, 256, 10**9,
                                                media=media, prefill_only=prefill)
            return Replica(env, i, sched, cost, (i,), finish, barrier_at, fast_forward=False,
                           on_handoff=(lambda seq, i=i: box[0].on_prefilled(i, seq)) if prefill else None,
                           on_batch=(lambda plan, i=i: box[0].on_batch(i, plan)) if i == 0 else None)

        llm = [engine(0, "remote", prefill_only, on_finish)]
        decode = [engine(1 + d, "remote", False, lambda seq, d=d: (on_finish(seq), box[0].on_decode_finish(d)))
                  for d in range(decode_workers)]
        enc = EncoderWorker(env, 0, "encoder0", cost, dispatcher or PerRequestDispatcher(), (9,),
                            lambda batch, s, t: box[0].on_encoded(0, batch))
        front = DisaggregatedFrontend(
            env, encoders=[enc], llm_engines=llm,
            inboxes=[EmbeddingInbox(env, llm[0], 1e12, 100.0, admit_when_complete=not streaming)],
            encoder_senders=[egress(env, link, 1, "e0", 4)], router=RoundRobinRouter(), streaming=streaming,
            decode_engines=decode, kv_senders=[egress(env, link, 1, "p0", 4)] if decode else None,
            kv_bytes_per_token=1000.0, decode_router=RoundRobinRouter(),
        )
        box.append(front)
        return front

    return Simulation(requests, make_frontend).run()


def workload():
    reqs = []
    t = 0.0
    for i in range(30):
        t += 0.037 * (1 + (i * 7) % 5)
        if i % 3:
            reqs.append(media_request(i, t, [("image", 300 + 50 * (i % 4)), 100 + i], 1 + i % 7))
        else:
            reqs.append(text_request(i, t, 200 + 13 * i, 1 + i % 5))
    return reqs


def test_e_pd_with_instant_encoder_and_link_equals_monolithic():
    cost = _EncodeParts(step_s=0.01, per_token_s=2e-5, encode_item_s=0.0)
    mono, _ = simulate(workload(), cost, encoder_budget=10**9)
    epd = disaggregated(workload(), cost)
    for a, b in zip(mono.seqs, epd.seqs):
        assert b.status == "finished"
        assert a.first_token_at == b.first_token_at
        assert a.finished_at == b.finished_at


def test_encoder_time_and_link_delay_the_first_token():
    cost = _EncodeParts(step_s=0.01, encode_item_s=0.05)
    slow = LinkSpec(bandwidth_gbs=1e-6, latency_us=1000.0)  # 1 kB/s + 1 ms
    req = media_request(0, 0.0, [("image", 10), 5], 1)
    res = disaggregated([req], cost, link=slow)
    s = res.seqs[0]
    transfer = 1e-3 + 10 * 100.0 / 1e3  # latency + bytes (10 tokens x 100 B) / bandwidth
    assert s.encode_finished_at == pytest.approx(0.05)
    assert s.prefill_started_at == pytest.approx(0.05 + transfer)
    assert s.first_token_at == pytest.approx(0.05 + transfer + 0.01)


def test_streaming_admission_prefills_text_before_the_image_arrives():
    cost = _EncodeParts(step_s=0.01, per_token_s=0.0, encode_item_s=0.1)
    req = media_request(0, 0.0, [50, ("image", 10), 5], 1)
    after = disaggregated([req], cost).seqs[0]
    stream = disaggregated([media_request(0, 0.0, [50, ("image", 10), 5], 1)], cost, streaming=True).seqs[0]
    assert after.prefill_started_at == pytest.approx(0.1)
    assert stream.prefill_started_at == 0.0  # the 50 text tokens go first
    assert stream.first_token_at == pytest.approx(0.11)  # the rest right after the embedding lands
    assert after.first_token_at == pytest.approx(0.11)


def test_prefill_hands_kv_to_decode_after_reserving_blocks():
    cost = _EncodeParts(step_s=0.01, encode_item_s=0.0)
    slow = LinkSpec(bandwidth_gbs=1e-3, latency_us=0.0)  # 1 MB/s
    req = text_request(0, 0.0, 100, 3)
    res = disaggregated([req], cost, link=slow, prefill_only=True, decode_workers=1)
    s = res.seqs[0]
    kv = 100 * 1000.0 / 1e6  # 100 tokens x 1 kB at 1 MB/s
    assert s.first_token_at == pytest.approx(0.01)
    assert s.finished_at == pytest.approx(0.01 + kv + 2 * 0.01)  # two decode steps on the decode worker
    front = res.frontend
    assert front.num_kv_transfers == 1
    for engine in front.llm_engines:
        assert engine.scheduler.pool.num_free == engine.scheduler.pool.num_blocks


def test_kv_waits_for_decode_capacity():
    cost = _EncodeParts(step_s=0.01, encode_item_s=0.0)
    reqs = [text_request(i, 0.0, 60, 40) for i in range(4)]
    # decode worker holds 10 blocks of 16 tokens: two requests at a time (60 + 40 tokens = 7 blocks max... tight)
    res = disaggregated(reqs, cost, prefill_only=True, decode_workers=1, num_blocks=10)
    assert all(s.status == "finished" for s in res.seqs)
    assert all(s.num_generated == 40 for s in res.seqs)


def test_fixed_dispatch_batches_across_requests():
    cost = _EncodeParts(step_s=0.01, encode_item_s=0.02)
    reqs = [media_request(i, 0.001 * i, [("image", 20), 5], 1) for i in range(4)]
    res = disaggregated(reqs, cost, dispatcher=FixedBatchDispatcher(FixedBatchConfig(max_items=4, timeout_s=0.01)))
    enc = res.frontend.encoders[0]
    assert enc.num_batches == 1 and enc.num_items == 4  # all four arrived within the timeout
    assert all(s.encode_started_at == pytest.approx(0.003) for s in res.seqs)


SYSTEMS = sorted(systems())
BASE = Path(__file__).resolve().parent.parent / "scenarios" / "rps-mix-llava72b-h100x4.yaml"


@pytest.mark.parametrize("system", SYSTEMS)
def test_every_system_conserves_requests_tokens_and_blocks(system):
    scn, base = load_scenario(BASE, [f"system={system}", "model=qwen2.5-vl-7b", "hardware.gpu=h100-sxm-80gb",
                                     "deployment=null", "deployment.max_model_len=32768", "policy=null",
                                     "workload.num_requests=60", "workload.arrival.rate=4"])
    run = run_scenario(scn, base)
    sim = run.built.simulation
    for seq in sim.seqs:
        assert seq.status == "finished"
        assert seq.num_generated == seq.request.num_output_tokens
        assert seq.request.arrived_at <= seq.first_token_at <= seq.finished_at
        if seq.request.media_segments:
            assert seq.encode_finished_at <= seq.first_token_at
    for engine in sim.frontend.llm_engines:
        pool = engine.scheduler.pool
        assert pool.peak_used <= pool.num_blocks
        assert pool.num_free == pool.num_blocks
    util = run.summary["gpu_utilization"]["per_gpu"]
    assert len(util) == 4 and all(0 <= u <= 1 for u in util)


def test_least_loaded_router_counts_requests_still_being_encoded():
    """A burst of image requests spreads over the prefill workers although none of them
    has reached a prefill queue yet (after_encode admission)."""
    scn, base = load_scenario(BASE, ["system=dynamo", "model=qwen2.5-vl-7b", "hardware.gpu=h100-sxm-80gb",
                                     "deployment=null", "deployment.max_model_len=32768", "policy=null",
                                     "deployment.prefill={workers: 2, tp: 1}", "deployment.decode={tp: 1}",
                                     "workload.num_requests=40", "workload.arrival={kind: deterministic, rate: 1000}",
                                     "workload.mix=[{name: img, weight: 1, text_tokens: {kind: fixed, value: 50}, "
                                     "images: {count: 1, width: 448, height: 448}}]"])
    run = run_scenario(scn, base)
    admitted = [e.scheduler._admit_counter for e in run.built.simulation.frontend.prefill]
    assert sum(admitted) == 40 and min(admitted) >= 15, admitted

"""RServe (rserve.txt section 3): embedding tracker, encoder scheduling (Algorithm 1),
schedulable-token batching (Algorithm 2), Figure 9's timelines, and end-to-end runs.

Hand-computed timelines use :class:`ConstantStepCost` (a step costs ``step_s +
per_token_s * tokens``, an encoder batch ``encode_item_s * items``) and an
instant link (one test uses a slow shared link), so every time below is a sum
of those constants.
"""

from __future__ import annotations

import math
from collections import deque

import pytest
import yaml

from lmmsim.catalog import LinkSpec
from lmmsim.costmodel.constant import ConstantStepCost
from lmmsim.engine.disaggregation import DisaggregatedFrontend, EmbeddingInbox, egress
from lmmsim.engine.embedding_tracker import EmbeddingTracker
from lmmsim.engine.encoder import EncoderWorker
from lmmsim.engine.kv_cache import BlockPool
from lmmsim.engine.replica import Replica
from lmmsim.engine.schedulable_tokens import SchedulableTokenScheduler
from lmmsim.engine.scheduler import ContinuousBatchingScheduler, SeqState
from lmmsim.engine.simulation import Simulation
from lmmsim.policies.encode_dispatch import (
    EmbeddingBatchConfig,
    EmbeddingBatchDispatcher,
    EncodeItem,
    PerRequestDispatcher,
)
from lmmsim.policies.queueing import FcfsQueue
from lmmsim.policies.routing import RoundRobinRouter
from lmmsim.results import run_scenario
from lmmsim.scenario import load_scenario

from conftest import media_request, text_request

INSTANT = LinkSpec(bandwidth_gbs=math.inf, latency_us=0.0)
BYTES_PER_TOKEN = 100.0


# --------------------------------------------------------------------------- helpers
def epd(requests, cost, *, streaming, dispatcher, scheduler_cls=SchedulableTokenScheduler, token_budget=10_000,
        num_blocks=100_000, link=INSTANT, **sched_kw):
    """One encoder worker + one LLM worker (e_pd) built by hand (instant link by default).

    Returns (result, step log, inbox, buffer.used after each LLM batch)."""
    log: list = []
    box: list = []
    used_after_batch: list = []

    def make_frontend(env, on_finish, barrier_at):
        sched = scheduler_cls(FcfsQueue(), BlockPool(num_blocks, 16), token_budget, min(256, token_budget), 10**9,
                              media="remote", **sched_kw)

        def on_batch(plan):
            box[0].on_batch(0, plan)
            used_after_batch.append(box[0].inboxes[0].buffer.used)

        llm = Replica(env, 0, sched, cost, (0,), on_finish, barrier_at, fast_forward=False, step_log=log,
                      name="llm0", on_batch=on_batch)
        enc = EncoderWorker(env, 0, "encoder0", cost, dispatcher, (1,),
                            lambda batch, s, t: box[0].on_encoded(0, batch), step_log=log)
        inbox = EmbeddingInbox(env, llm, 1e12, BYTES_PER_TOKEN, admit_when_complete=not streaming)
        if isinstance(sched, CheckedScheduler):
            sched.inbox = inbox
        front = DisaggregatedFrontend(env, encoders=[enc], llm_engines=[llm], inboxes=[inbox],
                                      encoder_senders=[egress(env, link, 1, "e0", 4)],
                                      router=RoundRobinRouter(), streaming=streaming)
        box.append(front)
        return front

    res = Simulation(requests, make_frontend).run()
    return res, log, res.frontend.inboxes[0], used_after_batch


class CheckedScheduler(SchedulableTokenScheduler):
    """Asserts, per batch, that no chunk computes a position whose embedding has not
    reached the inbox (its tracker, independent of the scheduler's own count)."""

    inbox = None

    def schedule(self, now, slot=0):
        plan = super().schedule(now, slot)
        for seq, n, start in plan.chunks:
            if not seq.request.media_segments:
                continue
            tracker = self.inbox.trackers.get(seq.request.request_id)
            if tracker is None:
                # The inbox opens a tracker at the first delivery: until then only the text
                # before the first item may run. (After all is consumed the tracker is gone;
                # only a preempted request recomputes then.)
                assert seq.num_preemptions > 0 or start + n <= seq.request.media_segments[0].start
            else:
                assert start + n <= tracker.ready_prefix or tracker.complete
        return plan


def rserve(requests, cost, **kw):
    """RServe: streaming admission, Algorithm 1 with C=1 (one item per batch), Algorithm 2."""
    return epd(requests, cost, streaming=True,
               dispatcher=EmbeddingBatchDispatcher(EmbeddingBatchConfig(embedding_batch_tokens=1)), **kw)


def gllm_epd(requests, cost, **kw):
    """gLLM-epd-like: a request is encoded whole (one batch), then admitted."""
    return epd(requests, cost, streaming=False, dispatcher=PerRequestDispatcher(),
               scheduler_cls=ContinuousBatchingScheduler, **kw)


def track(log, worker):
    """(start, end, tokens, batch size) of one track's records, in order."""
    return [(r.start_at, r.end_at, r.num_tokens, r.batch_size) for r in log if r.worker == worker]


def assert_track(log, worker, expected):
    got = track(log, worker)
    assert len(got) == len(expected), got
    for g, e in zip(got, expected):
        assert g[0] == pytest.approx(e[0]) and g[1] == pytest.approx(e[1]), (got, expected)
        assert g[2:] == e[2:], (got, expected)


# ----------------------------------------------------------- Figure 9, hand timelines
# Costs: an LLM step 10 ms + 0.1 ms/token; encoding 100 ms per item (slow encoder,
# prefill of a piece ends before the next item is encoded).
SLOW_ENC = ConstantStepCost(step_s=0.01, per_token_s=1e-4, encode_item_s=0.1)


def test_figure9_case0_text_mm_text_mm():
    """Case 0: Text1 (100), MM1 (200), Text2 (50), MM2 (200).

    encoder:  MM1 [0, .1)           MM2 [.1, .2)
    LLM:      Text1 [0, .02)        MM1+Text2 [.1, .135)     MM2 [.2, .23)
    (Text1 = .01 + 100e-4; MM1+Text2 = .01 + 250e-4; MM2 = .01 + 200e-4.)
    """
    parts = [100, ("image", 200), 50, ("image", 200)]
    res, log, inbox, used = rserve([media_request(0, 0.0, parts, 1)], SLOW_ENC)
    s = res.seqs[0]
    assert s.status == "finished"
    assert_track(log, "encoder0", [(0.0, 0.1, 200, 1), (0.1, 0.2, 200, 1)])
    assert_track(log, "llm0", [(0.0, 0.02, 100, 1), (0.1, 0.135, 250, 1), (0.2, 0.23, 200, 1)])
    assert s.prefill_started_at == 0.0
    assert s.encode_started_at == 0.0
    assert s.encode_finished_at == pytest.approx(0.2)
    assert s.first_token_at == pytest.approx(0.23)
    # MM1's embeddings are freed after the step that computed them, before MM2 lands:
    # at most one item (200 tokens) is ever held.
    assert inbox.buffer.peak == 200 * BYTES_PER_TOKEN
    assert used == [0.0, 0.0, 0.0]
    assert inbox.trackers == {} and inbox.held_bytes == 0

    # gLLM-epd-like: encode both items as one batch [0, .2), then prefill all 550 tokens
    # in one step [.2, .2 + .01 + .055): the first token is 350 tokens x 0.1 ms = 35 ms later.
    res_g, log_g, inbox_g, _ = gllm_epd([media_request(0, 0.0, parts, 1)], SLOW_ENC)
    g = res_g.seqs[0]
    assert_track(log_g, "encoder0", [(0.0, 0.2, 400, 2)])
    assert_track(log_g, "llm0", [(0.2, 0.265, 550, 1)])
    assert g.first_token_at == pytest.approx(0.265)
    assert g.first_token_at - s.first_token_at == pytest.approx(0.035)
    assert g.first_token_at > s.first_token_at
    assert inbox_g.buffer.peak == 400 * BYTES_PER_TOKEN


def test_figure9_case0_fast_encoder_embedding_lands_during_a_step():
    """Case 0 with encoding 25 ms per item: MM2 lands (.05) while MM1+Text2 runs
    [.025, .06), so MM2 is prefilled in the next step [.06, .09)."""
    cost = ConstantStepCost(step_s=0.01, per_token_s=1e-4, encode_item_s=0.025)
    parts = [100, ("image", 200), 50, ("image", 200)]
    res, log, inbox, _ = rserve([media_request(0, 0.0, parts, 1)], cost)
    assert_track(log, "encoder0", [(0.0, 0.025, 200, 1), (0.025, 0.05, 200, 1)])
    assert_track(log, "llm0", [(0.0, 0.02, 100, 1), (0.025, 0.06, 250, 1), (0.06, 0.09, 200, 1)])
    assert res.seqs[0].first_token_at == pytest.approx(0.09)
    assert inbox.buffer.peak == 400 * BYTES_PER_TOKEN  # MM1 still held when MM2 lands
    assert inbox.buffer.used == 0

    res_g, log_g, _, _ = gllm_epd([media_request(0, 0.0, parts, 1)], cost)
    assert_track(log_g, "llm0", [(0.05, 0.115, 550, 1)])
    assert res_g.seqs[0].first_token_at - res.seqs[0].first_token_at == pytest.approx(0.025)


@pytest.mark.parametrize("parts, llm, first_token, gllm_first_token", [
    # Text (100), MM1, MM2: Text [0,.02); MM1 [.1,.13) while MM2 encodes; MM2 [.2,.23).
    ([100, ("image", 200), ("image", 200)],
     [(0.0, 0.02, 100, 1), (0.1, 0.13, 200, 1), (0.2, 0.23, 200, 1)], 0.23, 0.26),
    # MM1, MM2, Text (100): nothing to prefill until MM1 lands; MM1 [.1,.13) while MM2
    # encodes; MM2 + Text [.2,.24).
    ([("image", 200), ("image", 200), 100],
     [(0.1, 0.13, 200, 1), (0.2, 0.24, 300, 1)], 0.24, 0.26),
], ids=["text-mm1-mm2", "mm1-mm2-text"])
def test_figure9_case1_consecutive_items(parts, llm, first_token, gllm_first_token):
    """Case 1: two consecutive MM items; MM1 is prefilled while MM2 is encoded."""
    res, log, inbox, _ = rserve([media_request(0, 0.0, parts, 1)], SLOW_ENC)
    assert_track(log, "encoder0", [(0.0, 0.1, 200, 1), (0.1, 0.2, 200, 1)])
    assert_track(log, "llm0", llm)
    s = res.seqs[0]
    assert s.prefill_started_at == pytest.approx(llm[0][0])
    assert s.first_token_at == pytest.approx(first_token)
    assert inbox.buffer.used == 0 and inbox.trackers == {}

    # gLLM-epd-like: encode [0,.2), one step of 500 tokens [.2, .26).
    res_g, log_g, _, _ = gllm_epd([media_request(0, 0.0, parts, 1)], SLOW_ENC)
    assert_track(log_g, "llm0", [(0.2, 0.26, 500, 1)])
    assert res_g.seqs[0].first_token_at == pytest.approx(gllm_first_token)
    assert res_g.seqs[0].first_token_at > s.first_token_at


def test_second_item_overtaking_the_first_on_the_link_does_not_unlock_the_first():
    """Prompt: text 10, MM1 (1000 tokens), text 5, MM2 (10 tokens), text 5; 50 ms per item
    encode; link 1 MB/s shared by concurrent transfers (processor sharing), 100 B/token.

    MM1 (100 kB) leaves at .05: alone until .1 (50 kB sent). MM2 (1 kB) leaves at .1; both
    get .5 MB/s, MM2 lands at .102, MM1 then has 49 kB left at 1 MB/s: lands at .151.
    MM2 landing first must not make MM1's positions schedulable: the LLM runs text 10
    [0, .011), then nothing until .151, then the remaining 1020 tokens [.151, .263).
    """
    cost = ConstantStepCost(step_s=0.01, per_token_s=1e-4, encode_item_s=0.05)
    slow = LinkSpec(bandwidth_gbs=1e-3, latency_us=0.0)
    res, log, inbox, _ = rserve([media_request(0, 0.0, [10, ("image", 1000), 5, ("image", 10), 5], 1)], cost,
                                link=slow, scheduler_cls=CheckedScheduler)
    assert_track(log, "encoder0", [(0.0, 0.05, 1000, 1), (0.05, 0.1, 10, 1)])
    assert_track(log, "llm0", [(0.0, 0.011, 10, 1), (0.151, 0.263, 1020, 1)])
    assert res.seqs[0].first_token_at == pytest.approx(0.263)
    assert inbox.buffer.peak == 1010 * BYTES_PER_TOKEN
    assert inbox.buffer.used == 0 and inbox.trackers == {}


def test_text_request_is_not_blocked_behind_unready_media_in_simulation():
    """r0 = image (200) + text 50 at t=0; r1 = text 100 at t=1 ms, streaming admission.

    Schedulable tokens: r1 runs at once [.001, .021); r0 [.1, .135) when its image lands.
    Base scheduler: r0 (zero schedulable tokens) blocks r1 until .1; one step of
    350 tokens [.1, .145) carries both."""
    def reqs():
        return [media_request(0, 0.0, [("image", 200), 50], 1), text_request(1, 0.001, 100, 1)]

    res, log, _, _ = rserve(reqs(), SLOW_ENC)
    assert_track(log, "llm0", [(0.001, 0.021, 100, 1), (0.1, 0.135, 250, 1)])
    assert res.seqs[1].first_token_at == pytest.approx(0.021)
    assert res.seqs[0].first_token_at == pytest.approx(0.135)

    res_b, log_b, _, _ = rserve(reqs(), SLOW_ENC, scheduler_cls=ContinuousBatchingScheduler)
    assert_track(log_b, "llm0", [(0.1, 0.145, 350, 2)])
    assert res_b.seqs[1].first_token_at == pytest.approx(0.145)


def mixed_requests(n=80, seed=1):
    """Text and media requests, media anywhere in the prompt, some with decodes."""
    import random

    rng = random.Random(seed)
    out, t = [], 0.0
    for i in range(n):
        t += rng.expovariate(40)
        if rng.randrange(4) == 0:
            out.append(text_request(i, t, rng.randint(20, 300), rng.randint(1, 20)))
            continue
        parts: list = []
        for _ in range(rng.randint(1, 4)):
            if rng.random() < 0.5:
                parts.append(rng.randint(1, 100))
            parts.append(("image", rng.randint(10, 300)))
        if rng.random() < 0.5:
            parts.append(rng.randint(1, 100))
        out.append(media_request(i, t, parts, rng.randint(1, 20)))
    return out


@pytest.mark.parametrize("kw", [{}, {"inter_request": False}, {"num_blocks": 80, "token_budget": 128}],
                         ids=["rserve", "intra", "tight-kv"])
def test_mixed_load_finishes_and_returns_all_memory(kw):
    cost = ConstantStepCost(step_s=0.005, per_token_s=2e-5, encode_item_s=0.01)
    res, log, inbox, _ = rserve(mixed_requests(), cost, scheduler_cls=CheckedScheduler, **kw)
    sched = res.frontend.prefill[0].scheduler
    if "num_blocks" in kw:
        assert sched.num_preemptions > 0  # the KV pool is small enough to force recomputes
    for s in res.seqs:
        assert s.status == "finished" and s.num_generated == s.request.num_output_tokens
        if s.request.media_segments:
            assert s.encode_finished_at <= s.first_token_at
    assert inbox.buffer.used == 0 and inbox.held_bytes == 0 and inbox.trackers == {}
    assert sched.pool.num_free == sched.pool.num_blocks
    # C = 1: one item per encoder batch.
    encodes = [r for r in log if r.kind == "encode"]
    assert len(encodes) == sum(len(s.request.media_segments) for s in res.seqs)
    assert all(r.batch_size == 1 and len(r.request_ids) == 1 for r in encodes)


# ------------------------------------------------- Algorithm 2 on hand-built queues
def make_sched(budget=1000, *, num_blocks=10_000, cls=SchedulableTokenScheduler, **kw):
    return cls(FcfsQueue(), BlockPool(num_blocks, 16), budget, min(budget, 256), 0, media="remote", **kw)


def seqs_of(*requests):
    return [SeqState(r) for r in requests]


def chunks(plan):
    """(request id, tokens, first position) per prefill chunk, in batch order."""
    return [(s.request.request_id, n, start) for s, n, start in plan.chunks]


def run_batch(sched, now=0.0):
    plan = sched.schedule(now)
    sched.complete(plan, now, now, now + 0.01)
    return plan


def queued(sched):
    return [s.request.request_id for s in sched.queue]


def test_budget_exhausted_mid_request_takes_the_rest_and_comes_back_first():
    sched = make_sched(budget=100)
    r0, r1, r2 = seqs_of(text_request(0, 0, 40, 1), text_request(1, 0, 150, 1), text_request(2, 0, 20, 1))
    for s in (r0, r1, r2):
        sched.add(s)
    assert chunks(run_batch(sched)) == [(0, 40, 0), (1, 60, 0)]  # r1 (150) takes the 60 left
    assert queued(sched) == [2]
    # r1 is incomplete: it is walked before the waiting r2, which then takes the rest.
    assert chunks(run_batch(sched)) == [(1, 90, 60), (2, 10, 0)]
    assert chunks(run_batch(sched)) == [(2, 10, 10)]
    assert all(s.status == "finished" for s in (r0, r1, r2))


def test_incomplete_requests_keep_their_order_whatever_order_embeddings_arrive():
    sched = make_sched()
    parts = [50, ("image", 100), 20]
    r0, r1, r2 = seqs_of(*(media_request(i, 0, parts, 1) for i in range(3)))
    for s in (r0, r1, r2):
        sched.add(s)
    assert chunks(run_batch(sched)) == [(0, 50, 0), (1, 50, 0), (2, 50, 0)]  # text before the image
    assert sched.schedule(0.02).is_empty  # no embedding yet: nothing schedulable
    r3 = SeqState(text_request(3, 0.03, 30, 1))
    sched.add(r3)
    sched.media_arrived(r2)  # r2's image lands before r1's; r0's not at all
    sched.media_arrived(r1)
    assert chunks(run_batch(sched, 0.04)) == [(1, 120, 50), (2, 120, 50), (3, 30, 0)]
    assert r0.status == "running" and r0.num_computed == 50
    sched.media_arrived(r0)
    assert chunks(run_batch(sched, 0.05)) == [(0, 120, 50)]
    assert all(s.status == "finished" for s in (r0, r1, r2, r3))


def test_zero_schedulable_requests_are_skipped_keeping_their_place_base_blocks():
    def setup(cls):
        sched = make_sched(cls=cls)
        seqs = seqs_of(media_request(0, 0, [("image", 100), 10], 1), media_request(1, 0, [("image", 100), 10], 1),
                       text_request(2, 0, 30, 1))
        for s in seqs:
            sched.add(s)
        return sched, seqs

    sched, (r0, r1, r2) = setup(SchedulableTokenScheduler)
    assert chunks(run_batch(sched)) == [(2, 30, 0)]
    assert queued(sched) == [0, 1]  # skipped requests are back at the head, in order
    sched.media_arrived(r1)
    assert chunks(run_batch(sched)) == [(1, 110, 0)]
    assert queued(sched) == [0]
    sched.media_arrived(r0)
    assert chunks(run_batch(sched)) == [(0, 110, 0)]

    base, (b0, b1, b2) = setup(ContinuousBatchingScheduler)
    assert base.schedule(0.0).is_empty  # the head (no embedding) blocks the text request
    assert queued(base) == [0, 1, 2]
    base.media_arrived(b1)
    assert base.schedule(0.0).is_empty  # still blocked by r0
    base.media_arrived(b0)
    assert chunks(run_batch(base)) == [(0, 110, 0), (1, 110, 0), (2, 30, 0)]


def test_rserve_intra_puts_one_request_per_batch():
    parts = [50, ("image", 100), 20]

    def setup(inter):
        sched = make_sched(inter_request=inter)
        seqs = seqs_of(media_request(0, 0, parts, 1), text_request(1, 0, 30, 1), text_request(2, 0, 40, 1))
        for s in seqs:
            sched.add(s)
        return sched, seqs

    sched, (r0, r1, r2) = setup(True)
    assert chunks(run_batch(sched)) == [(0, 50, 0), (1, 30, 0), (2, 40, 0)]

    sched, (r0, r1, r2) = setup(False)
    assert chunks(run_batch(sched)) == [(0, 50, 0)]
    assert queued(sched) == [1, 2]
    # r0 waits for its image: it is passed over, and the next request gets the batch alone.
    assert chunks(run_batch(sched)) == [(1, 30, 0)]
    sched.media_arrived(r0)
    assert chunks(run_batch(sched)) == [(0, 120, 50)]  # the running r0 first, r2 waits
    assert chunks(run_batch(sched)) == [(2, 40, 0)]
    assert all(s.status == "finished" for s in (r0, r1, r2))


def test_kv_block_shortage_stops_admission_in_queue_order():
    # 4 blocks of 16 tokens: r0 (40 tokens) takes 3; r1 (40) does not fit; r2 (10) would,
    # but admission is FCFS for memory and stops at r1.
    sched = make_sched(num_blocks=4)
    r0, r1, r2 = seqs_of(text_request(0, 0, 40, 1), text_request(1, 0, 40, 1), text_request(2, 0, 10, 1))
    for s in (r0, r1, r2):
        sched.add(s)
    plan = sched.schedule(0.0)
    assert chunks(plan) == [(0, 40, 0)]
    assert queued(sched) == [1, 2]
    assert sched.pool.num_free == 1
    sched.complete(plan, 0.0, 0.0, 0.01)  # r0 finishes and frees its 3 blocks
    assert sched.pool.num_free == 4
    assert chunks(run_batch(sched)) == [(1, 40, 0), (2, 10, 0)]
    assert sched.pool.num_free == 4


def test_skipped_and_memory_blocked_requests_both_stay_in_order():
    sched = make_sched(num_blocks=4)
    seqs = seqs_of(media_request(0, 0, [("image", 16), 4], 1), text_request(1, 0, 100, 1),
                   text_request(2, 0, 10, 1), text_request(3, 0, 10, 1))
    for s in seqs:
        sched.add(s)
    # r0: no embedding (skipped); r1: 7 blocks > 4 free (stops the walk); r2, r3 never offered.
    assert sched.schedule(0.0).is_empty
    assert queued(sched) == [0, 1, 2, 3]
    assert sched.pool.num_free == 4


# ------------------------------------------------------ Algorithm 1 (encoder batches)
def encode_queue(*requests):
    q = deque()
    for r in requests:
        seq = SeqState(r)
        q.extend(EncodeItem(seq, seg, 0.0) for seg in r.media_segments)
    return q


def batches(dispatcher, queue):
    """Drain ``queue``: per batch, (request id, item tokens...) of its items."""
    out = []
    while queue:
        batch, wake = dispatcher.select(queue, 0.0)
        assert wake is None and batch
        out.append([(it.seq.request.request_id, it.num_llm_tokens) for it in batch])
    return out


def disp(c):
    return EmbeddingBatchDispatcher(EmbeddingBatchConfig(embedding_batch_tokens=c))


ITEMS = [("image", 300), 7, ("image", 300), ("image", 500), 9, ("image", 200), 11]  # text runs in between


@pytest.mark.parametrize("c, expected", [
    (1024, [[300, 300, 500], [200]]),  # 600 < 1024, 1100 >= 1024: encode; the rest is last
    (1, [[300], [300], [500], [200]]),  # every item reaches C alone
    (600, [[300, 300], [500, 200]]),  # >= C, not > C: 600 closes the first batch
    (601, [[300, 300, 500], [200]]),
    (None, [[300, 300, 500, 200]]),  # C = infinity: the whole request
])
def test_algorithm1_batches_of_at_least_c_tokens(c, expected):
    out = batches(disp(c), encode_queue(media_request(0, 0, ITEMS, 1)))
    assert [[n for _, n in b] for b in out] == expected


def test_algorithm1_never_mixes_requests_and_serves_fcfs():
    q = encode_queue(media_request(0, 0, [("image", 300), ("image", 200)], 1),
                     media_request(1, 0, [5, ("image", 400), ("image", 900)], 1),
                     media_request(2, 0, [("image", 100)], 1))
    assert batches(disp(1024), q) == [
        [(0, 300), (0, 200)],  # 500 < C but the request has nothing more: it goes alone
        [(1, 400), (1, 900)],
        [(2, 100)],
    ]
    q = encode_queue(media_request(0, 0, [("image", 300), ("image", 200)], 1),
                     media_request(1, 0, [("image", 400)], 1))
    assert batches(disp(None), q) == [[(0, 300), (0, 200)], [(1, 400)]]


def test_embedding_batch_config_rejects_non_positive_c():
    with pytest.raises(ValueError):
        EmbeddingBatchConfig(embedding_batch_tokens=0)
    assert EmbeddingBatchConfig().embedding_batch_tokens == 1024  # the paper's setting


# ---------------------------------------------------------------- EmbeddingTracker
def tracker_for(parts, bytes_per_token=2.0):
    req = media_request(0, 0, parts, 1)
    return EmbeddingTracker(req.media_segments, req.num_prompt_tokens, bytes_per_token)


def test_tracker_interleaved_text_and_media_out_of_order_arrival():
    # text [0,10), MM1 [10,30), text [30,35), MM2 [35,65), text [65,72)
    t = tracker_for([10, ("image", 20), 5, ("image", 30), 7])
    assert t.num_prompt_tokens == 72
    assert t.ready_prefix == 10 and not t.complete
    assert t.schedulable_tokens(0) == 10
    assert [t.is_ready(p) for p in (0, 9, 10, 29, 30, 34, 35, 64, 65, 71, 72)] == [
        True, True, False, False, True, True, False, False, True, True, False]
    assert t.held_tokens == 0

    assert t.mark_ready([1]) == 0  # MM2 first: nothing joins the leading run
    assert t.ready_prefix == 10  # still stops at MM1's start
    assert t.schedulable_tokens(10) == 0
    assert t.is_ready(35) and not t.is_ready(10)
    assert t.held_tokens == 30 and t.held_bytes == 60.0

    assert t.mark_ready([0]) == 2  # MM1 closes the gap: both join
    assert t.mark_ready([0]) == 0 and t.held_tokens == 50  # a repeat changes nothing
    assert t.complete and t.ready_prefix == 72
    assert t.schedulable_tokens(10) == 62
    assert t.schedulable_tokens(80) == 0


def test_tracker_releases_at_token_granularity_back_to_zero():
    t = tracker_for([10, ("image", 20), 5, ("image", 30), 7])
    t.mark_ready([0, 1])
    assert t.held_tokens == 50
    assert t.release_computed(10) == 0  # text only
    assert t.release_computed(15) == 5  # a chunk ending inside MM1 frees its part
    assert t.held_tokens == 45 and t.held_bytes == 90.0
    assert t.release_computed(15) == 0 and t.release_computed(12) == 0  # nothing twice
    assert t.release_computed(40) == 15 + 5  # rest of MM1, first 5 of MM2
    assert t.held_tokens == 25
    assert t.release_computed(72) == 25
    assert t.held_tokens == 0 and t.held_bytes == 0


def test_tracker_item_arriving_after_the_text_before_it_was_computed():
    t = tracker_for([10, ("image", 20), 5])
    assert t.release_computed(10) == 0
    assert t.mark_ready([0]) == 1
    assert t.held_tokens == 20  # nothing of the item was below the release point
    assert t.release_computed(35) == 20 and t.held_tokens == 0


def test_tracker_media_first_and_text_only():
    t = tracker_for([("image", 8), ("image", 8), 4])
    assert t.ready_prefix == 0 and t.schedulable_tokens(0) == 0
    assert t.mark_ready([0]) == 1 and t.ready_prefix == 8
    text = text_request(1, 0, 12, 1)
    tt = EmbeddingTracker(text.media_segments, text.num_prompt_tokens, 2.0)
    assert tt.complete and tt.ready_prefix == 12 and tt.schedulable_tokens(5) == 7


# ------------------------------------------------------------ end to end (scenarios)
# RServe's evaluation workload (rserve.txt section 4, scenarios/baselines/rserve-mmmu-*): ~2k text
# tokens then four 1024x1024 images.
MMMU = [{"name": "mmmu", "weight": 1, "text_tokens": {"kind": "lognormal", "mean": 2000, "sigma": 0.4},
         "images": {"count": 4, "width": 1024, "height": 1024}, "layout": "text_first"}]


def scenario(tmp_path, name, *, system="rserve", layout="text_first", c="default", admission=None,
             dispatch=None, batching=None, rate=1.0, num_requests=40, seed=0, text_class=False, mix=None):
    """A small qwen2.5-vl-72b scenario on 5 x H100 (E1 + PP4 for the RServe presets), one output token."""
    mix = mix or [{"name": "mm4", "weight": 1, "text_tokens": {"kind": "lognormal", "mean": 1000, "sigma": 0.4},
                   "images": {"count": 4, "width": 1024, "height": 1024}, "layout": layout},
                  {"name": "mm2", "weight": 1, "text_tokens": {"kind": "lognormal", "mean": 500, "sigma": 0.4},
                   "images": {"count": 2, "width": 768, "height": 512}, "layout": layout}]
    if text_class:
        mix.append({"name": "txt", "weight": 0.5, "text_tokens": {"kind": "lognormal", "mean": 800, "sigma": 0.4}})
    dep = {"kind": "e_pd", "max_model_len": 32768}
    if dispatch is not None:
        dep["encoder"] = {"dispatch": dispatch}
    elif c != "default":
        dep["encoder"] = {"dispatch": {"kind": "embedding_batch", "embedding_batch_tokens": c}}
    if admission is not None:
        dep["admission"] = admission
    raw = {"name": name, "seed": seed, "system": system, "model": "qwen2.5-vl-72b",
           "hardware": {"gpu": "h100-sxm-80gb", "count": 5, "interconnect": "nvlink"},
           "deployment": dep,
           "workload": {"num_requests": num_requests, "arrival": {"kind": "poisson", "rate": rate}, "mix": mix,
                        "output_tokens": {"kind": "fixed", "value": 1}}}
    if batching is not None:
        raw["policy"] = {"batching": batching}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return load_scenario(path)


@pytest.mark.parametrize("system", ["rserve", "rserve-intra"])
def test_rserve_run_finishes_everything_and_frees_embedding_memory(tmp_path, system):
    scn, base = scenario(tmp_path, system, system=system, rate=1.5)
    assert scn.deployment.admission == "streaming"
    assert scn.deployment.encoder.dispatch.embedding_batch_tokens == 1024
    assert scn.policy.batching.kind == "schedulable_tokens"
    assert scn.policy.batching.inter_request is (system == "rserve")
    run = run_scenario(scn, base, trace=True)
    sim = run.built.simulation
    assert len(sim.seqs) == 40
    for seq in sim.seqs:
        assert seq.status == "finished"
        assert seq.num_generated == 1
        assert seq.encode_finished_at <= seq.first_token_at
    front = sim.frontend
    # Algorithm 1 with C = 1024, recounted here: items join a batch until it holds >= C tokens.
    expected_batches = 0
    for r in sim.requests:
        tokens = 0
        for seg in r.media_segments:
            tokens += seg.length
            if tokens >= 1024:
                expected_batches += 1
                tokens = 0
        expected_batches += tokens > 0
    assert sum(e.num_batches for e in front.encoders) == expected_batches
    assert sum(e.num_items for e in front.encoders) == sum(len(r.media_segments) for r in sim.requests)
    for inbox in front.inboxes:
        assert inbox.buffer.peak > 0
        assert inbox.buffer.used == 0
        assert inbox.held_bytes == 0
        assert inbox.trackers == {}
    for engine in front.llm_engines:
        assert engine.scheduler.pool.num_free == engine.scheduler.pool.num_blocks
    log = run.built.step_log
    encodes = [r for r in log if r.kind == "encode"]
    assert len(encodes) == expected_batches
    assert all(len(r.request_ids) == 1 for r in encodes)  # Algorithm 1 never mixes requests
    # One output token: LLM batches are prefill-only; count the requests in each micro-batch.
    firsts = [r for r in log if r.worker == "llm0/stage0"]
    assert firsts and all(r.kind == "prefill" for r in firsts)
    most = max(len(r.request_ids) for r in firsts)
    assert most == 1 if system == "rserve-intra" else most > 1


def ttfts(run):
    return run.requests.sort_values("request_id")["ttft_s"].tolist()


def test_c_infinity_with_media_first_prompts_equals_gllm_epd_semantics(tmp_path):
    """With no text before the first item and C = null, streaming admission gains
    nothing: the request has no schedulable token until its single batch lands.
    So TTFTs equal after_encode admission with per-request dispatch (same batching)."""
    common = {"layout": "media_first", "rate": 1.5, "seed": 3, "text_class": True}
    scn_r, base = scenario(tmp_path, "r_inf", c=None, **common)
    assert scn_r.deployment.encoder.dispatch.embedding_batch_tokens is None
    assert scn_r.deployment.admission == "streaming"
    scn_g, _ = scenario(tmp_path, "g_like", admission="after_encode", dispatch={"kind": "per_request"}, **common)
    assert scn_g.policy.batching.kind == "schedulable_tokens"
    r, g = run_scenario(scn_r, base), run_scenario(scn_g, base)
    assert (r.requests["status"] == "finished").all() and (g.requests["status"] == "finished").all()
    assert ttfts(r) == ttfts(g)  # exact, request by request
    # Not vacuous: with C = 1024 the items stream and some requests start earlier.
    scn_c, _ = scenario(tmp_path, "r_1024", **common)
    c = run_scenario(scn_c, base)
    diffs = [a - b for a, b in zip(ttfts(c), ttfts(g))]
    assert any(abs(d) > 1e-9 for d in diffs)
    assert sum(diffs) < 0


def test_rserve_mean_ttft_not_worse_than_gllm_epd_at_moderate_rate(tmp_path):
    # Same batching (schedulable tokens, B = 2048), gLLM-epd admission and dispatch: the
    # overlap of encoding and prefill can only help.
    scn_r, base = scenario(tmp_path, "rserve", rate=1.0)
    scn_l, _ = scenario(tmp_path, "gllm_epd_like", admission="after_encode", dispatch={"kind": "per_request"})
    r, like = run_scenario(scn_r, base), run_scenario(scn_l, base)
    assert len(r.requests) == len(like.requests) == 40
    assert r.summary["ttft_s"]["mean"] <= like.summary["ttft_s"]["mean"]


def test_rserve_beats_the_gllm_epd_system_on_the_papers_workload(tmp_path):
    # The gllm-epd preset (Token Throttling batching) on RServe's MMMU-like workload.
    scn_r, base = scenario(tmp_path, "rserve_mmmu", mix=MMMU, rate=1.0)
    scn_g, _ = scenario(tmp_path, "gllm_epd_mmmu", system="gllm-epd", mix=MMMU, rate=1.0)
    assert scn_g.deployment.admission == "after_encode" and scn_g.policy.batching.kind == "token_throttling"
    r, g = run_scenario(scn_r, base), run_scenario(scn_g, base)
    assert (r.requests["status"] == "finished").all() and (g.requests["status"] == "finished").all()
    assert r.summary["ttft_s"]["mean"] <= g.summary["ttft_s"]["mean"]

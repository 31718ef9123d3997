"""``policy.batching.encode_before_prefill``: a request's media are all encoded before
its first prefill chunk (the sequential encode -> prefill of RServe's baselines);
off, vLLM v1's encoder cache encodes each item with the chunk that reaches it."""

from __future__ import annotations

import pandas as pd
import pytest
import yaml

from lmmsim.engine.kv_cache import BlockPool
from lmmsim.engine.scheduler import ContinuousBatchingScheduler, SeqState
from lmmsim.policies.queueing import FcfsQueue
from lmmsim.results import run_scenario
from lmmsim.scenario import load_scenario

from conftest import assert_user_error, media_request


def _scheduler(on: bool, media: str = "local", encoder_budget: int = 256) -> ContinuousBatchingScheduler:
    return ContinuousBatchingScheduler(FcfsQueue(), BlockPool(10_000, 16), 256, 16, encoder_budget, media=media,
                                       encode_before_prefill=on)


def _three_images(rid: int = 0):
    # 100 text, image, 100 text, image, 100 text, image, 100 text: a 256-token chunk reaches only the first
    return media_request(rid, 0.0, [100, ("image", 200), 100, ("image", 200), 100, ("image", 200), 100], 1)


@pytest.mark.parametrize("on, encoded", [(False, 1), (True, 3)])
def test_local_first_chunk_encodes_every_item_only_with_the_option(on, encoded):
    sched = _scheduler(on)
    seq = SeqState(_three_images())
    sched.add(seq)
    plan = sched.schedule(0.0)
    assert [s for s, _, _ in plan.chunks] == [seq]
    assert len(plan.encodes) == encoded
    assert plan.chunks[0][1] == 256
    if on:  # the whole media set may exceed the budget when it is the step's first encoder work
        assert sum(seg.length for _, seg in plan.encodes) == 600 > sched.encoder_budget


def test_local_second_request_waits_when_the_step_already_encoded():
    sched = _scheduler(True, encoder_budget=700)
    first, second = SeqState(_three_images(0)), SeqState(_three_images(1))
    sched.add(first)
    sched.add(second)
    plan = sched.schedule(0.0)
    # first: 600 encoder tokens of 700; second's 600 do not fit what is left, and it may not exceed the budget
    assert [s for s, _, _ in plan.chunks] == [first]


def test_remote_first_chunk_waits_for_every_embedding():
    for on, expect in ((False, 100 + 200), (True, 0)):
        sched = _scheduler(on, media="remote")
        seq = SeqState(_three_images())
        sched.add(seq)
        sched.media_arrived(seq, 1)
        plan = sched.schedule(0.0)
        assert sum(n for _, n, _ in plan.chunks) == min(expect, 256)
    sched = _scheduler(True, media="remote")
    seq = SeqState(_three_images())
    sched.add(seq)
    sched.media_arrived(seq, 3)
    assert sum(n for _, n, _ in sched.schedule(0.0).chunks) == 256


SCENARIO = {
    "name": "encode-first",
    "seed": 1,
    "model": "qwen2.5-vl-7b",
    "hardware": {"gpu": "h100-sxm-80gb", "count": 2, "interconnect": "nvlink"},
    "deployment": {"kind": "monolithic", "tp": 1, "pp": 1, "max_model_len": 16384},
    "policy": {"batching": {"kind": "chunked_prefill", "token_budget": 512}},
    "workload": {
        "num_requests": 12,
        "arrival": {"kind": "poisson", "rate": 4.0},
        "mix": [{"name": "mm", "weight": 1, "text_tokens": {"kind": "fixed", "value": 1200},
                 "images": {"count": 3, "width": 448, "height": 448}, "layout": "interleaved"}],
        "output_tokens": {"kind": "fixed", "value": 2},
    },
}
PIPELINE = {"kind": "monolithic", "tp": 1, "pp": 2, "chunk_pipelining": True, "max_model_len": 16384}
STREAMING = {"kind": "e_pd", "max_model_len": 16384, "admission": "streaming",
             "encoder": {"workers": 1, "dispatch": {"kind": "embedding_batch", "embedding_batch_tokens": 256}},
             "llm": {"tp": 1, "pp": 1}}


def _run(tmp_path, name: str, deployment: dict, batching: dict) -> pd.DataFrame:
    """Per request, with ``first_step_end``: when the first LLM step holding it ended
    (on the first pipeline stage)."""
    scn = {**SCENARIO, "deployment": deployment, "policy": {"batching": batching}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(scn))
    scenario, base = load_scenario(path)
    out = run_scenario(scenario, base, trace=True)
    df = out.requests.set_index("request_id").sort_index()
    first_end: dict = {}
    for rec in out.built.step_log:
        if rec.kind in ("prefill", "mixed") and rec.worker.split("/")[-1] in ("replica0", "llm0", "stage0"):
            for rid in rec.request_ids:
                first_end.setdefault(rid, rec.end_at)
    return df.assign(first_step_end=pd.Series(first_end))


@pytest.mark.parametrize("deployment, batching", [
    (SCENARIO["deployment"], SCENARIO["policy"]["batching"]),
    (PIPELINE, {"kind": "token_throttling", "token_budget": 512}),
    (STREAMING, {"kind": "schedulable_tokens", "token_budget": 512}),
], ids=["monolithic", "pipeline", "e_pd-streaming"])
def test_prefill_starts_after_all_items_are_encoded_and_off_changes_nothing(tmp_path, deployment, batching):
    plain = _run(tmp_path, "plain", deployment, batching)
    off = _run(tmp_path, "off", deployment, {**batching, "encode_before_prefill": False})
    on = _run(tmp_path, "on", deployment, {**batching, "encode_before_prefill": True})
    pd.testing.assert_frame_equal(plain, off)
    assert on.ttft_s.notna().all() and not on.ttft_s.equals(plain.ttft_s)
    if deployment["kind"] == "e_pd":
        # today: some request starts its prefill before its last item is encoded (the overlap);
        # with the option the first chunk starts once every embedding is there
        assert (plain.prefill_started_at < plain.encode_finished_at).any()
        assert (on.prefill_started_at >= on.encode_finished_at).all()
    else:
        # inside the step: today a later chunk encodes the items it reaches; with the option the
        # first chunk's step encodes every item, before its LLM pass
        assert (plain.encode_finished_at > plain.first_step_end).any()
        assert on.first_step_end.notna().all()
        assert (on.encode_finished_at < on.first_step_end).all()
        assert (on.encode_started_at == on.prefill_started_at).all()


def test_a_bad_value_is_one_line(tmp_path, capsys):
    scn = {**SCENARIO, "policy": {"batching": {"kind": "chunked_prefill", "encode_before_prefill": "maybe"}}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(scn))
    assert_user_error(capsys, ["validate", tmp_path / "s.yaml"], "policy.batching.encode_before_prefill")

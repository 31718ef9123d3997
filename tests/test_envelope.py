"""EAServe's envelope transfer: one embedding transfer per encoder batch and destination."""

from __future__ import annotations

from pathlib import Path

import pytest

from lmmsim.results import run_scenario
from lmmsim.scenario import load_scenario

BASE = Path(__file__).resolve().parent.parent / "scenarios" / "baselines" / "rps-mix-llava72b-dynamo.yaml"


def _run(envelope: bool):
    scn, base = load_scenario(BASE, [
        "workload.num_requests=80", "workload.arrival.rate=20",
        "deployment.encoder.dispatch={kind: fixed, max_items: 8, timeout_s: 0.05}",
        f"deployment.encoder.envelope_transfer={str(envelope).lower()}",
    ])
    run = run_scenario(scn, base, trace=True)
    transfers = [r for r in run.built.step_log if r.worker.startswith("link:encoder")]
    return run, transfers


def test_envelope_sends_one_transfer_per_batch_and_destination():
    plain, plain_transfers = _run(False)
    env, env_transfers = _run(True)
    media = int((plain.requests["num_mm_tokens"] > 0).sum())
    batches = env.summary["deployment"]["pools"]["encoder"]["batches"][0]
    assert len(plain_transfers) == media  # one per request
    assert len(env_transfers) == batches < media  # one prefill worker: one per batch
    # every request still finishes with all its embeddings delivered before its first token
    for run in (plain, env):
        df = run.requests
        assert (df["status"] == "finished").all()
        media_rows = df[df["num_mm_tokens"] > 0]
        assert (media_rows["encode_finished_at"] <= media_rows["first_token_at"]).all()


def test_encoder_call_overhead_delays_each_batch_and_leaves_the_gpu_idle():
    base = ["workload.num_requests=30", "workload.arrival={kind: deterministic, rate: 0.2}",
            "deployment.encoder.dispatch={kind: per_request}"]
    scn, b = load_scenario(BASE, base)
    plain = run_scenario(scn, b)
    scn, b = load_scenario(BASE, [*base, "deployment.encoder.call_overhead_s=0.25"])
    slow = run_scenario(scn, b)
    media = plain.requests["num_mm_tokens"] > 0
    # isolated requests (one every 5 s): each media request's encode span and TTFT grow by exactly 0.25 s
    span = lambda df: (df["encode_finished_at"] - df["encode_started_at"])[media]  # noqa: E731
    assert ((span(slow.requests) - span(plain.requests)).round(9) == 0.25).all()
    assert ((slow.requests["ttft_s"] - plain.requests["ttft_s"])[media].round(9) == 0.25).all()
    # the GPU's busy time does not count the host-side overhead
    enc_gpu = 0
    assert slow.summary["gpu_utilization"]["per_gpu"][enc_gpu] * slow.summary["window_s"] == \
        pytest.approx(plain.summary["gpu_utilization"]["per_gpu"][enc_gpu] * plain.summary["window_s"], rel=1e-9)

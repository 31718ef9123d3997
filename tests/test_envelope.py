"""EAServe's envelope transfer: one embedding transfer per encoder batch and destination."""

from __future__ import annotations

from pathlib import Path

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

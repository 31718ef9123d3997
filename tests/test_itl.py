"""Inter-token latency from the engine steps (lmmsim.metrics.itl), std in every latency
block, and ``lmmsim export vllm`` (lmmsim.vllm_export)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from lmmsim.build import build
from lmmsim.costmodel.constant import ConstantStepCost
from lmmsim.metrics.itl import stable_argsort, token_gaps, token_times
from lmmsim.metrics.summary import latency_stats
from lmmsim.results import run_scenario
from lmmsim.scenario import load_scenario
from lmmsim.vllm_export import vllm_keys

from conftest import assert_user_error, run_cli, simulate, text_request
from test_invariants import DecodeAwareCost, random_requests

ROOT = Path(__file__).resolve().parent.parent


def _scenario(rel: str) -> str:
    """A shipped scenario file: package data (lmmsim/scenarios) or the checkout's scenarios/."""
    for base in (ROOT / "lmmsim" / "scenarios", ROOT / "scenarios"):
        if (base / rel).is_file():
            return str(base / rel)
    raise FileNotFoundError(rel)

#: The keys ``vllm bench serve --save-result`` writes with its defaults (generation task,
#: ``--percentile-metrics ttft,tpot,itl``, ``--metric-percentiles 99``, no ``--goodput``,
#: no ``--save-detailed``), in order. Source: vllm-project/vllm, vllm/benchmarks/serve.py
#: (``main_async``'s result_json + ``benchmark``'s result dict + ``process_one_metric``),
#: commit 009e6d4a1cd6ba3fb2a9fc00f4ec06f5297232a1.
VLLM_DEFAULT_KEYS = [
    "date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts",
    "request_rate", "burstiness", "max_concurrency",
    "duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
    "request_throughput", "request_goodput", "output_throughput", "total_token_throughput",
    "latencies", "queue_times", "max_output_tokens_per_s", "max_concurrent_requests", "rtfx",
    "mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p99_ttft_ms",
    "mean_tpot_ms", "median_tpot_ms", "std_tpot_ms", "p99_tpot_ms",
    "mean_itl_ms", "median_itl_ms", "std_itl_ms", "p99_itl_ms",
]
#: Added by ``--save-detailed`` (same source), between total_token_throughput and
#: max_output_tokens_per_s: input_lens, output_lens, ttfts, itls, latencies, start_times,
#: queue_times, generated_texts, errors.
VLLM_DETAILED = ["input_lens", "output_lens", "ttfts", "itls", "start_times", "generated_texts", "errors"]

# step = 0.01 s + 1 ms per token in the batch
COST = ConstantStepCost(step_s=0.01, per_token_s=0.001)


def _accumulate(start: float, steps: list[float]) -> list[float]:
    """Token times as the engine sums them: ``t = t + dt`` step after step."""
    out, t = [], start
    for dt in steps:
        t = t + dt
        out.append(t)
    return out


def _by_id(result):
    return {s.request.request_id: s for s in result.seqs}


def test_one_request_gaps_are_the_decode_steps_across_a_fast_forward():
    # prefill of 100 tokens: 0.11 s; then 5 decode steps of 0.011 s, applied as one stretch
    reqs = [text_request(0, 0.0, 100, 6)]
    res, log = simulate(reqs, COST, step_log=True)
    assert any(r.kind == "decode_run" and r.batch_size == 5 for r in log)  # fast-forwarded
    seq = res.seqs[0]
    times = token_times(seq)
    assert times.tolist() == [0.11] + _accumulate(0.11, [0.011] * 5)
    assert np.diff(times) == pytest.approx([0.011] * 5, abs=1e-12)
    gaps = token_gaps(res.seqs)
    assert gaps.count == 5
    assert gaps.stats()["max"] == pytest.approx(0.011, abs=1e-12)
    assert gaps.per_request_max[0] == np.diff(times).max()
    stepped, _ = simulate(reqs, COST, fast_forward=False)
    assert token_times(stepped.seqs[0]).tolist() == times.tolist()  # bit for bit


def test_two_requests_mixed_step_then_shared_stretch():
    # A: prefill 0.11; decodes alone at 0.121, 0.132 (B arrives at 0.13: no stretch past it);
    # 0.132-0.193 one mixed step (A's decode + B's 50-token prefill: 0.061 s); then both decode
    # (0.012 s a step) through a fast-forwarded stretch of 4 steps until A ends; B alone 0.011 s.
    reqs = [text_request(0, 0.0, 100, 8), text_request(1, 0.13, 50, 6)]
    res, log = simulate(reqs, COST, step_log=True)
    assert any(r.kind == "decode_run" and r.batch_size == 4 for r in log)
    a, b = (token_times(s) for s in (_by_id(res)[0], _by_id(res)[1]))
    t_mixed = _accumulate(0.11, [0.011, 0.011, 0.061])
    shared = _accumulate(t_mixed[-1], [0.012] * 4)
    assert a.tolist() == [0.11] + t_mixed + shared
    assert b.tolist() == [t_mixed[-1]] + shared + _accumulate(shared[-1], [0.011])
    assert np.diff(a) == pytest.approx([0.011, 0.011, 0.061, 0.012, 0.012, 0.012, 0.012], abs=1e-12)
    assert np.diff(b) == pytest.approx([0.012] * 4 + [0.011], abs=1e-12)
    pooled = np.concatenate([np.diff(a), np.diff(b)])
    got = token_gaps(res.seqs).stats()
    want = latency_stats(pooled)
    assert got.keys() == want.keys() == {"mean", "p50", "p90", "p95", "p99", "max", "std"}
    assert got == pytest.approx(want, abs=1e-15)
    assert got["max"] == pytest.approx(0.061, abs=1e-12)
    stepped, _ = simulate(reqs, COST, fast_forward=False)
    assert [token_times(s).tolist() for s in stepped.seqs] == [a.tolist(), b.tolist()]


@pytest.mark.parametrize("seed", [0, 2, 5])
def test_gaps_with_preemption_match_the_expanded_tokens(seed):
    reqs = random_requests(seed, 60, rate=8.0, max_prompt=1500, max_out=200)
    cost = DecodeAwareCost(step_s=0.004, per_token_s=1e-6, encode_item_s=0.01)
    kw = dict(num_blocks=300, token_budget=1024, encoder_budget=1500, max_running=32, replicas=2)
    jumped, _ = simulate(reqs, cost, fast_forward=True, **kw)
    stepped, _ = simulate(reqs, cost, fast_forward=False, **kw)
    assert sum(s.num_preemptions for s in jumped.seqs) > 0
    expanded = []
    for s_j, s_s in zip(jumped.seqs, stepped.seqs):
        t = token_times(s_j)
        assert t.tolist() == token_times(s_s).tolist()
        assert len(t) == s_j.request.num_output_tokens and t[-1] == s_j.finished_at
        assert (np.diff(t) >= 0).all()
        expanded.append(np.diff(t))
    pooled = np.concatenate(expanded)
    gaps = token_gaps(jumped.seqs)
    assert gaps.count == pooled.size
    assert gaps.stats() == pytest.approx(latency_stats(pooled), rel=1e-12, abs=1e-15)
    assert gaps.stats() == token_gaps(stepped.seqs).stats()


def _check_scenario_gaps(path: str, n: int) -> None:
    scn, base = load_scenario(path, [f"workload.num_requests={n}"])
    result = build(scn, base).simulation.run()
    for s in result.seqs:
        if s.status == "finished":
            t = token_times(s)
            assert len(t) == s.request.num_output_tokens
            assert t[-1] == s.finished_at
            assert (np.diff(t) >= 0).all()


def test_disaggregated_and_pipelined_engines_emit_every_token():
    _check_scenario_gaps(_scenario("text-pd.yaml"), 40)
    _check_scenario_gaps(_scenario("baselines/rps-mix-internvl38b-vllm-pp.yaml"), 40)


@pytest.fixture(scope="module")
def quick_run():
    scn, base = load_scenario(_scenario("quickstart.yaml"), ["workload.num_requests=60"])
    return run_scenario(scn, base)


def test_every_latency_block_has_std_and_itl(quick_run):
    s, df = quick_run.summary, quick_run.requests
    blocks = [s] + list(s["by_modality"].values())
    for block in blocks:
        for name in ("ttft_s", "tpot_s", "e2e_s", "normalized_latency_s_per_token", "itl_s"):
            assert set(block[name]) == {"mean", "p50", "p90", "p95", "p99", "max", "std"}, name
    done = df[df["status"] == "finished"]
    assert s["ttft_s"]["std"] == pytest.approx(float(np.std(done["ttft_s"])))
    assert s["itl_s"]["max"] == pytest.approx(float(done["itl_max_s"].max()))
    assert s["itl_s"]["mean"] == pytest.approx(
        float((done["finished_at"] - done["first_token_at"]).sum() / (done["num_output_tokens"] - 1).sum()))


def test_export_vllm_writes_vllms_keys_in_ms(tmp_path, capsys):
    run_dir = tmp_path / "run"
    code, _, err = run_cli(capsys, "run", _scenario("quickstart.yaml"), "--set",
                           "workload.num_requests=40", "-o", run_dir, "-q")
    assert code == 0, err
    out = tmp_path / "result.json"
    code, _, err = run_cli(capsys, "export", "vllm", run_dir, "-o", out)
    assert code == 0, err
    data = json.loads(out.read_text())
    assert list(data) == VLLM_DEFAULT_KEYS == vllm_keys()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert data["mean_ttft_ms"] == pytest.approx(summary["ttft_s"]["mean"] * 1000)
    assert data["std_tpot_ms"] == pytest.approx(summary["tpot_s"]["std"] * 1000)
    assert data["p99_itl_ms"] == pytest.approx(summary["itl_s"]["p99"] * 1000)
    assert data["median_itl_ms"] == pytest.approx(summary["itl_s"]["p50"] * 1000)
    assert data["completed"] == summary["num_finished"] and data["num_prompts"] == 40
    assert data["request_throughput"] == pytest.approx(summary["throughput"]["requests_per_s"])
    assert len(data["latencies"]) == 40

    detailed = tmp_path / "detailed.json"
    code, _, err = run_cli(capsys, "export", "vllm", run_dir, "-o", detailed, "--save-detailed",
                           "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99")
    assert code == 0, err
    data = json.loads(detailed.read_text())
    assert set(VLLM_DETAILED) <= set(data) and "p50_e2el_ms" in data and "p99_e2el_ms" in data
    assert list(data) == vllm_keys(("ttft", "tpot", "itl", "e2el"), (50.0, 99.0), detailed=True)
    assert data["generated_texts"] == [""] * 40


def test_export_vllm_user_errors(tmp_path, capsys):
    assert_user_error(capsys, ["export", "vllm", tmp_path / "missing", "-o", tmp_path / "r.json"], "not found")
    assert_user_error(capsys, ["export", "vllm", tmp_path, "-o", tmp_path / "r.json"], "not a run folder")


@pytest.mark.parametrize("values", [
    np.round(np.random.default_rng(3).random(5000), 2),  # many runs of equal values
    np.random.default_rng(4).random(5000),  # none
    np.concatenate([np.random.default_rng(5).random(3000), np.round(np.random.default_rng(6).random(300), 1)]),  # a few
    np.array([2.0, 2.0, 1.0, 3.0, 0.5, 3.0, 3.0]),  # runs at both ends of the sorted order
    np.array([1.0, -0.0, 0.0, 1.0, 0.0, 2.0]),  # -0.0 equals 0.0: index order among them
    np.array([0.5, np.nan, 0.5, np.nan, 0.1]),
    np.array([]),
])
def test_stable_argsort_is_numpys_stable_sort(values):
    assert np.array_equal(stable_argsort(values), np.argsort(values, kind="stable"))

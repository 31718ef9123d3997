"""bench/moe_public_result.py: the published numbers, the scenarios that restate their setup,
and the vLLM-bench definitions the comparison uses."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from lmmsim.results import run_scenario
from lmmsim.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent


def _bench():
    name = "moe_public_result"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses resolve their module while the class is built
        spec.loader.exec_module(module)
    return sys.modules[name]


BENCH = _bench()
RESULTS = {r.key: r for r in BENCH.RESULTS}


@pytest.mark.parametrize("key", sorted(RESULTS))
def test_published_numbers_are_self_consistent(key):
    """The transcribed output agrees with itself: throughputs = token totals / duration."""
    r = RESULTS[key]
    pub, stated = r.published, r.stated
    duration = pub["duration_s"]
    assert pub["output_throughput"] == pytest.approx(stated["total_output_tokens"] / duration, rel=0.005)
    assert pub["total_throughput"] == pytest.approx(
        (stated["total_input_tokens"] + stated["total_output_tokens"]) / duration, rel=0.005)
    assert pub["request_throughput"] == pytest.approx(stated["num_requests"] / duration, abs=0.006)
    assert set(pub) <= {k for k, _, _ in BENCH.METRICS}


@pytest.mark.parametrize("key", sorted(RESULTS))
def test_scenario_restates_the_source(key):
    r = RESULTS[key]
    scn, _ = load_scenario(str(ROOT / r.scenario), [])
    s, dep, wl = r.stated, scn.deployment, scn.workload
    assert (scn.model, scn.hardware.gpu, scn.hardware.count) == (s["model"], s["gpu"], s["count"])
    assert (dep.tp, dep.ep, dep.dtype) == (s["tp"], s["ep"], s["dtype"])
    assert wl.num_requests == s["num_requests"]
    prompt, output = wl.mix[0].text_tokens.value, wl.output_tokens.value
    # Fixed lengths whose totals are the source's totals (to the rounding of a per-request mean)
    assert prompt * wl.num_requests == pytest.approx(s["total_input_tokens"], rel=0.001)
    assert output * wl.num_requests == pytest.approx(s["total_output_tokens"], rel=0.001)
    if "concurrency" in s:
        assert (wl.arrival.kind, wl.arrival.concurrency, wl.arrival.think_time_s) == ("closed_loop", s["concurrency"], 0)
    # vLLM's `vllm serve` defaults on an H100 (cited in the scenario file)
    assert (scn.policy.batching.token_budget, scn.policy.batching.max_running) == (8192, 1024)


def test_measure_follows_vllm_bench_definitions():
    """Duration from the first send to the last token; TPOT per request over output - 1 tokens."""
    r = RESULTS["qwen3-30b-a3b"]
    overrides = ["workload.num_requests=6", "workload.arrival.concurrency=3",
                 "workload.mix.0.text_tokens.value=300", "workload.output_tokens.value=20"]
    scn, base = load_scenario(str(ROOT / r.scenario), overrides)
    run = run_scenario(scn, base)
    m = BENCH.measure(run)
    df = run.requests
    assert (df["status"] == "finished").all()
    duration = df["finished_at"].max() - df["arrived_at"].min()
    assert m["duration_s"] == pytest.approx(duration)
    assert m["output_throughput"] == pytest.approx(6 * 20 / duration)
    per_request = (df["finished_at"] - df["first_token_at"]) / 19
    assert m["mean_tpot_ms"] == pytest.approx(per_request.mean() * 1e3)
    assert m["median_ttft_ms"] == pytest.approx((df["first_token_at"] - df["arrived_at"]).median() * 1e3)
    # ITL pools every gap: its mean is the mean TPOT when all requests have the same length
    assert m["mean_itl_ms"] == pytest.approx(m["mean_tpot_ms"], rel=1e-6)


def test_verdict_states_the_distance():
    r = RESULTS["glm45v"]
    near = {k: v * 1.1 for k, v in r.published.items()}
    far = {k: v * 2.0 for k, v in r.published.items()}
    assert "within 25%" in BENCH.verdict_for(r, near, [("a", "", near)])
    text = BENCH.verdict_for(r, far, [("a", "", far), ("b", "", near)])
    assert "off by 2.0x" in text and "a documented variant reaches" in text


def test_verdict_reach_needs_a_variant_inside_the_band():
    """Variants at 0.7x and 1.3x straddle 0.8-1.25x without reaching it."""
    r = RESULTS["glm45v"]
    base = {k: v * 2.0 for k, v in r.published.items()}
    low, high = ({k: v * f for k, v in r.published.items()} for f in (0.7, 1.3))
    text = BENCH.verdict_for(r, base, [("a", "", base), ("low", "", low), ("high", "", high)])
    assert "no documented variant reaches" in text and "a possible cause" not in text


def test_same_compares_the_printed_numbers():
    a = {k: 100.0 for k in BENCH.HEADLINE}
    assert BENCH.same(a, {k: 100.0 + 1e-9 for k in BENCH.HEADLINE})
    assert not BENCH.same(a, {k: 100.02 for k in BENCH.HEADLINE})

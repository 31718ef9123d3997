"""Token Throttling's running count of the waiting queue's pending prefill tokens equals the sum
it replaced, at every step of overloaded runs (FCFS, RPS-Serve's priority walk with preemption,
RServe's schedulable-token walk)."""

from __future__ import annotations

import pytest

from lmmsim.engine.token_throttle import TokenThrottle


@pytest.mark.parametrize("overrides", [
    {"system": "gllm"},
    {"system": "gllm", "policy.queue.kind": "rps", "policy.batching.token_budget": 1024},
    {"system": "rserve", "policy.batching.token_throttling": True},
])
def test_the_running_count_equals_the_queue_sum(monkeypatch, overrides):
    from lmmsim.api import run

    checked = []
    plain = TokenThrottle._throttled_prefill_tokens

    def checking(self):
        summed = sum(s.num_tokens - s.num_scheduled for s in self.queue)
        assert self._waiting_pending == summed
        checked.append(summed)
        return plain(self)

    monkeypatch.setattr(TokenThrottle, "_throttled_prefill_tokens", checking)
    scenario = {
        "name": "throttle", "seed": 3, "model": "qwen2.5-vl-7b", "hardware": {"gpu": "h100-sxm-80gb", "count": 4},
        "workload": {"num_requests": 120, "arrival": {"kind": "poisson", "rate": 40.0},
                     "mix": [{"name": "text", "weight": 0.7, "text_tokens": {"kind": "uniform", "low": 200, "high": 3000}},
                             {"name": "image", "weight": 0.3, "text_tokens": {"kind": "fixed", "value": 50},
                              "images": {"count": 1, "width": 896, "height": 896}}],
                     "output_tokens": {"kind": "uniform", "low": 20, "high": 200}},
    }
    result = run(scenario, overrides)
    assert result.summary["num_finished"] == 120
    assert checked and max(checked) > 0  # the queue was not empty: the check saw an overload

"""Openness: a plugin adds a batching scheduler, an offload router, a system preset and a
queue subclass through the registries alone, and scenarios select them by ``kind:`` /
``system:`` -- no edit to lmmsim/ (issue 15 item 6)."""

from __future__ import annotations

import itertools
from typing import Literal

import pytest
import yaml

from lmmsim import policies, systems
from lmmsim.engine.scheduler import ContinuousBatchingScheduler
from lmmsim.policies import registry
from lmmsim.policies.batching import ChunkedPrefillConfig, SchedulerChoice
from lmmsim.policies.rps_queue import RpsQueue, RpsQueueConfig
from lmmsim.results import run_scenario
from lmmsim.scenario import validate_scenario

_versions = itertools.count(10**9, 10**6)  # far apart: each test registers a few, bumping the version


@pytest.fixture
def plugin_space(monkeypatch):
    """Registries as they are now; what a test registers is gone after it."""
    monkeypatch.setattr(registry, "_REGISTRY", {role: dict(t) for role, t in registry._REGISTRY.items()})
    monkeypatch.setattr(registry, "_version", next(_versions))
    monkeypatch.setattr(systems, "_SYSTEMS", dict(systems._SYSTEMS))


# ------------------------------------------------------------------ the plugin
class HalfBudgetConfig(ChunkedPrefillConfig):
    """Chunked prefill whose prefill chunks use at most half the token budget."""

    kind: Literal["half_budget"] = "half_budget"


class HalfBudgetScheduler(ContinuousBatchingScheduler):
    def __init__(self, *args, token_budget, **kwargs):
        super().__init__(*args, token_budget=max(1, token_budget // 2), **kwargs)


class TaggedRpsConfig(RpsQueueConfig):
    kind: Literal["rps_tagged"] = "rps_tagged"


def install_plugin() -> None:
    policies.register("batching", HalfBudgetConfig)(
        lambda config, queue=None: SchedulerChoice(HalfBudgetScheduler))
    policies.register("queue", TaggedRpsConfig)(lambda config, **ctx: RpsQueue(config, **ctx))
    systems.register_system(systems.SystemPreset(
        name="half-budget-vllm", summary="vLLM TP1 with the half-budget scheduler (a test plugin)",
        reference="tests/test_plugins.py",
        defaults=lambda n: {"deployment": {"kind": "monolithic", "replicas": n, "tp": 1},
                            "policy": {"batching": {"kind": "half_budget", "token_budget": 1024}}}))


TEXT = """
model: qwen2.5-vl-7b
hardware: {gpu: h100-sxm-80gb, count: 1, cost_model: roofline}
deployment: {max_model_len: 8192}
workload:
  num_requests: 12
  arrival: {kind: poisson, rate: 20}
  mix: [{name: t, weight: 1, text_tokens: {kind: fixed, value: 1500}}]
  output_tokens: {kind: fixed, value: 4}
"""


def _widest_prefill(run) -> int:
    return max(r.num_tokens for r in run.built.step_log if r.kind in ("prefill", "mixed"))


def test_plugin_scheduler_and_system_run_from_yaml(plugin_space, tmp_path):
    install_plugin()
    base = yaml.safe_load(TEXT)
    plugin = run_scenario(validate_scenario({**base, "system": "half-budget-vllm"}), tmp_path, trace=True)
    assert plugin.requests["status"].eq("finished").all()
    assert plugin.built.scenario.policy.batching.kind == "half_budget"
    assert _widest_prefill(plugin) <= 512
    builtin = run_scenario(validate_scenario({**base, "policy": {"batching": {"token_budget": 1024}}}), tmp_path,
                           trace=True)
    assert _widest_prefill(builtin) > 512  # the plugin, not the default, made the chunks small


PLUGIN_MODULE = """
from typing import Literal

from lmmsim import policies
from lmmsim.policies.offload import DeficitOffloadConfig

SEEN = []


class LeastLoadedOffloadConfig(DeficitOffloadConfig):
    kind: Literal["least_loaded_local"] = "least_loaded_local"


class LeastLoadedOffload:
    \"\"\"Local prefill unless a remote worker has less outstanding work than the local one.\"\"\"

    def route(self, request=None, workers=None) -> bool:
        remote, local = workers.remote_loads, workers.local_load
        SEEN.append((request.request_id, remote, local))
        return min(remote) < local


policies.register("offload", LeastLoadedOffloadConfig)(lambda config: LeastLoadedOffload())
"""

EASERVE = """
system: easerve
model: llava-v1.6-34b
hardware: {gpu: rtx-6000-ada, count: 8, interconnect: pcie}
deployment: {max_model_len: 8192, local_prefill: {offload: {kind: least_loaded_local}}}
workload:
  num_requests: 60
  arrival: {kind: poisson, rate: 2.5}
  mix: [{name: image, weight: 1, text_tokens: {kind: fixed, value: 100}, images: {count: 1, width: 1024, height: 1024}}]
  output_tokens: {kind: fixed, value: 32}
"""

DRIVER = """
import json, sys
import yaml
from lmmsim.results import run_scenario
from lmmsim.scenario import validate_scenario
import lmmsim_test_plugin as plugin

run = run_scenario(validate_scenario(yaml.safe_load(open(sys.argv[1]))), ".")
print(json.dumps({"status": sorted(set(run.requests["status"])), "seen": plugin.SEEN}))
"""


def test_entry_point_offload_router_reads_worker_loads(tmp_path):
    """A package installed with an ``lmmsim.policies`` entry point (a dist-info on the path,
    in a fresh interpreter) adds an offload router that reads the workers' loads."""
    import json
    import subprocess
    import sys

    (tmp_path / "lmmsim_test_plugin.py").write_text(PLUGIN_MODULE)
    dist = tmp_path / "lmmsim_test_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: lmmsim-test-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[lmmsim.policies]\ntest_plugin = lmmsim_test_plugin\n")
    (tmp_path / "s.yaml").write_text(EASERVE)
    (tmp_path / "driver.py").write_text(DRIVER)
    env = {**__import__("os").environ, "PYTHONPATH": str(tmp_path)}
    out = subprocess.run([sys.executable, "driver.py", "s.yaml"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["status"] == ["finished"]
    seen = result["seen"]
    assert len(seen) == 60
    assert any(local > 0 for _, _, local in seen) and any(max(remote) > 0 for _, remote, _ in seen)
    assert {min(remote) < local for _, remote, local in seen} == {True, False}  # both ways were taken


def test_registered_rps_queue_subclass_gets_the_classifier(plugin_space, tmp_path):
    install_plugin()
    raw = {**yaml.safe_load(TEXT), "system": "rps-serve",
           "policy": {"queue": {"kind": "rps_tagged", "classifier": "kmeans", "num_classes": 2,
                                "profile_requests": 6}}}
    run = run_scenario(validate_scenario(raw), tmp_path)
    assert run.requests["status"].eq("finished").all()
    assert run.built.admission is not None and run.built.admission.report["classifier"] == "kmeans"


def test_a_scoring_queue_with_schedulable_tokens_is_one_config_error(plugin_space, tmp_path):
    from lmmsim.errors import UserError

    install_plugin()
    raw = {**yaml.safe_load(TEXT), "system": "rps-serve",
           "policy": {"queue": {"kind": "rps_tagged", "classifier": "naive", "num_classes": 3, "priority": "edf"},
                      "batching": {"kind": "schedulable_tokens", "token_budget": 1024}}}
    raw["slo"] = {"ttft_s": 1.0}
    with pytest.raises(UserError, match="policy.queue.kind"):
        run_scenario(validate_scenario(raw), tmp_path)


def test_a_scoring_queue_plugin_on_schedulable_tokens_is_one_config_error(plugin_space, tmp_path):
    """The scheduler declares what it needs of the queue: RServe's schedulable tokens take
    requests in arrival order, so a plugin queue that scores requests is refused in one line."""
    from lmmsim.errors import UserError
    from lmmsim.policies.queueing import FcfsConfig, FcfsQueue

    class ScoredConfig(FcfsConfig):
        kind: Literal["scored_fifo"] = "scored_fifo"

    class ScoredQueue(FcfsQueue):
        def sort_key(self, seq):
            return (seq.request.arrived_at,)

    policies.register("queue", ScoredConfig)(lambda config: ScoredQueue())
    raw = {**yaml.safe_load(TEXT), "system": "rserve",
           "policy": {"queue": {"kind": "scored_fifo"}, "batching": {"kind": "schedulable_tokens"}}}
    raw["hardware"]["count"] = 3
    with pytest.raises(UserError, match="policy.batching.kind") as err:
        run_scenario(validate_scenario(raw), tmp_path)
    assert "arrival order" in str(err.value)

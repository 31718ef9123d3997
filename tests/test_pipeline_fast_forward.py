"""Pipeline fast-forward (lmmsim.engine.pipeline_ff): running the engine's own events ahead
of the clock must give the timeline stepping gives, bit for bit, and must actually run."""

from __future__ import annotations

import pandas as pd
import pytest

import lmmsim.engine.pipeline_ff as pipeline_ff
from lmmsim.results import run_scenario
from lmmsim.scenario import load_scenario

BASE = "scenarios/baselines/rps-mix-internvl38b-{}.yaml"

CASES = {
    # vanilla PP4, chunked prefill, FCFS
    "vllm-pp": ("vllm-pp", []),
    # CPP + Token Throttling (gLLM), a KV cache small enough to preempt
    "gllm-small-kv": ("gllm", ["deployment.gpu_memory_utilization=0.55"]),
    # PP2 with four slots' worth of load: empty slots cycle through stage 0
    "gllm-pp2-light": ("gllm", ["deployment.pp=2", "hardware.count=2", "workload.arrival.rate=0.5"]),
    # vanilla PP at a light load: empty slots in stage 0's line with no notify as batches leave it
    "vllm-pp-vanilla-light": ("vllm-pp", ["deployment.chunk_pipelining=false", "workload.arrival.rate=0.5"]),
    # encoders apart, LLM pipeline (e_pd): embeddings may still be coming while it decodes
    "gllm-epd": ("gllm-epd", []),
    # a horizon that cuts the run while batches are in flight
    "vllm-pp-horizon": ("vllm-pp", ["sim.horizon_s=60"]),
}


def _run(system: str, overrides: list[str], fast_forward: bool):
    scn, base = load_scenario(BASE.format(system), [*overrides, "workload.num_requests=120",
                                                    f"sim.fast_forward={str(fast_forward).lower()}"])
    return run_scenario(scn, base)


@pytest.mark.parametrize("case", sorted(CASES))
def test_pipeline_fast_forward_equals_stepping(case):
    system, overrides = CASES[case]
    stepped = _run(system, overrides, False)
    ahead = _run(system, overrides, True)
    pd.testing.assert_frame_equal(ahead.requests, stepped.requests, check_exact=True)
    for key in ("sim_steps", "num_preemptions", "sim_end_at_s", "gpu_utilization", "ttft_s", "itl_s"):
        assert ahead.summary.get(key) == stepped.summary.get(key), key
    # it ran ahead: fewer simulation events for the same steps
    assert ahead.summary["sim_events"] < 0.7 * stepped.summary["sim_events"]


def test_pipeline_fast_forward_is_checked(monkeypatch):
    """A run ahead that forgot one of a slot's steps is caught by the comparison."""
    original = pipeline_ff.Ahead.commit

    def forgetful(self):
        for ends in self.ends:
            if ends:
                ends.pop()  # as if its last step had not run
                break
        original(self)

    monkeypatch.setattr(pipeline_ff.Ahead, "commit", forgetful)
    stepped = _run("vllm-pp", [], False)
    try:
        ahead = _run("vllm-pp", [], True)
    except AssertionError as err:  # the commit's own guard: a finish inside a run ahead
        assert "finished a request" in str(err)
    else:
        assert not ahead.requests.equals(stepped.requests)


def _awaiting_spy(monkeypatch, answer=None):
    """Record, at each e_pd run ahead, whether a request routed to a pipeline still waited for
    its embeddings (``answer``: what the outside barrier returns instead of the real one)."""
    from lmmsim.engine.disaggregation import DisaggregatedFrontend

    frontends, seen = [], []
    init, first = DisaggregatedFrontend.__init__, pipeline_ff.next_outside_event

    def keep(self, *args, **kwargs):
        init(self, *args, **kwargs)
        frontends.append(self)

    def spy(env):
        seen.append(any(box.num_awaiting for box in frontends[-1].inboxes))
        return first(env) if answer is None else answer

    monkeypatch.setattr(DisaggregatedFrontend, "__init__", keep)
    monkeypatch.setattr(pipeline_ff, "next_outside_event", spy)
    return seen


def test_epd_pipeline_runs_ahead_while_embeddings_are_coming(monkeypatch):
    """An e_pd pipeline runs ahead even while embeddings for it are on their way, up to the next
    event that is not its own: the timeline is stepping's, bit for bit."""
    seen = _awaiting_spy(monkeypatch)
    ahead = _run("gllm-epd", [], True)
    monkeypatch.undo()
    stepped = _run("gllm-epd", [], False)
    pd.testing.assert_frame_equal(ahead.requests, stepped.requests, check_exact=True)
    assert sum(seen) >= 10, "no run ahead began while a request awaited its embeddings"


def test_epd_run_ahead_needs_the_outside_barrier(monkeypatch):
    """Without the stop at the next outside event, a run ahead overtakes embeddings that arrive
    meanwhile, and the comparison sees it."""
    _awaiting_spy(monkeypatch, answer=float("inf"))
    try:
        ahead = _run("gllm-epd", [], True)
    except AssertionError:
        return  # a guard of the run ahead caught it
    monkeypatch.undo()
    stepped = _run("gllm-epd", [], False)
    assert not ahead.requests.equals(stepped.requests)


@pytest.mark.parametrize("case", ["gllm-small-kv", "gllm-epd", "vllm-pp-vanilla-light"])
def test_run_ahead_from_a_quiet_grant(monkeypatch, case):
    """The first grant after an engine turns quiet starts a run ahead itself (run_ahead_from_grant):
    it is taken, its timeline is stepping's, and a run from it that prices the slot's batches at
    another context is caught."""
    system, overrides = CASES[case]
    started = []
    real = pipeline_ff.run_ahead_from_grant

    def spy(engine, slot):
        ran = real(engine, slot)
        started.append(ran)
        return ran

    import lmmsim.engine.pipeline as pipeline

    monkeypatch.setattr(pipeline, "run_ahead_from_grant", spy)
    ahead = _run(system, overrides, True)
    stepped = _run(system, overrides, False)
    pd.testing.assert_frame_equal(ahead.requests, stepped.requests, check_exact=True)
    assert sum(started) >= 10, "no run ahead began at a grant"

    def mispriced(engine, slot):
        ahead = pipeline_ff._runner(engine)
        if not ahead.fits(slot):
            return False
        ahead.ctx0[slot] += 4096
        pipeline_ff._run(engine, ahead, ahead.granted, slot)
        return True

    monkeypatch.setattr(pipeline, "run_ahead_from_grant", mispriced)
    broken = _run(system, overrides, True)
    assert not broken.requests.equals(stepped.requests)


def test_run_aheads_leave_no_cyclic_garbage():
    """Run-aheads make no garbage for the cyclic collector: an engine keeps one set of run-ahead
    handlers (pipeline_ff.Ahead) for all of them. Thousands of run-aheads' objects left in cycles
    once made every young collection walk them."""
    import gc

    gc.collect()
    gc.disable()
    try:
        run = _run("gllm", [], True)
        assert run.summary["sim_events"] > 0
        engines = [e for e in run.built.simulation.frontend.workers if hasattr(e, "_runner")]
        made = [o for o in gc.get_objects() if type(o) is pipeline_ff.Ahead]
    finally:
        gc.enable()
    assert len(engines) == 1 and made == [engines[0]._runner]


def test_steady_loop_moves_empty_slots_as_one_block(monkeypatch):
    """With slots that have no members, the steady loop still takes the steps (the empty slots
    cycle through stage 0 as one block), in every place the block can be: waiting on the change
    signal and in stage 0's line. Results are stepping's (the case above)."""
    import lmmsim.engine.pipeline_steady as steady

    taken, places = [], set()
    run, read = steady.run_steady, steady._Block.read.__func__

    def spy(engine, ahead, queue, barrier):
        done = run(engine, ahead, queue, barrier)
        taken.append((not all(ahead.size), done))
        return done

    def read_spy(cls, *args):
        block = read(cls, *args)
        if block:
            places.add(block.waits)
        return block

    monkeypatch.setattr(pipeline_ff, "run_steady", spy)
    monkeypatch.setattr(steady._Block, "read", classmethod(read_spy))
    for case in ("gllm-pp2-light", "vllm-pp-vanilla-light"):
        _run(*CASES[case], True)
    assert sum(done for empty, done in taken if empty) > 1000, "the steady loop declined the empty slots"
    assert places == {True, False}


def test_engine_events_run_from_its_own_queue(monkeypatch):
    """With fast-forward the engine's events -- prefill batches with the scheduler's walk
    included -- run from its own queue, merged with the simulation's by key (pipeline_ff.EngineQueue):
    the simulation sees a wake per stretch of them, and the timeline is stepping's (the cases above,
    with preemptions: gllm-small-kv)."""
    from lmmsim.engine.pipeline import PipelineEngine

    granted, prefill_grants = PipelineEngine._granted, []

    def spy(self, slot):
        if self.scheduler.prefilling or len(self.scheduler.queue):
            prefill_grants.append(self._q.busy)
        granted(self, slot)

    monkeypatch.setattr(PipelineEngine, "_granted", spy)
    run = _run(*CASES["gllm-small-kv"], True)
    assert prefill_grants and all(prefill_grants)
    assert run.summary["sim_events"] < len(prefill_grants) / 2, "about an event per engine event"


def test_finishing_completions_inside_a_run_ahead_keep_the_order_of_ends(monkeypatch, tmp_path):
    """A completion that finishes a request is completed inside the run ahead when nothing else in
    the simulation comes first (pipeline_ff._finish_inline). In a fleet of pipelines the other
    replicas' events interleave: requests streamed to disk (``sim.keep_requests: false``) are
    written in the order they ended, and that order is stepping's, row for row."""
    calls = []
    finish = pipeline_ff._finish_inline

    def spy(*args):
        outcome = finish(*args)
        calls.append(outcome)
        return outcome

    monkeypatch.setattr(pipeline_ff, "_finish_inline", spy)
    overrides = ["deployment.replicas=2", "hardware.count=8", "workload.arrival.rate=3.0", "sim.keep_requests=false",
                 "workload.num_requests=200"]
    files = []
    for ff in (False, True):
        scn, base = load_scenario(BASE.format("vllm-pp"), [*overrides, f"sim.fast_forward={str(ff).lower()}"])
        run = run_scenario(scn, base, spill_near=tmp_path)
        files.append(pd.read_parquet(run.requests_path))
    pd.testing.assert_frame_equal(files[1], files[0], check_exact=True)
    assert calls.count(True) > 20, "no request finished inside a run ahead"
    assert None in calls, "no run ahead met another replica's event before a finish"


@pytest.mark.parametrize("extra", [["workload.arrival.think_time_s=0"],
                                   ["workload.arrival.think_time_s=0", "deployment.replicas=2", "hardware.count=8"]])
def test_closed_loop_pipeline_equals_stepping(extra):
    """A closed loop sends the next request from inside a completion (think time 0: at that very
    instant), so work reaches a pipeline from within its own events: the merged queue must still
    give stepping's timeline, one replica or two."""
    overrides = ["system=gllm", "model=internvl3.5-38b", "hardware.gpu=h100-96gb", "hardware.count=4",
                 "deployment.pp=4", "workload.num_requests=150", *extra]
    runs = []
    for ff in ("true", "false"):
        scn, base = load_scenario("scenarios/closed-loop.yaml", [*overrides, f"sim.fast_forward={ff}"])
        runs.append(run_scenario(scn, base))
    pd.testing.assert_frame_equal(runs[0].requests, runs[1].requests, check_exact=True)
    assert runs[0].summary["sim_events"] < runs[1].summary["sim_events"]

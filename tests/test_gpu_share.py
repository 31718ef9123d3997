"""Two workers on one GPU: exclusive, time-sliced and SM-split sharing."""

from __future__ import annotations

from itertools import pairwise

import pytest

from lmmsim.engine.clock import SimEnvironment
from lmmsim.engine.gpu_share import GpuRun, SharedGpu, SmShareCurve


def drive(gpu: SharedGpu, jobs: dict[str, list[tuple[float, float, float]]]) -> dict[str, list[GpuRun]]:
    """Each worker submits its jobs ``(not_before, compute_s, memory_s)`` in order,
    one at a time (waiting for ``not_before`` if its previous run ended earlier);
    runs the simulation to the end and returns every worker's GpuRun records."""
    env = gpu.env
    out: dict[str, list[GpuRun]] = {w: [] for w in jobs}

    def worker(name, todo):
        for not_before, c, m in todo:
            if env.now < not_before:
                yield env.timeout_at(not_before, late=False)
            out[name].append((yield gpu.run(name, c, m)))

    for name, todo in jobs.items():
        env.process(worker(name, todo))
    env.run()
    return out


# --------------------------------------------------------------------- curve
def test_curve_endpoints_monotone_saturating():
    curve = SmShareCurve()
    assert curve.k == 0.25
    assert curve.speed(1.0) == 1.0 and curve.stretch(1.0) == 1.0
    xs = [i / 100 for i in range(1, 101)]
    g = [curve.speed(x) for x in xs]
    assert all(a < b for a, b in pairwise(g))  # monotone increasing
    steps = [b - a for a, b in pairwise(g)]
    assert all(a > b for a, b in pairwise(steps))  # concave: diminishing returns
    assert all(gx >= x for gx, x in zip(g, xs))  # never worse than linear scaling
    assert curve.speed(0.5) == pytest.approx(1.25 * 0.5 / 0.75)
    for x in xs:
        assert curve.stretch(x) * curve.speed(x) == pytest.approx(1.0, rel=1e-15)


def test_curve_k_controls_saturation():
    early, late = SmShareCurve(k=0.01), SmShareCurve(k=100.0)
    assert early.speed(0.1) > 0.9  # saturates early
    assert late.speed(0.1) == pytest.approx(0.1, rel=0.01)  # nearly linear
    assert early.speed(0.3) > SmShareCurve().speed(0.3) > late.speed(0.3)
    for bad in (0.0, -0.1, 1.01):
        with pytest.raises(ValueError):
            SmShareCurve().speed(bad)
        with pytest.raises(ValueError):
            SmShareCurve().stretch(bad)
    for bad_k in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError):
            SmShareCurve(k=bad_k)


# ----------------------------------------------------------------- exclusive
def test_exclusive_is_exactly_compute_plus_memory():
    env = SimEnvironment()
    gpu = SharedGpu(env, 0, "exclusive")
    jobs = [(0.1, 0.0123, 0.0456), (0.0, 1e-5, 0.3), (0.7, 0.1, 0.0), (0.0, 0.0, 0.0)]
    runs = drive(gpu, {"llm": jobs})["llm"]
    t = 0.1
    for run, (not_before, c, m) in zip(runs, jobs):
        t = max(t, not_before)
        assert run.started_at == run.submitted_at == t
        assert run.finished_at == t + (c + m)  # bit-identical
        t = run.finished_at
    assert gpu.num_runs == 4
    busy = sum(r.finished_at - r.started_at for r in runs)
    assert gpu.busy_s == pytest.approx(busy) and gpu.worker_busy_s("llm") == pytest.approx(busy)


def test_exclusive_rejects_a_second_worker_and_overlapping_runs():
    env = SimEnvironment()
    gpu = SharedGpu(env, 0, "exclusive")
    gpu.run("enc", 1.0, 0.0)
    with pytest.raises(RuntimeError):
        gpu.run("enc", 1.0, 0.0)  # one run in flight per worker
    with pytest.raises(ValueError):
        gpu.run("llm", 1.0, 0.0)
    with pytest.raises(ValueError):
        SharedGpu(env, 0, "exclusive", shares={"enc": 1.0})
    for c, m in ((-1.0, 0.0), (0.0, float("nan")), (float("inf"), 0.0)):
        with pytest.raises(ValueError):
            SharedGpu(env, 1, "exclusive").run("x", c, m)


# ---------------------------------------------------------------- time slice
def test_time_slice_serialises_fifo():
    env = SimEnvironment()
    gpu = SharedGpu(env, 0, "time_slice")
    runs = drive(gpu, {
        "enc": [(0.0, 1.0, 2.0), (0.0, 0.25, 0.25)],  # second run submitted at 3.0, behind llm's
        "llm": [(1.0, 0.5, 0.5)],
    })
    e1, e2 = runs["enc"]
    (p1,) = runs["llm"]
    assert (e1.started_at, e1.finished_at) == (0.0, 3.0)
    assert (p1.submitted_at, p1.started_at, p1.finished_at) == (1.0, 3.0, 4.0)  # waited for enc
    assert (e2.submitted_at, e2.started_at, e2.finished_at) == (3.0, 4.0, 4.5)  # FIFO: behind llm
    assert gpu.busy_s == 4.5
    assert gpu.worker_busy_s("enc") == 3.5 and gpu.worker_busy_s("llm") == 1.0  # queueing is not busy


def test_time_slice_three_workers_and_idle_gap():
    env = SimEnvironment()
    gpu = SharedGpu(env, 0, "time_slice")
    runs = drive(gpu, {"a": [(0.0, 0.0, 1.0)], "b": [(0.5, 1.0, 0.0)], "c": [(0.6, 0.5, 0.5)], "d": [(5.0, 1.0, 1.0)]})
    assert runs["a"][0].finished_at == 1.0
    assert (runs["b"][0].started_at, runs["b"][0].finished_at) == (1.0, 2.0)
    assert (runs["c"][0].started_at, runs["c"][0].finished_at) == (2.0, 3.0)
    assert (runs["d"][0].started_at, runs["d"][0].finished_at) == (5.0, 7.0)
    assert gpu.busy_s == 5.0  # idle from 3 to 5


# ------------------------------------------------------------------ SM split
def test_sm_split_full_share_equals_exclusive():
    jobs = [(0.0, 0.0123, 0.0456), (0.2, 0.031, 1e-4), (0.0, 0.0, 0.07), (0.9, 0.11, 0.0)]
    env_x = SimEnvironment()
    exclusive = drive(SharedGpu(env_x, 0, "exclusive"), {"enc": jobs})["enc"]
    env_s = SimEnvironment()
    gpu = SharedGpu(env_s, 0, "sm_split", shares={"enc": 1.0, "llm": 0.0})
    split = drive(gpu, {"enc": jobs})["enc"]
    assert split == exclusive  # identical floats
    assert gpu.busy_s == gpu.worker_busy_s("enc") and gpu.worker_busy_s("llm") == 0.0
    with pytest.raises(ValueError):
        gpu.run("llm", 0.1, 0.0)  # share 0: cannot run
    with pytest.raises(ValueError):
        gpu.run("other", 0.1, 0.0)  # no share at all


def test_sm_split_half_half_compute_only_runs_concurrently():
    env = SimEnvironment()
    curve = SmShareCurve()
    gpu = SharedGpu(env, 0, "sm_split", shares={"enc": 0.5, "llm": 0.5}, curve=curve)
    runs = drive(gpu, {"enc": [(0.0, 1.0, 0.0)], "llm": [(0.5, 1.0, 0.0)]})
    s = curve.stretch(0.5)
    assert s == pytest.approx(1.2)
    assert runs["enc"][0].finished_at == pytest.approx(s)  # not slowed by the other tenant
    assert runs["llm"][0].started_at == 0.5  # no waiting: concurrent
    assert runs["llm"][0].finished_at == pytest.approx(0.5 + s)
    assert gpu.busy_s == pytest.approx(0.5 + s)
    assert gpu.worker_busy_s("enc") == pytest.approx(s) and gpu.worker_busy_s("llm") == pytest.approx(s)


@pytest.mark.parametrize(
    "interference, enc_end, llm_end",
    [
        # enc alone on [0, 0.5): half done; then both at rate 1/2: enc's other half takes 1.0 -> 1.5;
        # llm does 0.5 on [0.5, 1.5), the rest alone -> 2.0.
        (1.0, 1.5, 2.0),
        # rate 1/1.5 while overlapping: enc's other half takes 0.75 -> 1.25; llm does 0.5 on
        # [0.5, 1.25), the rest alone -> 1.75.
        (0.5, 1.25, 1.75),
        (0.0, 1.0, 1.5),  # isolated bandwidth: nobody slows down
    ],
)
def test_sm_split_memory_interference_piecewise(interference, enc_end, llm_end):
    env = SimEnvironment()
    gpu = SharedGpu(env, 0, "sm_split", shares={"enc": 0.5, "llm": 0.5}, memory_interference=interference)
    runs = drive(gpu, {"enc": [(0.0, 0.0, 1.0)], "llm": [(0.5, 0.0, 1.0)]})
    assert runs["enc"][0].finished_at == pytest.approx(enc_end, rel=1e-12)
    assert runs["llm"][0].finished_at == pytest.approx(llm_end, rel=1e-12)
    assert gpu.busy_s == pytest.approx(llm_end)  # union of [0, enc_end] and [0.5, llm_end]
    assert gpu.worker_busy_s("enc") == pytest.approx(enc_end)
    assert gpu.worker_busy_s("llm") == pytest.approx(llm_end - 0.5)


def test_sm_split_blended_compute_and_memory():
    # enc (compute 1, memory 1) at share 0.5 alone: period 1.2 + 1 = 2.2. At 1.1 it is half done
    # when llm (memory 1) starts: enc's period becomes 1.2 + 2 = 3.2 -> the other half takes 1.6,
    # enc ends at 2.7. llm at period 2 on [1.1, 2.7) does 0.8, the last 0.2 alone -> 2.9.
    env = SimEnvironment()
    gpu = SharedGpu(env, 0, "sm_split", shares={"enc": 0.5, "llm": 0.5})
    runs = drive(gpu, {"enc": [(0.0, 1.0, 1.0)], "llm": [(1.1, 0.0, 1.0)]})
    assert runs["enc"][0].finished_at == pytest.approx(2.7, rel=1e-12)
    assert runs["llm"][0].finished_at == pytest.approx(2.9, rel=1e-12)


def test_sm_split_busy_time_mid_run_and_gaps():
    env = SimEnvironment()
    gpu = SharedGpu(env, 0, "sm_split", shares={"enc": 0.5, "llm": 0.5})
    seen = {}

    def probe():
        yield env.timeout_at(1.0, late=False)
        seen["at1"] = (gpu.busy_s, gpu.worker_busy_s("enc"), gpu.worker_busy_s("llm"), gpu.active_workers)
        yield env.timeout_at(2.5, late=False)
        seen["at2.5"] = (gpu.busy_s, gpu.active_workers)

    env.process(probe())
    drive(gpu, {"enc": [(0.0, 0.0, 1.0), (3.0, 0.0, 0.5)], "llm": [(0.5, 0.0, 1.0)]})
    assert seen["at1"][0] == pytest.approx(1.0)
    assert seen["at1"][1] == pytest.approx(1.0) and seen["at1"][2] == pytest.approx(0.5)
    assert seen["at1"][3] == ("enc", "llm")
    assert seen["at2.5"] == (pytest.approx(2.0), ())  # idle between 2.0 and 3.0
    assert gpu.busy_s == pytest.approx(2.5)
    assert gpu.worker_busy_s("enc") == pytest.approx(2.0) and gpu.worker_busy_s("llm") == pytest.approx(1.5)
    assert gpu.num_runs == 3


def test_sm_split_zero_work_does_not_perturb():
    env = SimEnvironment()
    gpu = SharedGpu(env, 0, "sm_split", shares={"enc": 0.5, "llm": 0.5})
    runs = drive(gpu, {"enc": [(0.0, 0.0123, 0.0456)], "llm": [(0.01, 0.0, 0.0)]})
    assert runs["llm"][0].finished_at == 0.01
    assert runs["enc"][0].finished_at == 0.0 + (0.0123 * SmShareCurve().stretch(0.5) + 0.0456)
    assert gpu.worker_busy_s("llm") == 0.0


def test_set_shares_mid_run():
    # Compute-only run at share 0.5 (period 1.2); at 0.6 it is half done and gets the whole GPU:
    # the other half takes 0.5 -> ends at 1.1.
    env = SimEnvironment()
    gpu = SharedGpu(env, 0, "sm_split", shares={"enc": 0.5, "llm": 0.5})

    def resplit():
        yield env.timeout_at(0.6, late=False)
        gpu.set_shares({"enc": 1.0, "llm": 0.0})

    env.process(resplit())
    runs = drive(gpu, {"enc": [(0.0, 1.0, 0.0)]})
    assert runs["enc"][0].finished_at == pytest.approx(1.1, rel=1e-12)
    assert gpu.shares == {"enc": 1.0, "llm": 0.0}
    busy = SharedGpu(SimEnvironment(), 1, "sm_split", shares={"a": 0.5, "b": 0.5})
    busy.run("a", 1.0, 0.0)
    with pytest.raises(ValueError):
        busy.set_shares({"a": 0.0, "b": 1.0})  # a is running
    with pytest.raises(ValueError):
        SharedGpu(SimEnvironment(), 2, "time_slice").set_shares({"a": 1.0})


def test_sm_split_validation():
    env = SimEnvironment()
    with pytest.raises(ValueError):
        SharedGpu(env, 0, "sm_split")  # shares required
    with pytest.raises(ValueError):
        SharedGpu(env, 0, "sm_split", shares={"a": 0.7, "b": 0.4})
    with pytest.raises(ValueError):
        SharedGpu(env, 0, "sm_split", shares={"a": 1.5})
    with pytest.raises(ValueError):
        SharedGpu(env, 0, "time_slice", shares={"a": 0.5})
    with pytest.raises(ValueError):
        SharedGpu(env, 0, "mps")
    with pytest.raises(ValueError):
        SharedGpu(env, 0, "sm_split", shares={"a": 0.5}, memory_interference=-1.0)
    SharedGpu(env, 0, "sm_split", shares={"a": 0.1, "b": 0.2, "c": 0.7})  # sums to 1 up to rounding


def test_sm_split_deterministic_and_work_conserving_bounds():
    import random

    def scenario():
        rng = random.Random(7)
        jobs = {
            w: [(rng.uniform(0, 0.05) * i, rng.uniform(0, 0.01), rng.uniform(0, 0.01)) for i in range(40)]
            for w in ("enc", "llm")
        }
        env = SimEnvironment()
        gpu = SharedGpu(env, 0, "sm_split", shares={"enc": 0.3, "llm": 0.7}, memory_interference=0.8)
        return jobs, gpu, drive(gpu, jobs)

    jobs, gpu, first = scenario()
    assert scenario()[2] == first  # same inputs, identical floats
    curve = SmShareCurve()
    for w, share in (("enc", 0.3), ("llm", 0.7)):
        for (_, c, m), run in zip(jobs[w], first[w]):
            d = run.finished_at - run.started_at
            lo = c * curve.stretch(share) + m  # never faster than alone on its share
            hi = c * curve.stretch(share) + m * 1.8  # never slower than always contended
            assert lo * (1 - 1e-9) <= d <= hi * (1 + 1e-9)
    assert gpu.busy_s <= gpu.worker_busy_s("enc") + gpu.worker_busy_s("llm")

"""End-to-end check of the cost-model composition on this machine's CPU.

The shipped CPU fit (profiles/ops/cpu/fit, operators timed one by one with
the bundled profiler) composed by ComposedStepCostModel must predict the wall
time of complete forward passes of small real models (random weights) within
15%: a 4-layer decoder (MHA and GQA) over several prompt lengths and decode
batches, and a 4-layer ViT over batch sizes. This is the one test that times
something, because that is what it checks; it runs single-threaded like the
profile.

What it checks is composition -- whether a pass costs the sum of its
operators -- not whether this shared machine runs as fast today as on the
day of the profile: a host that is uniformly slower (a busy neighbour, a lower
clock) would fail every case alike. So the fit's prediction of a pass is
scaled by one factor, the machine's speed now: the time of the pass's own GEMM
and attention kernels (the shapes the composition asks the fit for, timed
like the profiler times them) over the fit's time for them. A fixed set of
large GEMMs is not enough: on a host where small and memory-bound kernels
drifted (here they ran 15-35% faster than on the profile day while large GEMMs
did not) a 128-token prefill and a batch-32 decode were off by 16-20%.

How it stays robust on a loaded machine:

* the calibration kernels and the pass are timed in interleaved rounds, so a
  burst of load hits both, not just one of them;
* each keeps its best (minimum) time over the rounds in which this process
  ran undisturbed (process CPU time >= 90% of the wall time of that call), so
  time the scheduler gave to someone else is never counted; 7 rounds, more (up
  to 21) until the pass and every kernel have 3 undisturbed ones;
* it skips, naming the figure, when the 1-minute load average exceeds 1.5 per
  core, or when after 21 rounds a kernel or the pass still has fewer than 3
  undisturbed ones: such a machine cannot time anything, and saying so is the
  honest result.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.timing  # run alone: a neighbour on the shared L3 cache inflates the passes

from lmmsim import catalog  # noqa: E402
from lmmsim.costmodel.composed import ComposedStepCostModel  # noqa: E402
from lmmsim.costmodel.composition import predict_pass_s  # noqa: E402
from lmmsim.costmodel.fitted import FittedPredictor  # noqa: E402
from lmmsim.profiler import ops  # noqa: E402
from lmmsim.profiler.composition import pass_fn, reference_models  # noqa: E402
from lmmsim.profiler.timing import CpuTimer  # noqa: E402

FIT = Path(__file__).resolve().parent.parent / "profiles" / "ops" / "cpu" / "fit"
TOLERANCE = 0.15
ROUNDS = 7  # interleaved rounds of (pass, calibration kernels), after one warm-up round ...
MAX_ROUNDS = 21  # ... and more, up to this, until each has run undisturbed in MIN_UNDISTURBED
MIN_UNDISTURBED = 3
UNDISTURBED_CPU_SHARE = 0.9  # this process ran >= 90% of the call's wall time
MAX_LOAD_PER_CORE = 1.5
CALIBRATED = ("gemm_s", "attention_prefill_s", "attention_decode_s")  # rebuilt exactly from their arguments

# Passes of at least ~10 ms; below that (a 32-token prompt, a batch-1 decode)
# per-kernel cold caches make the composed model 15-30% pessimistic (README).
CASES = [
    ("mha", "prefill", {"num_tokens": 128}),
    ("mha", "prefill", {"num_tokens": 512}),
    ("gqa", "prefill", {"num_tokens": 1024}),
    ("mha", "decode", {"batch": 16, "context": 512}),
    ("gqa", "decode", {"batch": 32, "context": 1024}),
    ("vit", "encode", {"batch": 1, "seq_len": 196}),
    ("vit", "encode", {"batch": 2, "seq_len": 196}),
]


@pytest.fixture(scope="module")
def models():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the CPU profile was taken single-threaded
    mha, gqa, vit = reference_models()
    yield {"mha": mha, "gqa": gqa, "vit": vit}
    torch.set_num_threads(threads)


class _Recorder:
    """The fitted predictor, remembering the GEMM and attention calls the composition makes."""

    def __init__(self, inner):
        self._inner = inner
        self.calls: dict[tuple, float] = {}  # (method, args) -> fitted seconds

    def __getattr__(self, name):
        method = getattr(self._inner, name)
        if name not in CALIBRATED:
            return method

        def recorded(*args):
            self.calls[(name, args)] = seconds = method(*args)
            return seconds

        return recorded


def _kernel(method: str, args: tuple):
    """The profiler's benchmark of one recorded predictor call (its own input pool)."""
    pool = ops.TensorPool("cpu")
    if method == "gemm_s":
        m, n, k = args
        return ops.build("gemm", {"m": m, "n": n, "k": k}, pool)[0]
    if method == "attention_prefill_s":
        new, context, heads, kv_heads, head_dim, causal = args
        return ops.build("attention_prefill", {"batch": 1, "new_tokens": new, "context": context, "heads": heads,
                                               "kv_heads": kv_heads, "head_dim": head_dim, "causal": int(causal)},
                         pool)[0]
    batch, context_sum, heads, kv_heads, head_dim = args
    return ops.build("attention_decode", {"batch": batch, "context": context_sum // batch, "heads": heads,
                                          "kv_heads": kv_heads, "head_dim": head_dim}, pool)[0]


def _skip_if_loaded() -> None:
    per_core = os.getloadavg()[0] / (os.cpu_count() or 1)
    if per_core > MAX_LOAD_PER_CORE:
        pytest.skip(f"machine overloaded: 1-minute load average {per_core:.2f} per core "
                    f"(> {MAX_LOAD_PER_CORE}); wall-clock timings would measure the neighbours")


def _undisturbed(samples: list) -> list[float]:
    return [s.wall_ms for s in samples if s.cpu_share >= UNDISTURBED_CPU_SHARE]


def _interleaved(fns: list) -> list[list]:
    """Per callable, its :class:`~lmmsim.profiler.timing.Sample` of every round; each
    round calls every one once, in order. One untimed warm-up round, then ROUNDS, then
    more (up to MAX_ROUNDS) while any callable has fewer than MIN_UNDISTURBED calm samples."""
    timer, samples = CpuTimer(), [[] for _ in fns]
    with torch.inference_mode():
        for fn in fns:
            fn()
        for r in range(MAX_ROUNDS):
            if r >= ROUNDS and all(len(_undisturbed(s)) >= MIN_UNDISTURBED for s in samples):
                break
            for i, fn in enumerate(fns):
                samples[i].append(timer.sample(fn))
    return samples


def _best_ms(samples: list, what: str) -> float:
    """Minimum wall time over the undisturbed samples; skip when too few ran undisturbed."""
    calm = _undisturbed(samples)
    if len(calm) < MIN_UNDISTURBED:
        share = max(s.cpu_share for s in samples)
        pytest.skip(f"machine overloaded: {what} ran undisturbed in {len(calm)} of {len(samples)} rounds "
                    f"(best CPU share {share:.0%}, load average {os.getloadavg()[0]:.1f} on "
                    f"{os.cpu_count()} cores); need {MIN_UNDISTURBED}")
    return min(calm)


@pytest.mark.parametrize("which,kind,shape", CASES, ids=[f"{w}-{k}-{'x'.join(map(str, s.values()))}"
                                                         for w, k, s in CASES])
def test_fitted_cpu_cost_model_predicts_real_forward_passes(models, which, kind, shape):
    _skip_if_loaded()
    gpu = catalog.get_gpu("cpu")
    model = models[which]
    fitted = _Recorder(FittedPredictor(FIT, gpu))
    cost = ComposedStepCostModel(model.as_model_spec(f"tiny-{which}"), gpu, 1, fitted)
    fitted_ms = predict_pass_s(cost, {"kind": kind, **shape}) * 1e3
    calls = sorted(fitted.calls)
    assert calls, "the composition asked the fit for no GEMM or attention kernel"
    samples = _interleaved([pass_fn(model, kind, shape), *(_kernel(*c) for c in calls)])
    measured_ms = _best_ms(samples[0], "the pass")
    kernels_now_ms = sum(_best_ms(s, f"{c[0][:-2]}{c[1]}") for c, s in zip(calls, samples[1:]))
    speed_now = kernels_now_ms / (sum(fitted.calls.values()) * 1e3)
    predicted_ms = fitted_ms * speed_now
    assert predicted_ms == pytest.approx(measured_ms, rel=TOLERANCE), (measured_ms, predicted_ms, speed_now)

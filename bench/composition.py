"""Does the fitted CPU cost model, composed, predict real forward passes? (a timing check, not a test)

    python bench/composition.py            # the 7 cases, 15% tolerance
    python bench/composition.py --tolerance 0.10

The shipped CPU fit (profiles/ops/cpu/fit, operators timed one by one with the
bundled profiler) composed by ComposedStepCostModel should predict the wall time
of complete forward passes of small real models (random weights): a 4-layer
decoder (MHA and GQA) over prompt lengths and decode batches, a 4-layer ViT over
batch sizes. Single-threaded, like the profile.

It checks composition -- whether a pass costs the sum of its operators -- not
whether this machine runs as fast today as on the profile day, so the fit's
prediction of a pass is scaled by one factor, the machine's speed now: the time
of the pass's own GEMM and attention kernels (the shapes the composition asks the
fit for, timed like the profiler times them) over the fit's time for them.

This lives in bench/ because it times wall clock: a shared host (a neighbour on
the L3 cache, a lower clock) moves it by 20% and more (CI saw a 128-token prefill
and a batch-16 decode predicted 20-26% high). To keep what it can: the kernels
and the pass run in interleaved rounds, each keeps its minimum over the rounds in
which this process kept its CPU (>= 90% of the call's wall time), 7 rounds and
more (up to 21) until every one has 3 such rounds; a case without them prints
"machine busy" instead of a figure.

Prints, per case: measured and predicted ms, the speed factor, predicted /
measured; exits 1 when a case is outside the tolerance, else 3 when the machine
was too busy to time one.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

from lmmsim import catalog
from lmmsim.costmodel.composed import ComposedStepCostModel
from lmmsim.costmodel.composition import predict_pass_s
from lmmsim.costmodel.fitted import FittedPredictor
from lmmsim.profiler.composition import RecordingPredictor, kernel_for_call, pass_fn, reference_models
from lmmsim.profiler.timing import CpuTimer

ROOT = Path(__file__).resolve().parent.parent
FIT = ROOT / "profiles" / "ops" / "cpu" / "fit"
ROUNDS, MAX_ROUNDS, MIN_UNDISTURBED = 7, 21, 3
UNDISTURBED_CPU_SHARE = 0.9

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


class MachineBusy(Exception):
    pass


def _undisturbed(samples: list) -> list[float]:
    return [s.wall_ms for s in samples if s.cpu_share >= UNDISTURBED_CPU_SHARE]


def _interleaved(fns: list) -> list[list]:
    """Per callable, its Sample of every round (one untimed warm-up round first)."""
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
    calm = _undisturbed(samples)
    if len(calm) < MIN_UNDISTURBED:
        share = max(s.cpu_share for s in samples)
        raise MachineBusy(f"{what} ran undisturbed in {len(calm)} of {len(samples)} rounds "
                          f"(best CPU share {share:.0%}, load average {os.getloadavg()[0]:.1f})")
    return min(calm)


def check(model, which: str, kind: str, shape: dict) -> tuple[float, float, float]:
    """``(measured_ms, predicted_ms, speed_now)`` of one pass."""
    gpu = catalog.get_gpu("cpu")
    fitted = RecordingPredictor(FittedPredictor(FIT, gpu))
    cost = ComposedStepCostModel(model.as_model_spec(f"tiny-{which}"), gpu, 1, fitted)
    fitted_ms = predict_pass_s(cost, {"kind": kind, **shape}) * 1e3
    calls = sorted(fitted.calls)
    samples = _interleaved([pass_fn(model, kind, shape), *(kernel_for_call(*c) for c in calls)])
    measured_ms = _best_ms(samples[0], "the pass")
    kernels_now_ms = sum(_best_ms(s, f"{c[0][:-2]}{c[1]}") for c, s in zip(calls, samples[1:]))
    speed_now = kernels_now_ms / (sum(fitted.calls.values()) * 1e3)
    return measured_ms, fitted_ms * speed_now, speed_now


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tolerance", type=float, default=0.15)
    args = ap.parse_args()
    torch.set_num_threads(1)  # the CPU profile was taken single-threaded
    mha, gqa, vit = reference_models()
    models = {"mha": mha, "gqa": gqa, "vit": vit}
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; tolerance {args.tolerance:.0%}")
    print(f"{'case':<24} {'measured ms':>12} {'predicted ms':>13} {'speed':>6} {'ratio':>6}")
    outside = busy_cases = 0
    for which, kind, shape in CASES:
        name = f"{which}-{kind}-{'x'.join(map(str, shape.values()))}"
        try:
            measured, predicted, speed = check(models[which], which, kind, shape)
        except MachineBusy as busy:
            print(f"{name:<24} machine busy: {busy}")
            busy_cases += 1
            continue
        ratio = predicted / measured
        flag = "" if abs(ratio - 1) <= args.tolerance else "  OUTSIDE"
        outside += bool(flag)
        print(f"{name:<24} {measured:>12.2f} {predicted:>13.2f} {speed:>6.2f} {ratio:>6.3f}{flag}")
    return 1 if outside else 3 if busy_cases else 0


if __name__ == "__main__":
    sys.exit(main())

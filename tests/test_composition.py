"""End-to-end check of the cost-model composition on this machine's CPU.

The shipped CPU fit (profiles/ops/cpu/fit, operators timed one by one with
the bundled profiler) composed by ComposedStepCostModel must predict the wall
time of complete forward passes of small real models (random weights) within
15%: a 4-layer decoder (MHA and GQA) over several prompt lengths and decode
batches, and a 4-layer ViT over batch sizes. This is the one test that times
something, because that is what it checks; it runs single-threaded like the
profile and takes the median of several passes.

What it checks is composition -- whether a pass costs the sum of its
operators -- not whether this shared machine runs as fast today as on the
day of the profile: a host that is uniformly slower (a busy neighbour, a lower
clock) would fail every case alike. So the passes are compared with the fit's
predictions scaled by the machine's speed now, measured on the GEMMs these very
models run (median of measured / predicted over a handful of shapes, timed
like the profiler times them).
"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.timing  # run alone: a neighbour on the shared L3 cache inflates the passes

from lmmsim import catalog  # noqa: E402
from lmmsim.costmodel.composed import ComposedStepCostModel  # noqa: E402
from lmmsim.costmodel.composition import predict_pass_s  # noqa: E402
from lmmsim.costmodel.fitted import FittedPredictor  # noqa: E402
from lmmsim.profiler.composition import measure, reference_models  # noqa: E402

FIT = Path(__file__).resolve().parent.parent / "profiles" / "ops" / "cpu" / "fit"
TOLERANCE = 0.15

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


@pytest.fixture(scope="module")
def speed_now(models):
    """This machine's GEMM time now over the fit's prediction (1.0 = as profiled)."""
    from lmmsim.profiler import ops
    from lmmsim.profiler.timing import CpuTimer

    llm = models["mha"].as_model_spec("tiny-mha").llm
    h, f = llm.hidden_size, llm.intermediate_size
    predictor = FittedPredictor(FIT, catalog.get_gpu("cpu"))
    pool, timer, ratios = ops.TensorPool("cpu"), CpuTimer(), []
    for m in (128, 512, 1024):
        for n, k in ((3 * h, h), (h, h), (2 * f, h), (h, f)):  # qkv, o, gate_up, down
            fn, _impl = ops.build("gemm", {"m": m, "n": n, "k": k}, pool)
            ratios.append(timer.measure(fn).median_ms * 1e-3 / predictor.gemm_s(m, n, k))
    ratios.sort()
    return ratios[len(ratios) // 2]


@pytest.mark.parametrize("which,kind,shape", CASES, ids=[f"{w}-{k}-{'x'.join(map(str, s.values()))}"
                                                         for w, k, s in CASES])
def test_fitted_cpu_cost_model_predicts_real_forward_passes(models, speed_now, which, kind, shape):
    gpu = catalog.get_gpu("cpu")
    model = models[which]
    cost = ComposedStepCostModel(model.as_model_spec(f"tiny-{which}"), gpu, 1, FittedPredictor(FIT, gpu))
    measured_ms = measure(model, which, kind, shape, repeats=7, device="cpu")["time_ms"]
    predicted_ms = predict_pass_s(cost, {"kind": kind, **shape}) * 1e3 * speed_now
    assert predicted_ms == pytest.approx(measured_ms, rel=TOLERANCE), (measured_ms, predicted_ms, speed_now)

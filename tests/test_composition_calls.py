"""The composition check's bookkeeping (bench/composition.py times it; nothing here is timed).

For every pass the check times, the composed cost model must ask the fitted predictor
for GEMM and attention kernels, and each of those calls must map back to a profiler
benchmark of the same shape, or the check's speed factor would be computed on the
wrong kernels.
"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from lmmsim import catalog  # noqa: E402
from lmmsim.costmodel.composed import ComposedStepCostModel  # noqa: E402
from lmmsim.costmodel.composition import predict_pass_s  # noqa: E402
from lmmsim.costmodel.fitted import FittedPredictor  # noqa: E402
from lmmsim.profiler.composition import RecordingPredictor, kernel_for_call, reference_models  # noqa: E402

FIT = Path(__file__).resolve().parent.parent / "profiles" / "ops" / "cpu" / "fit"
CASES = [("mha", "prefill", {"num_tokens": 128}), ("gqa", "decode", {"batch": 32, "context": 1024}),
         ("vit", "encode", {"batch": 2, "seq_len": 196})]


@pytest.fixture(scope="module")
def models():
    mha, gqa, vit = reference_models()
    return {"mha": mha, "gqa": gqa, "vit": vit}


@pytest.mark.parametrize("which,kind,shape", CASES, ids=[c[1] for c in CASES])
def test_every_recorded_kernel_is_rebuilt_at_its_own_shape(models, which, kind, shape):
    gpu = catalog.get_gpu("cpu")
    fitted = RecordingPredictor(FittedPredictor(FIT, gpu))
    cost = ComposedStepCostModel(models[which].as_model_spec(f"tiny-{which}"), gpu, 1, fitted)
    total_s = predict_pass_s(cost, {"kind": kind, **shape})
    methods = {method for method, _ in fitted.calls}
    assert "gemm_s" in methods
    assert methods & {"attention_prefill_s", "attention_decode_s"}
    assert 0 < sum(fitted.calls.values()) < total_s  # the kernels are part of the pass, not all of it
    spec = models[which].as_model_spec("m")
    hidden = spec.llm.hidden_size if kind != "encode" else spec.encoder.hidden_size
    for (method, args), seconds in fitted.calls.items():
        assert seconds > 0
        fn = kernel_for_call(method, args)
        if method == "gemm_s":
            assert hidden in args[1:]  # every projection reads or writes the hidden size
        with torch.inference_mode():
            fn()


def test_an_unknown_predictor_call_names_the_valid_ones():
    with pytest.raises(ValueError, match="gemm_s, attention_prefill_s, attention_decode_s"):
        kernel_for_call("allreduce_s", (1,))

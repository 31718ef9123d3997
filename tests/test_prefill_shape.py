"""Prefill attention of one head shape (lmmsim.costmodel.prefill_shape) against the general path.

The specialised miss path must give the very seconds of ``attention_prefill_s``, leave the
same entries in the predictor's and the process's memos and move the same counters, for
calls inside the fit's data (the forest), outside it (the fitted roofline), repeated, and
invalid; a fit whose domain it does not read falls back to the general path.
"""

from __future__ import annotations

import random

import pytest

from lmmsim import catalog
from lmmsim.costmodel import fitcache
from lmmsim.costmodel.fitted import FittedPredictor
from lmmsim.costmodel.prefill_shape import prefill_fn

GPU = "h100-sxm-80gb"
SHAPES = [(64, 8, 128), (40, 8, 128), (16, 2, 128), (28, 4, 64)]


@pytest.fixture(scope="module")
def fit_folder():
    return catalog.find(catalog.get_gpu(GPU).fitted_profile)


def _chunks(seed: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    chunks = [(n, n) for n in (1, 2, 127, 128, 129, 512, 2048, 8192)]  # fresh prefills: mostly inside
    chunks += [(rng.randint(1, 4096), 0) for _ in range(300)]
    chunks = [(n, c if c else n + rng.choice((0, rng.randint(1, 64), rng.randint(1, 30000)))) for n, c in chunks]
    return chunks + chunks[:40]  # repeats: memo hits, counted once


def _state(pred):
    shared = pred._shared.scalar("attention_prefill", pred.fit.classes["attention_prefill"]).memo
    return (dict(pred._prefill_memo), dict(shared), pred.predicted_s, pred.extrapolated_s, pred.extrapolated)


@pytest.mark.parametrize("heads, kv_heads, head_dim", SHAPES)
def test_one_shape_equals_the_general_path(fit_folder, heads, kv_heads, head_dim):
    gpu = catalog.get_gpu(GPU)
    chunks = _chunks(heads)
    fitcache.clear()
    general = FittedPredictor(fit_folder, gpu)
    expected = [general.attention_prefill_s(n, c, heads, kv_heads, head_dim, True) for n, c in chunks]
    want = _state(general)
    fitcache.clear()
    fast = FittedPredictor(fit_folder, gpu)
    fn = fast.attention_prefill_fn(heads, kv_heads, head_dim, True)
    assert [fn(n, c) for n, c in chunks] == expected
    assert _state(fast) == want
    assert want[4]["attention_prefill"] and want[4]["attention_prefill"] < len(set(chunks))  # inside and outside


def test_the_general_path_hits_what_one_shape_evaluated(fit_folder):
    gpu = catalog.get_gpu(GPU)
    fitcache.clear()
    first = FittedPredictor(fit_folder, gpu)
    fn = first.attention_prefill_fn(64, 8, 128)
    chunks = _chunks(5)
    values = [fn(n, c) for n, c in chunks]
    second = FittedPredictor(fit_folder, gpu)  # the same shared fit: its evaluations are memoised
    assert [second.attention_prefill_s(n, c, 64, 8, 128) for n, c in chunks] == values
    assert (second.predicted_s, second.extrapolated_s, second.extrapolated) == (
        first.predicted_s, first.extrapolated_s, first.extrapolated)


def test_invalid_calls_answer_as_the_general_path(fit_folder):
    pred = FittedPredictor(fit_folder, catalog.get_gpu(GPU))
    fn = pred.attention_prefill_fn(64, 8, 128)
    assert fn(0, 10) == 0.0
    with pytest.raises(ValueError, match="shorter"):
        fn(10, 5)


def test_a_domain_it_does_not_read_takes_the_general_path(fit_folder, monkeypatch):
    pred = FittedPredictor(fit_folder, catalog.get_gpu(GPU))
    check = pred.fit.classes["attention_prefill"].domain_check()
    monkeypatch.setattr(check, "_box", (*check._box, "log_flops"))
    calls = []
    monkeypatch.setattr(pred, "attention_prefill_s", lambda *args: calls.append(args) or 1.0)
    assert prefill_fn(pred, 64, 8, 128)(100, 300) == 1.0
    assert calls == [(100, 300, 64, 8, 128, True)]


def test_a_recorder_wrapping_the_predictor_sees_every_prefill_call(fit_folder):
    from lmmsim.costmodel.composed import ComposedStepCostModel
    from lmmsim.profiler.composition import RecordingPredictor

    gpu = catalog.get_gpu(GPU)
    rec = RecordingPredictor(FittedPredictor(fit_folder, gpu))
    cost = ComposedStepCostModel(catalog.get_model("qwen2.5-vl-7b"), gpu, 1, rec)
    cost.llm_step_s([(512, 1024), (300, 300)], 0, 0, 2)
    assert {args[:2] for name, args in rec.calls if name == "attention_prefill_s"} == {(512, 1024), (300, 300)}


def test_an_overridden_prefill_method_is_called(fit_folder):
    class Scaled(FittedPredictor):
        def attention_prefill_s(self, *args):
            return 2.0 * super().attention_prefill_s(*args)

    gpu = catalog.get_gpu(GPU)
    plain, scaled = FittedPredictor(fit_folder, gpu), Scaled(fit_folder, gpu)
    assert scaled.attention_prefill_fn(64, 8, 128)(700, 3000) == 2.0 * plain.attention_prefill_fn(64, 8, 128)(700, 3000)

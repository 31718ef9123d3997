"""Warm cost models: fits shared by the runs of a process, forests evaluated all trees at once.

* The fast forest paths give the very floats of the straightforward ones (tree by tree,
  one Python list per tree) on random inputs, exact thresholds included.
* A GEMM block from the shared fit equals the old path through a DataFrame.
* A second predictor of the same fit reuses the loaded fit and its evaluations, yet
  counts its own calls: its counters, description and extrapolated share equal those
  of a predictor that evaluated everything itself; a run's summary is the same cold
  and warm.
* A rewritten fit, another interconnect, another GPU: another shared fit.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lmmsim import catalog
from lmmsim.costmodel import fitcache, fitstore
from lmmsim.costmodel.fitted import FittedPredictor, extrapolated_share
from lmmsim.costmodel.npmodels import ForestModel
from lmmsim.results import run_scenario
from lmmsim.scenario import load_scenario

GPU = "h100-sxm-80gb"
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def fit_folder():
    return catalog.find(catalog.get_gpu(GPU).fitted_profile)


@pytest.mark.parametrize("name", ["gemm", "attention_prefill", "attention_decode", "elementwise.norm", "p2p"])
def test_fast_forest_paths_equal_the_straightforward_ones(fit_folder, name):
    with np.load(fit_folder / f"{name}.forest.npz", allow_pickle=False) as arrays:
        forest = ForestModel(arrays)
    rng = np.random.default_rng(7)
    width = int(forest.feature.max()) + 1
    thresholds = forest.threshold[forest.left >= 0]
    X = rng.choice(thresholds, (400, width)) + rng.normal(0.0, 0.3, (400, width))
    X[:100] = rng.choice(thresholds, (100, width))  # exactly on a split: the <= side
    X[100:120] = rng.normal(0.0, 50.0, (20, width))  # far outside the data
    fast, slow = forest.predict_s(X), forest.predict_s_reference(X)
    assert np.array_equal(fast, slow)
    assert [forest.scalar_s(x) for x in X[:150]] == [forest.scalar_s_reference(x) for x in X[:150]]
    assert len(np.unique(fast)) > 20  # the inputs reach many leaves (the comparison means something)


@pytest.mark.parametrize("name", ["p2p", "elementwise", "elementwise.act", "elementwise.norm"])
def test_a_one_input_forest_read_as_steps_equals_its_walk(fit_folder, name):
    forest = fitstore.read_forest(fit_folder / f"{name}.forest.npz")
    cuts = np.unique(forest.threshold[forest.left >= 0]).astype(np.float32)
    below, above = np.nextafter(cuts, np.float32(-np.inf)), np.nextafter(cuts, np.float32(np.inf))
    rng = np.random.default_rng(3)
    x = np.concatenate([cuts, below, above, rng.uniform(cuts[0] - 3, cuts[-1] + 3, 300),
                        [-np.inf, np.inf, np.nan, 1e30, -1e30, 0.0]]).astype(float)
    steps = [forest.scalar_s([v]) for v in x]
    assert forest._steps is not None  # answered by the step table, not a walk
    walked = fitstore.read_forest(fit_folder / f"{name}.forest.npz")
    walked._prepare()
    walked._steps = None  # the one-row walk of any forest
    assert steps == [walked.scalar_s([v]) for v in x]
    assert steps[::7] == [forest.scalar_s_reference([v]) for v in x[::7]]  # the tree-by-tree walk
    assert forest.scalar_many([[v] for v in x]) == steps
    assert len(set(steps)) > 20


def test_a_gemm_block_equals_the_dataframe_path(fit_folder):
    gpu = catalog.get_gpu(GPU)
    pred = FittedPredictor(fit_folder, gpu)
    for lo, n, k in ((1, 4096, 4096), (129, 1536, 8960), (8193, 152064, 3584), (1 << 20, 7, 3)):
        times, total, extra, count = pred._shared.gemm_block(lo, n, k, pred.GEMM_BLOCK)
        frame = pd.DataFrame({"m": np.arange(lo, lo + pred.GEMM_BLOCK), "n": n, "k": k})
        old = pred.predict_frame("gemm", frame)
        assert times == old.tolist()
        assert total == float(old.sum())


def _calls(seed: int):
    """A mixed call sequence, inside and outside the fit's data, with repeats."""
    rnd = random.Random(seed)
    out = []
    for _ in range(400):
        m = rnd.choice([rnd.randint(1, 8192), rnd.randint(1, 300), 1 << 21])
        out += [("gemm_s", (m, rnd.choice([4096, 3584, 18944]), rnd.choice([3584, 4096]))),
                ("attention_prefill_s", (m % 9000 + 1, m % 9000 + 1 + rnd.randint(0, 40000), 28, 4, 128, True)),
                ("attention_decode_s", (rnd.randint(1, 256), rnd.randint(1, 1 << 22), 28, 4, 128)),
                ("elementwise_s", (float(m * 7168), rnd.choice(["add_norm", "rotary", "silu_and_mul", None]))),
                ("allreduce_s", (float(m * 7168), 4)), ("p2p_s", (float(m * 14336),)),
                ("gemm_fp8_s", (m, 4096, 4096)),
                ("moe_experts_s", (m % 4096 + 1, 2048, 768, 128, 8, rnd.choice([1, 2]), rnd.choice([1, 2])))]
    return out


def _counters(pred):
    return (pred.predicted_s, pred.extrapolated_s, pred.extrapolated, sorted(pred.roofline_answered),
            pred.describe(), pred.extrapolated_share(), extrapolated_share([pred]))


def test_a_warm_predictor_counts_exactly_as_a_cold_one(fit_folder):
    gpu = catalog.get_gpu(GPU)
    link = next(iter(gpu.links.values()))
    fitcache.clear()
    cold = FittedPredictor(fit_folder, gpu, link)
    values = [getattr(cold, name)(*args) for name, args in _calls(0)]
    warm = FittedPredictor(fit_folder, gpu, link)
    assert warm._shared is cold._shared and warm.fit is cold.fit  # loaded once
    assert [getattr(warm, name)(*args) for name, args in _calls(0)] == values
    assert _counters(warm) == _counters(cold)
    assert cold.extrapolated["gemm"] > 0 and cold.extrapolated_s["attention_prefill"] > 0  # outside calls counted
    # a different sequence on a warm fit counts as a cold fit would count it
    again = FittedPredictor(fit_folder, gpu, link)
    [getattr(again, name)(*args) for name, args in _calls(1)]
    fitcache.clear()
    fresh = FittedPredictor(fit_folder, gpu, link)
    [getattr(fresh, name)(*args) for name, args in _calls(1)]
    assert _counters(again) == _counters(fresh)


def test_every_input_of_a_prediction_names_its_own_shared_fit(fit_folder, tmp_path):
    gpu = catalog.get_gpu(GPU)
    links = list(gpu.links.values())
    base = FittedPredictor(fit_folder, gpu)._shared
    assert FittedPredictor(fit_folder, gpu, links[0])._shared is not base
    assert FittedPredictor(fit_folder, gpu)._shared is base
    copy = tmp_path / "fit"
    shutil.copytree(fit_folder, copy)
    first = FittedPredictor(copy, gpu)
    assert first._shared is not base  # another folder
    doc = json.loads((copy / "model.json").read_text())
    doc["classes"]["p2p"]["roofline"]["launch_s"] = 1.0  # rewrite the fit in place
    if doc["classes"]["p2p"]["kind"] == "roofline":
        doc["classes"]["p2p"]["params"]["launch_s"] = 1.0
    (copy / "model.json").write_text(json.dumps(doc))
    second = FittedPredictor(copy, gpu)
    assert second._shared is not first._shared
    assert second.p2p_s(1 << 40) != first.p2p_s(1 << 40)


def test_a_run_summary_is_the_same_cold_and_warm():
    summaries = []
    for _ in range(2):
        if not summaries:
            fitcache.clear()
        scn, base = load_scenario(ROOT / "scenarios" / "quickstart.yaml", ["workload.num_requests=60"])
        run = run_scenario(scn, base)
        run.summary["sim_wall_time_s"] = 0.0
        summaries.append((json.dumps(run.summary, sort_keys=True, default=str), run.requests.to_json()))
    assert summaries[0] == summaries[1]
    assert json.loads(summaries[0][0])["cost_model"]["extrapolated_share"]


def test_prefetched_elementwise_calls_equal_calls_made_one_by_one(fit_folder):
    gpu = catalog.get_gpu(GPU)
    fitcache.clear()
    ops = ["add_norm", "rotary", "silu_and_mul", "embedding", None, "softmax"]
    calls = [(float(m * 3584 * w), op) for m in range(1, 600, 3) for w in (2, 8) for op in ops]
    warm = FittedPredictor(fit_folder, gpu)
    warm.prefetch_elementwise(calls)
    assert warm.predicted_s["elementwise"] == 0.0  # prefetching counts nothing for the run
    fast = [warm.elementwise_s(b, op) for b, op in calls]
    fitcache.clear()
    cold = FittedPredictor(fit_folder, gpu)
    assert [cold.elementwise_s(b, op) for b, op in calls] == fast
    assert _counters(warm) == _counters(cold)


def _forests(fit):
    """Every forest of a loaded fit, per class and per op: ``{(class, op): LoadedClass}``."""
    out = {}
    for c, lc in fit.classes.items():
        for op, sub in [(None, lc), *lc.per_op.items()]:
            if sub.kind == "forest":
                out[(c, op)] = sub
    return out


def test_a_forest_is_read_when_first_called_and_predicts_as_one_read_eagerly(fit_folder):
    gpu = catalog.get_gpu(GPU)
    link = next(iter(gpu.links.values()))
    fitcache.clear()
    lazy = FittedPredictor(fit_folder, gpu, link)
    assert all(isinstance(lc.source, Path) for lc in _forests(lazy.fit).values())  # nothing read yet
    calls = [c for c in _calls(2) if c[0] in ("attention_prefill_s", "p2p_s")]
    values = [getattr(lazy, name)(*args) for name, args in calls]
    read = {k for k, lc in _forests(lazy.fit).items() if not isinstance(lc.source, Path)}
    assert read == {("attention_prefill", None), ("p2p", None)}  # only the classes called
    fitcache.clear()
    eager = FittedPredictor(fit_folder, gpu, link)
    for lc in _forests(eager.fit).values():
        assert isinstance(lc.model, ForestModel)  # read before any call
    assert [getattr(eager, name)(*args) for name, args in calls] == values
    assert _counters(eager) == _counters(lazy)
    assert [getattr(eager, name)(*args) for name, args in _calls(3)] == [
        getattr(lazy, name)(*args) for name, args in _calls(3)]
    assert _counters(eager) == _counters(lazy)


def test_a_forest_read_from_its_zip_equals_np_load(fit_folder):
    for path in sorted(fit_folder.glob("*.forest.npz")):
        forest = fitstore.read_forest(path)
        with np.load(path, allow_pickle=False) as arrays:
            for name, attr in (("tree_offsets", "offsets"), ("children_left", "left"), ("children_right", "right"),
                               ("feature", "feature"), ("threshold", "threshold"), ("value", "value")):
                mine, theirs = getattr(forest, attr), arrays[name]
                assert np.array_equal(mine, theirs) and mine.dtype.kind == theirs.dtype.kind, (path.name, name)


def test_a_missing_forest_file_fails_when_the_fit_loads(fit_folder, tmp_path):
    copy = tmp_path / "fit"
    shutil.copytree(fit_folder, copy)
    (copy / "p2p.forest.npz").unlink()
    with pytest.raises(FileNotFoundError, match="p2p"):
        fitstore.load_fit(copy)


def test_one_worker_pool_serves_every_execution_inside_shared_pool():
    from lmmsim.sweep import executors

    assert executors.pool_for() is None
    with executors.shared_pool(2):
        pool = executors.pool_for()
        assert pool is not None and executors.pool_for() is pool
        with executors.shared_pool(3):  # nested: the outer pool stays
            assert executors.pool_for() is pool
        assert list(pool.map(abs, [-1, -2, 3])) == [1, 2, 3]
    assert executors.pool_for() is None
    with pytest.raises(RuntimeError):  # shut down on exit
        pool.submit(abs, -1)


def _prefill_memo_size(pred) -> int:
    return len(pred._shared._memos[("attention_prefill", None)])


def test_prefetched_prefill_calls_equal_calls_made_one_by_one(fit_folder):
    gpu = catalog.get_gpu(GPU)
    rnd = random.Random(5)
    calls = [(n, n + rnd.choice([0, 0, rnd.randint(1, 9000)]), 8, 1, 128, True) for n in range(1, 3000, 7)]
    fitcache.clear()
    warm = FittedPredictor(fit_folder, gpu)
    warm.prefetch_attention_prefill(calls)
    assert _prefill_memo_size(warm) == len(calls)  # every call evaluated into the process's memo ...
    # ... none counted
    assert warm.predicted_s["attention_prefill"] == 0.0 and warm.extrapolated["attention_prefill"] == 0
    fast = [warm.attention_prefill_s(*c) for c in calls]
    assert _prefill_memo_size(warm) == len(calls)  # the calls were answered from it
    fitcache.clear()
    cold = FittedPredictor(fit_folder, gpu)
    assert [cold.attention_prefill_s(*c) for c in calls] == fast
    assert _counters(warm) == _counters(cold)
    assert 0 < cold.extrapolated["attention_prefill"] < len(calls)  # inside and outside the data


def test_a_step_model_prefetching_fresh_prefills_gives_the_steps_and_counts_of_calls_made_alone(fit_folder,
                                                                                                monkeypatch):
    from lmmsim.costmodel.composed import ComposedStepCostModel

    gpu, model = catalog.get_gpu(GPU), catalog.get_model("qwen2.5-vl-72b")
    rnd = random.Random(11)
    steps = []
    for _ in range(300):  # fresh prefills, later chunks and decodes, as an engine's steps mix them
        fresh = rnd.randint(1, 2048)
        steps.append((((fresh, fresh), (512, 512 + rnd.randint(1, 5000))), rnd.randint(0, 64), 40000, 3))

    def run():
        fitcache.clear()
        pred = FittedPredictor(fit_folder, gpu, next(iter(gpu.links.values())))
        cost = ComposedStepCostModel(model, gpu, 8, pred)
        return [cost.llm_step_s(*s) for s in steps], pred

    times, prefetched = run()
    assert _prefill_memo_size(prefetched) > 2 * len(steps)  # the blocks of fresh prefills were evaluated together
    monkeypatch.setattr(FittedPredictor, "prefetch_attention_prefill", lambda self, calls: None)
    alone_times, alone = run()
    assert _prefill_memo_size(alone) <= 2 * len(steps)  # each call evaluated alone
    assert times == alone_times
    assert _counters(prefetched) == _counters(alone)
    assert 0 < alone.extrapolated["attention_prefill"] < 2 * len(steps)


def test_a_forest_file_with_a_bad_crc_is_refused(tmp_path):
    import zipfile

    path = tmp_path / "tiny.forest.npz"
    arrays = {"tree_offsets": np.array([0]), "children_left": np.array([1, -1, -1], np.int32),
              "children_right": np.array([2, -1, -1], np.int32), "feature": np.array([0, -2, -2], np.int32),
              "threshold": np.array([0.5, -2.0, -2.0]), "value": np.array([0.0, 1.0, 2.0])}
    np.savez(path, **arrays)  # stored, not deflated: a flipped byte reaches the CRC check
    assert fitstore.read_forest(path).scalar_s([1.0]) == np.exp(2.0)
    blob = bytearray(path.read_bytes())
    blob[blob.index(np.array([0.0, 1.0, 2.0]).tobytes()) + 8] ^= 1
    path.write_bytes(bytes(blob))
    with pytest.raises(zipfile.BadZipFile, match="CRC"):
        fitstore.read_forest(path)

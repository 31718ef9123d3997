"""The forest's faster one-call walks give the very floats of its plain walk.

:class:`~lmmsim.costmodel.npmodels.PrunedForest` (tests on fixed inputs resolved),
:class:`~lmmsim.costmodel.npmodels.StepTable` (a one-input forest read by bisection) and
:class:`~lmmsim.costmodel.npmodels.RecurringWalk` (which of them a call takes) against
``ForestModel.scalar_s`` on the shipped H100 forests, at and around every split.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from lmmsim import catalog
from lmmsim.costmodel import npmodels
from lmmsim.costmodel.features import CLASSES
from lmmsim.costmodel.npmodels import ForestModel, PrunedForest, RecurringWalk, StepTable

GPU = "h100-sxm-80gb"


@pytest.fixture(scope="module")
def fit_folder():
    return catalog.find(catalog.get_gpu(GPU).fitted_profile)


def _forest(folder, name: str) -> ForestModel:
    with np.load(folder / f"{name}.forest.npz", allow_pickle=False) as arrays:
        return ForestModel(arrays)


def _rows(op_class: str, shapes) -> list[list[float]]:
    spec = CLASSES[op_class]
    return [[f[nm] for nm in spec.log_features] for f in (spec.features(*s) for s in shapes)]


def _prefill_shapes(rng, heads, kv_heads, head_dim, causal, n):
    for _ in range(n):
        new = int(rng.integers(1, 16384))
        yield new, new + int(rng.integers(0, 40000)), heads, kv_heads, head_dim, causal


@pytest.mark.parametrize("model", [(64, 8, 128, True), (16, 16, 80, False), (32, 32, 128, True)])
def test_a_pruned_prefill_forest_predicts_what_the_whole_one_does(fit_folder, model):
    forest = _forest(fit_folder, "attention_prefill")
    names = CLASSES["attention_prefill"].log_features
    fixed_cols = [names.index(nm) for nm in CLASSES["attention_prefill"].model_features]
    rows = _rows("attention_prefill", _prefill_shapes(np.random.default_rng(3), *model, 600))
    pruned = forest.pruned({i: rows[0][i] for i in fixed_cols})
    assert pruned.num_nodes < len(forest.left) / 2  # the model's tests resolved away
    assert [pruned.scalar_s(x) for x in rows] == [forest.scalar_s(x) for x in rows]
    assert len({forest.scalar_s(x) for x in rows}) > 50  # many leaves reached


def test_a_pruned_forest_walks_the_splits_of_its_free_inputs_exactly(fit_folder):
    """Rows set exactly on the free inputs' thresholds (the <= side) and a float32 step past them."""
    forest = _forest(fit_folder, "attention_decode")
    names = CLASSES["attention_decode"].log_features
    fixed_cols = [names.index(nm) for nm in CLASSES["attention_decode"].model_features]
    base = _rows("attention_decode", [(8, 8 * 900, 32, 8, 128)])[0]
    rng = np.random.default_rng(5)
    free = [i for i in range(len(names)) if i not in fixed_cols]
    thresholds = forest.threshold[(forest.left >= 0) & np.isin(forest.feature, free)]
    rows = []
    for t in rng.choice(thresholds, 300):
        for v in (float(t), float(np.nextafter(np.float32(t), np.float32(np.inf)))):
            row = list(base)
            row[int(rng.choice(free))] = v
            rows.append(row)
    pruned = forest.pruned({i: base[i] for i in fixed_cols})
    assert [pruned.scalar_s(x) for x in rows] == [forest.scalar_s(x) for x in rows]


@pytest.mark.parametrize("name", ["p2p", "elementwise.norm", "elementwise"])
def test_a_one_input_forest_as_a_step_table(fit_folder, name):
    forest = _forest(fit_folder, name)
    table = StepTable(forest)
    thr = np.unique(forest.threshold[forest.left >= 0])
    t32 = thr.astype(np.float32)
    xs = np.concatenate([thr, np.nextafter(thr, np.inf), np.nextafter(thr, -np.inf), t32,
                         np.nextafter(t32, np.float32(np.inf)), np.nextafter(t32, np.float32(-np.inf)),
                         np.random.default_rng(1).uniform(thr[0] - 5, thr[-1] + 5, 2000), [-1e30, 1e30]])
    assert [table([x]) for x in xs.tolist()] == [forest.scalar_s([x]) for x in xs.tolist()]
    assert table([math.nan]) == forest.scalar_s([math.nan])


def test_recurring_calls_take_the_fast_walks_and_rare_ones_the_plain_walk(fit_folder, monkeypatch):
    monkeypatch.setattr(npmodels, "MAX_PRUNED", 2)
    forest = _forest(fit_folder, "attention_prefill")
    cols = tuple(CLASSES["attention_prefill"].log_features.index(nm)
                 for nm in CLASSES["attention_prefill"].model_features)
    walk = RecurringWalk(forest, cols)
    rng = np.random.default_rng(11)
    models = [(64, 8, 128, True), (16, 16, 80, False), (40, 8, 128, True)]
    shapes = [s for m in models for s in _prefill_shapes(rng, *m, 40)]
    shapes += [(64, 64, h, h, 80, False) for h in range(80, 80 * 12, 80)]  # a head count seen once each
    rows = _rows("attention_prefill", [shapes[i] for i in rng.permutation(len(shapes))])
    assert [walk(x) for x in rows] == [forest.scalar_s(x) for x in rows]
    assert len(walk._pruned) == 2  # two models pruned (the cap), the third and the rare ones walked whole
    assert all(isinstance(p, PrunedForest) for p in walk._pruned.values())
    one = RecurringWalk(_forest(fit_folder, "p2p"), ())
    xs = [[float(v)] for v in rng.uniform(5, 30, 3 * npmodels.PRUNE_AFTER)]
    assert [one(x) for x in xs] == [one._forest.scalar_s(x) for x in xs]
    assert isinstance(one._table, StepTable)

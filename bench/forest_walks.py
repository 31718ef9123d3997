"""One cold call of a fitted forest: the plain walk, the pruned one, the step table (not a test).

    python bench/forest_walks.py                 # H100 forests, 300 calls each
    python bench/forest_walks.py --gpu a100-sxm-80gb

Between engine steps a simulation touches megabytes of other objects, so a forest
walk that missed the cost memo finds its nodes out of the CPU caches. This times a
single call with the caches evicted before it (a 128 MB array rewritten) and warm
(calls back to back), for the prefill-attention forest of Qwen2-72B's attention (64
heads, 8 KV heads, head size 128, causal) walked whole (``ForestModel.scalar_s``)
and pruned to that model (``PrunedForest``), and for the one-input p2p forest walked
whole and as a ``StepTable``. Checks that every variant returns the same floats.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from lmmsim import catalog
from lmmsim.costmodel.features import CLASSES
from lmmsim.costmodel.npmodels import ForestModel, StepTable


def per_call_us(fn, rows, evict) -> tuple[float, float]:
    cold = 0.0
    for x in rows:
        evict += 1.0
        t = time.perf_counter()
        fn(x)
        cold += time.perf_counter() - t
    t = time.perf_counter()
    for x in rows:
        fn(x)
    return cold / len(rows) * 1e6, (time.perf_counter() - t) / len(rows) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpu", default="h100-sxm-80gb")
    ap.add_argument("--calls", type=int, default=300)
    args = ap.parse_args()
    folder = catalog.find(catalog.get_gpu(args.gpu).fitted_profile)
    rng = np.random.default_rng(0)
    evict = np.ones(16_000_000)
    spec = CLASSES["attention_prefill"]
    with np.load(folder / "attention_prefill.forest.npz") as a:
        prefill = ForestModel(a)
    rows = []
    for _ in range(args.calls):
        new = int(rng.integers(1, 8192))
        f = spec.features(new, new + int(rng.integers(0, 30000)), 64, 8, 128, True)
        rows.append([f[nm] for nm in spec.log_features])
    t = time.perf_counter()
    pruned = prefill.pruned({spec.log_features.index(nm): rows[0][spec.log_features.index(nm)]
                             for nm in spec.model_features})
    prune_ms = (time.perf_counter() - t) * 1e3
    assert [pruned.scalar_s(x) for x in rows] == [prefill.scalar_s(x) for x in rows]
    with np.load(folder / "p2p.forest.npz") as a:
        p2p = ForestModel(a)
    t = time.perf_counter()
    table = StepTable(p2p)
    table_ms = (time.perf_counter() - t) * 1e3
    xs = [[float(v)] for v in rng.uniform(10, 30, args.calls)]
    assert [table(x) for x in xs] == [p2p.scalar_s(x) for x in xs]
    print(f"{args.gpu}; {args.calls} calls each; microseconds per call")
    print(f"{'walk':<50} {'cold':>7} {'warm':>7}")
    cases = [(f"prefill attention, whole ({len(prefill.left):,} nodes)", prefill.scalar_s, rows),
             (f"prefill attention, pruned ({pruned.num_nodes:,} nodes, {prune_ms:.0f} ms)", pruned.scalar_s, rows),
             (f"p2p, whole ({len(p2p.left):,} nodes)", p2p.scalar_s, xs),
             (f"p2p, step table (built in {table_ms:.0f} ms)", table, xs)]
    for name, fn, xs_ in cases:
        cold, warm = per_call_us(fn, xs_, evict)
        print(f"{name:<50} {cold:7.1f} {warm:7.1f}")


if __name__ == "__main__":
    main()

"""One call of a fitted forest, cold and warm: numpy's walk against a Python-list walk (not a test).

    python bench/forest_walk.py                  # H100 and A100 forests, 300 calls each
    python bench/forest_walk.py --calls 1000

A cost-model memo miss evaluates a forest for one row (``ForestModel.scalar_s``). Between
engine steps a simulation touches megabytes of other objects, so that walk finds the
forest's nodes out of the CPU caches. This times one call with the caches evicted before
it (a 128 MB array rewritten) and warm (calls back to back), for ``scalar_s`` (all trees
descended together by numpy gathers over flat arrays) and for the walk it replaced (each
tree in turn, a Python loop over lists of boxed numbers, kept here as the comparison),
on the prefill-attention, decode-attention and p2p forests, and checks both give the same
floats. Then the vectorised walk of a GEMM block (``SharedFit.gemm_block``: 128 token counts of
one weight shape, a dense step's memo miss), cold and warm, over RServe's four LLM shapes.
"""

from __future__ import annotations

import argparse
import math
import time
from array import array

import numpy as np

from lmmsim import catalog
from lmmsim.costmodel.features import CLASSES
from lmmsim.costmodel.npmodels import ForestModel


def list_walk(forest: ForestModel):
    """The one-row walk before numpy's: every tree in turn over flat Python lists."""
    inner = forest.left >= 0
    base = np.repeat(forest.offsets, np.diff(forest.offsets, append=len(forest.left)))  # global node indices
    roots, left = forest.offsets.tolist(), np.where(inner, forest.left + base, -1).tolist()
    right, feature = (forest.right + base).tolist(), forest.feature.tolist()
    threshold, value = forest.threshold.tolist(), forest.value.tolist()

    def walk(x) -> float:
        x = array("f", x).tolist()
        total = 0.0
        for node in roots:
            while left[node] >= 0:
                node = left[node] if x[feature[node]] <= threshold[node] else right[node]
            total += value[node]
        return math.exp(total / len(roots))

    return walk


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


def rows_of(op_class: str, rng, n: int) -> list[list[float]]:
    spec = CLASSES[op_class]
    out = []
    for _ in range(n):
        if op_class == "attention_prefill":
            new = int(rng.integers(1, 8192))
            f = spec.features(new, new + int(rng.integers(0, 30000)), 64, 8, 128, True)
        elif op_class == "attention_decode":
            batch = int(rng.integers(1, 256))
            f = spec.features(batch, batch * int(rng.integers(64, 16384)), 64, 8, 128)
        else:
            f = spec.features(float(rng.integers(1, 1 << 26)))
        out.append([f[nm] for nm in spec.log_features])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpus", default="h100-sxm-80gb,a100-sxm-80gb")
    ap.add_argument("--calls", type=int, default=300)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    evict = np.ones(16_000_000)
    print(f"{args.calls} calls each; microseconds per call, caches evicted before each (cold) and back to back (warm)")
    print(f"{'forest':<48} {'lists cold':>10} {'numpy cold':>10} {'lists warm':>10} {'numpy warm':>10}")
    for gpu in args.gpus.split(","):
        folder = catalog.find(catalog.get_gpu(gpu).fitted_profile)
        for op_class in ("attention_prefill", "attention_decode", "p2p"):
            with np.load(folder / f"{op_class}.forest.npz") as a:
                forest = ForestModel(a)
            rows = rows_of(op_class, rng, args.calls)
            old = list_walk(forest)
            assert [forest.scalar_s(x) for x in rows] == [old(x) for x in rows]
            lc, lw = per_call_us(old, rows, evict)
            nc, nw = per_call_us(forest.scalar_s, rows, evict)
            name = f"{gpu} {op_class} ({len(forest.left):,} nodes)"
            print(f"{name:<48} {lc:10.1f} {nc:10.1f} {lw:10.1f} {nw:10.1f}")
        gemm_blocks(gpu, evict)


def gemm_blocks(gpu: str, evict) -> None:
    """One 128-row walk of the GEMM forest (the rows of ``SharedFit.gemm_block``), cold and warm."""
    with np.load(catalog.find(catalog.get_gpu(gpu).fitted_profile) / "gemm.forest.npz") as a:
        forest = ForestModel(a)
    blocks = []
    for n, k in ((10240, 8192), (8192, 8192), (59392, 8192), (8192, 29696)):  # Qwen2.5-72B, tp 1
        for lo in range(1, 2049, 128):
            f = CLASSES["gemm"].features(np.arange(lo, lo + 128.0), np.full(128, float(n)), np.full(128, float(k)))
            X = np.column_stack([np.broadcast_to(np.asarray(f[c], float), (128,))
                                 for c in CLASSES["gemm"].log_features])
            blocks.append(X.astype(np.float32).astype(float))
    cold, warm = per_call_us(forest._leaf_totals, blocks, evict)
    print(f"{gpu + ' gemm, 128-row blocks':<48} {'':>10} {cold:10.1f} {'':>10} {warm:10.1f}")


if __name__ == "__main__":
    main()

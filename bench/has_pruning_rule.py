"""What-if: HAS's Stage 1 with the paper's pruning rule alone, for EAServe Table 5's two platforms.

lmmsim's Stage 1 (lmmsim/search/capacity.py ``prune``) drops dominated allocations, then those whose
most loaded stage exceeds capacity (our addition), then keeps the top K = 3 whose balance score is
within 1.2x of the best. The paper (easerve.txt 4.3) states only the 1.2x balance rule. This runs HAS
on the image workload at 5 req/s on 8x RTX 6000 Ada and on 8x A100 SXM4, once as shipped and once with
the capacity filter removed (balance rule over the undominated allocations), and prints what Stage 1
keeps and the best throughput found.

    python bench/has_pruning_rule.py            # ~2 min on 2 cores

Since issue 17 the shipped rule also fills the kept list up to K from the survivors (least loaded first)
and offers co-location on and off: it keeps 3 on both platforms and finds 3.24 (RTX) and 4.78 req/s (A100;
before: one allocation kept, 1.83 req/s); the paper's rule alone keeps 2 and 1 (3.25 and 4.56 req/s).
"""

from __future__ import annotations

from pathlib import Path

import lmmsim.search.runner as runner
from lmmsim import search
from lmmsim.search import capacity

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "reproduce" / "easerve" / "image-llava34b.yaml"
PLATFORMS = (("rtx-6000-ada", "pcie"), ("a100-sxm-80gb", "nvlink"))
SHIPPED = capacity.prune


def paper_rule(allocs, caps, rate, **kw):
    """The balance rule alone: top K of the undominated allocations within the factor of the best score."""
    r = SHIPPED(allocs, caps, rate, **kw)
    factor, top_k = kw.get("factor", capacity.PRUNING_FACTOR), kw.get("top_k", capacity.TOP_K)
    ranked = sorted(r.undominated, key=lambda c: (c.score, c.max_load, -c.alloc.gpus, c.alloc.sort_key()))
    near = [c for c in ranked if c.score <= factor * ranked[0].score + 1e-12]
    return capacity.PruneResult(r.feasible, r.undominated, r.undominated, False, near, near[:top_k])


def main() -> None:
    for rule, prune in (("shipped", SHIPPED), ("paper's rule only", paper_rule)):
        runner.prune = prune
        for gpu, link in PLATFORMS:
            raw, scn, base = search.read_raw(SCENARIO, [f"hardware.gpu={gpu}", f"hardware.interconnect={link}"])
            problem = search.Problem(raw, scn, base, rate=5, trial_requests=500)
            kept = []
            result = search.search(problem, method="has", budget=30, jobs=2, seed=0,
                                   log=lambda m: kept.append(m) if m.startswith("Stage 1: ") and "kept" in m else None)
            best = result.best or {}
            print(f"{rule}, {gpu}: {kept[-1] if kept else ''}; best {best.get('throughput_rps', float('nan')):.3f} req/s")
    runner.prune = SHIPPED


if __name__ == "__main__":
    main()

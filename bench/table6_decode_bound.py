"""What moved EAServe's Table 6 (SM partitioning ablation) in the reliability change.

The decode worker used to take every prefilled request whose KV blocks it could
reserve, so its batch grew past ``policy.batching.max_running`` (256) at the
table's 50 req/s. It now reserves a place among ``max_running`` with the blocks
(``ContinuousBatchingScheduler.reserve``). This script runs Table 6's three SM
settings over a few seeds with the bound at 256 (the scenario's, vLLM's default
``max_num_seqs`` on a 48 GB GPU), at 1024 (vLLM's default on >= 70 GB GPUs) and
without it (the old rule, patched back in), and prints P99 TTFT and the
differences the claims read.

    python bench/table6_decode_bound.py [--seeds 0 1 2] [--valve 0.05]    # ~25 s

The SM split's effect also depends on the encode batches: ``--valve 0.05`` reruns it with the
Poisson-gap valve that decided batches before issue 17 (small batches), the default 2 s lets the gap
rule decide (batches of ~B).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from lmmsim.engine.kv_cache import blocks_for
from lmmsim.engine.scheduler import ContinuousBatchingScheduler
from lmmsim.results import run_scenario
from lmmsim.scenario import load_scenario

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "reproduce" / "easerve" / "audio-ultravox27b.yaml"
MODES = ("none", "static", "dynamic")
BOUNDED = ContinuousBatchingScheduler.reserve


def unbounded(self, seq) -> bool:
    """The old reservation: KV blocks only, any number of requests."""
    need = blocks_for(seq.num_computed, self.block_size)
    if need > self.pool.num_free:
        return False
    self.pool.allocate(need)
    seq.num_blocks = need
    self.num_reserved += 1
    return True


def p99(mode: str, seed: int, max_running: int) -> float:
    scn, base = load_scenario(SCENARIO, ["system=easerve", "workload.arrival.rate=50", "workload.num_requests=2500",
                                         f"deployment.local_prefill.sm_partitioning={mode}", f"seed={seed}",
                                         f"policy.batching.max_running={max_running}"])
    return run_scenario(scn, base).summary["ttft_s"]["p99"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--valve", type=float, default=None,
                    help="the Poisson-gap safety valve in s for every encoder (default: the dispatcher's, 2 s; "
                         "0.05: the default before issue 17)")
    args = ap.parse_args()
    if args.valve is not None:
        from lmmsim.policies.encode_dispatch import PoissonGapDispatcher

        PoissonGapDispatcher.valve_s = lambda self, rate: args.valve
    print(f"{'max_running':14s}{'seed':>5s}" + "".join(f"{m + ' P99 s':>14s}" for m in MODES)
          + f"{'none/dyn-1':>12s}{'static/dyn-1':>14s}")
    # the scenario's bound (vLLM's default max_num_seqs for a 48 GB GPU), vLLM's default for >= 70 GB, the old rule
    variants = (("256", 256, BOUNDED), ("1024", 1024, BOUNDED), ("none (old)", 256, unbounded))
    for label, max_running, reserve in variants:
        ContinuousBatchingScheduler.reserve = reserve
        try:
            for seed in args.seeds:
                vals = {m: p99(m, seed, max_running) for m in MODES}
                print(f"{label:14s}{seed:5d}" + "".join(f"{vals[m]:14.4f}" for m in MODES)
                      + f"{vals['none'] / vals['dynamic'] - 1:+12.2%}{vals['static'] / vals['dynamic'] - 1:+14.2%}")
        finally:
            ContinuousBatchingScheduler.reserve = BOUNDED
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

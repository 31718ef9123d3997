"""EAServe's Poisson-gap dispatch against its safety valve (``max_age_s``): which trigger decides, and
how much the claims depend on the valve.

The gap rule waits, after each arrival, for the p-quantile of an exponential gap at the estimated rate
(``g = -ln(1 - p) / rate``, p = 0.8) before dispatching a partial batch; the valve dispatches once the
oldest request has waited ``max_age_s``. The paper gives no valve value. Until issue 17 the default was
50 ms, which fired before g at every reproduction rate (g = 1.6 s at 1 req/s per encoder): the rule acted
as a fixed 50 ms timeout. Today's default, 2 s, is twice the batch-fill horizon the paper's B cap implies
(lmmsim/policies/encode_dispatch.py); no valve at all lets P99 TTFT explode at low load.

Part 1 runs the HAS-tuned EAServe image configuration (fig10-image.yaml) and the EAServe preset (B = 10)
at a near-idle, a moderate and a saturating rate for several valves, and prints throughput, TTFT and the
share of batches each trigger dispatched (full batch, gap, valve). Part 2 (``--claims``) reruns the
reproduction's figures whose claims involve EAServe's dispatch with every Poisson-gap valve set to each
value, and prints each claim's value per valve:

    python bench/poisson_gap_valve.py                       # part 1, ~10 s
    python bench/poisson_gap_valve.py --claims --seeds 3    # part 2, ~5 min on 2 cores
"""

from __future__ import annotations

import argparse
import json
import math
import re
import tempfile
from pathlib import Path

import yaml
from easerve_host import report_column  # bench/, on the path when run as a script

from lmmsim.policies.encode_dispatch import VALVE_S, PoissonGapDispatcher
from lmmsim.results import run_scenario
from lmmsim.scenario import load_scenario

HERE = Path(__file__).resolve().parent.parent / "scenarios" / "reproduce" / "easerve"
VALVES = (0.05, 0.5, VALVE_S, 5.0, None)  # None: no valve (the gap rule and B alone)
RATES = (0.05, 2.0, 5.0)
CLAIM_FIGURES = ("fig9-image", "fig10-image", "table7")


def _has_deployment() -> dict:
    sweep = yaml.safe_load((HERE / "fig10-image.yaml").read_text())
    params = sweep["axes"][0]["params"]
    return params["deployment"][params["name"].index("easerve-has")]


def _triggers(run) -> dict[str, float]:
    counts = {"full": 0, "gap": 0, "valve": 0}
    for enc in run.built.simulation.frontend.encoders:
        for k, v in getattr(enc.dispatcher, "triggers", {}).items():
            counts[k] += v
    n = sum(counts.values()) or 1
    return {k: v / n for k, v in counts.items()}


def part1() -> None:
    has = _has_deployment()
    for label, sets in (("easerve-has", [f"deployment={json.dumps(has)}"]), ("easerve preset, B = 10", ["system=easerve"])):
        for rate in RATES:
            for valve in VALVES:
                PoissonGapDispatcher.valve_s = (lambda self, r, v=valve: math.inf if v is None else v)
                scn, base = load_scenario(HERE / "image-llava34b.yaml", [*sets, f"workload.arrival.rate={rate}"])
                run = run_scenario(scn, base)
                s, t = run.summary, _triggers(run)
                print(f"{label}, rate {rate:g} req/s, valve {valve if valve is not None else 'none'}: throughput "
                      f"{s['throughput']['requests_per_s']:.2f} req/s, TTFT mean {s['ttft_s']['mean']:.2f} s, "
                      f"P99 {s['ttft_s']['p99']:.2f} s; batches by full {t['full']:.0%}, gap {t['gap']:.0%}, "
                      f"valve {t['valve']:.0%}", flush=True)
    PoissonGapDispatcher.valve_s = _DEFAULT_VALVE


def part2(seeds: int, jobs: int) -> None:
    from lmmsim.reproduce import reproduce

    table: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for valve in (0.05, 0.5, VALVE_S, 5.0):
            PoissonGapDispatcher.valve_s = (lambda self, r, v=valve: v)
            report = reproduce("easerve", Path(tmp) / f"valve-{valve}", figures=list(CLAIM_FIGURES), seeds=seeds,
                               jobs=jobs, force=True)
            text = report.read_text()
            paper = report_column(text, 2)
            for (figure, claim), value in report_column(text, 3).items():
                if figure in CLAIM_FIGURES:
                    table.setdefault(f"{figure} | {claim} | {paper[figure, claim]}", {})[f"{valve:g} s"] = re.sub(
                        r" \(n=\d+\)", "", value)
    PoissonGapDispatcher.valve_s = _DEFAULT_VALVE
    cols = [f"{v:g} s" for v in (0.05, 0.5, VALVE_S, 5.0)]
    print(f"| figure | claim | paper | {' | '.join('valve ' + c for c in cols)} |")
    print("|---|---|---:|" + "---:|" * len(cols))
    for key, row in table.items():
        print(f"| {key} | " + " | ".join(row.get(c, "-") for c in cols) + " |")


_DEFAULT_VALVE = PoissonGapDispatcher.valve_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--claims", action="store_true", help="part 2: the claims over valves")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=1)
    args = ap.parse_args()
    if args.claims:
        part2(args.seeds, args.jobs)
    else:
        part1()


if __name__ == "__main__":
    main()

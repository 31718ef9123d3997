"""What EAServe's Poisson-gap dispatch does with and without its safety valve (``max_age_s``).

The gap rule waits, after each arrival, for the p-quantile of an exponential gap at the estimated rate
(``g = -ln(1 - p) / rate``; p = 0.8) before dispatching a partial batch; the valve dispatches once the
oldest request has waited ``max_age_s``. The paper gives no valve value. With the default 50 ms the
valve always fires before g at the reproduction's rates (g = 1.6 s at 1 req/s per encoder), so the rule
acts as a fixed 50 ms timeout. This runs the HAS-tuned EAServe image configuration (fig10-image.yaml) at
a near-idle, a moderate and a saturating rate for several valve values, and prints throughput and TTFT:

    python bench/poisson_gap_valve.py            # ~3 s
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import yaml

from lmmsim.results import run_scenario
from lmmsim.scenario import load_scenario

HERE = Path(__file__).resolve().parent.parent / "scenarios" / "reproduce" / "easerve"
VALVES = (0.05, 0.5, 2.0, None)  # None: no valve (the gap rule and B alone)
RATES = (0.05, 2.0, 5.0)


def main() -> None:
    sweep = yaml.safe_load((HERE / "fig10-image.yaml").read_text())
    has = sweep["axes"][0]["params"]["deployment"][sweep["axes"][0]["params"]["name"].index("easerve-has")]
    workers = has["encoder"]["workers"]
    for rate in RATES:
        gap = -math.log(0.2) / (rate / workers)
        for valve in VALVES:
            dep = json.loads(json.dumps(has))
            dep["encoder"]["dispatch"]["max_age_s"] = 1e9 if valve is None else valve
            scn, base = load_scenario(HERE / "image-llava34b.yaml",
                                      [f"deployment={json.dumps(dep)}", f"workload.arrival.rate={rate}"])
            s = run_scenario(scn, base).summary
            print(f"rate {rate:g} req/s (g ~ {gap:.2f} s per encoder), valve {valve if valve is not None else 'none'}: "
                  f"throughput {s['throughput']['requests_per_s']:.2f} req/s, TTFT mean {s['ttft_s']['mean']:.2f} s, "
                  f"P99 {s['ttft_s']['p99']:.2f} s")


if __name__ == "__main__":
    main()

"""Simulator speed of every serving system on its own scenario (not a test).

    taskset -c 1 python bench/systems_speed.py                  # 3,000 requests each
    taskset -c 1 python bench/systems_speed.py --requests 5000 --systems gllm,vllm-pp

Each system runs the scenario it is compared on (``scenarios/baselines``, RServe's MMMU file,
EAServe's image file, RPS-Serve on the LLaVA-72B mix) at the scenario's own arrival rate with
``--requests`` requests, each in a fresh process whose imports (lmmsim, pandas, scikit-learn) are
done before the clock starts: a run's cost-model memos, fits and RPS-Serve's prepared admission
model are shared within a process, so one system's run would warm the next. Prints the full-run
rate (build incl. RPS-Serve's profiling, loop, results) and the loop-only rate in simulated
requests per wall-second, SimPy events per request and engine steps per request. Run it pinned
to one core on an idle machine; the issue's bar is 3,000 req/s full-run. SimPy's raw event rate
on the same core, before and after, shows the machine's speed at the time (a shared host's drifts). ``--prediction-cache``
measures each system with ``LMMSIM_PREDICTION_CACHE`` warm (an unmeasured run fills it first);
``--repeat N`` runs each system N times and shows the fastest. The hot modules run compiled where
the install built them (lmmsim/native.py; the table's first line says how many are fresh);
``--pure`` measures the pure-Python modules instead (``LMMSIM_NATIVE=0``), and ``--compare-pure``
alternates the two, run by run, showing both.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

SYSTEMS = {
    "vllm": ("scenarios/baselines/rps-mix-internvl38b-vllm.yaml", []),
    "vllm-pp": ("scenarios/baselines/rps-mix-internvl38b-vllm-pp.yaml", []),
    "gllm": ("scenarios/baselines/rps-mix-internvl38b-gllm.yaml", []),
    "gllm-epd": ("scenarios/baselines/rps-mix-internvl38b-gllm-epd.yaml", []),
    "modserve": ("scenarios/baselines/rps-mix-internvl38b-modserve.yaml", []),
    "dynamo": ("scenarios/baselines/rps-mix-internvl38b-dynamo.yaml", []),
    "rserve": ("scenarios/baselines/rserve-mmmu-qwen72b-rserve.yaml", []),
    "easerve": ("scenarios/reproduce/easerve/image-llava34b.yaml", []),
    "rps-serve": ("scenarios/rps-mix-llava72b-h100x4.yaml", ["system=rps-serve"]),
}


def measure(path: str, overrides: list[str], n: int) -> dict:
    import sklearn.cluster  # noqa: F401  (RPS-Serve's classifier: an import, not the run's cost)

    from lmmsim.results import run_scenario
    from lmmsim.scenario import load_scenario

    scn, base = load_scenario(path, [*overrides, f"workload.num_requests={n}"])
    t0 = time.perf_counter()
    s = run_scenario(scn, base).summary
    wall = time.perf_counter() - t0
    return {"full": n / wall, "loop": n / s["sim_wall_time_s"], "events": s["sim_events"] / n,
            "steps": s["sim_steps"] / n, "finished": s["num_finished"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated: " + ", ".join(SYSTEMS))
    ap.add_argument("--prediction-cache", action="store_true",
                    help="measure with LMMSIM_PREDICTION_CACHE warm: a temporary folder one unmeasured run "
                         "per system fills first")
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs per system, each in a fresh process; the table shows the fastest (a busy "
                         "host only ever slows a run down)")
    ap.add_argument("--pure", action="store_true", help="the pure-Python modules (LMMSIM_NATIVE=0)")
    ap.add_argument("--compare-pure", action="store_true",
                    help="each system compiled and pure-Python, alternating run by run: both columns")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: measure one system, print JSON
    args = ap.parse_args()
    if args.one:
        print(json.dumps(measure(*SYSTEMS[args.one], args.requests)))
        return 0
    with tempfile.TemporaryDirectory(prefix="systems_speed_") as tmp:
        env = {**os.environ, **({"LMMSIM_PREDICTION_CACHE": tmp} if args.prediction_cache else {}),
               **({"LMMSIM_NATIVE": "0"} if args.pure else {})}
        table(args, env)
    return 0


def table(args, env: dict) -> None:
    from vidur_compare import simpy_rate  # (this folder) the machine's speed, as the Vidur comparison reads it

    # a shared host's speed drifts by a fifth through a day: compare tables taken at similar rates
    print(f"SimPy raw event rate on this core: {simpy_rate() / 1e6:.2f} M events/s")
    print(f"compiled hot modules: {native_line(env)}")
    pure_env = {**env, "LMMSIM_NATIVE": "0"}
    print(f"{'system':10s} {'full req/s':>10s} {'loop req/s':>10s} {'events/req':>10s} {'steps/req':>9s}"
          + (f" {'pure full':>10s} {'pure loop':>10s}" if args.compare_pure else ""))
    for name in args.systems.split(","):
        SYSTEMS[name]  # a KeyError names an unknown system before any run
        cmd = [sys.executable, __file__, "--one", name, "--requests", str(args.requests)]
        if args.prediction_cache:
            subprocess.run(cmd, check=True, capture_output=True, env=env)  # fills the cache
        runs, pure = [], []
        for _ in range(max(args.repeat, 1)):  # alternating, so that both see the host alike
            runs.append(one_run(cmd, env))
            if args.compare_pure:
                pure.append(one_run(cmd, pure_env))
        m = best(runs)
        print(f"{name:10s} {m['full']:10,.0f} {m['loop']:10,.0f} {m['events']:10.1f} {m['steps']:9.2f}"
              + (f" {best(pure)['full']:10,.0f} {best(pure)['loop']:10,.0f}" if pure else "")
              + ("" if m["finished"] == args.requests else f"   ({m['finished']} finished)"))
    print(f"SimPy raw event rate on this core, after: {simpy_rate() / 1e6:.2f} M events/s")


def one_run(cmd: list, env: dict) -> dict:
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def best(runs: list[dict]) -> dict:
    return {**runs[0], "full": max(r["full"] for r in runs), "loop": max(r["loop"] for r in runs)}


def native_line(env: dict) -> str:
    """How many of the hot modules run compiled in a run with ``env`` (lmmsim.native)."""
    code = ("import json, lmmsim.native as n, importlib; [importlib.import_module(m) for m in n.MODULES]; "
            "print(json.dumps(n.status()))")
    st = json.loads(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                                   env=env).stdout)
    if st["off"]:
        return "off (LMMSIM_NATIVE=0): pure Python"
    return f"{st['compiled']} of {st['of']}" + (f" (stale, run as Python: {', '.join(st['stale'])})"
                                               if st["stale"] else "")


if __name__ == "__main__":
    sys.exit(main())

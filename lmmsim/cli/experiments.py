"""Commands that run many simulations: ``sweep``, ``reproduce``, ``search``."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from lmmsim.cli.summary import fmt


def cmd_sweep(args) -> int:
    """Exit 0 when every run is ok, 1 when any failed (the others still ran)."""
    from lmmsim.sweep.runner import describe_failures, run_sweep

    out = Path(args.output)
    frame = run_sweep(Path(args.sweep), out, jobs=args.jobs, executor=args.executor, address=args.address,
                      retry_failed=args.retry_failed, progress=not args.quiet)
    failed = int((frame["status"] != "ok").sum()) if "status" in frame else 0
    print(f"{len(frame)} runs ({failed} failed); results in {out / 'results.parquet'}")
    failures = describe_failures(frame, out)
    if failures is None:
        return 0
    print(f"lmmsim: sweep: {failures}", file=sys.stderr)
    return 1


def cmd_reproduce(args) -> int:
    from lmmsim.reproduce import reproduce

    out = Path(args.output)
    report = reproduce(args.paper, out, quick=args.quick, jobs=args.jobs, figures=args.figures, force=args.force,
                       sets=tuple(args.overrides), seeds=args.seeds, progress=not args.quiet)
    print(report.read_text())
    print(f"figures and report in {out}/")
    return 0


def cmd_search(args) -> int:
    from lmmsim import search

    out = Path(args.output)
    search.check_output_dir(out, args.force)  # fail before searching, not after
    if args.method == "has":
        search.require_optuna()
    raw, scn, base_dir = search.read_raw(args.scenario, args.overrides)
    problem = search.Problem(raw, scn, base_dir, rate=args.rate, trial_requests=args.trial_requests,
                             deploy_s=search.DEPLOY_S if args.deploy_cost is None else args.deploy_cost)
    t0 = time.perf_counter()
    result = search.search(problem, method=args.method, budget=args.budget, jobs=args.jobs, seed=args.seed,
                           executor=args.executor, address=args.address, coordinate_start=args.start,
                           log=(lambda m: None) if args.quiet else (lambda m: print(m, flush=True)))
    wall = time.perf_counter() - t0
    paths = search.write_outputs(result, out, force=args.force)
    if args.quiet:
        return 0
    s = result.summary
    caps = s.get("capacities")
    if caps:
        enc = caps["encode_rps"]
        print(f"capacities (req/s per worker): encode {'inf' if enc is None else f'{enc:.2f}'} "
              f"(TP1, B={caps['encode_batch']}); prefill "
              + ", ".join(f"TP{t} {c:.3f}" for t, c in caps["prefill_rps"].items()) + "; decode "
              + ", ".join(f"TP{t} {c:.3f}" for t, c in caps["decode_rps"].items()))
    alloc = s["allocations"]
    line = f"allocations: {alloc['feasible']} feasible of {alloc['enumerated']}"
    if "pruning" in s:
        pr = s["pruning"]
        line += (f", {pr['undominated']} undominated, {pr['within_capacity']} within capacity"
                 + (" (none under load 1: least loaded kept)" if pr["capacity_fallback"] else "")
                 + f", kept {pr['kept']}: " + ", ".join(
                     f"{c['alloc']} (score {c['score']:.2f}, max load {c['max_load']:.2f})"
                     for c in pr["kept_allocations"]))
    print(line)
    b = s["best"]
    if b is None:
        print("no trial finished")
    else:
        print(f"best ({s['method']}, trial {b['trial']} of {s['trials']}, stop: {s['stop_reason']}): {b['alloc']}, "
              f"B={b['batch_bound']}, s={b['offload_s']:g} -> {b['throughput_rps']:.3f} req/s, mean TTFT "
              f"{fmt(b['ttft_mean_s'])} s, mean TPOT {fmt(b['tpot_mean_s'], 1e3, 1)} ms")
    print(f"rate {s['rate_rps']:g} req/s; simulated search cost {s['sim_cost_s']:.0f} s; wall {wall:.1f} s")
    print(f"results in {out}/ ({', '.join(p.name for p in paths.values())})")
    return 0

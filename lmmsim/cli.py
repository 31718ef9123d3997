"""Command line: ``lmmsim run | validate | workload | list``.

Any :class:`~lmmsim.errors.UserError` becomes one line on stderr and exit
code 2; nothing a user can get wrong prints a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from lmmsim import __version__
from lmmsim.errors import StuckRunError, UserError

EXIT_USER_ERROR = 2
EXIT_STUCK_RUN = 3  # the simulation deadlocked: requests left that no event can ever move
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a Unix tool whose reader closed the pipe


# ------------------------------------------------------------------- helpers
def _scenario_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("scenario", help="scenario YAML file")
    p.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="override a scenario key, e.g. --set workload.arrival.rate=4 (repeatable; value parsed as YAML)",
    )


def _default_out_dir(name: str) -> Path:
    """``results/<name>``, or the first ``results/<name>-N`` not taken: never overwrite."""
    base = Path("results") / name
    candidate, n = base, 1
    while candidate.exists():
        n += 1
        candidate = base.with_name(f"{base.name}-{n}")
    return candidate


class _Progress:
    """A progress bar on stderr that appears only once a run passes one second."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.t0 = time.perf_counter()
        self.bar = None
        self.task = None

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        if self.bar is None:
            if time.perf_counter() - self.t0 < 1.0:
                return
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

            self.bar = Progress(
                "[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                TimeRemainingColumn(), console=Console(stderr=True), transient=True,
            )
            self.bar.start()
            self.task = self.bar.add_task("simulating", total=total)
        self.bar.update(self.task, completed=done)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def _fmt(x, scale: float = 1.0, digits: int = 3) -> str:
    return "-" if x is None else f"{x * scale:.{digits}f}"


def print_summary(summary: dict, scn, out: Path | None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(
        title=f"{scn.name}: {scn.system} / {scn.model} / {scn.hardware.count}x {scn.hardware.gpu}",
        caption="TTFT, E2E in s; TPOT in ms", min_width=60,
    )
    for col in ("", "n", "done", "TTFT", "TTFT p99", "TPOT", "TPOT p99", "E2E", "SLO"):
        table.add_column(col, justify="left" if not col else "right", no_wrap=True)

    def row(name: str, block: dict, n: int, done: int) -> None:
        slo = block.get("slo_attainment")
        table.add_row(
            name, str(n), str(done), _fmt(block["ttft_s"]["mean"]), _fmt(block["ttft_s"]["p99"]),
            _fmt(block["tpot_s"]["mean"], 1e3, 1), _fmt(block["tpot_s"]["p99"], 1e3, 1),
            _fmt(block["e2e_s"]["mean"]), "-" if slo is None else f"{slo:.1%}",
        )

    for modality, block in summary["by_modality"].items():
        row(modality, block, block["num_requests"], block["num_finished"])
    row("all", summary, summary["num_requests"], summary["num_finished"])
    console.print(table)
    tp = summary["throughput"]
    util = summary["gpu_utilization"]
    console.print(
        f"throughput {_fmt(tp['requests_per_s'], digits=2)} req/s, "
        f"{_fmt(tp['input_tokens_per_s'], digits=0)} in tok/s, {_fmt(tp['output_tokens_per_s'], digits=0)} out tok/s; "
        f"goodput {_fmt(summary['goodput_requests_per_s'], digits=2)} req/s; "
        f"GPU busy {util['mean']:.1%}; preemptions {summary['num_preemptions']}"
    )
    extra = ""
    if summary["num_rejected"] or summary["num_unfinished"] or summary.get("num_not_arrived"):
        extra = (f"; rejected {summary['num_rejected']} (see reject_reason), unfinished at the horizon "
                 f"{summary['num_unfinished']}, arriving after it {summary.get('num_not_arrived', 0)}")
    console.print(
        f"simulated {summary['sim_end_at_s']:.1f} s in {summary['sim_wall_time_s']:.2f} s wall "
        f"({summary['sim_events']} events){extra}"
    )
    kv = [f"{pool} {entry['kv_capacity_tokens_per_worker']:,}" for pool, entry in
          summary.get("deployment", {}).get("pools", {}).items() if "kv_capacity_tokens_per_worker" in entry]
    if kv:
        console.print(f"KV cache per worker (tokens): {', '.join(kv)}")
    cm = summary.get("cost_model", {})
    if cm.get("fallback_classes"):
        console.print(f"cost model: fitted ({cm['fit']}); roofline v0 for {', '.join(cm['fallback_classes'])} "
                      f"(no profile data)")
    if out is not None:
        console.print(f"results in {out}/")


# ------------------------------------------------------------------ commands
def cmd_run(args) -> int:
    from lmmsim.results import prepare_output_dir, run_scenario, write_results
    from lmmsim.scenario import load_scenario

    scn, base_dir = load_scenario(args.scenario, args.overrides)
    out = Path(args.output) if args.output else _default_out_dir(scn.name)
    prepare_output_dir(out, args.force)  # fail before simulating, not after
    progress = _Progress(enabled=not args.quiet)
    try:
        run = run_scenario(scn, base_dir, progress=progress, trace=args.trace)
    finally:
        progress.close()
    write_results(run, scn, out, force=args.force, csv=args.format == "csv")
    if not args.quiet:
        print_summary(run.summary, scn, out)
    return 0


def cmd_admission_profile(args) -> int:
    from lmmsim.build import simulate_requests
    from lmmsim.rps.profiler import profile_isolated
    from lmmsim.scenario import load_scenario

    scn, base_dir = load_scenario(args.scenario, args.overrides)
    out = Path(args.output) if args.output else None
    if out is not None and out.exists() and not args.force:
        raise UserError("--output", f"{out} exists; pass --force to overwrite it")
    df = profile_isolated(scn, base_dir, simulate=simulate_requests, num_requests=args.requests)
    print(f"{len(df)} isolated runs of {scn.name} ({scn.system}, {scn.model}, {scn.hardware.count}x "
          f"{scn.hardware.gpu}); latency = TTFT of a request alone (encode + prefill)")
    print(f"{'modality':<9}{'n':>5}{'mean s':>10}{'p50 s':>10}{'p99 s':>10}{'encode s':>10}{'tokens':>9}")
    for modality, part in df.groupby("modality", sort=True):
        lat = part["latency_s"]
        print(f"{modality:<9}{len(part):>5}{lat.mean():>10.3f}{lat.quantile(0.5):>10.3f}{lat.quantile(0.99):>10.3f}"
              f"{part['encode_s'].mean():>10.3f}{part['prefill_tokens'].mean():>9.0f}")
    if out is not None:
        from lmmsim.outputs import atomic_path

        with atomic_path(out) as tmp:
            df.to_csv(tmp, index=False)
        print(f"profile in {out} (usable as policy.queue.profile)")
    return 0


def cmd_validate(args) -> int:
    from lmmsim.build import build
    from lmmsim.scenario import load_scenario

    scn, base_dir = load_scenario(args.scenario, args.overrides)
    built = build(scn, base_dir)
    mix: dict[str, int] = {}
    for r in built.requests:
        mix[r.modality] = mix.get(r.modality, 0) + 1
    print(f"{args.scenario}: valid")
    print(f"  system {scn.system}, model {built.model.name}, {scn.hardware.count}x {built.gpu.name}, "
          f"deployment {scn.deployment.kind}")
    for pool, workers in built.placement.items():
        line = f"  {pool}: {len(workers)} worker(s) on GPUs {[list(w) for w in workers]}"
        mem = built.memory.get(pool)
        if mem is not None:
            line += (f"; per GPU weights {mem.weight_bytes / 2**30:.1f} GiB, activations "
                     f"{mem.activation_bytes / 2**30:.1f} GiB, KV {mem.kv_bytes / 2**30:.1f} GiB = "
                     f"{mem.kv_capacity_tokens} tokens per worker")
        print(line)
    print(f"  workload: {len(built.requests)} requests {dict(sorted(mix.items()))}, max_model_len "
          f"{built.max_model_len}; {len(built.rejected)} refused at arrival")
    for reason, ids in _group_reasons(built.rejected):
        print(f"  warning: {len(ids)} request(s) will be refused at arrival (ids {_some(ids)}): {reason}")
    from lmmsim.results import probe_extrapolated_share

    share = probe_extrapolated_share(built)
    if share is not None:  # a typical step set, see probe_extrapolated_share
        print("  cost model: share of predicted time extrapolated outside the fitted data (typical steps): "
              + ", ".join(f"{c} {v:.0%}" for c, v in share.items()))
    return 0


def _group_reasons(rejected: dict[int, str]) -> list[tuple[str, list[int]]]:
    """Refusals grouped by kind of reason (the text before its numbers), largest group first."""
    import re

    groups: dict[str, tuple[str, list[int]]] = {}
    for rid, reason in sorted(rejected.items()):
        kind = re.sub(r"[\d.]+", "#", reason)
        groups.setdefault(kind, (reason, []))[1].append(rid)
    return sorted(groups.values(), key=lambda g: -len(g[1]))


def _some(ids: list[int], n: int = 5) -> str:
    return ", ".join(map(str, ids[:n])) + (", ..." if len(ids) > n else "")


def cmd_plot(args) -> int:
    out = Path(args.output)
    if out.suffix not in (".png", ".pdf"):
        raise UserError("-o", f"figure must end in .png or .pdf, got {out.name!r}")
    if out.exists() and not args.force:
        raise UserError("-o", f"{out} exists; pass --force to overwrite it")
    source = Path(args.results)
    if args.kind == "timeline":
        from lmmsim.plotting.timeline import plot_timeline

        trace = source / "trace.json" if source.is_dir() else source
        if not trace.exists():
            raise UserError("RESULTS", f"{trace} not found; run with `lmmsim run ... --trace` first")
        plot_timeline(trace, out, first_n=args.first, force=args.force)
    else:
        from lmmsim.plotting.figures import KINDS, plot

        if args.kind not in KINDS:
            raise UserError("KIND", f"unknown figure {args.kind!r}; valid: 'timeline', "
                            + ", ".join(repr(k) for k in KINDS))

        if not source.exists():
            raise UserError("RESULTS", f"{source} not found; give a sweep folder or its results.parquet")
        options = {"x": args.x, "series": args.series, "where": args.where, "stat": args.stat,
                   "metric": args.metric, "modality": args.modality, "normalize": args.normalize,
                   "baseline": args.baseline, "group": args.group, "run_id": args.run_id, "bins": args.bins,
                   "log_x": args.log_x or None}
        plot(args.kind, source, out, force=args.force, **{k: v for k, v in options.items() if v is not None})
    print(f"wrote {out}")
    return 0


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
    report = reproduce(args.paper, out, quick=args.quick, jobs=args.jobs, figures=args.figures, force=args.force)
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
              f"{_fmt(b['ttft_mean_s'])} s, mean TPOT {_fmt(b['tpot_mean_s'], 1e3, 1)} ms")
    print(f"rate {s['rate_rps']:g} req/s; simulated search cost {s['sim_cost_s']:.0f} s; wall {wall:.1f} s")
    print(f"results in {out}/ ({', '.join(p.name for p in paths.values())})")
    return 0


def cmd_workload(args) -> int:
    from lmmsim import catalog
    from lmmsim.scenario import load_scenario
    from lmmsim.workload.generator import generate_requests
    from lmmsim.workload.trace import write_trace

    scn, base_dir = load_scenario(args.scenario, args.overrides)
    out = Path(args.output)
    if out.exists() and not args.force:
        raise UserError("-o", f"{out} exists; pass --force to overwrite it")
    if out.suffix not in (".jsonl", ".csv"):
        raise UserError("-o", f"trace file must end in .jsonl or .csv, got {out.name!r}")
    model = catalog.get_model(scn.model)
    requests = generate_requests(scn.workload, model, scn.seed, base_dir)
    from lmmsim.outputs import atomic_path

    with atomic_path(out) as tmp:
        write_trace(requests, tmp)
    print(f"wrote {len(requests)} requests to {out}")
    return 0


def cmd_list(args) -> int:
    from lmmsim import catalog, policies
    from lmmsim.systems import systems

    what = args.what
    if what == "models":
        for name, m in sorted(catalog.models().items()):
            enc = m.encoder.family if m.encoder else "-"
            print(f"{name:28s} {m.llm.num_params / 1e9:6.1f}B LLM  encoder {enc:10s} inputs {','.join(m.modalities)}")
    elif what == "gpus":
        for name, g in sorted(catalog.gpus().items()):
            print(f"{name:16s} {g.peak_bf16_tflops:7.1f} TFLOP/s bf16  {g.hbm_bandwidth_tbs:5.2f} TB/s  "
                  f"{g.memory_gib:5.0f} GiB  links {','.join(g.links)}")
    elif what == "systems":
        for name, s in systems().items():
            print(f"{name:10s} {s.summary} [{s.reference}]")
            if args.verbose:
                for note in s.notes:
                    print(f"{'':10s}   - {note}")
    else:
        for role, table in policies.describe().items():
            for name, summary in table.items():
                print(f"{role:8s} {name:14s} {summary}")
    return 0


def cmd_profile(args) -> int:
    from lmmsim import catalog

    from lmmsim.costmodel import opdata
    from lmmsim.costmodel.composition import COMPOSITION_CSV, COMPOSITION_MODELS
    from lmmsim.outputs import OutputDir

    try:
        import torch

        from lmmsim.profiler.composition import measure_composition
        from lmmsim.profiler.reference import REFERENCE_MODELS
        from lmmsim.profiler.run import output_files, profile
    except ImportError as exc:  # torch is optional
        raise UserError("profile", f"needs torch ({exc.name} missing): pip install 'lmmsim[profile]'") from None
    catalog.get_gpu(args.hardware, key="--hardware")
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    if not models:
        raise UserError("--models", "give at least one model name")
    for m in models:
        if m not in REFERENCE_MODELS:
            catalog.get_model(m, key="--models")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise UserError("--device", "cuda: torch sees no CUDA device here (torch.cuda.is_available() is False); "
                                    "valid here: 'cpu'")
    out = Path(args.output or catalog.profiles_dir() / "ops" / args.hardware)
    out_dir = OutputDir(out, force=args.force, key="-o")
    expected = output_files(args.device) + ((COMPOSITION_CSV, COMPOSITION_MODELS) if args.composition else ())
    out_dir.check(*expected)  # a user's file in the way stops us before minutes of measuring, not after
    if args.threads:
        torch.set_num_threads(args.threads)
    with opdata.staged_output(out_dir) as stage:
        profile(args.device, args.hardware, models, stage, quick=args.quick, max_minutes=args.max_minutes,
                command="lmmsim " + " ".join(sys.argv[1:]))
        if args.composition:
            measure_composition(stage, device=args.device, quick=args.quick)
    print(f"profile written to {out}/")
    if (out / "fit" / "model.json").exists():
        print(f"note: {out / 'fit'}/ was fitted to the earlier profile; refit with `lmmsim fit {out} --force`")
    return 0


def _profile_folder(name_or_dir: str) -> Path:
    from lmmsim import catalog

    path = Path(name_or_dir)
    if not path.exists():
        path = catalog.profiles_dir() / "ops" / name_or_dir
    if not path.is_dir():
        raise UserError("PROFILE", f"{name_or_dir} is neither a profile folder nor a name under profiles/ops/")
    return path


def cmd_fit(args) -> int:
    from lmmsim import catalog
    from lmmsim.costmodel import opdata
    from lmmsim.costmodel.fitting import FIT_FILES, derive_classes, fit_profile
    from lmmsim.outputs import OutputDir

    folder = _profile_folder(args.profile)
    meta = opdata.read_meta(folder)
    hardware = args.hardware or meta.get("hardware")
    if not hardware:
        raise UserError("--hardware", f"{folder}/meta.json names no hardware; pass --hardware NAME")
    gpu = catalog.get_gpu(hardware, key="--hardware")
    out = Path(args.out) if args.out else folder / "fit"
    if out.resolve() == folder.resolve():  # its CSVs are the inputs, never outputs to replace or prune
        raise UserError("--out", f"{out} is the profile folder itself; give the fit a folder of its own "
                                 f"(default {folder / 'fit'})")
    if args.derive_from and not (Path(args.derive_from) / "model.json").is_file():
        raise UserError("--derive-from", f"{args.derive_from} holds no model.json; give a fit folder "
                                         "(e.g. profiles/ops/a100-sxm-80gb/fit)")
    out_dir = OutputDir(out, force=args.force, key="--out")
    out_dir.check(*FIT_FILES)  # fail before fitting, not after
    derived: list[str] = []
    with opdata.staged_output(out_dir) as stage:
        metrics = fit_profile(folder, gpu, out=stage)
        if args.derive_from:
            derived = [c for c in opdata.FITTED_CLASSES if c not in metrics["classes"]]
            try:
                if derived:
                    derive_classes(Path(args.derive_from), stage, derived, target_gpu=gpu.name)
            except ValueError as err:
                raise UserError("--derive-from", str(err)) from None
    print(f"fitted on {gpu.name}; model and report in {out}/")
    _print_fit_table(metrics["classes"])
    if derived:
        print(f"derived from {args.derive_from} (its fitted rooflines at {gpu.name}'s peaks): {', '.join(derived)}")
    for cls, why in metrics.get("skipped", {}).items():
        if not args.derive_from:
            print(f"  {cls}: not fitted ({why}); runs use the roofline v0 for it")
    return 0


def _print_fit_table(classes: dict) -> None:
    print(f"  {'class':18s} {'rows':>7s} {'model':>8s} {'CV MAPE':>8s} {'held-out MAPE':>14s} {'P95':>7s}")
    for cls, m in classes.items():
        print(f"  {cls:18s} {m['rows']:7d} {m['chosen']:>8s} {m['chosen_cv_mape_pct']:7.1f}% "
              f"{m['heldout_mape_pct']:13.1f}% {m['heldout_p95_pct']:6.1f}%")


def cmd_import_vidur(args) -> int:
    from lmmsim.costmodel import opdata
    from lmmsim.outputs import OutputDir
    from lmmsim.profiler.vidur_import import OUTPUT_FILES, import_vidur

    src = Path(args.source)
    if not (src / "compute").is_dir():
        raise UserError("DIR", f"{src} is not a Vidur profiling folder (no compute/ inside)")
    out = Path(args.output)
    out_dir = OutputDir(out, force=args.force, key="-o")
    out_dir.check(*OUTPUT_FILES)
    with opdata.staged_output(out_dir) as stage:
        rows = import_vidur(src, stage, gpu=args.gpu, network=args.network)
    print(f"imported into {out}/: " + ", ".join(f"{k} {v}" for k, v in rows.items()))
    return 0


def cmd_import_aiconfigurator(args) -> int:
    from lmmsim.costmodel import opdata
    from lmmsim.outputs import OutputDir
    from lmmsim.profiler.aiconfigurator_import import OUTPUT_FILES, import_aiconfigurator

    classes = [c.strip() for c in args.classes.split(",") if c.strip()] if args.classes else None
    out_dir = OutputDir(Path(args.output), force=args.force, key="-o")
    out_dir.check(*OUTPUT_FILES)
    command = " ".join(["lmmsim import-aiconfigurator", f"--gpu {args.gpu}", f"--backend {args.backend}",
                        *(f"--{k} {getattr(args, k)}" for k in ("version", "kernel", "classes", "base")
                          if getattr(args, k)), *(["--append"] if args.append else []), f"-o {args.output}"])
    with opdata.staged_output(out_dir) as stage:
        rows = import_aiconfigurator(stage, gpu=args.gpu, backend=args.backend, version=args.version,
                                     kernel=args.kernel, classes=classes, base=args.base, append=args.append,
                                     command=command)
    print(f"imported into {args.output}/: " + ", ".join(f"{k} {v}" for k, v in rows.items()))
    return 0


def cmd_validate_costmodel(args) -> int:
    import json

    from lmmsim import catalog
    from lmmsim.costmodel import opdata
    from lmmsim.costmodel.composition import composition_report
    from lmmsim.costmodel.fitting import validate

    folder = _profile_folder(args.profile)
    fit = folder / "fit"
    if not (fit / "model.json").exists():
        raise UserError("PROFILE", f"{folder} has no fit; run `lmmsim fit {args.profile}` first")
    doc = json.loads((fit / "model.json").read_text())
    has_data = any(opdata.csv_path(folder, c).exists() for c in opdata.FITTED_CLASSES)
    if has_data:
        print(f"error per operator class, {folder} (held-out columns: points the fit never saw):")
        print(validate(fit, folder).to_string(index=False))
    else:  # a shipped fit without its raw data: the error measured when it was fitted
        print(f"held-out error per operator class recorded at fit time ({fit}/model.json; "
              f"data: {doc.get('profile', {}).get('source', 'see report.md')}):")
        for cls, entry in sorted(doc["classes"].items()):
            m = entry.get("metrics", {})
            if entry.get("derived_from"):
                print(f"  {cls:18s} derived from {entry['derived_from']} (roofline at this GPU's peaks; no data here)")
            else:
                print(f"  {cls:18s} {entry['kind']:>8s} rows {m.get('rows', 0):6d}  held-out MAPE "
                      f"{m.get('heldout_mape_pct', float('nan')):5.1f}%  P95 {m.get('heldout_p95_pct', float('nan')):5.1f}%")
    hardware = doc.get("gpu") or opdata.read_meta(folder).get("hardware")
    if hardware and opdata.csv_path(folder, "composition").exists():
        comp = composition_report(folder, fit, catalog.get_gpu(hardware))
        print("\ncomposed model vs measured forward passes:")
        print(comp.to_string(index=False))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lmmsim", description="Discrete-event simulator of multimodal-LLM inference serving."
    )
    parser.add_argument("--version", action="version", version=f"lmmsim {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("run", help="simulate a scenario and write results", description=(
        "Simulate a scenario. Writes DIR/requests.parquet, DIR/summary.json and DIR/scenario.resolved.yaml."))
    _scenario_args(p)
    p.add_argument("-o", "--output", help="results directory (default: results/<scenario name>[-N])")
    p.add_argument("--force", action="store_true", help="write into a folder that holds files, replacing only those lmmsim wrote there")
    p.add_argument("--format", choices=("parquet", "csv"), default="parquet",
                   help="csv also writes requests.csv beside the parquet file")
    p.add_argument("-q", "--quiet", action="store_true", help="no table, no progress bar")
    p.add_argument("--trace", action="store_true",
                   help="also write DIR/trace.json: every step of every worker (Chrome/Perfetto trace)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("validate", help="check a scenario (keys, catalog names, memory fit) without running it")
    _scenario_args(p)
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("admission-profile",
                       help="RPS-Serve's Workload Profiler: run requests of the scenario's mix one at a time",
                       description="Run requests drawn from the scenario's mix alone on its deployment and "
                                   "report per modality the isolated TTFT (mean, p50, p99: the papers' SLO "
                                   "recipe), encode time and prompt tokens; -o writes the runs as a CSV that "
                                   "policy.queue.profile accepts.")
    _scenario_args(p)
    p.add_argument("-o", "--output", help="CSV of the isolated runs")
    p.add_argument("--requests", type=int, default=240, help="how many requests to profile (default 240)")
    p.add_argument("--force", action="store_true", help="overwrite an existing CSV")
    p.set_defaults(func=cmd_admission_profile)

    p = sub.add_parser("workload", help="export the scenario's generated requests as a replayable trace")
    _scenario_args(p)
    p.add_argument("-o", "--output", required=True, help="trace file (.jsonl or .csv)")
    p.add_argument("--force", action="store_true", help="overwrite an existing trace file")
    p.set_defaults(func=cmd_workload)

    p = sub.add_parser("plot", help="draw a figure from saved results",
                       description="Paper-style figures from saved results: KIND timeline (a run made with "
                                   "--trace) or ttft-vs-rate, throughput-vs-rate, slo-attainment-vs-rate, "
                                   "goodput-vs-slo-scale, line, pareto, cdf, bars, utilization (a sweep folder).")
    p.add_argument("kind", metavar="KIND")
    p.add_argument("results", metavar="RESULTS", help="results directory (a run's, or a sweep's), or its file")
    p.add_argument("-o", "--output", required=True, help="figure file (.png or .pdf)")
    p.add_argument("--first", type=int, default=4, help="timeline: colour the first N requests (default 4)")
    p.add_argument("--x", help="column on the x axis (default: workload.arrival.rate)")
    p.add_argument("--series", help="column that makes one line per value (default: system)")
    p.add_argument("--where", action="append", metavar="KEY=VALUE", help="keep only runs matching (repeatable)")
    p.add_argument("--stat", help="latency statistic: mean, p50, p90, p95, p99, max")
    p.add_argument("--metric", help="column to plot (bars, line, throughput-vs-rate, cdf)")
    p.add_argument("--modality", help="per-modality latency / SLO (text, image, video, audio)")
    p.add_argument("--normalize", help="pareto: x, overall or none")
    p.add_argument("--baseline", help="pareto: series to normalise by")
    p.add_argument("--group", help="bars: column for grouped bars")
    p.add_argument("--run-id", dest="run_id", help="utilization: which run")
    p.add_argument("--bins", type=int, help="utilization: time bins")
    p.add_argument("--log-x", dest="log_x", action="store_true", help="cdf: log x axis")
    p.add_argument("--force", action="store_true", help="overwrite an existing figure")
    p.set_defaults(func=cmd_plot)

    p = sub.add_parser("sweep", help="run a scenario over a grid / zip / random set of key values",
                       description="Run every point of a sweep YAML (base scenario + axes + repeats); each run "
                                   "lands in OUT/runs/<hash>/, one row per run in OUT/results.parquet. "
                                   "Rerunning skips finished runs and redoes damaged ones. Exit status 1 "
                                   "when any run failed (the others still run).")
    p.add_argument("sweep", metavar="SWEEP", help="sweep YAML")
    p.add_argument("-o", "--output", required=True, help="sweep folder")
    p.add_argument("--jobs", type=int, help="local worker processes (default: CPU count)")
    p.add_argument("--executor", choices=("local", "dask"), default="local")
    p.add_argument("--address", help="dask scheduler address, e.g. tcp://host:8786")
    p.add_argument("--retry-failed", action="store_true", help="run again the points that failed before")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("reproduce", help="rerun a seed paper's figures and compare its headline claims")
    p.add_argument("paper", metavar="PAPER", help="rps or rserve")
    p.add_argument("--figures", nargs="+", metavar="NAME", help="only these figures (e.g. fig17 fig20)")
    p.add_argument("-o", "--output", required=True, help="folder for sweeps, figures and REPORT.md")
    p.add_argument("--quick", action="store_true", help="fewer requests per run")
    p.add_argument("--jobs", type=int, help="local worker processes")
    p.add_argument("--force", action="store_true", help="write into a folder that holds files, replacing only those lmmsim wrote there")
    p.set_defaults(func=cmd_reproduce)

    p = sub.add_parser("search", help="EAServe's HAS: search the e_p_d allocation, encode batch bound and offload",
                       description="Hybrid Auto Selection (easerve.txt 3.1) on an e_p_d scenario: Stage 1 profiles "
                                   "per-worker stage capacities and prunes GPU allocations by bottleneck balance; "
                                   "Stage 2 refines (allocation, B, s) with an Optuna TPE study of simulated "
                                   "trials. Writes DIR/best.yaml (runnable scenario), DIR/trials.csv|parquet and "
                                   "DIR/summary.json. --method random|coordinate: the baselines.")
    _scenario_args(p)
    p.add_argument("-o", "--output", required=True, help="search folder")
    p.add_argument("--budget", type=int, default=30, help="trials at most (default 30)")
    p.add_argument("--rate", type=float, help="target arrival rate in req/s (default: the scenario's)")
    p.add_argument("--method", choices=("has", "random", "coordinate"), default="has")
    p.add_argument("--jobs", type=int, default=1, help="trials simulated at once (default 1)")
    p.add_argument("--executor", choices=("local", "dask"), default="local",
                   help="where trials run: local processes or a Dask cluster")
    p.add_argument("--address", help="dask scheduler address (default: a local cluster of --jobs workers)")
    p.add_argument("--seed", type=int, default=0, help="sampler seed (default 0)")
    p.add_argument("--start", choices=("scenario", "center"), default="scenario",
                   help="coordinate descent's start: the scenario's configuration (default) or an uninformed "
                        "one (the middle allocation, B = 1, s = 1)")
    p.add_argument("--trial-requests", dest="trial_requests", type=int, default=200,
                   help="requests per simulated trial (default 200)")
    p.add_argument("--deploy-cost", dest="deploy_cost", type=float, default=None,
                   help="seconds added to the search cost per deployment started (a trial, or a Stage 1 "
                        "stage setting): weight loading and warm-up (default 120)")
    p.add_argument("--force", action="store_true", help="write into a folder that holds files, replacing only those lmmsim wrote there")
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing")
    p.set_defaults(func=cmd_search)

    p = sub.add_parser("profile", help="time a model's operators on this machine's CPU or GPU (needs torch)",
                       description="Build the models' real layer shapes with random weights and time every "
                                   "operator class the cost model uses; writes one CSV per class and meta.json.")
    p.add_argument("--device", choices=("cpu", "cuda"), required=True)
    p.add_argument("--hardware", required=True, help="catalog GPU name the profile describes (e.g. h200, cpu)")
    p.add_argument("--models", required=True, help="comma-separated catalog model names")
    p.add_argument("-o", "--output", help="profile folder (default: profiles/ops/<hardware>/)")
    p.add_argument("--quick", action="store_true", help="tiny shapes only (seconds; for tests)")
    p.add_argument("--max-minutes", type=float, help="thin the shape grids so the sweep fits in N minutes")
    p.add_argument("--threads", type=int, help="torch threads (CPU; default torch's choice)")
    p.add_argument("--composition", action="store_true",
                   help="also time whole forward passes of the reference models (composition check)")
    p.add_argument("--force", action="store_true", help="write into a folder that holds files, replacing only those lmmsim wrote there")
    p.set_defaults(func=cmd_profile)

    p = sub.add_parser("fit", help="fit operator cost models to a profile (scikit-learn)",
                       description="Per operator class: fit a roofline, a polynomial and a random-forest model, "
                                   "pick by cross-validated MAPE, write PROFILE/fit/ (JSON/npz, report, plot).")
    p.add_argument("profile", metavar="PROFILE", help="profile folder, or a name under profiles/ops/")
    p.add_argument("--hardware", help="catalog GPU name (default: the profile's meta.json)")
    p.add_argument("--out", help="fit folder (default: PROFILE/fit)")
    p.add_argument("--derive-from", metavar="FIT",
                   help="for classes this profile lacks, use another GPU's fitted rooflines at this GPU's peaks")
    p.add_argument("--force", action="store_true", help="write into a folder that holds files, replacing only those lmmsim wrote there")
    p.set_defaults(func=cmd_fit)

    p = sub.add_parser("import-vidur", help="convert Vidur-format profiles into an lmmsim profile folder")
    p.add_argument("source", metavar="DIR", help="Vidur profiling root (holds compute/ and network/)")
    p.add_argument("-o", "--output", required=True, help="profile folder to write")
    p.add_argument("--gpu", required=True, help="compute/<gpu> folder to read (e.g. a100, h100)")
    p.add_argument("--network", help="network/<topology> folder (default: <gpu>_dgx)")
    p.add_argument("--force", action="store_true", help="write into a folder that holds files, replacing only those lmmsim wrote there")
    p.set_defaults(func=cmd_import_vidur)

    p = sub.add_parser("import-aiconfigurator",
                       help="convert NVIDIA aiconfigurator's measured kernel tables into an lmmsim profile folder",
                       description="Read the bf16 GEMM, attention and all-reduce tables that the aiconfigurator-core "
                                   "package ships for one GPU (pip install 'lmmsim[calibrate]') and write them as "
                                   "an lmmsim profile folder (see lmmsim/profiler/aiconfigurator_import.py).")
    p.add_argument("--gpu", required=True, help="catalog GPU (h100-sxm-80gb, h200, b200, gb200, l40s, rtx-pro-6000, "
                                                "a100-sxm-80gb) or aiconfigurator folder name")
    p.add_argument("--backend", default="vllm", help="vllm (default), sglang or trtllm")
    p.add_argument("--version", help="backend version of the tables (default: the newest the GPU has)")
    p.add_argument("--kernel", help="LLM attention kernel (default: the one vLLM picks on that GPU)")
    p.add_argument("--classes", help="comma-separated subset of gemm,attention_prefill,attention_decode,allreduce")
    p.add_argument("--base", help="profile folder whose other classes are copied in (e.g. a Vidur import)")
    p.add_argument("--append", action="store_true",
                   help="with --base: also keep the base's rows of the classes imported here")
    p.add_argument("-o", "--output", required=True, help="profile folder to write")
    p.add_argument("--force", action="store_true", help="write into a folder that holds files, replacing only those lmmsim wrote there")
    p.set_defaults(func=cmd_import_aiconfigurator)

    p = sub.add_parser("validate-costmodel", help="held-out error of a fitted cost model, per class and per model")
    p.add_argument("profile", metavar="PROFILE", help="profile folder, or a name under profiles/ops/")
    p.set_defaults(func=cmd_validate_costmodel)

    p = sub.add_parser("list", help="list catalog entries and registered names")
    p.add_argument("what", choices=("models", "gpus", "systems", "policies"))
    p.add_argument("-v", "--verbose", action="store_true", help="systems: also list each preset's simplifications")
    p.set_defaults(func=cmd_list)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except UserError as err:
        print(f"lmmsim: error: {err}", file=sys.stderr)
        return EXIT_USER_ERROR
    except StuckRunError as err:
        print(f"lmmsim: error: run stuck: {err}", file=sys.stderr)
        return EXIT_STUCK_RUN
    except BrokenPipeError:  # the reader went away (`lmmsim list models | head`): stop quietly, as Unix tools do
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # nothing left to flush at exit
        return EXIT_BROKEN_PIPE
    except OSError as err:  # unwritable output folder, disk full, ...
        where = err.filename or "lmmsim"
        print(f"lmmsim: error: {where}: {err.strerror or err}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("lmmsim: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

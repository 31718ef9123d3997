"""Command line: ``lmmsim run | validate | workload | list``.

Any :class:`~lmmsim.errors.UserError` becomes one line on stderr and exit
code 2; nothing a user can get wrong prints a traceback.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from lmmsim import __version__
from lmmsim.errors import UserError

EXIT_USER_ERROR = 2


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
    if summary["num_rejected"] or summary["num_unfinished"]:
        extra = f"; rejected {summary['num_rejected']}, unfinished {summary['num_unfinished']}"
    console.print(
        f"simulated {summary['sim_end_at_s']:.1f} s in {summary['sim_wall_time_s']:.2f} s wall "
        f"({summary['sim_events']} events){extra}"
    )
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
    print(f"  workload: {len(built.requests)} requests {dict(sorted(mix.items()))}, "
          f"{len(built.rejected)} longer than max_model_len {built.max_model_len}")
    return 0


def cmd_plot(args) -> int:
    from lmmsim.plotting.timeline import plot_timeline

    source = Path(args.results)
    trace = source / "trace.json" if source.is_dir() else source
    if not trace.exists():
        raise UserError("RESULTS", f"{trace} not found; run with `lmmsim run ... --trace` first")
    out = Path(args.output)
    if out.suffix not in (".png", ".pdf"):
        raise UserError("-o", f"figure must end in .png or .pdf, got {out.name!r}")
    if out.exists() and not args.force:
        raise UserError("-o", f"{out} exists; pass --force to overwrite it")
    plot_timeline(trace, out, first_n=args.first, force=args.force)
    print(f"wrote {out}")
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
    out.parent.mkdir(parents=True, exist_ok=True)
    write_trace(requests, out)
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
    p.add_argument("--force", action="store_true", help="overwrite an existing results directory")
    p.add_argument("--format", choices=("parquet", "csv"), default="parquet",
                   help="csv also writes requests.csv beside the parquet file")
    p.add_argument("-q", "--quiet", action="store_true", help="no table, no progress bar")
    p.add_argument("--trace", action="store_true",
                   help="also write DIR/trace.json: every step of every worker (Chrome/Perfetto trace)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("validate", help="check a scenario (keys, catalog names, memory fit) without running it")
    _scenario_args(p)
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("workload", help="export the scenario's generated requests as a replayable trace")
    _scenario_args(p)
    p.add_argument("-o", "--output", required=True, help="trace file (.jsonl or .csv)")
    p.add_argument("--force", action="store_true", help="overwrite an existing trace file")
    p.set_defaults(func=cmd_workload)

    p = sub.add_parser("plot", help="draw a figure from saved results",
                       description="Figures from saved results. KIND 'timeline': a Gantt chart of the first "
                                   "requests' steps on every worker, from a run made with --trace.")
    p.add_argument("kind", choices=("timeline",))
    p.add_argument("results", metavar="RESULTS", help="results directory (or its trace.json)")
    p.add_argument("-o", "--output", required=True, help="figure file (.png or .pdf)")
    p.add_argument("--first", type=int, default=4, help="timeline: colour the first N requests (default 4)")
    p.add_argument("--force", action="store_true", help="overwrite an existing figure")
    p.set_defaults(func=cmd_plot)

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
    except OSError as err:  # unwritable output folder, disk full, ...
        where = err.filename or "lmmsim"
        print(f"lmmsim: error: {where}: {err.strerror or err}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("lmmsim: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

"""Commands on one scenario or its results: ``run``, ``validate``, ``workload``, ``plot``, ``list``."""

from __future__ import annotations

import sys
from pathlib import Path

from lmmsim.cli.summary import ProgressBar, print_summary
from lmmsim.errors import UserError


def _default_out_dir(name: str) -> Path:
    """``results/<name>``, or the first ``results/<name>-N`` not taken: never overwrite."""
    base = Path("results") / name
    candidate, n = base, 1
    while candidate.exists():
        n += 1
        candidate = base.with_name(f"{base.name}-{n}")
    return candidate


def cmd_run(args) -> int:
    from lmmsim.results import prepare_output_dir, run_scenario, spill_place, write_results
    from lmmsim.scenario import load_scenario

    scn, base_dir = load_scenario(args.scenario, args.overrides)
    out = Path(args.output) if args.output else _default_out_dir(scn.name)
    prepare_output_dir(out, args.force)  # fail before simulating, not after
    progress = ProgressBar(enabled=not args.quiet)
    try:
        run = run_scenario(scn, base_dir, progress=progress, trace=args.trace, spill_near=spill_place(out))
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
    print(f"  workload: {len(built.requests)} requests {dict(sorted(mix.items()))}, max_model_len "
          f"{built.max_model_len}; {len(built.rejected)} refused at arrival")
    for reason, ids in _group_reasons(built.rejected):
        print(f"  warning: {len(ids)} request(s) will be refused at arrival (ids {_some(ids)}): {reason}")
    from lmmsim.assembly.host_stage import host_lines
    from lmmsim.results import probe_extrapolated_share

    for line in host_lines(built.host, scn, built.gpu, scn.deployment.pools()):
        print(line)

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
    from lmmsim.plotting.style import FIGURE_SUFFIXES

    out = Path(args.output)
    if out.suffix.lower() not in FIGURE_SUFFIXES:
        raise UserError("-o", f"figure must end in .png, .pdf or .svg, got {out.name!r}")
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
                   "log_x": args.log_x or None, "log_y": getattr(args, "log_y", None)}
        plot(args.kind, source, out, force=args.force, **{k: v for k, v in options.items() if v is not None})
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
    fmt = getattr(args, "export_format", "trace")
    if fmt == "trace" and out.suffix not in (".jsonl", ".csv"):
        raise UserError("-o", f"trace file must end in .jsonl or .csv, got {out.name!r}")
    if fmt != "trace" and out.suffix != ".jsonl":
        raise UserError("-o", f"a {fmt} file is JSONL: it must end in .jsonl, got {out.name!r}")
    model = catalog.get_model(scn.model)
    requests = generate_requests(scn.workload, model, scn.seed, base_dir)
    from lmmsim.outputs import atomic_path

    with atomic_path(out) as tmp:
        if fmt == "trace":
            write_trace(requests, tmp)
            if scn.workload.arrival.kind == "closed_loop":
                print("note: a closed_loop workload's arrival times come from the run; the trace's "
                      "timestamps are all 0", file=sys.stderr)
        else:
            from lmmsim.workload.export import write_dataset

            dropped = write_dataset(requests, tmp, fmt)
            if dropped:
                print(f"note: {dropped} requests carry media, which a {fmt} file does not hold here; "
                      "only their text was written", file=sys.stderr)
    print(f"wrote {len(requests)} requests to {out}" + ("" if fmt == "trace" else f" ({fmt})"))
    return 0


def cmd_list(args) -> int:
    from lmmsim import catalog, policies
    from lmmsim.systems import systems

    what = args.what
    if what == "models":
        for name, m in sorted(catalog.models().items()):
            enc = m.encoder.family if m.encoder else "-"
            moe = (f"MoE {m.llm.moe.num_experts}x top-{m.llm.moe.experts_per_token}, "
                   f"{m.llm.active_params / 1e9:.1f}B active" if m.llm.moe else "dense")
            print(f"{name:28s} {m.llm.num_params / 1e9:6.1f}B LLM  {moe:31s} encoder {enc:10s} "
                  f"inputs {','.join(m.modalities)}")
    elif what == "gpus":
        for name, g in sorted(catalog.gpus().items()):
            fp8 = f"{g.peak_fp8_tflops:7.1f} fp8" if g.peak_fp8_tflops else "     no fp8"
            print(f"{name:16s} {g.peak_bf16_tflops:7.1f} TFLOP/s bf16 {fp8}  {g.hbm_bandwidth_tbs:5.2f} TB/s  "
                  f"{g.memory_gib:5.0f} GiB  links {','.join(g.links)}")
    elif what == "scenarios":
        from lmmsim.scenario import examples_dir

        root = examples_dir()
        for path in sorted(root.rglob("*.yaml")):
            print(f"{path.relative_to(root).with_suffix('').as_posix():40s} {path}")
    elif what == "systems":
        table = systems()
        w = max(map(len, table), default=0)  # the longest name sets the column
        for name, s in table.items():
            print(f"{name:{w}s} {s.summary} [{s.reference}]")
            if args.verbose:
                for note in s.notes:
                    print(f"{'':{w}s}   - {note}")
    else:
        described = policies.describe()
        w = max((len(n) for t in described.values() for n in t), default=0)
        rw = max(map(len, described), default=0)
        for role, table in described.items():
            for name, summary in table.items():
                print(f"{role:{rw}s} {name:{w}s} {summary}")
    return 0


def cmd_schema(args) -> int:
    """The scenario's JSON schema (pydantic), for editors: a YAML file whose first line is
    ``# yaml-language-server: $schema=scenario.schema.json`` gets completion and checks."""
    import json

    from lmmsim.scenario import scenario_cls

    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema",
              "title": "lmmsim scenario", **scenario_cls().model_json_schema()}
    print(json.dumps(schema, indent=2, sort_keys=True))
    return 0


def cmd_completion(args) -> int:
    from lmmsim.cli.completion import script

    print(script(args.root_parser, args.shell), end="")  # the parser itself: build_parser sets it
    return 0

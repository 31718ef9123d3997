"""Commands that measure or import cost-model data: ``profile``, ``fit``, ``import-vidur``,
``import-aiconfigurator``, ``validate-costmodel``, and ``admission-profile`` (RPS-Serve's isolated-run profile).
"""

from __future__ import annotations

import sys
from pathlib import Path

from lmmsim.errors import UserError


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


def cmd_profile_host(args) -> int:
    from lmmsim import catalog
    from lmmsim.costmodel import opdata
    from lmmsim.outputs import OutputDir

    if args.max_minutes is not None and not args.max_minutes > 0:
        raise UserError("--max-minutes", f"must be > 0 (got {args.max_minutes})")
    try:
        import av  # noqa: F401
        import PIL  # noqa: F401
        import tokenizers  # noqa: F401
        import torch  # noqa: F401
        import transformers  # noqa: F401

        from lmmsim.profiler import host_merge
        from lmmsim.profiler.host import OUTPUT_FILES, profile_host
    except ImportError as exc:  # optional: the profile extra
        raise UserError("profile-host", f"needs Pillow, av, torch, transformers and tokenizers ({exc.name} "
                                        "missing): pip install 'lmmsim[profile]'") from None
    sections = host_merge.parse_only(args.only) if args.only is not None else None
    out = Path(args.output or catalog.profiles_dir() / "host" / "cpu")
    out_dir = OutputDir(out, force=args.force, key="-o")
    out_dir.check(*OUTPUT_FILES)  # a user's file in the way stops us before minutes of measuring
    if sections:
        host_merge.check_previous(out, sections)  # and so does a profile with nothing to merge into
    command = (f"lmmsim profile-host -o {out}" + (" --quick" if args.quick else "")
               + (f" --max-minutes {args.max_minutes:g}" if args.max_minutes else "")
               + (f" --only {','.join(sections)}" if sections else "") + (" --force" if args.force else ""))
    with opdata.staged_output(out_dir) as stage:
        meta = profile_host(stage, quick=args.quick, max_minutes=args.max_minutes or 6.0, command=command,
                            sections=sections)
        if sections:
            host_merge.merge_previous(out, stage, sections)
    print(f"host preprocessing profile written to {out}/ ({meta['cpu_model']}, {meta['cpu_count']} cores, "
          f"{meta['torch_threads']} torch thread, {meta['elapsed_s']:.0f} s"
          + (f"; {', '.join(sections)} measured again, the rest kept" if sections else "") + ")")
    for note in meta["skipped"]:
        print(f"  skipped: {note}")
    return 0


def _profile_folder(name_or_dir: str) -> Path:
    from lmmsim import catalog

    path = Path(name_or_dir)
    if not path.exists():
        path = catalog.find(Path("ops") / name_or_dir)
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

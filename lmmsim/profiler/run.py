"""``profile(...)``: time every operator shape of some models on this machine's CPU or GPU.

Writes one CSV per operator class plus ``meta.json`` in the format of
:mod:`lmmsim.costmodel.opdata`. Also a command::

    python -m lmmsim.profiler.run --device cuda --hardware h200 \\
        --models qwen2.5-vl-7b,llava-v1.6-34b --max-minutes 7 -o profiles/ops/h200

Order of work (deterministic): the shape grids of :mod:`lmmsim.profiler.grid`
class by class (gemm, attention_prefill, attention_decode, elementwise,
encoder_layer), then the measurements that need child processes (SM limits
under CUDA green contexts; all-reduce / p2p over NCCL when several GPUs are
visible; :mod:`lmmsim.profiler.children`).

Time budget (``max_minutes``): first five shapes per class, spread over its
range of work estimates (roofline time at nominal rates) with both extremes,
are timed ("calibrating"). They calibrate, per class, a log-log interpolation
from work estimate to kernel time and a fixed per-shape cost, so the wall time
of any shape's measurement (build, warm-up, repeats) can be predicted
(:mod:`lmmsim.profiler.planning`). Every grid is then thinned by one factor
(each keeps its endpoints; :func:`lmmsim.profiler.grid.thin_indices`) so the
predicted total fits the budget (less the child-process phases and 3 s for
writing). Every ~5 % of the
budget, at a grid boundary, the grids not started are re-planned with the
predictions scaled by measured/predicted so far (per class once it has five
shapes); the factor may go down or, with a 10 % margin, up. A hard stop drops
what is left when the budget is spent. meta.json records the factors
(``thinning``: initial, per class, re-plans, predicted vs actual seconds) and
per class the full, planned, measured, skipped (failed: e.g. out of memory)
and dropped-for-time counts.

CPU timings are sensitive to other processes on the machine (torch uses every
core); profile on a quiet machine.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import torch

from lmmsim import catalog
from lmmsim.catalog import ModelSpec
from lmmsim.costmodel.opdata import SHAPE_COLUMNS, csv_path, write_class, write_meta
from lmmsim.profiler import children, ops, timing
from lmmsim.profiler import grid as G
from lmmsim.profiler.planning import Planner, choose_factor, nominal_rates

WRITE_RESERVE_S = 3.0  # kept back from max_minutes for writing files
MAX_ERRORS_KEPT = 20


# ----------------------------------------------------------------- measuring
def _measure_case(case: G.Case, timer, pool: ops.TensorPool):
    """Build and time one case -> ``(Timing, impl)``. Raises on failure."""
    fn, impl = ops.build(case.kind, case.params, pool)
    return timer.measure(fn), impl


# ----------------------------------------------------------------- meta helpers
def _driver_version() -> str | None:
    try:
        import pynvml  # type: ignore

        pynvml.nvmlInit()
        v = pynvml.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else str(v)
    except Exception:  # noqa: BLE001
        pass
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except Exception:  # noqa: BLE001
        return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _ram_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) * 1024 / 2**30, 2)
    except OSError:
        pass
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 2)
    except (ValueError, OSError, AttributeError):
        return None


def device_info(dev: torch.device) -> dict:
    info = {"device_type": dev.type, "torch_version": torch.__version__, "dtype": "bfloat16",
            "python_version": platform.python_version()}
    if dev.type == "cuda":
        p = torch.cuda.get_device_properties(dev)
        info.update(device=p.name, sm_count=p.multi_processor_count, memory_gib=round(p.total_memory / 2**30, 2),
                    compute_capability=f"{p.major}.{p.minor}", cuda_version=torch.version.cuda,
                    driver_version=_driver_version(), device_count=torch.cuda.device_count(),
                    l2_cache_bytes=getattr(p, "L2_cache_size", None))
    else:
        info.update(device=_cpu_model(), cpu_cores=os.cpu_count(), torch_threads=torch.get_num_threads(),
                    memory_gib=_ram_gib(), cpu_capability=torch.backends.cpu.get_cpu_capability(),
                    cuda_version=None, driver_version=None)
    return info


# ---------------------------------------------------------------------- main
def _resolve(models) -> list[ModelSpec]:
    """Catalog names, reference-model names (:data:`lmmsim.profiler.reference.REFERENCE_MODELS`)
    or ModelSpecs -> ModelSpecs."""
    from lmmsim.profiler.reference import REFERENCE_MODELS, reference_spec

    out = []
    for m in models:
        if isinstance(m, ModelSpec):
            out.append(m)
        elif m in REFERENCE_MODELS:
            out.append(reference_spec(m))
        else:
            out.append(catalog.get_model(m, key="models"))
    return out


def output_files(device_type: str) -> tuple[str, ...]:
    """Every file :func:`profile` may write on a ``cpu`` or ``cuda`` device (the CLI
    checks them against a user's files before measuring for minutes)."""
    classes = G.CLASS_ORDER + (("sm_limit", "allreduce", "p2p") if device_type == "cuda" else ())
    return tuple(csv_path(Path(), c).name for c in classes) + ("meta.json",)


def profile(device: str, hardware: str, models: list, out_dir: Path, *, quick: bool = False,
            max_minutes: float | None = None, tp_sizes=(1, 2, 4, 8), progress: bool = True, command: str = "",
            fuse: bool | None = None) -> Path:
    """Profile ``models`` (catalog names, reference-model names or ModelSpecs) on ``device``; write ``out_dir``.

    ``quick``: toy dimensions and a few points per class (tests; seconds).
    ``max_minutes``: thin the grids so the whole run fits (see module doc).
    ``fuse``: compile multi-kernel elementwise ops (default: on CUDA only).
    Class CSVs an earlier run left in ``out_dir`` that this run did not
    produce are removed. Returns ``out_dir``.
    """
    t_start = time.monotonic()
    deadline = t_start + 60.0 * max_minutes if max_minutes else None
    out_dir = Path(out_dir)
    dev = _open_device(device)
    torch.manual_seed(0)

    specs = _resolve(models)
    if quick:
        specs = [G.shrink(s) for s in specs]
    tp_sizes = tuple(t for t in tp_sizes if (not quick or t <= 2))
    cfg = G.grid_config(dev.type, quick)
    cases = G.build_cases(specs, cfg, tp_sizes)

    meta: dict = {"hardware": hardware, "models": [s.name for s in specs], "quick": quick,
                  "command": command, "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                  "tp_sizes": list(tp_sizes), "max_minutes": max_minutes, "grid": cfg.as_dict()}
    meta.update(device_info(dev))
    meta["elementwise_impl"] = ops.configure(dev, fuse)
    meta["elementwise_num_bytes"] = dict(ops.ELEMENTWISE_BYTES)
    policy, timer = _timing(dev, quick, meta)

    # Child-process measurements (planned for up front, run at the end).
    green = dev.type == "cuda" and not quick and bool(cfg.sm_fractions) and children.green_supported()
    sm_shapes = G.sm_limit_shapes(specs, cfg) if green else []
    n_dev = torch.cuda.device_count() if dev.type == "cuda" else 0
    phase_est = ((children.SM_LIMIT_EST_S if sm_shapes else 0.0)
                 + children.COLLECTIVE_EST_S * sum(1 for w in (2, 4, 8) if w <= n_dev))

    run = _Profiling(dev, cases, timer, _planner(dev, hardware, quick, timer, policy), progress)
    run.measure(deadline, phase_est, t_start)
    frames = run.frames()
    _child_phases(frames, meta, dev, quick, policy, deadline, sm_shapes, cfg.sm_fractions, n_dev)
    _write(out_dir, frames, meta, run, deadline, t_start)
    return out_dir


def _open_device(device: str) -> torch.device:
    """``device`` checked and, for CUDA, made current with an explicit index."""
    dev = torch.device(device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("device cuda requested but torch.cuda.is_available() is False")
        dev = torch.device("cuda", dev.index if dev.index is not None else torch.cuda.current_device())
        torch.cuda.set_device(dev)
    elif dev.type != "cpu":
        raise ValueError(f"unsupported device {device!r}: use cpu or cuda")
    return dev


def _timing(dev: torch.device, quick: bool, meta: dict) -> tuple[timing.RepeatPolicy, object]:
    """The repeat policy and timer for ``dev``; recorded in ``meta["timing"]``."""
    policy = timing.policy_for(dev.type, quick)
    timer = timing.make_timer(dev, policy)
    meta["timing"] = {"policy": policy.as_dict(),
                      "clock": "CUDA events, L2 flushed before each call" if dev.type == "cuda"
                      else "time.perf_counter_ns per call",
                      "statistic": "time_ms = median of repeats; time_ms_p10 / time_ms_p90 their percentiles"}
    if dev.type == "cuda":
        meta["timing"]["flush_bytes"] = timer.flush_bytes
    return policy, timer


def _planner(dev: torch.device, hardware: str, quick: bool, timer, policy: timing.RepeatPolicy) -> Planner:
    """The planner, its per-call cost measured on a warmed-up GPU (a fixed guess elsewhere)."""
    per_call_s = 2e-6
    if dev.type == "cuda" and not quick:
        per_call_s = _warm_up_gpu(dev, timer) + 20e-6
    return Planner(nominal_rates(dev.type, hardware), policy, per_call_s,
                   default_overhead_s=0.002 if dev.type == "cuda" else 0.001)


class _Profiling:
    """One profile's measurement of the shape grids: the time-budget plan (module doc) and the results.

    :meth:`measure` times the probes (with a deadline), then every selected
    case grid by grid, re-planning the grids not started as it goes;
    :meth:`frames` turns the results into rows per class.
    """

    def __init__(self, dev: torch.device, cases: list[G.Case], timer, planner: Planner, progress: bool):
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.dev, self.cases, self.timer, self.planner = dev, cases, timer, planner
        self.classes = [c for c in G.CLASS_ORDER if any(x.op_class == c for x in cases)]
        self.pool = ops.TensorPool(dev)
        cap = _pool_cap_bytes(dev) // ops.BYTES
        self.pool.reserve(min(cap, max((c.numel for c in cases), default=0)))
        self.results: dict[int, tuple] = {}  # case index -> (Timing, impl, wall_s)
        self.by_key: dict[tuple, tuple] = {}  # dedupe identical shapes (timing, impl)
        self.reused: set[int] = set()  # cases answered from by_key
        self.errors: list[str] = []
        self.stats = {c: {"full": sum(1 for x in cases if x.op_class == c), "planned": 0, "measured": 0,
                          "skipped": 0, "dropped_for_time": 0} for c in self.classes}
        self.bar = Progress(TextColumn("{task.description:<18}"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), console=Console(stderr=True), disable=not progress, transient=False)
        # The plan: probes, predicted cost per case, the cases kept, the thinning factor.
        self.probes: set[int] = set()
        self.cost = [0.0] * len(cases)
        self.selected = set(range(len(cases)))
        self.factor, self.budget, self.whole = 1.0, None, frozenset()
        self.thinning: dict = {"factor": 1.0, "per_class": {}, "replans": []}
        self.diag = {c: [0.0, 0.0, 0] for c in self.classes}  # predicted s, actual s, count (non-probe cases)

    def run_one(self, i: int, task) -> None:
        """Time case ``i`` (or reuse an identical shape's timing); a failure is counted, not raised."""
        c = self.cases[i]
        t0 = time.monotonic()
        try:
            hit = self.by_key.get(c.key)
            if hit is None:
                t, impl = _measure_case(c, self.timer, self.pool)
                self.by_key[c.key] = (t, impl)
            else:
                t, impl = hit
                self.reused.add(i)
            self.results[i] = (t, impl, time.monotonic() - t0)
        except Exception as exc:  # noqa: BLE001 - skip the shape, keep going
            self.stats[c.op_class]["skipped"] += 1
            if len(self.errors) < MAX_ERRORS_KEPT:
                self.errors.append(f"{c.grid} {c.params}: {type(exc).__name__}: {str(exc)[:200]}")
            _recover(self.dev)
        finally:
            self.pool.reset()
            self.bar.advance(task)

    def measure(self, deadline: float | None, phase_est: float, t_start: float) -> None:
        with self.bar:
            if deadline is not None:
                self._calibrate(deadline, phase_est)
            self._measure_grids(deadline, phase_est, t_start)
            for cls in self.classes:
                self.stats[cls]["planned"] = sum(1 for i in self.selected if self.cases[i].op_class == cls)

    def _calibrate(self, deadline: float, phase_est: float) -> None:
        """Time the probes, fit the planner, and thin the grids to the budget left."""
        cases, planner = self.cases, self.planner
        # Probes: shapes spread over each class's work range, extremes included.
        for cls in self.classes:
            self.probes |= planner.probes(cases, [i for i, x in enumerate(cases) if x.op_class == cls])
        task = self.bar.add_task("calibrating", total=len(self.probes))
        for i in sorted(self.probes):
            self.run_one(i, task)
        for cls in self.classes:
            planner.fit(cls, [(cases[i], self.results[i][0].median_ms * 1e-3, self.results[i][2])
                              for i in self.probes if cases[i].op_class == cls and i in self.results])
        first_of_key: dict[tuple, int] = {}
        for i, c in enumerate(cases):
            first_of_key.setdefault(c.key, i)
        # A shape equal to an earlier one (another model, op or class) costs nothing.
        self.cost = [planner.wall_s(c) if first_of_key[c.key] == i else 0.0 for i, c in enumerate(cases)]
        self.budget = budget = deadline - time.monotonic() - phase_est - WRITE_RESERVE_S
        self.whole = G.cheap_grids(cases, self.cost, budget)
        self.factor = choose_factor(cases, self.cost, budget, self.probes, self.whole)
        self.selected = set(G.thin(cases, self.factor, self.whole)) | self.probes
        self.thinning.update(factor=round(self.factor, 4), budget_s=round(budget, 1),
                             grids_kept_whole=len(self.whole),
                             predicted_s=round(sum(self.cost[i] for i in self.selected - self.probes), 1))

    def _todo_count(self, cls: str, ids) -> int:
        return sum(1 for i in ids if i in self.selected and i not in self.probes and self.cases[i].op_class == cls)

    def _measure_grids(self, deadline: float | None, phase_est: float, t_start: float) -> None:
        """Every selected non-probe case, grid by grid; re-plans every ~5 % of the budget, hard stop at the end."""
        cases, stats = self.cases, self.stats
        self.tasks = {c: self.bar.add_task(c, total=self._todo_count(c, range(len(cases)))) for c in self.classes}
        self.done = {c: 0 for c in self.classes}
        grids = list(G.group_by_grid(cases).values())
        hard_stop = (deadline - WRITE_RESERVE_S) if deadline else None
        interval = max(10.0, 0.05 * self.budget) if self.budget else None
        last_plan = time.monotonic()
        seen_classes: set[str] = set()
        for gi, idx in enumerate(grids):
            cls = cases[idx[0]].op_class
            if interval and time.monotonic() - last_plan >= interval:
                last_plan = time.monotonic()
                self._replan([i for ix in grids[gi:] for i in ix], deadline, phase_est, t_start)
            if cls not in seen_classes:
                seen_classes.add(cls)
                self.thinning["per_class"][cls] = round(self.factor, 4)
            for i in idx:
                if i not in self.selected or i in self.probes:
                    continue
                self.done[cls] += 1
                if hard_stop is not None and time.monotonic() > hard_stop:
                    stats[cls]["dropped_for_time"] += 1
                    self.bar.advance(self.tasks[cls])
                    continue
                self.run_one(i, self.tasks[cls])
                if i in self.results and i not in self.reused:
                    d = self.diag[cls]
                    d[0] += self.cost[i]
                    d[1] += self.results[i][2]
                    d[2] += 1

    def _replan(self, rest: list[int], deadline: float, phase_est: float, t_start: float) -> None:
        """Re-thin the cases ``rest`` (the grids not started), predictions scaled by how far off
        they were so far (per class once it has 5 shapes, else overall)."""
        diag = self.diag
        tot_p, tot_a = sum(d[0] for d in diag.values()), sum(d[1] for d in diag.values())
        overall = tot_a / tot_p if tot_p > 0 else 1.0

        def ratio(c):
            r = diag[c][1] / diag[c][0] if diag[c][2] >= 5 and diag[c][0] > 0 else overall
            return min(3.0, max(0.3, r))

        scaled = [ratio(self.cases[i].op_class) * self.cost[i] for i in rest]
        sub = [self.cases[i] for i in rest]
        local_probes = {j for j, i in enumerate(rest) if i in self.probes}
        left = deadline - time.monotonic() - phase_est - WRITE_RESERVE_S
        f2 = choose_factor(sub, scaled, left, local_probes, self.whole)
        if f2 > self.factor:  # loosen with a 10% margin
            f2 = max(self.factor, choose_factor(sub, scaled, 0.9 * left, local_probes, self.whole))
        if f2 == self.factor:
            return
        self.factor = f2
        self.selected = ((self.selected - set(rest)) | {rest[j] for j in G.thin(sub, f2, self.whole)}
                         | (set(rest) & self.probes))
        self.thinning["replans"].append({"at_s": round(time.monotonic() - t_start, 1),
                                         "factor": round(f2, 4), "overall_ratio": round(overall, 3)})
        for c in self.classes:
            self.bar.update(self.tasks[c], total=self.done[c] + self._todo_count(c, rest))

    def frames(self) -> dict[str, list[dict]]:
        """Rows per class, in case order (``stats[...]["measured"]`` set)."""
        frames: dict[str, list[dict]] = {c: [] for c in self.classes}
        for i in sorted(self.results):
            c = self.cases[i]
            t, impl, _ = self.results[i]
            frames[c.op_class].append({**c.row, "time_ms": t.median_ms, "time_ms_p10": t.p10_ms,
                                       "time_ms_p90": t.p90_ms, "repeats": t.repeats, "dtype": "bfloat16",
                                       "impl": impl})
        for cls in self.classes:
            self.stats[cls]["measured"] = len(frames[cls])
        return frames


def _child_phases(frames: dict, meta: dict, dev: torch.device, quick: bool, policy: timing.RepeatPolicy,
                  deadline: float | None, sm_shapes: list[dict], sm_fractions, n_dev: int) -> None:
    """SM limits and collectives (:mod:`lmmsim.profiler.children`): rows into ``frames``, notes into ``meta``."""
    if sm_shapes:
        left = (deadline - time.monotonic() - WRITE_RESERVE_S) if deadline else 600.0
        if left < 15:
            meta["sm_limit"] = "not measured: out of time (--max-minutes)"
        else:
            rows, meta["sm_limit"] = children.sm_limit(dev, sm_shapes, sm_fractions, policy, min(left, 240.0))
            if rows:
                frames["sm_limit"] = rows
    else:
        meta["sm_limit"] = children.sm_limit_reason(dev, quick)
    if n_dev > 1:
        stop_at = (deadline - WRITE_RESERVE_S) if deadline else None
        ar, p2p, note = children.collectives(n_dev, policy, stop_at)
        meta["allreduce"] = meta["p2p"] = note
        if ar:
            frames["allreduce"] = ar
        if p2p:
            frames["p2p"] = p2p
    else:
        why = "one device" if dev.type == "cuda" else "CPU (no CUDA devices)"
        meta["allreduce"] = f"not measurable: {why}"
        meta["p2p"] = f"not measurable: {why}"


def _write(out_dir: Path, frames: dict, meta: dict, run: _Profiling, deadline: float | None,
           t_start: float) -> None:
    """The class CSVs (removing classes this run did not produce) and ``meta.json``."""
    for cls, rows in frames.items():
        if rows:
            write_class(out_dir, cls, pd.DataFrame(rows))
    for cls in SHAPE_COLUMNS:  # a class not measured this time must not keep an older run's rows
        if not frames.get(cls):
            csv_path(out_dir, cls).unlink(missing_ok=True)
    stats = run.stats
    meta["rows"] = {cls: len(rows) for cls, rows in frames.items() if rows}
    meta["grid_sizes"] = stats
    meta["skipped"] = sum(s["skipped"] for s in stats.values())
    meta["skipped_examples"] = run.errors
    meta["dropped_for_time"] = sum(s["dropped_for_time"] for s in stats.values())
    if deadline is not None:
        run.thinning["predicted_vs_actual_s"] = {c: [round(p, 1), round(a, 1)] for c, (p, a, _) in run.diag.items()}
    meta["thinning"] = run.thinning
    meta["elapsed_s"] = round(time.monotonic() - t_start, 2)
    write_meta(out_dir, meta)


def _pool_cap_bytes(dev: torch.device) -> int:
    """Pre-reserve at most a quarter of the device's (or host's) memory for inputs."""
    if dev.type == "cuda":
        return torch.cuda.get_device_properties(dev).total_memory // 4
    ram = _ram_gib()
    return int((ram or 8) * 2**30 / 4)


def _warm_up_gpu(dev: torch.device, timer) -> float:
    """Spin the clocks up (~1 s of GEMMs); returns the seconds one L2 flush takes."""
    a = torch.randn(8192, 8192, dtype=ops.DTYPE, device=dev)
    t_end = time.monotonic() + 1.0
    while time.monotonic() < t_end:
        for _ in range(10):
            a @ a
        torch.cuda.synchronize(dev)
    del a
    flush = timer.measure(lambda: timer._flush.zero_(), timing.RepeatPolicy(1, 5, 5, 0.0))
    return flush.median_ms * 1e-3


def _recover(dev: torch.device) -> None:
    if dev.type == "cuda":
        try:
            torch.cuda.synchronize(dev)
        except Exception:  # noqa: BLE001
            pass
        torch.cuda.empty_cache()


# ----------------------------------------------------------------------- CLI
def _summary(out_dir: Path) -> str:
    from lmmsim.costmodel.opdata import read_meta

    meta = read_meta(out_dir)
    lines = [f"profile: {out_dir}  ({meta.get('device')}, {meta.get('elapsed_s')} s, "
             f"thinning {meta.get('thinning', {}).get('factor')}, skipped {meta.get('skipped')}, "
             f"dropped for time {meta.get('dropped_for_time')})"]
    for cls, n in meta.get("rows", {}).items():
        lines.append(f"  {cls:18s} {n:6d} rows")
    for key in ("allreduce", "sm_limit"):
        lines.append(f"  {key}: {meta.get(key)}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lmmsim.profiler.run",
                                 description="Time operator shapes of catalog models (lmmsim opdata format).")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="cpu or cuda[:N]")
    ap.add_argument("--hardware", required=True, help="name of the hardware the profile describes (e.g. h200)")
    ap.add_argument("--models", required=True,
                    help="comma-separated catalog model names (or reference models: tiny-decoder-mha, "
                         "tiny-decoder-gqa, tiny-vit)")
    ap.add_argument("-o", "--output", help="profile folder (default: profiles/ops/<hardware>)")
    ap.add_argument("--quick", action="store_true", help="toy shapes, a few points per class (seconds)")
    ap.add_argument("--max-minutes", type=float, default=None, help="thin the grids to fit this wall time")
    ap.add_argument("--tp", default="1,2,4,8", help="tensor-parallel sizes (comma-separated)")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    ap.add_argument("--fuse", choices=("auto", "on", "off"), default="auto",
                    help="compile multi-kernel elementwise ops (auto: on CUDA)")
    args = ap.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    out = Path(args.output) if args.output else catalog.profiles_dir() / "ops" / args.hardware
    command = "python -m lmmsim.profiler.run " + " ".join(sys.argv[1:] if argv is None else argv)
    fuse = {"auto": None, "on": True, "off": False}[args.fuse]
    profile(args.device, args.hardware, models, out, quick=args.quick, max_minutes=args.max_minutes,
            tp_sizes=tuple(int(t) for t in args.tp.split(",") if t.strip()), progress=not args.no_progress,
            command=command, fuse=fuse)
    print(_summary(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())

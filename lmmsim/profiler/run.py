"""``profile(...)``: time every operator shape of some models on this machine's CPU or GPU.

Writes one CSV per operator class plus ``meta.json`` in the format of
:mod:`lmmsim.costmodel.opdata`. Also a command::

    python -m lmmsim.profiler.run --device cuda --hardware h200 \\
        --models qwen2.5-vl-7b,llava-v1.6-34b --max-minutes 7 -o profiles/ops/h200

Order of work (deterministic): the shape grids of :mod:`lmmsim.profiler.grid`
class by class (gemm, attention_prefill, attention_decode, elementwise,
encoder_layer), then the measurements that need child processes (SM limits
under CUDA green contexts; all-reduce / p2p over NCCL when several GPUs are
visible).

Time budget (``max_minutes``): first five shapes per class, spread over its
range of work estimates (roofline time at nominal rates) with both extremes,
are timed ("calibrating"). They calibrate, per class, a log-log interpolation
from work estimate to kernel time and a fixed per-shape cost, so the wall time
of any shape's measurement (build, warm-up, repeats) can be predicted. Every
grid is then thinned by one factor (each keeps its endpoints;
:func:`lmmsim.profiler.grid.thin_indices`) so the predicted total fits the
budget (less the child-process phases and 3 s for writing). Every ~5 % of the
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
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from lmmsim import catalog
from lmmsim.catalog import ModelSpec
from lmmsim.costmodel.opdata import SHAPE_COLUMNS, csv_path, write_class, write_meta
from lmmsim.profiler import grid as G
from lmmsim.profiler import ops, timing

WRITE_RESERVE_S = 3.0  # kept back from max_minutes for writing files
SM_LIMIT_EST_S = 45.0  # child start + CUDA init + rows (estimate used for planning)
COLLECTIVE_EST_S = 30.0  # per world size
COLLECTIVE_SIZES = [1 << p for p in range(10, 29, 2)]  # 1 KiB .. 256 MiB, x4 steps
MAX_ERRORS_KEPT = 20


# ----------------------------------------------------------------- measuring
def _measure_case(case: G.Case, timer, pool: ops.TensorPool):
    """Build and time one case -> ``(Timing, impl)``. Raises on failure."""
    fn, impl = ops.build(case.kind, case.params, pool)
    return timer.measure(fn), impl


class _Planner:
    """Predicts a case's kernel time and measurement wall time (see module doc).

    Kernel time: piecewise-linear interpolation, in log-log space, of the
    probes' measured kernel time against their work estimate (roofline time at
    nominal rates); outside the probes, proportional to the nearest one. Wall
    time: a per-class fixed cost (build, first-call overheads; the probes'
    median) plus the calls the repeat policy makes.
    """

    def __init__(self, rates: tuple[float, float, float], policy: timing.RepeatPolicy, per_call_s: float,
                 default_overhead_s: float):
        self.flops_per_s, self.bytes_per_s, self.launch_s = rates
        self.policy = policy
        self.per_call_s = per_call_s
        self.default_overhead_s = default_overhead_s
        self.fits: dict[str, tuple[list[float], list[float], float]] = {}

    def model_s(self, c: G.Case) -> float:
        return c.launches * self.launch_s + c.flops / self.flops_per_s + c.bytes / self.bytes_per_s

    def kernel_s(self, c: G.Case) -> float:
        fit = self.fits.get(c.op_class)
        m = self.model_s(c)
        if fit is None:
            return m
        xs, ys, _ = fit
        x = math.log(m)
        if x <= xs[0]:
            return math.exp(ys[0] + x - xs[0])
        if x >= xs[-1]:
            return math.exp(ys[-1] + x - xs[-1])
        return math.exp(float(np.interp(x, xs, ys)))

    def wall_s(self, c: G.Case) -> float:
        k = self.kernel_s(c)
        fit = self.fits.get(c.op_class)
        over = fit[2] if fit else self.default_overhead_s
        return over + self.policy.calls_for(k) * (k + self.per_call_s)

    def fit(self, op_class: str, samples: list[tuple[G.Case, float, float]]) -> None:
        """``samples``: (case, kernel_s, wall_s) of the class's probes."""
        pts = sorted((math.log(self.model_s(c)), math.log(max(k, 1e-9)), k, w) for c, k, w in samples)
        if not pts:
            return
        xs, ys = [], []
        for x, y, _, _ in pts:  # strictly increasing x, non-decreasing y
            if xs and x <= xs[-1] + 1e-9:
                ys[-1] = max(ys[-1], y)
                continue
            xs.append(x)
            ys.append(max(y, ys[-1]) if ys else y)
        over = sorted(w - self.policy.calls_for(k) * (k + self.per_call_s) for *_, k, w in pts)
        self.fits[op_class] = (xs, ys, max(0.0, over[len(over) // 2]))

    def probes(self, cases: list[G.Case], idx: list[int], count: int = 5) -> set[int]:
        """``count`` cases of ``idx`` spread evenly over log work, extremes included."""
        logs = {i: math.log(self.model_s(cases[i])) for i in idx}
        lo, hi = min(logs.values()), max(logs.values())
        picks = set()
        for j in range(count):
            target = lo + (hi - lo) * j / max(1, count - 1)
            picks.add(min(idx, key=lambda i: (abs(logs[i] - target), i)))
        return picks


def _choose_factor(cases: list[G.Case], cost: list[float], budget_s: float, exclude: set[int],
                   whole: frozenset = frozenset()) -> float:
    """Largest thinning factor whose kept cases (less ``exclude``; grids in
    ``whole`` entire) cost <= budget (0: endpoints only)."""
    groups = [([(i, 0.0 if i in exclude else cost[i]) for i in idx], grid in whole)
              for grid, idx in G.group_by_grid(cases).items()]

    def total(f):
        return sum(g[j][1] for g, entire in groups
                   for j in (range(len(g)) if entire else G.thin_indices(len(g), f)))

    if total(1.0) <= budget_s:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(20):
        mid = (lo + hi) / 2
        if total(mid) <= budget_s:
            lo = mid
        else:
            hi = mid
    return lo


def _nominal_rates(device_type: str, hardware: str) -> tuple[float, float, float]:
    """(FLOP/s, bytes/s, launch s) to start from: the catalog's figures for
    ``hardware`` when it has them; only ratios between shapes matter, since the
    probes rescale them."""
    try:
        gpu = catalog.get_gpu(hardware)
        return gpu.peak_flops * 0.7, gpu.hbm_bytes_per_s * 0.8, gpu.efficiency.kernel_launch_us * 1e-6
    except Exception:  # noqa: BLE001 - not in the catalog
        return (7e14, 3e12, 5e-6) if device_type == "cuda" else (5e11, 2e10, 2e-5)


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


# ------------------------------------------------------------ child processes
def _run_child(target, args, timeout_s: float) -> str | None:
    """Run ``target(*args)`` in a spawned process; an error message or None."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    p = ctx.Process(target=target, args=args, daemon=True)
    p.start()
    p.join(max(1.0, timeout_s))
    if p.is_alive():
        p.terminate()
        p.join(5)
        if p.is_alive():
            p.kill()
        return f"timed out after {timeout_s:.0f} s"
    return None if p.exitcode == 0 else f"child exited with code {p.exitcode}"


def _sm_limit(dev: torch.device, shapes: list[dict], fractions, policy: timing.RepeatPolicy,
              timeout_s: float) -> tuple[list[dict], str]:
    """SM-limited encoder layers via green contexts in a child; (rows, note)."""
    import json

    errors = []
    for alloc_inside in (False, True):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "sm.json")
            start = time.monotonic()
            err = _run_child(ops.sm_limit_worker, (shapes, list(fractions), dev.index or 0, policy.as_dict(),
                                                   out, alloc_inside), timeout_s)
            timeout_s -= time.monotonic() - start
            data = json.loads(Path(out).read_text()) if os.path.exists(out) else {"rows": []}
        rows = data["rows"]
        if data.get("error"):
            err = f"{err or 'failed'}: {data['error']}"
        if rows and any(r["sm_fraction"] < 1 for r in rows):
            how = "inputs allocated inside each green context" if alloc_inside else "inputs shared"
            note = f"measured with CUDA green contexts (torch.cuda.green_contexts, {how}) in a child process"
            if err is not None:
                note += f"; partial ({err})"
            low = [r for r in rows if r["sm_fraction"] < 0.3]
            full = {(r["family"], r["seq_len"]): r["time_ms"] for r in rows if r["sm_fraction"] >= 1}
            if low and all(r["time_ms"] < 1.2 * full.get((r["family"], r["seq_len"]), 0) for r in low):
                note += "; WARNING: latency did not grow as SMs shrank, the limit may not have applied"
            return rows, note
        errors.append(f"{'inside' if alloc_inside else 'shared'}: {err or 'no rows'}")
        if timeout_s < 10:
            break
    return [], "not measurable: green-context run failed (" + "; ".join(errors) + ")"


def _collectives(device_count: int, policy: timing.RepeatPolicy, deadline: float | None, backend: str = "nccl",
                 sizes: list[int] | None = None):
    """All-reduce over 2, 4, 8 GPUs (up to the count) and p2p between two; (ar rows, p2p rows, note).

    ``backend="gloo"`` runs the same sweep over CPU processes (tests)."""
    import json
    import random

    import torch.multiprocessing as tmp_mp

    ar_rows, p2p_rows, notes = [], [], []
    for world in (2, 4, 8):
        if world > device_count:
            break
        left = (deadline - time.monotonic() - WRITE_RESERVE_S) if deadline else 300.0
        if left < COLLECTIVE_EST_S * 0.5:
            notes.append(f"world {world}: not measured: out of time")
            continue
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "coll.json")
            port = 29500 + random.Random(world + os.getpid()).randrange(1000)
            try:
                ctx = tmp_mp.start_processes(ops.collective_worker,
                                             args=(world, sizes or COLLECTIVE_SIZES, max(5, policy.min_repeats),
                                                   backend, port, out),
                                             nprocs=world, join=False, start_method="spawn")
                t_end = time.monotonic() + min(left, 120.0)
                while not ctx.join(timeout=1.0):
                    if time.monotonic() > t_end:
                        for p in ctx.processes:
                            if p.is_alive():
                                p.kill()
                        raise TimeoutError("timed out")
                data = json.loads(Path(out).read_text())
            except Exception as exc:  # noqa: BLE001 - record, go on
                notes.append(f"world {world}: failed ({type(exc).__name__}: {str(exc)[:100]})")
                continue
        for nbytes, med, p10, p90 in data["allreduce"]:
            ar_rows.append({"num_bytes": nbytes, "world": world, "time_ms": med, "time_ms_p10": p10,
                            "time_ms_p90": p90, "backend": backend, "dtype": "bfloat16"})
        for nbytes, med, p10, p90 in data["p2p"]:
            p2p_rows.append({"num_bytes": nbytes, "time_ms": med, "time_ms_p10": p10, "time_ms_p90": p90,
                             "backend": backend, "dtype": "bfloat16"})
        notes.append(f"world {world}: measured ({backend})")
    return ar_rows, p2p_rows, "; ".join(notes)


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
    dev = torch.device(device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("device cuda requested but torch.cuda.is_available() is False")
        dev = torch.device("cuda", dev.index if dev.index is not None else torch.cuda.current_device())
        torch.cuda.set_device(dev)
    elif dev.type != "cpu":
        raise ValueError(f"unsupported device {device!r}: use cpu or cuda")
    torch.manual_seed(0)

    specs = _resolve(models)
    if quick:
        specs = [G.shrink(s) for s in specs]
    tp_sizes = tuple(t for t in tp_sizes if (not quick or t <= 2))
    cfg = G.grid_config(dev.type, quick)
    cases = G.build_cases(specs, cfg, tp_sizes)
    classes = [c for c in G.CLASS_ORDER if any(x.op_class == c for x in cases)]

    meta: dict = {"hardware": hardware, "models": [s.name for s in specs], "quick": quick,
                  "command": command, "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                  "tp_sizes": list(tp_sizes), "max_minutes": max_minutes, "grid": cfg.as_dict()}
    meta.update(device_info(dev))
    meta["elementwise_impl"] = ops.configure(dev, fuse)
    meta["elementwise_num_bytes"] = dict(ops.ELEMENTWISE_BYTES)
    policy = timing.policy_for(dev.type, quick)
    timer = timing.make_timer(dev, policy)
    meta["timing"] = {"policy": policy.as_dict(),
                      "clock": "CUDA events, L2 flushed before each call" if dev.type == "cuda"
                      else "time.perf_counter_ns per call",
                      "statistic": "time_ms = median of repeats; time_ms_p10 / time_ms_p90 their percentiles"}
    if dev.type == "cuda":
        meta["timing"]["flush_bytes"] = timer.flush_bytes

    # Child-process measurements (planned for up front, run at the end).
    green = dev.type == "cuda" and not quick and bool(cfg.sm_fractions) and _green_supported()
    sm_shapes = G.sm_limit_shapes(specs, cfg) if green else []
    n_dev = torch.cuda.device_count() if dev.type == "cuda" else 0
    phase_est = (SM_LIMIT_EST_S if sm_shapes else 0.0) + COLLECTIVE_EST_S * sum(1 for w in (2, 4, 8) if w <= n_dev)

    pool = ops.TensorPool(dev)
    cap = _pool_cap_bytes(dev) // ops.BYTES
    pool.reserve(min(cap, max((c.numel for c in cases), default=0)))
    per_call_s = 2e-6
    if dev.type == "cuda" and not quick:
        per_call_s = _warm_up_gpu(dev, timer) + 20e-6
    planner = _Planner(_nominal_rates(dev.type, hardware), policy, per_call_s,
                       default_overhead_s=0.002 if dev.type == "cuda" else 0.001)

    results: dict[int, tuple] = {}  # case index -> (Timing, impl, wall_s)
    by_key: dict[tuple, tuple] = {}  # dedupe identical shapes (timing, impl)
    reused: set[int] = set()  # cases answered from by_key
    errors: list[str] = []
    stats = {c: {"full": sum(1 for x in cases if x.op_class == c), "planned": 0, "measured": 0, "skipped": 0,
                 "dropped_for_time": 0} for c in classes}

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn("{task.description:<18}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   console=Console(stderr=True), disable=not progress, transient=False)

    def run_one(i: int, task) -> None:
        c = cases[i]
        t0 = time.monotonic()
        try:
            hit = by_key.get(c.key)
            if hit is None:
                t, impl = _measure_case(c, timer, pool)
                by_key[c.key] = (t, impl)
            else:
                t, impl = hit
                reused.add(i)
            results[i] = (t, impl, time.monotonic() - t0)
        except Exception as exc:  # noqa: BLE001 - skip the shape, keep going
            stats[c.op_class]["skipped"] += 1
            if len(errors) < MAX_ERRORS_KEPT:
                errors.append(f"{c.grid} {c.params}: {type(exc).__name__}: {str(exc)[:200]}")
            _recover(dev)
        finally:
            pool.reset()
            bar.advance(task)

    with bar:
        probes: set[int] = set()
        cost = [0.0] * len(cases)
        selected = set(range(len(cases)))
        factor, budget = 1.0, None
        thinning: dict = {"factor": 1.0, "per_class": {}, "replans": []}
        if deadline is not None:
            # Probes: shapes spread over each class's work range, extremes included.
            for cls in classes:
                probes |= planner.probes(cases, [i for i, x in enumerate(cases) if x.op_class == cls])
            task = bar.add_task("calibrating", total=len(probes))
            for i in sorted(probes):
                run_one(i, task)
            for cls in classes:
                planner.fit(cls, [(cases[i], results[i][0].median_ms * 1e-3, results[i][2])
                                  for i in probes if cases[i].op_class == cls and i in results])
            first_of_key: dict[tuple, int] = {}
            for i, c in enumerate(cases):
                first_of_key.setdefault(c.key, i)
            # A shape equal to an earlier one (another model, op or class) costs nothing.
            cost = [planner.wall_s(c) if first_of_key[c.key] == i else 0.0 for i, c in enumerate(cases)]
            budget = deadline - time.monotonic() - phase_est - WRITE_RESERVE_S
            whole = G.cheap_grids(cases, cost, budget)
            factor = _choose_factor(cases, cost, budget, probes, whole)
            selected = set(G.thin(cases, factor, whole)) | probes
            thinning.update(factor=round(factor, 4), budget_s=round(budget, 1), grids_kept_whole=len(whole),
                            predicted_s=round(sum(cost[i] for i in selected - probes), 1))

        def todo_count(cls, ids):
            return sum(1 for i in ids if i in selected and i not in probes and cases[i].op_class == cls)

        tasks = {c: bar.add_task(c, total=todo_count(c, range(len(cases)))) for c in classes}
        done = {c: 0 for c in classes}
        diag = {c: [0.0, 0.0, 0] for c in classes}  # predicted s, actual s, count (non-probe cases)
        grids = list(G.group_by_grid(cases).values())
        hard_stop = (deadline - WRITE_RESERVE_S) if deadline else None
        interval = max(10.0, 0.05 * budget) if budget else None
        last_plan = time.monotonic()
        seen_classes: set[str] = set()
        for gi, idx in enumerate(grids):
            cls = cases[idx[0]].op_class
            if interval and time.monotonic() - last_plan >= interval:
                # Re-plan the grids not started, predictions scaled by how far off
                # they were so far (per class once it has 5 shapes, else overall).
                last_plan = time.monotonic()
                rest = [i for ix in grids[gi:] for i in ix]
                tot_p, tot_a = sum(d[0] for d in diag.values()), sum(d[1] for d in diag.values())
                overall = tot_a / tot_p if tot_p > 0 else 1.0

                def ratio(c):
                    r = diag[c][1] / diag[c][0] if diag[c][2] >= 5 and diag[c][0] > 0 else overall
                    return min(3.0, max(0.3, r))

                scaled = [ratio(cases[i].op_class) * cost[i] for i in rest]
                sub = [cases[i] for i in rest]
                local_probes = {j for j, i in enumerate(rest) if i in probes}
                left = deadline - time.monotonic() - phase_est - WRITE_RESERVE_S
                f2 = _choose_factor(sub, scaled, left, local_probes, whole)
                if f2 > factor:  # loosen with a 10% margin
                    f2 = max(factor, _choose_factor(sub, scaled, 0.9 * left, local_probes, whole))
                if f2 != factor:
                    factor = f2
                    selected = ((selected - set(rest)) | {rest[j] for j in G.thin(sub, f2, whole)}
                                | (set(rest) & probes))
                    thinning["replans"].append({"at_s": round(time.monotonic() - t_start, 1),
                                                "factor": round(f2, 4), "overall_ratio": round(overall, 3)})
                    for c in classes:
                        bar.update(tasks[c], total=done[c] + todo_count(c, rest))
            if cls not in seen_classes:
                seen_classes.add(cls)
                thinning["per_class"][cls] = round(factor, 4)
            for i in idx:
                if i not in selected or i in probes:
                    continue
                done[cls] += 1
                if hard_stop is not None and time.monotonic() > hard_stop:
                    stats[cls]["dropped_for_time"] += 1
                    bar.advance(tasks[cls])
                    continue
                run_one(i, tasks[cls])
                if i in results and i not in reused:
                    diag[cls][0] += cost[i]
                    diag[cls][1] += results[i][2]
                    diag[cls][2] += 1
        for cls in classes:
            stats[cls]["planned"] = sum(1 for i in selected if cases[i].op_class == cls)

    # Rows per class, in case order.
    frames: dict[str, list[dict]] = {c: [] for c in classes}
    for i in sorted(results):
        c = cases[i]
        t, impl, _ = results[i]
        frames[c.op_class].append({**c.row, "time_ms": t.median_ms, "time_ms_p10": t.p10_ms,
                                   "time_ms_p90": t.p90_ms, "repeats": t.repeats, "dtype": "bfloat16",
                                   "impl": impl})
    for cls in classes:
        stats[cls]["measured"] = len(frames[cls])

    # Child-process measurements.
    if sm_shapes:
        left = (deadline - time.monotonic() - WRITE_RESERVE_S) if deadline else 600.0
        if left < 15:
            meta["sm_limit"] = "not measured: out of time (--max-minutes)"
        else:
            rows, meta["sm_limit"] = _sm_limit(dev, sm_shapes, cfg.sm_fractions, policy, min(left, 240.0))
            if rows:
                frames["sm_limit"] = rows
    else:
        meta["sm_limit"] = _sm_limit_reason(dev, quick)
    if n_dev > 1:
        ar, p2p, note = _collectives(n_dev, policy, deadline)
        meta["allreduce"] = meta["p2p"] = note
        if ar:
            frames["allreduce"] = ar
        if p2p:
            frames["p2p"] = p2p
    else:
        why = "one device" if dev.type == "cuda" else "CPU (no CUDA devices)"
        meta["allreduce"] = f"not measurable: {why}"
        meta["p2p"] = f"not measurable: {why}"

    for cls, rows in frames.items():
        if rows:
            write_class(out_dir, cls, pd.DataFrame(rows))
    for cls in SHAPE_COLUMNS:  # a class not measured this time must not keep an older run's rows
        if not frames.get(cls):
            csv_path(out_dir, cls).unlink(missing_ok=True)
    meta["rows"] = {cls: len(rows) for cls, rows in frames.items() if rows}
    meta["grid_sizes"] = stats
    meta["skipped"] = sum(s["skipped"] for s in stats.values())
    meta["skipped_examples"] = errors
    meta["dropped_for_time"] = sum(s["dropped_for_time"] for s in stats.values())
    if deadline is not None:
        thinning["predicted_vs_actual_s"] = {c: [round(p, 1), round(a, 1)] for c, (p, a, _) in diag.items()}
    meta["thinning"] = thinning
    meta["elapsed_s"] = round(time.monotonic() - t_start, 2)
    write_meta(out_dir, meta)
    return out_dir


def _green_supported() -> bool:
    try:
        from torch.cuda import green_contexts

        return bool(green_contexts.SUPPORTED)
    except Exception:  # noqa: BLE001
        return False


def _sm_limit_reason(dev: torch.device, quick: bool) -> str:
    if dev.type != "cuda":
        return "not measurable: CPU (SM limits need CUDA MPS or green contexts)"
    if quick:
        return "not measured: --quick"
    return ("not measurable: this torch build has no CUDA green contexts (torch.cuda.green_contexts.SUPPORTED is "
            "False), and CUDA MPS (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE) needs an MPS control daemon started "
            "before the process")


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

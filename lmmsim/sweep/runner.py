"""``run_sweep``: expand, run what is not finished, collect ``results.parquet``.

Layout of ``out``::

    out/runs/<run_id>/      run_id = sha256(resolved scenario YAML)[:16]
        requests.parquet, summary.json, scenario.resolved.yaml   (the run contract)
        done.json           written last: swept values, repeat, seed, run_id, wall_s
        error.json          instead, when the run raised: message, traceback
    out/results.parquet     one row per point x repeat

Resume: a run dir holding ``done.json`` is not run again; one holding
``error.json`` is not either, unless ``retry_failed``. Anything else (no dir,
or a dir left by a killed run) runs. Two points resolving to the same scenario
share one run.

``results.parquet`` columns: the swept keys (dotted; a mapping or list value
is stored as its JSON text), ``repeat``, ``seed``, ``run_id``, ``status``
(``ok`` / ``failed``), ``error`` (message, failed runs only), then every
summary.json metric flattened with dots (``ttft_s.p99``,
``by_modality.image.ttft_s.mean``, ``gpu_utilization.per_gpu.0``). The
wall-clock field ``sim_wall_time_s`` is left out, so the file depends only on
the sweep, never on the executor, job count or machine load. Rows are in
point order, repeats innermost.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from lmmsim.errors import UserError
from lmmsim.scenario import apply_override, dump_scenario, validate_scenario
from lmmsim.sweep.executors import DONE, ERROR, execute, record_failure
from lmmsim.sweep.spec import Point, SweepSpec, expand, load_sweep

WALL_CLOCK_FIELDS = ("sim_wall_time_s",)


# ------------------------------------------------------------------ scenarios
def set_value(raw: dict, dotted: str, value: Any) -> None:
    """``apply_override`` semantics for an already-parsed value (no YAML round trip)."""
    if value is None:
        apply_override(raw, f"{dotted}=null")
        return
    apply_override(raw, f"{dotted}=0")  # creates the path, checks list indices
    keys = dotted.split(".")
    node: Any = raw
    for key in keys[:-1]:
        node = node[int(key)] if isinstance(node, list) else node[key]
    last = keys[-1]
    node[int(last) if isinstance(node, list) else last] = copy.deepcopy(value)


def _base(spec: SweepSpec, sweep_path: Path) -> tuple[dict, Path]:
    if spec.scenario is not None:
        return copy.deepcopy(spec.scenario), sweep_path.resolve().parent
    base = (sweep_path.parent / spec.base).resolve()
    try:
        raw = yaml.safe_load(base.read_text())
    except FileNotFoundError:
        raise UserError(f"{sweep_path}: base", f"scenario file {base} not found") from None
    except yaml.YAMLError as exc:
        raise UserError(str(base), f"not valid YAML ({getattr(exc, 'problem', exc)})") from None
    if not isinstance(raw, dict):
        raise UserError(str(base), "a scenario must be a YAML mapping of keys")
    return raw, base.parent


def resolve_point(base_raw: dict, spec: SweepSpec, point: Point):
    """The validated scenario of one run: base, then ``set``, then the point's values, seed + repeat."""
    raw = copy.deepcopy(base_raw)
    for key, value in {**spec.set, **point.overrides}.items():
        set_value(raw, key, value)
    scn = validate_scenario(raw)
    if point.repeat:
        scn = scn.model_copy(update={"seed": scn.seed + point.repeat})
    return scn


def run_id_of(scenario_yaml: str) -> str:
    return hashlib.sha256(scenario_yaml.encode()).hexdigest()[:16]


# -------------------------------------------------------------------- results
def flatten(obj: Any, prefix: str = "", out: dict | None = None) -> dict:
    """Nested dicts/lists -> ``{"a.b.0": leaf}``."""
    out = {} if out is None else out
    if isinstance(obj, dict):
        for key, value in obj.items():
            flatten(value, f"{prefix}{key}.", out)
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            flatten(value, f"{prefix}{i}.", out)
    else:
        out[prefix[:-1]] = obj
    return out


def _cell(value: Any) -> Any:
    return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else value


def _to_table(rows: list[dict]) -> pa.Table:
    columns: dict[str, None] = {}
    for row in rows:
        columns.update(dict.fromkeys(row))
    arrays = {}
    for name in columns:
        values = [row.get(name) for row in rows]
        try:
            arrays[name] = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError):  # mixed types (e.g. 1 and "auto"): as text
            arrays[name] = pa.array([None if v is None else json.dumps(v) for v in values])
    return pa.table(arrays)


def _write_parquet_atomic(table: pa.Table, path: Path) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _row(point: Point, seed: int, run_id: str, run_dir: Path, swept_keys: list[str]) -> dict:
    row = {key: _cell(point.overrides.get(key)) for key in swept_keys}
    row.update(repeat=point.repeat, seed=seed, run_id=run_id)
    if (run_dir / DONE).exists():
        summary = json.loads((run_dir / "summary.json").read_text())
        for field in WALL_CLOCK_FIELDS:
            summary.pop(field, None)
        row.update(status="ok", error=None)
        row.update(flatten(summary))
    else:
        try:
            message = json.loads((run_dir / ERROR).read_text()).get("message")
        except (OSError, ValueError):
            message = "run did not finish"
        row.update(status="failed", error=message)
    return row


# ---------------------------------------------------------------------- sweep
def run_sweep(sweep_path: Path, out: Path, *, jobs: int | None = None, executor: str = "local",
              address: str | None = None, retry_failed: bool = False, progress: bool = True) -> pd.DataFrame:
    """Run every point of the sweep at ``sweep_path`` not yet finished under ``out``;
    write and return the results table (see the module docstring)."""
    sweep_path, out = Path(sweep_path), Path(out)
    spec = load_sweep(sweep_path)
    base_raw, base_dir = _base(spec, sweep_path)
    points = expand(spec)
    swept_keys = spec.swept_keys()
    runs_dir = out / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)

    # Resolve every point (cheap) before running anything.
    resolved: list[tuple[Point, int, str]] = []  # point, seed, run_id
    tasks: dict[str, dict] = {}
    invalid: list[UserError] = []
    for point in points:
        meta = {"swept": point.overrides, "repeat": point.repeat}
        try:
            scn = resolve_point(base_raw, spec, point)
        except UserError as exc:  # this combination is not a valid scenario: a failed run
            invalid.append(exc)
            raw_text = json.dumps({"base": base_raw, "set": spec.set, **meta}, sort_keys=True, default=str)
            run_id = "invalid-" + run_id_of(raw_text)
            merged = {"seed": base_raw.get("seed", 0), **spec.set, **point.overrides}
            seed = merged["seed"] + point.repeat if isinstance(merged["seed"], int) else -1
            if not (runs_dir / run_id / ERROR).exists():
                task = {"run_id": run_id, "meta": {**meta, "seed": None}}
                record_failure(runs_dir / run_id, task, f"invalid scenario: {exc}", "")
            resolved.append((point, seed, run_id))
            continue
        text = dump_scenario(scn)
        run_id = run_id_of(text)
        resolved.append((point, scn.seed, run_id))
        run_dir = runs_dir / run_id
        if run_id in tasks or (run_dir / DONE).exists():
            continue
        if (run_dir / ERROR).exists() and not retry_failed:
            continue
        tasks[run_id] = {"scenario_yaml": text, "base_dir": str(base_dir), "run_dir": str(run_dir),
                         "run_id": run_id, "meta": {**meta, "seed": scn.seed}}
    if points and len(invalid) == len(points):
        raise invalid[0]  # nothing valid at all: most likely a typo in a key, say so

    _execute_with_progress(list(tasks.values()), executor, jobs, address, progress)

    rows = [_row(point, seed, run_id, runs_dir / run_id, swept_keys) for point, seed, run_id in resolved]
    table = _to_table(rows)
    _write_parquet_atomic(table, out / "results.parquet")
    return table.to_pandas()


def _execute_with_progress(tasks, executor, jobs, address, progress) -> None:
    if not progress:
        execute(tasks, executor=executor, jobs=jobs, address=address)
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    columns = (TextColumn("sweep"), BarColumn(), MofNCompleteColumn(),
               TextColumn("[red]{task.fields[failed]} failed"), TimeElapsedColumn(), TextColumn("ETA"),
               TimeRemainingColumn())
    bar = Progress(*columns, console=Console(file=sys.stderr), transient=False)
    task_id = bar.add_task("sweep", total=len(tasks), failed=0)
    failed = 0

    def on_done(status: dict) -> None:
        nonlocal failed
        failed += status["status"] != "ok"
        bar.update(task_id, advance=1, failed=failed)

    try:
        execute(tasks, executor=executor, jobs=jobs, address=address, on_done=on_done, on_start=bar.start)
    finally:
        bar.stop()

"""``run_sweep``: expand, run what is not finished, collect ``results.parquet``.

Layout of ``out``::

    out/runs/<run_id>/      run_id = sha256(resolved scenario YAML + provenance cache key)[:16]
        requests.parquet, summary.json, scenario.resolved.yaml   (the run contract)
        done.json           written last: swept values, repeat, seed, run_id, wall_s
        error.json          instead, when the run raised: message, traceback
    out/results.parquet     one row per point x repeat

Only ``runs/`` and ``results.parquet`` are the sweep's (claimed through
:class:`lmmsim.outputs.OutputDir`, so a user's own file of either name stops
the sweep before anything runs); anything else in ``out`` is left alone.

Resume: a finished run (:func:`inspect_run`: ``done.json`` and the whole
contract present and readable) is not run again; one holding ``error.json`` is
not either, unless ``retry_failed``. Anything else (no dir, a dir left by a
killed run, or a finished one damaged since: said on stderr) runs again from
an empty dir. Two points resolving to the same scenario share one run. The run id
also hashes the lmmsim version and the catalog entries and fits the run reads
(:func:`lmmsim.provenance.cache_key`): when one changes, the run is made again, and
the sweep says why on stderr (:func:`rerun_reasons`).

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
import sys
from pathlib import Path
from typing import Any, NamedTuple

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from lmmsim.errors import UserError
from lmmsim.outputs import OutputDir, atomic_path
from lmmsim.scenario import apply_override, dump_scenario, validate_scenario
from lmmsim.sweep.executors import DONE, ERROR, execute, record_failure
from lmmsim.sweep.spec import Point, SweepSpec, expand, load_sweep
from lmmsim.yamlio import read_yaml

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
    if not base.is_file():  # said against the sweep's key, which is where the path came from
        raise UserError(f"{sweep_path}: base", f"scenario file {base} not found")
    raw = read_yaml(base, "scenario file")
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


def run_id_of(scenario_yaml: str, key: dict | None = None) -> str:
    """sha256 of the resolved scenario YAML and (when given) its provenance cache key --
    lmmsim version and the hashes of the catalog entries and fits it reads
    (:func:`lmmsim.provenance.cache_key`) -- so a changed catalog or fit is a new run."""
    text = scenario_yaml if key is None else f"{scenario_yaml}\n# inputs: {json.dumps(key, sort_keys=True)}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


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


class RunState(NamedTuple):
    """What a run dir holds: ``summary`` (parsed) when the run is finished, else None;
    ``damage`` says why a dir whose ``done.json`` claims it finished is not."""

    summary: dict | None
    damage: str | None = None

    @property
    def finished(self) -> bool:
        return self.summary is not None


def _json_object(path: Path) -> tuple[dict | None, str | None]:
    """``(object, None)``, or ``(None, why not)`` when ``path`` is missing or no JSON object."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None, f"{path.name} is missing"
    except (OSError, ValueError):  # unreadable, or not UTF-8
        return None, f"{path.name} cannot be read"
    if not text.strip():
        return None, f"{path.name} is empty"
    try:
        data = json.loads(text)
    except ValueError:
        return None, f"{path.name} is not valid JSON"
    return (data, None) if isinstance(data, dict) else (None, f"{path.name} is not a JSON object")


def _parquet_problem(path: Path) -> str | None:
    if not path.is_file():
        return f"{path.name} is missing"
    try:
        pq.read_metadata(path)  # footer and schema: enough to tell a whole file from a truncated one
    except (OSError, pa.ArrowException):
        return f"{path.name} is not a readable parquet file"
    return None


def _yaml_mapping_problem(path: Path) -> str | None:
    try:
        # lmmsim's own file, not user input; the C loader when present (a resumed sweep reads thousands)
        data = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except FileNotFoundError:
        return f"{path.name} is missing"
    except (OSError, ValueError, yaml.YAMLError):
        return f"{path.name} is not valid YAML"
    return None if isinstance(data, dict) else f"{path.name} is not a YAML mapping"


def inspect_run(run_dir: Path) -> RunState:
    """Is the run in ``run_dir`` finished: ``done.json`` (a JSON object), ``summary.json``
    (a JSON object), ``requests.parquet`` (readable metadata) and ``scenario.resolved.yaml``
    (a mapping) all present and parsing? The one test used both to pick what to run and
    to build rows, so a run counted ``ok`` is always one that is not rerun."""
    if not (run_dir / DONE).exists():
        return RunState(None)  # not run, killed, or failed: no damage to report
    _, problem = _json_object(run_dir / DONE)
    summary, summary_problem = _json_object(run_dir / "summary.json")
    problem = (problem or summary_problem or _parquet_problem(run_dir / "requests.parquet")
               or _yaml_mapping_problem(run_dir / "scenario.resolved.yaml"))
    return RunState(None, problem) if problem else RunState(summary)


def _row(point: Point, seed: int, run_id: str, run_dir: Path, swept_keys: list[str]) -> dict:
    row = {key: _cell(point.overrides.get(key)) for key in swept_keys}
    row.update(repeat=point.repeat, seed=seed, run_id=run_id)
    state = inspect_run(run_dir)
    if state.finished:
        summary = dict(state.summary)
        for field in WALL_CLOCK_FIELDS:
            summary.pop(field, None)
        row.update(status="ok", error=None)
        row.update(flatten(summary))
        return row
    error, _ = _json_object(run_dir / ERROR)
    message = (error or {}).get("message") or state.damage or "run did not finish"
    row.update(status="failed", error=message)
    return row


def describe_failures(frame: pd.DataFrame, out: Path, shown: int = 3) -> str | None:
    """One line on the failed rows of a results table (None when every run is ok):
    how many, and the ``error.json`` of the first ``shown`` failed runs."""
    if "status" not in frame:
        return None
    failed = frame[frame["status"] != "ok"]
    if failed.empty:
        return None
    paths = [str(Path(out) / "runs" / run_id / ERROR) for run_id in dict.fromkeys(failed["run_id"])]
    listed = ", ".join(paths[:shown]) + (f" and {len(paths) - shown} more" if len(paths) > shown else "")
    return f"{len(failed)} of {len(frame)} runs failed; see {listed}"


# ---------------------------------------------------------------------- sweep
def run_sweep(sweep_path: Path, out: Path, *, jobs: int | None = None, executor: str = "local",
              address: str | None = None, retry_failed: bool = False, progress: bool = True,
              spec: SweepSpec | None = None) -> pd.DataFrame:
    """Run every point of the sweep at ``sweep_path`` not yet finished under ``out``;
    write and return the results table (see the module docstring). ``spec``: an
    already-parsed sweep (the Python API); ``sweep_path`` then only anchors its relative paths."""
    # Absolute before anything is dispatched: a dask worker's working directory is not ours,
    # so a relative run folder would be written (or looked for) somewhere else.
    sweep_path, out = Path(sweep_path).resolve(), Path(out).resolve()
    spec = load_sweep(sweep_path) if spec is None else spec
    base_raw, base_dir = _base(spec, sweep_path)
    folder = OutputDir(out, resume=True)
    folder.check("runs/", "results.parquet")  # a user's file of either name: stop before any work

    resolved, invalid = _resolve_all(base_raw, spec, base_dir)
    if resolved and all(r.scenario_yaml is None for r in resolved):
        raise next(iter(invalid.values()))[1]  # nothing valid at all: most likely a typo in a key, say so
    runs_dir = folder.folder("runs")
    results_path = folder.file("results.parquet")
    for run_id, (task, exc) in invalid.items():
        if not (runs_dir / run_id / ERROR).exists():
            record_failure(runs_dir / run_id, task, f"invalid scenario: {exc}", "")

    tasks = _tasks_to_run(resolved, runs_dir, base_dir, retry_failed)
    for line in rerun_reasons(tasks, runs_dir, {r.run_id for r in resolved}):
        print(f"sweep: {line}", file=sys.stderr)
    _execute_with_progress(tasks, executor, jobs, address, progress)

    swept_keys = spec.swept_keys()
    rows = [_row(r.point, r.seed, r.run_id, runs_dir / r.run_id, swept_keys) for r in resolved]
    table = _to_table(rows)
    with atomic_path(results_path) as tmp:
        pq.write_table(table, tmp)
    return table.to_pandas()


class _Resolved(NamedTuple):
    """One point x repeat: its run id and seed; ``scenario_yaml`` is None when invalid.
    ``key``: its provenance cache key (:func:`lmmsim.provenance.cache_key`)."""

    point: Point
    seed: int
    run_id: str
    scenario_yaml: str | None
    key: dict | None = None


def _keyer(base_dir: Path):
    """``cache_key`` of a scenario, computed once per (GPU, model, cost model, host profile,
    replayed trace) -- the inputs :func:`lmmsim.provenance.inputs` hashes."""
    from lmmsim.provenance import cache_key

    memo: dict[tuple, dict] = {}

    def key_of(scn) -> dict:
        which = (scn.hardware.gpu, scn.model, scn.hardware.cost_model, scn.host.profile,
                 getattr(scn.workload.arrival, "path", None))
        if which not in memo:
            memo[which] = cache_key(scn, base_dir)
        return memo[which]

    return key_of


def _resolve_all(base_raw: dict, spec: SweepSpec,
                 base_dir: Path) -> tuple[list[_Resolved], dict[str, tuple[dict, UserError]]]:
    """Resolve every point (cheap, writes nothing). Returns them in point order, and the
    invalid ones by run id with the task record for their error.json and the error."""
    key_of = _keyer(base_dir)
    resolved: list[_Resolved] = []
    invalid: dict[str, tuple[dict, UserError]] = {}
    for point in expand(spec):
        meta = {"swept": point.overrides, "repeat": point.repeat}
        try:
            scn = resolve_point(base_raw, spec, point)
        except UserError as exc:  # this combination is not a valid scenario: a failed run
            raw_text = json.dumps({"base": base_raw, "set": spec.set, **meta}, sort_keys=True, default=str)
            run_id = "invalid-" + run_id_of(raw_text)
            merged = {"seed": base_raw.get("seed", 0), **spec.set, **point.overrides}
            seed = merged["seed"] + point.repeat if isinstance(merged["seed"], int) else -1
            invalid[run_id] = ({"run_id": run_id, "meta": {**meta, "seed": None}}, exc)
            resolved.append(_Resolved(point, seed, run_id, None))
            continue
        text, key = dump_scenario(scn), key_of(scn)
        resolved.append(_Resolved(point, scn.seed, run_id_of(text, key), text, key))
    return resolved, invalid


def _tasks_to_run(resolved: list[_Resolved], runs_dir: Path, base_dir: Path, retry_failed: bool) -> list[dict]:
    """The tasks for the valid runs not finished yet (one per run id); a finished run found
    damaged is run again, and said so on stderr."""
    tasks: dict[str, dict] = {}
    for r in resolved:
        if r.scenario_yaml is None or r.run_id in tasks:
            continue
        run_dir = runs_dir / r.run_id
        state = inspect_run(run_dir)
        if state.finished:
            continue
        if state.damage:
            print(f"sweep: {run_dir}: {state.damage}; running it again", file=sys.stderr)
        elif (run_dir / ERROR).exists() and not retry_failed:
            continue
        # scenario_id (the scenario alone) and cache_key go into done.json: a later sweep
        # finding this scenario under another run id can say what changed
        tasks[r.run_id] = {"scenario_yaml": r.scenario_yaml, "base_dir": str(base_dir), "run_dir": str(run_dir),
                           "run_id": r.run_id, "meta": {"swept": r.point.overrides, "repeat": r.point.repeat,
                                                        "seed": r.seed, "scenario_id": run_id_of(r.scenario_yaml),
                                                        "cache_key": r.key}}
    return list(tasks.values())


def rerun_reasons(tasks: list[dict], runs_dir: Path, current: set[str] = frozenset()) -> list[str]:
    """Lines saying why runs whose scenario already ran under another run id are run
    again (the lmmsim version, a catalog entry or fit changed since), one per reason.
    A run made before run ids held the inputs is found by its id, the scenario's hash.
    ``current``: the sweep's own run ids (not read: none is an earlier version of another)."""
    if not tasks or not runs_dir.is_dir():
        return []
    mine = {t["run_id"] for t in tasks} | set(current)
    earlier: dict[str, dict | None] = {}
    for run_dir in sorted(runs_dir.iterdir()):
        if run_dir.name in mine or not (run_dir / DONE).is_file():
            continue
        done, _ = _json_object(run_dir / DONE)
        if done is not None:
            earlier[done.get("scenario_id", run_dir.name)] = done.get("cache_key")
    counts: dict[str, int] = {}
    for task in tasks:
        scenario_id = task["meta"]["scenario_id"]
        if scenario_id in earlier:
            from lmmsim.provenance import changes

            reason = "; ".join(changes(earlier[scenario_id], task["meta"]["cache_key"])) or "inputs changed"
            counts[reason] = counts.get(reason, 0) + 1
    return [f"rerunning {n} run{'s' if n > 1 else ''} already made: {reason}" for reason, n in counts.items()]


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

"""The Python API: ``from lmmsim import load_scenario, run, sweep``.

A thin layer over what the CLI runs (:func:`lmmsim.scenario.validate_scenario`,
:func:`lmmsim.results.run_scenario`, :func:`lmmsim.sweep.runner.run_sweep`), for
notebooks and scripts::

    import lmmsim

    scn = lmmsim.load_scenario("quickstart", {"workload.num_requests": 200})
    res = lmmsim.run(scn)                      # writes nothing
    res.requests.groupby("modality").ttft_s.median()
    res.summary["ttft_s"]["p99"]
    df = lmmsim.sweep({"base": "scenario.yaml", "axes": [
        {"kind": "grid", "params": {"workload.arrival.rate": [2, 4, 6]}}]})

A scenario source is a path (or a shipped example's name, as for ``lmmsim run``), YAML
text or a dict; ``overrides`` maps dotted keys to values with ``--set``'s meaning (a
``None`` value removes the key, so its default applies). Relative paths inside a
scenario (traces, cost models, host profiles) resolve against the scenario file's
folder, and against the working directory for YAML text or a dict. Mistakes raise
:class:`lmmsim.errors.UserError`, whose one-line message names the key.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any, Mapping

from lmmsim.errors import UserError


def _assignments(overrides) -> list[str]:
    """``--set`` strings for ``overrides`` (a dict of dotted key -> value, or such strings)."""
    if overrides is None:
        return []
    if isinstance(overrides, str):
        raise UserError("overrides", "give a dict of dotted keys to values, e.g. {'workload.num_requests': 100}")
    if not isinstance(overrides, Mapping):
        return [str(a) for a in overrides]
    import yaml

    out = []
    for key, value in overrides.items():
        if not isinstance(key, str):
            raise UserError("overrides", f"keys must be dotted strings, got {key!r}")
        text = yaml.safe_dump(value, default_flow_style=True, width=math.inf).strip()
        out.append(f"{key}={text.removesuffix('...').strip()}")  # YAML text that loads back to value
    return out


def _is_yaml_text(source: str) -> bool:
    return "\n" in source or (":" in source and not Path(source).exists())


def load_scenario(source, overrides: Mapping[str, Any] | None = None):
    """The validated scenario of ``source`` (a path, YAML text, a dict, or a scenario
    already loaded) with ``overrides`` applied; its relative paths resolve as described
    in the module docstring (kept with the scenario for :func:`run`)."""
    from pydantic import BaseModel

    from lmmsim import scenario as scenario_mod

    sets = _assignments(overrides)
    if isinstance(source, BaseModel) and not sets:
        return source if getattr(source, "_base_dir", None) else _with_base(source.model_copy(), Path.cwd())
    if isinstance(source, BaseModel):  # a loaded scenario: overrides apply over its resolved keys
        raw, base_dir = source.model_dump(mode="json"), getattr(source, "_base_dir", None) or Path.cwd()
    elif isinstance(source, dict):
        raw, base_dir = copy.deepcopy(source), Path.cwd()
    elif isinstance(source, str) and _is_yaml_text(source):
        from lmmsim.yamlio import load_yaml

        raw, base_dir = load_yaml(source, "scenario text"), Path.cwd()
        if not isinstance(raw, dict):
            raise UserError("scenario text", "a scenario must be a YAML mapping of keys")
    elif isinstance(source, (str, Path)):
        scn, base_dir = scenario_mod.load_scenario(source, sets)
        return _with_base(scn, base_dir)
    else:
        raise UserError("scenario", f"give a path, YAML text or a dict, not a {type(source).__name__}")
    for assignment in sets:
        scenario_mod.apply_override(raw, assignment)
    return _with_base(scenario_mod.validate_scenario(raw), base_dir)


def _with_base(scn, base_dir: Path):
    scn._base_dir = Path(base_dir).resolve()
    return scn


class RunResult:
    """One simulated run: ``requests`` (one row per request, the columns of
    ``requests.parquet``), ``summary`` (the dict ``summary.json`` holds), ``steps`` (one
    row per engine step, encoder batch or transfer, with ``step_log=True``; else None),
    ``scenario`` (the validated scenario) and ``output`` (the folder written, or None).
    With ``sim.keep_requests: false`` the rows are not held: ``requests`` is None and
    ``requests_path`` names ``output``'s requests.parquet (None without ``output``: the rows
    streamed to a temporary file, gone with the run)."""

    def __init__(self, requests, summary: dict, steps, scenario, output: Path | None):
        self.requests, self.summary, self.steps = requests, summary, steps
        self.scenario, self.output = scenario, output
        self.requests_path = output / "requests.parquet" if requests is None and output is not None else None

    def __repr__(self) -> str:
        where = f", output={str(self.output)!r}" if self.output is not None else ""
        return f"RunResult({self.scenario.name!r}, {self.summary['num_requests']} requests{where})"


def run(scenario, overrides: Mapping[str, Any] | None = None, *, output: str | Path | None = None,
        step_log: bool = False, force: bool = False, csv: bool = False) -> RunResult:
    """Simulate ``scenario`` (anything :func:`load_scenario` takes) and return its results.
    Nothing is written unless ``output`` names a folder: then the files of ``lmmsim run -o``
    (``trace.json`` too with ``step_log``, ``requests.csv`` with ``csv``; an existing
    non-empty folder only with ``force``, as ``--force``)."""
    from lmmsim.results import prepare_output_dir, run_scenario, spill_place, write_results

    scn = load_scenario(scenario, overrides)
    out = Path(output) if output is not None else None
    if out is not None:
        prepare_output_dir(out, force)  # fail before simulating, not after
    result = run_scenario(scn, scn._base_dir, trace=step_log, spill_near=spill_place(out) if out is not None else None)
    if out is not None:
        write_results(result, scn, out, force=force, csv=csv)
    steps = result.built.step_log.to_frame() if result.built.step_log is not None else None
    return RunResult(result.requests, result.summary, steps, scn, out)


def sweep(spec, *, output: str | Path | None = None, jobs: int | None = 1, executor: str = "local",
          address: str | None = None, retry_failed: bool = False, progress: bool = False):
    """Run a sweep and return its results table (a DataFrame, one row per point x repeat;
    the columns of ``results.parquet``). ``spec``: a sweep file's path, its YAML text, a dict
    of the same keys, or a :class:`lmmsim.sweep.SweepSpec`; relative paths in a dict or text
    resolve against the working directory, or the folder of a scenario loaded from a file
    given as the dict's ``scenario``. ``output``: the sweep folder (runs kept there and
    reused when run again, as ``lmmsim sweep -o``); None runs in a temporary folder, removed
    after. ``executor``/``jobs``/``address``: as the CLI's ``--executor``/``-j``/``--address``."""
    from lmmsim.sweep.runner import run_sweep
    from lmmsim.sweep.spec import SweepSpec, parse_sweep

    from pydantic import BaseModel

    anchor, parsed, folder = None, None, Path.cwd()
    if isinstance(spec, dict) and isinstance(spec.get("scenario"), BaseModel):  # a loaded scenario
        scn = spec["scenario"]
        folder = getattr(scn, "_base_dir", None) or folder
        spec = {**spec, "scenario": scn.model_dump(mode="json")}
    if isinstance(spec, SweepSpec):
        parsed = spec
    elif isinstance(spec, dict):
        parsed = parse_sweep(copy.deepcopy(spec), "sweep")
    elif isinstance(spec, str) and _is_yaml_text(spec):
        from lmmsim.yamlio import load_yaml

        parsed = parse_sweep(load_yaml(spec, "sweep text"), "sweep text")
    elif isinstance(spec, (str, Path)):
        anchor = Path(spec)
    else:
        raise UserError("sweep", f"give a path, YAML text, a dict or a SweepSpec, not a {type(spec).__name__}")
    if parsed is not None:
        anchor = folder / "sweep"  # where an in-memory sweep's relative paths resolve
    options = {"jobs": jobs, "executor": executor, "address": address, "retry_failed": retry_failed,
               "progress": progress, "spec": parsed}
    if output is not None:
        return run_sweep(anchor, Path(output), **options)
    import tempfile

    with tempfile.TemporaryDirectory(prefix="lmmsim-sweep-") as tmp:
        return run_sweep(anchor, Path(tmp) / "sweep", **options)

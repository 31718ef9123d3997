"""Sweep results for the figures: reading ``results.parquet`` and choosing its rows.

:func:`load_results` reads a sweep folder (or its parquet file),
:func:`filter_rows` applies ``where`` (``key=value`` strings or a dict),
:func:`usable` drops failed runs and rows missing a metric, and
:func:`require` turns a missing column into ``UserError("RESULTS", ...)``.
The figure kinds that use them live in :mod:`lmmsim.plotting.figures`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from lmmsim.errors import UserError, choices

FAILED_STATUSES = frozenset({"failed", "error", "errored", "crashed"})


def load_results(results: Path) -> pd.DataFrame:
    """Read a sweep's results (its folder or its ``results.parquet``), or a single run's
    folder (``lmmsim run -o``: one row, for the kinds that read run folders, e.g. ``cdf``).

    ``frame.attrs["root"]`` is the sweep folder (where ``runs/<run_id>/`` live); for a
    run folder ``frame.attrs["run_dir"]`` is the folder itself.
    """
    results = Path(results)
    if results.is_dir() and not (results / "results.parquet").exists() and (results / "requests.parquet").exists():
        frame = pd.DataFrame({"run_id": [results.name], "status": ["ok"]})
        frame.attrs["run_dir"] = str(results)
        return frame
    path = results / "results.parquet" if results.is_dir() else results
    if not path.exists():
        raise UserError("RESULTS", f"{path} not found; give a sweep folder or its results.parquet")
    try:
        frame = pd.read_parquet(path)
    except Exception as err:
        raise UserError("RESULTS", f"cannot read {path}: {err}") from err
    frame.attrs["root"] = str(path.parent)
    return frame


def require(frame: pd.DataFrame, *columns: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise UserError(
            "RESULTS",
            f"no column {missing[0]!r} in the results; columns: {choices(map(str, frame.columns))}",
        )


def _parse_where(where) -> list[tuple[str, str]]:
    if where is None:
        return []
    if isinstance(where, Mapping):
        return [(str(k), str(v)) for k, v in where.items()]
    if isinstance(where, str):
        where = [where]
    out = []
    for item in where:
        if "=" not in item:
            raise UserError("--where", f"expected key=value, got {item!r}")
        key, value = item.split("=", 1)
        out.append((key.strip(), value.strip()))
    return out


def filter_rows(frame: pd.DataFrame, where=None) -> pd.DataFrame:
    """Rows matching every ``key=value`` of ``where`` (numeric columns compare numerically)."""
    keep = pd.Series(True, index=frame.index)
    for key, value in _parse_where(where):
        require(frame, key)
        col = frame[key]
        if pd.api.types.is_bool_dtype(col):
            keep &= col.astype(str).str.lower() == value.lower()
        elif pd.api.types.is_numeric_dtype(col):
            try:
                target = float(value)
            except ValueError:
                raise UserError("--where", f"{key} is numeric; cannot compare it with {value!r}") from None
            keep &= np.isclose(col.astype(float), target, rtol=1e-9, atol=0.0)
        else:
            keep &= col.astype(str) == value
    out = frame[keep]
    if out.empty:
        raise UserError("--where", f"no results row matches {dict(_parse_where(where))}")
    return out


def usable(frame: pd.DataFrame, *metrics: str) -> pd.DataFrame:
    """Drop failed runs and rows missing one of ``metrics``."""
    if "status" in frame.columns:
        frame = frame[~frame["status"].astype(str).str.lower().isin(FAILED_STATUSES)]
    frame = frame.dropna(subset=list(metrics))
    if frame.empty:
        raise UserError("RESULTS", f"no successful run has a value for {', '.join(metrics)}")
    return frame

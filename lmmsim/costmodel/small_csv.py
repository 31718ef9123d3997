"""A small CSV (a profile's few dozen rows) read into typed column lists, without pandas.

``pandas.read_csv`` costs milliseconds per file before it parses a row; a run reads a
handful of such files while it is built. The columns come out as ``read_csv`` types a
column of plain numbers and words and ``Series.tolist`` hands it back: ints if every
cell is an integer, else floats if every filled cell is a number (NaN where empty), else
strings (None where empty).
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

from lmmsim.errors import UserError


def read_columns(path: Path, names=None, key: str = "profile") -> dict[str, list]:
    """The columns ``names`` (all if None) of the CSV at ``path``, in file order; a missing
    column is a :class:`UserError` under ``key``."""
    with Path(path).open(newline="") as f:
        reader = csv.reader(f)
        header = next(reader, [])
        rows = list(reader)
    wanted = header if names is None else list(names)
    missing = [n for n in wanted if n not in header]
    if missing:
        raise UserError(key, f"{path} has no column {missing[0]!r}")
    return {name: _typed([row[header.index(name)] for row in rows]) for name in wanted}


def _typed(cells: list[str]) -> list:
    try:
        return [int(c) for c in cells]
    except ValueError:
        pass
    try:
        return [float(c) if c != "" else math.nan for c in cells]
    except ValueError:
        return [c if c != "" else None for c in cells]

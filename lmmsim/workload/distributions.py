"""Length distributions for prompt text, output tokens and audio clip durations.

Each ``kind:`` of the scenario's ``text_tokens`` / ``output_tokens`` /
``audio.seconds`` keys is one pydantic model here; :data:`LengthDist` is their
discriminated union. All draw vectorised from a caller-supplied
``numpy.random.Generator`` so the generator controls the random streams.

Two ways to draw:

* :meth:`sample` returns token counts: int64, rounded to the nearest integer and
  clipped to ``[max(1, min), max]``, so every value is at least 1. Clipping
  (rather than redrawing) keeps the draw count fixed and the stream aligned, at
  the price of piling up a little mass on the bounds; with the default
  ``min: 1`` that only matters for wide ``normal`` distributions.
* :meth:`sample_float` returns float64 values (e.g. seconds of audio), clipped
  to ``[min, max]`` where the kind has those bounds and never rounded.

The numeric parameters are floats so the same kinds serve both uses; for token
counts ``fixed`` rounds its value and ``uniform`` draws integers from
``round(low)`` to ``round(high)`` inclusive.
"""

from __future__ import annotations

import csv
import functools
import math
from pathlib import Path
from typing import Annotated, Literal, Union

import numpy as np
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from lmmsim.errors import UserError


# ---------------------------------------------------------------- validators
# Raising PydanticCustomError (a ValueError) keeps the message exactly as
# written, without pydantic's "Value error, " prefix; the location comes from
# pydantic, so the user sees e.g. ``workload.arrival.rate: must be > 0``.
def _positive(v):
    if not (math.isfinite(v) and v > 0):
        raise PydanticCustomError("value_error", "must be > 0")
    return v


def _non_negative(v):
    if not (math.isfinite(v) and v >= 0):
        raise PydanticCustomError("value_error", "must be >= 0")
    return v


#: A finite float > 0 (rates, means, seconds).
PositiveNumber = Annotated[float, AfterValidator(_positive)]
#: A finite float >= 0 (spreads such as sigma and std).
NonNegativeNumber = Annotated[float, AfterValidator(_non_negative)]
#: An int > 0 (counts, pixels, frames).
PositiveCount = Annotated[int, AfterValidator(_positive)]


class StrictModel(BaseModel):
    """Base of every workload config model: unknown keys rejected, immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def _round_counts(x: np.ndarray, low: float = 1, high: float | None = None) -> np.ndarray:
    """Round to integers and clip to ``[max(1, ceil(low)), floor(high)]``."""
    lo = max(1, math.ceil(low))
    hi = None if high is None else max(lo, math.floor(high))
    return np.clip(np.rint(x), lo, hi).astype(np.int64)


class _Dist(StrictModel):
    """Shared interface: subclasses implement :meth:`sample` and :meth:`sample_float`."""

    def sample(self, rng: np.random.Generator, n: int, base_dir: Path = Path(".")) -> np.ndarray:
        """``n`` token counts (int64, each >= 1)."""
        raise NotImplementedError

    def sample_float(self, rng: np.random.Generator, n: int, base_dir: Path = Path(".")) -> np.ndarray:
        """``n`` unrounded values (float64)."""
        raise NotImplementedError

    @property
    def mean_value(self) -> float | None:
        """The distribution's nominal mean before rounding/clipping (None if unknown without data)."""
        return None


# -------------------------------------------------------------------- kinds
class FixedDist(_Dist):
    """Always ``value``."""

    kind: Literal["fixed"] = "fixed"
    value: PositiveNumber

    def sample(self, rng, n, base_dir=Path(".")):
        return np.full(n, max(1, round(self.value)), dtype=np.int64)

    def sample_float(self, rng, n, base_dir=Path(".")):
        return np.full(n, float(self.value))

    @property
    def mean_value(self):
        return float(self.value)


class UniformDist(_Dist):
    """Uniform on ``[low, high]``: integers inclusive for counts, continuous for floats."""

    kind: Literal["uniform"] = "uniform"
    low: PositiveNumber
    high: PositiveNumber

    @model_validator(mode="after")
    def _ordered(self):
        if self.high < self.low:
            raise PydanticCustomError("value_error", f"high must be >= low (got low={self.low}, high={self.high})")
        return self

    def sample(self, rng, n, base_dir=Path(".")):
        lo = max(1, round(self.low))
        hi = max(lo, round(self.high))
        return rng.integers(lo, hi + 1, size=n, dtype=np.int64)

    def sample_float(self, rng, n, base_dir=Path(".")):
        return rng.uniform(self.low, self.high, size=n)

    @property
    def mean_value(self):
        return (self.low + self.high) / 2


class _Bounded(_Dist):
    """A continuous distribution clipped to ``[min, max]``."""

    min: PositiveNumber = 1
    max: PositiveNumber | None = None

    @model_validator(mode="after")
    def _ordered(self):
        if self.max is not None and self.max < self.min:
            raise PydanticCustomError("value_error", f"max must be >= min (got min={self.min}, max={self.max})")
        return self

    def _raw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        raise NotImplementedError

    def sample(self, rng, n, base_dir=Path(".")):
        return _round_counts(self._raw(rng, n), self.min, self.max)

    def sample_float(self, rng, n, base_dir=Path(".")):
        return np.clip(self._raw(rng, n), self.min, self.max)


class LognormalDist(_Bounded):
    """Log-normal with the given MEAN (not median) and log-space ``sigma``.

    ``mu = ln(mean) - sigma**2 / 2`` so that ``E[X] = mean``; the median is
    ``mean * exp(-sigma**2 / 2)``.
    """

    kind: Literal["lognormal"] = "lognormal"
    mean: PositiveNumber
    sigma: NonNegativeNumber

    def _raw(self, rng, n):
        mu = math.log(self.mean) - self.sigma**2 / 2
        return rng.lognormal(mu, self.sigma, size=n)

    @property
    def mean_value(self):
        return float(self.mean)


class NormalDist(_Bounded):
    """Normal with ``mean`` and ``std``, clipped to ``[min, max]``."""

    kind: Literal["normal"] = "normal"
    mean: PositiveNumber
    std: NonNegativeNumber

    def _raw(self, rng, n):
        return rng.normal(self.mean, self.std, size=n)

    @property
    def mean_value(self):
        return float(self.mean)


class EmpiricalDist(_Dist):
    """Values drawn uniformly with replacement from a file.

    ``path`` (relative to the scenario's folder) is either a text file with one
    number per line (blank lines and ``#`` comments skipped) or, when
    ``column`` is given, a CSV file with a header row whose ``column`` is used.
    The file is parsed once and cached while it is unchanged on disk.
    """

    kind: Literal["empirical"] = "empirical"
    path: str = Field(min_length=1)
    column: str | None = None

    def values(self, base_dir: Path = Path(".")) -> np.ndarray:
        """The file's values (float64, read-only)."""
        path = Path(base_dir) / self.path
        try:
            stat = path.stat()
        except OSError:
            raise UserError(str(path), "empirical distribution file not found") from None
        return _load_values(str(path), self.column, stat.st_mtime_ns, stat.st_size)

    def _raw(self, rng, n, base_dir):
        vals = self.values(base_dir)
        return vals[rng.integers(0, len(vals), size=n)]

    def sample(self, rng, n, base_dir=Path(".")):
        return _round_counts(self._raw(rng, n, base_dir))

    def sample_float(self, rng, n, base_dir=Path(".")):
        return self._raw(rng, n, base_dir)


LengthDist = Annotated[
    Union[FixedDist, UniformDist, LognormalDist, NormalDist, EmpiricalDist],
    Field(discriminator="kind"),
]


# -------------------------------------------------------------- file reading
@functools.lru_cache(maxsize=32)
def _load_values(path: str, column: str | None, _mtime_ns: int, _size: int) -> np.ndarray:
    """Parse an empirical-distribution file; mtime and size are in the key so edits are seen."""
    try:
        with open(path, newline="") as fh:
            if column is None:
                raw = [(i, line.strip()) for i, line in enumerate(fh, start=1)]
                raw = [(i, s) for i, s in raw if s and not s.startswith("#")]
            else:
                reader = csv.DictReader(fh)
                if reader.fieldnames is None or column not in reader.fieldnames:
                    have = ", ".join(repr(c) for c in (reader.fieldnames or []))
                    raise UserError(f"{path}:1", f"no column {column!r} in the header (columns: {have})")
                raw = []
                for row in reader:
                    # line_num is the last physical line of the record just read.
                    raw.append((reader.line_num, (row.get(column) or "").strip()))
    except OSError as exc:
        raise UserError(path, f"cannot read empirical distribution file ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise UserError(path, "not a text file") from None

    values = np.empty(len(raw))
    for k, (line, text) in enumerate(raw):
        try:
            v = float(text)
        except ValueError:
            hint = "" if column is not None or k else " (for a CSV file, set column:)"
            raise UserError(f"{path}:{line}", f"not a number: {text!r}{hint}") from None
        if not (math.isfinite(v) and v >= 0):
            raise UserError(f"{path}:{line}", f"value must be a finite number >= 0, got {text!r}")
        values[k] = v
    if len(values) == 0:
        raise UserError(path, "empirical distribution file has no values")
    values.setflags(write=False)
    return values

"""What every token rule shares: the frozen, strict pydantic base and the argument checks.

Kept apart from :mod:`lmmsim.tokenrules` so the family modules (``tokenrules_audio``,
``tokenrules_llama4``) can use them while ``tokenrules`` gathers every family into the
``kind``-discriminated unions the catalog reads.
"""

from __future__ import annotations

import math
import numbers

from pydantic import BaseModel, ConfigDict


class _Rule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _positive_int(name: str, value) -> int:
    """``value`` as an int, or ValueError unless it is a positive whole number."""
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not float(value).is_integer()
        or value <= 0
    ):
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def _positive_seconds(value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"seconds must be a positive finite number, got {value!r}")
    return float(value)


def _image_args(width, height) -> tuple[int, int]:
    return _positive_int("width", width), _positive_int("height", height)


def _video_args(frames, width, height) -> tuple[int, int, int]:
    return (_positive_int("frames", frames),) + _image_args(width, height)

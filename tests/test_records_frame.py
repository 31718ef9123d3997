"""frame_of's typed columns: the very frame pandas infers from the rows (then int64 casts)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from lmmsim.metrics.records import COLUMNS, frame_of, with_latencies

NAN = math.nan


def inferred_frame(rows, per_request_max, cached: bool) -> pd.DataFrame:
    """frame_of as it was: every column a list for pandas to infer, integers cast after."""
    columns = list(zip(*rows)) if rows else [()] * (len(COLUMNS) + 1)
    cols: dict[str, list] = {c: list(v) for c, v in zip(COLUMNS, columns)}
    if cached:
        cols["num_cached_tokens"] = [c or 0 for c in columns[-1]]
    df = pd.DataFrame(cols)
    for c in ("request_id", "replica", "num_prompt_tokens", "num_text_tokens", "num_mm_tokens",
              "num_media_items", "num_output_tokens", "num_preemptions", "num_cached_tokens"):
        if c in df:
            df[c] = df[c].astype(np.int64)
    return with_latencies(df, per_request_max)


def row(i, status="finished", arrived=0.5, first=1.25, done=3.0, out=8, reason=None, cached=None, encode=NAN):
    return (i, "chat", "image" if i % 2 else "text", status, reason, i % 3, arrived, NAN, NAN, encode, encode,
            arrived, first, done, 100 + i, 60, 40 + i, i % 2, out, 0, cached)


CASES = {
    "finished": [row(i, arrived=0.1 * i, first=0.1 * i + 0.5, done=0.1 * i + 2.0) for i in range(50)],
    "ended otherwise": [row(0), row(1, "rejected", first=NAN, done=NAN, reason="too long"),
                        row(2, "unfinished", done=NAN, out=1), row(3, out=0), row(4, "not_arrived", NAN, NAN, NAN)],
    "integer times": [row(0, arrived=0, first=1, done=2), row(1, arrived=0.5)],  # pandas' own inference then
    "cached tokens": [row(0, cached=5), row(1, cached=None), row(2, cached=0)],
    "encoded": [row(i, encode=0.25 * i) for i in range(4)],
    "empty": [],
}


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("cached", [False, True])
def test_frame_of_is_the_inferred_frame(name, cached):
    rows = CASES[name]
    per_max = np.linspace(0.0, 1.0, len(rows))
    got, want = frame_of(rows, per_max, cached), inferred_frame(rows, per_max, cached)
    assert list(got.columns) == list(want.columns)
    assert got.dtypes.to_dict() == want.dtypes.to_dict()
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    assert got.to_csv(float_format="%.17g") == want.to_csv(float_format="%.17g")

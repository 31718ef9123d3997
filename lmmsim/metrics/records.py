"""Per-request records: engine states -> one pandas row per request.

Times are simulated seconds. A request that never reached a stage has NaN in
that stage's column (``preprocess_*``: NaN in a run without a host stage); ``status`` says how it ended (``finished``; ``rejected``
at arrival, with ``reject_reason``; ``unfinished``: arrived before the horizon
and still in the system there; ``not_arrived``: arrival past the horizon; see
:mod:`lmmsim.engine.simulation`).

``num_cached_tokens`` (a run with ``deployment.prefix_caching`` only): prompt tokens the
prefix cache held when the request was first admitted (vLLM's ``num_cached_tokens``;
0 for a request never admitted). Runs without prefix caching have no such column, so
their files are byte for byte what they were before it existed.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from lmmsim.metrics.itl import TokenGaps, token_gaps

COLUMNS = (
    "request_id", "class_name", "modality", "status", "reject_reason", "replica",
    "arrived_at", "preprocess_started_at", "preprocess_finished_at",
    "encode_started_at", "encode_finished_at", "prefill_started_at",
    "first_token_at", "finished_at",
    "num_prompt_tokens", "num_text_tokens", "num_mm_tokens", "num_media_items",
    "num_output_tokens", "num_preemptions",
)


def requests_frame(seqs, gaps: TokenGaps | None = None) -> pd.DataFrame:
    """One row per request, in request-id order, plus derived latency columns
    ``ttft_s``, ``tpot_s``, ``e2e_s``, ``normalized_latency_s_per_token`` and
    ``itl_max_s`` (the request's largest inter-token gap, :mod:`lmmsim.metrics.itl`;
    ``gaps``: :func:`~lmmsim.metrics.itl.token_gaps` of the same ``seqs``, if at hand)."""
    seqs = list(seqs)
    if gaps is None:
        gaps = token_gaps(seqs)
    rows = [row_of(s) for s in seqs]
    cached = any(row[-1] is not None for row in rows)  # some engine caches prefixes
    return frame_of(rows, gaps.per_request_max, cached)


def row_of(s) -> tuple:
    """The :data:`COLUMNS` of one request (engine state), then its ``num_cached_tokens``."""
    r = s.request
    return (r.request_id, r.class_name, r.modality, s.status, s.reject_reason, s.replica,
            r.arrived_at, s.preprocess_started_at, s.preprocess_finished_at,
            s.encode_started_at, s.encode_finished_at, s.prefill_started_at,
            s.first_token_at, s.finished_at,
            r.num_prompt_tokens, r.num_text_tokens, r.num_mm_tokens, len(r.media_segments),
            r.num_output_tokens, s.num_preemptions, s.num_cached_tokens)


#: Integer columns (cast to int64); the times, float64 when every value is a float.
INT_COLUMNS = ("request_id", "replica", "num_prompt_tokens", "num_text_tokens", "num_mm_tokens",
               "num_media_items", "num_output_tokens", "num_preemptions", "num_cached_tokens")
TIME_COLUMNS = tuple(c for c in COLUMNS if c.endswith("_at"))


def frame_of(rows: list[tuple], per_request_max, cached: bool) -> pd.DataFrame:
    """The requests frame of :func:`row_of` rows (``per_request_max``: their ``itl_max_s``;
    ``cached``: with the ``num_cached_tokens`` column)."""
    columns = list(zip(*rows)) if rows else [()] * (len(COLUMNS) + 1)
    cols: dict[str, object] = {c: _column(c, v) for c, v in zip(COLUMNS, columns)}
    if cached:
        cols["num_cached_tokens"] = np.array([c or 0 for c in columns[-1]], np.int64)
    return with_latencies(pd.DataFrame(cols), per_request_max)


def with_latencies(df: pd.DataFrame, per_request_max) -> pd.DataFrame:
    """``df`` (the :data:`COLUMNS`) with the derived latency columns and ``itl_max_s`` added."""
    df["ttft_s"] = df["first_token_at"] - df["arrived_at"]
    df["e2e_s"] = df["finished_at"] - df["arrived_at"]
    decode_tokens = (df["num_output_tokens"] - 1).where(df["num_output_tokens"] > 1)
    df["tpot_s"] = (df["finished_at"] - df["first_token_at"]) / decode_tokens
    df["normalized_latency_s_per_token"] = df["e2e_s"] / df["num_output_tokens"]
    df["itl_max_s"] = per_request_max
    return df


def _column(name: str, values: tuple):
    """One column for the frame: an int64 array for the integer columns, a float64 array for
    a time column of floats, else the values for pandas to infer the type of (text; an empty
    frame's). The very column pandas makes of the values (then ``astype(int64)`` for the
    integers), without its inference over 3,000 boxed numbers per column."""
    if name in INT_COLUMNS:
        return np.array(values, np.int64)
    if name in TIME_COLUMNS and values and all(type(v) is float for v in values):
        return np.array(values, float)
    return list(values)

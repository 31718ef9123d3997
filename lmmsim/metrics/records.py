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
    cols: dict[str, list] = {c: [] for c in COLUMNS}
    for s in seqs:
        r = s.request
        cols["request_id"].append(r.request_id)
        cols["class_name"].append(r.class_name)
        cols["modality"].append(r.modality)
        cols["status"].append(s.status)
        cols["reject_reason"].append(s.reject_reason)
        cols["replica"].append(s.replica)
        cols["arrived_at"].append(r.arrived_at)
        cols["preprocess_started_at"].append(s.preprocess_started_at)
        cols["preprocess_finished_at"].append(s.preprocess_finished_at)
        cols["encode_started_at"].append(s.encode_started_at)
        cols["encode_finished_at"].append(s.encode_finished_at)
        cols["prefill_started_at"].append(s.prefill_started_at)
        cols["first_token_at"].append(s.first_token_at)
        cols["finished_at"].append(s.finished_at)
        cols["num_prompt_tokens"].append(r.num_prompt_tokens)
        cols["num_text_tokens"].append(r.num_text_tokens)
        cols["num_mm_tokens"].append(r.num_mm_tokens)
        cols["num_media_items"].append(len(r.media_segments))
        cols["num_output_tokens"].append(r.num_output_tokens)
        cols["num_preemptions"].append(s.num_preemptions)
    cached = [s.num_cached_tokens for s in seqs]
    if any(c is not None for c in cached):  # some engine caches prefixes
        cols["num_cached_tokens"] = [c or 0 for c in cached]
    df = pd.DataFrame(cols)
    for c in ("request_id", "replica", "num_prompt_tokens", "num_text_tokens", "num_mm_tokens",
              "num_media_items", "num_output_tokens", "num_preemptions", "num_cached_tokens"):
        if c in df:
            df[c] = df[c].astype(np.int64)
    df["ttft_s"] = df["first_token_at"] - df["arrived_at"]
    df["e2e_s"] = df["finished_at"] - df["arrived_at"]
    decode_tokens = (df["num_output_tokens"] - 1).where(df["num_output_tokens"] > 1)
    df["tpot_s"] = (df["finished_at"] - df["first_token_at"]) / decode_tokens
    df["normalized_latency_s_per_token"] = df["e2e_s"] / df["num_output_tokens"]
    df["itl_max_s"] = gaps.per_request_max
    return df

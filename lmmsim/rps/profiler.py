"""Workload Profiler (rps-serve.txt section 3.2): isolated runs of a request mix.

RPS-Serve profiles each model--modality pair offline by running a
representative workload against the model *one request at a time*, so that
no request interferes with another, and records the GPU time of vision
encoding and LLM prefill together with the prompt token counts. Here the
"model" is the scenario's simulated deployment and the representative
workload is the scenario's own request mix, drawn with a different seed.

:func:`profile_isolated` returns one row per profiled request:

=================  ==========================================================
``request_id``     id in the profiling draw (not in the scenario's run)
``modality``       the request's class modality (text, image, video, audio)
``text_tokens``    prompt tokens that are text
``media_tokens``   prompt tokens that are media embeddings
``num_items``      media items in the prompt (images, videos, clips)
``encode_s``       span of the request's encoder work (0 for text)
``prefill_s``      ``latency_s - encode_s``
``latency_s``      ``first_token_at - arrived_at``: GPU prefill latency,
                   encoding included (the paper's definition; the simulator
                   has no CPU-side preprocessing to exclude)
``prefill_tokens`` prompt tokens, the KV cache proxy of section 3.3
``class_name``     extra, informational: the workload mix class
=================  ==========================================================

Choices (where the paper leaves room):

* Each request gets exactly one output token, so it ends at its first token
  and leaves nothing behind (no decode) that could slow the next one.
* Requests arrive at ``0, T, 2T, ...``. Isolation is *checked*, not assumed:
  every request must have finished before the next one arrives. When one has
  not, ``T`` doubles and the whole profile reruns (at most
  :data:`MAX_DOUBLINGS` times). ``T`` starts at :data:`START_SPACING_S`.
* The queue policy is forced to FCFS (irrelevant for a lone request, and the
  RPS queue itself needs this profile), and the scenario's simulation horizon
  is dropped so no request is cut off.
* In a disaggregated deployment ``latency_s`` also holds the embedding (and
  KV) transfers, which are part of what a request costs there; ``prefill_s``
  is then "everything after encoding".
* Requests longer than the deployment's max model length are skipped (their
  ids are in ``df.attrs["rejected"]``); so are requests that never produced a
  token (e.g. larger than the whole KV cache; ``df.attrs["unfinished"]``).
  ``df.attrs["spacing_s"]`` is the spacing ``T`` that was used.

:func:`read_measured` accepts the same table measured elsewhere (a CSV of
real isolated runs), so the estimator can be fitted to hardware measurements
instead of the simulator.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pandas as pd

from lmmsim.errors import UserError, choices
from lmmsim.rps.estimator import request_features
from lmmsim.workload.request import MODALITIES, Request

#: The profile's columns, in order (``class_name`` may follow as an extra).
COLUMNS = ("request_id", "modality", "text_tokens", "media_tokens", "num_items", "encode_s", "prefill_s",
           "latency_s", "prefill_tokens")
#: Columns that hold non-negative integers / non-negative seconds.
INT_COLUMNS = ("request_id", "text_tokens", "media_tokens", "num_items", "prefill_tokens")
FLOAT_COLUMNS = ("encode_s", "prefill_s", "latency_s")

#: First spacing between profiling arrivals, seconds.
START_SPACING_S = 60.0
#: How many times the spacing may double before giving up.
MAX_DOUBLINGS = 12


def _profiling_scenario(scn, num_requests: int):
    """The scenario as profiled: FCFS queue, no horizon, ``num_requests`` requests."""
    from lmmsim.policies.queueing import FcfsConfig

    workload = scn.workload.model_copy(update={"num_requests": num_requests, "duration_s": None})
    return scn.model_copy(update={
        "policy": scn.policy.model_copy(update={"queue": FcfsConfig()}),
        "sim": scn.sim.model_copy(update={"horizon_s": None}),
        "workload": workload,
    })


def profiling_requests(scn, base_dir, *, num_requests: int = 240, seed_offset: int = 7919) -> list[Request]:
    """The requests a profile runs: the scenario's mix drawn with seed
    ``scn.seed + seed_offset``, one output token each, arrival times still 0.

    With a trace arrival the first ``num_requests`` trace rows are used.
    """
    from lmmsim import catalog
    from lmmsim.workload.generator import generate_requests

    if num_requests < 1:
        raise UserError("--requests", f"must be at least 1 (got {num_requests})")
    prof = _profiling_scenario(scn, num_requests)
    model = catalog.get_model(prof.model)
    drawn = generate_requests(prof.workload, model, prof.seed + seed_offset, Path(base_dir))
    return [Request(r.request_id, 0.0, r.modality, r.class_name, r.segments, 1) for r in drawn]


def _spaced(requests: list[Request], spacing_s: float) -> list[Request]:
    return [Request(r.request_id, i * spacing_s, r.modality, r.class_name, r.segments, 1)
            for i, r in enumerate(requests)]


def run_isolated(scn, base_dir, requests: list[Request], *, simulate, spacing_s: float = START_SPACING_S):
    """Run ``requests`` one at a time through the scenario's deployment.

    ``simulate(scn, base_dir, requests) -> (seqs, rejected)`` runs a scenario on
    given requests (:func:`lmmsim.build.simulate_requests`); it is passed in so
    that this policy package never imports the builder that prepares it.
    Returns ``(seqs, rejected, spacing_s)``: the engine states in request
    order, the ids refused for length, and the spacing that achieved
    isolation. Raises ``RuntimeError`` if no spacing up to
    ``spacing_s * 2**MAX_DOUBLINGS`` isolates the requests.
    """
    prof = _profiling_scenario(scn, max(1, len(requests)))
    for _ in range(MAX_DOUBLINGS + 1):
        seqs, rejected = simulate(prof, Path(base_dir), _spaced(requests, spacing_s))
        if _isolated(seqs, rejected):
            return seqs, rejected, spacing_s
        spacing_s *= 2.0
    raise RuntimeError(f"profiling requests still overlap with {spacing_s / 2:g} s between arrivals")


def _isolated(seqs, rejected) -> bool:
    """Each request that ran ended before the next request that ran arrived.

    A request that never finished (the run ended with it still waiting, say
    because it can never fit) is not an overlap a wider spacing could fix; it
    is left to the caller, which reports it.
    """
    ran = [s for s in seqs if s.request.request_id not in rejected]
    for cur, nxt in itertools.pairwise(ran):
        if cur.finished_at == cur.finished_at and not cur.finished_at < nxt.request.arrived_at:
            return False
    return True


def profile_isolated(scn, base_dir, *, simulate, num_requests: int = 240, seed_offset: int = 7919) -> pd.DataFrame:
    """Profile the scenario's request mix in isolation (see the module docstring).

    ``scn``/``base_dir`` as returned by :func:`lmmsim.scenario.load_scenario`;
    ``simulate`` as in :func:`run_isolated`.
    Deterministic: the same scenario and arguments give the same table.
    """
    requests = profiling_requests(scn, base_dir, num_requests=num_requests, seed_offset=seed_offset)
    seqs, rejected, spacing = run_isolated(scn, base_dir, requests, simulate=simulate)
    rows = []
    unfinished = []
    for s in seqs:
        r = s.request
        if r.request_id in rejected:
            continue
        if s.first_token_at != s.first_token_at:  # NaN: never produced a token
            unfinished.append(r.request_id)
            continue
        latency = s.first_token_at - r.arrived_at
        encode = s.encode_finished_at - s.encode_started_at if r.media_segments else 0.0
        if math.isnan(encode):  # media that needed no encoder pass
            encode = 0.0
        text, media, items = request_features(r)
        rows.append((r.request_id, r.modality, text, media, items, encode, latency - encode, latency,
                     r.num_prompt_tokens, r.class_name))
    df = pd.DataFrame.from_records(rows, columns=[*COLUMNS, "class_name"])
    df = df.astype({c: "int64" for c in INT_COLUMNS} | {c: "float64" for c in FLOAT_COLUMNS})
    df.attrs.update(spacing_s=spacing, rejected=sorted(rejected), unfinished=unfinished,
                    first_reason=next(iter(rejected.values()), None),
                    num_requests=num_requests, seed=scn.seed + seed_offset)
    return df


def read_measured(path) -> pd.DataFrame:
    """A CSV of measured isolated runs with the profile's columns (:data:`COLUMNS`).

    Extra columns are kept. Problems raise :class:`UserError` keyed by the
    file (and line for a bad value).
    """
    path = Path(path)
    try:
        df = pd.read_csv(path)
    except FileNotFoundError:
        raise UserError(str(path), "measured profile not found") from None
    except (OSError, ValueError) as exc:  # pandas' parse errors are ValueErrors
        raise UserError(str(path), f"cannot read as CSV ({str(exc).splitlines()[0]})") from None
    for col in COLUMNS:
        if col not in df.columns:
            raise UserError(str(path), f"missing column {col!r}; the columns are: {', '.join(COLUMNS)}")
    if df.empty:
        raise UserError(str(path), "no rows")
    for col in (*INT_COLUMNS, *FLOAT_COLUMNS):
        values = pd.to_numeric(df[col], errors="coerce")
        bad = values.isna() | (values < 0) | ~values.map(math.isfinite)
        if col in INT_COLUMNS:
            bad |= values != values.round()
        if bad.any():
            i = int(bad.to_numpy().nonzero()[0][0])
            kind = "a non-negative integer" if col in INT_COLUMNS else "a non-negative number of seconds"
            raise UserError(f"{path}:{i + 2}", f"{col} must be {kind} (got {df[col].iloc[i]!r})")
        df[col] = values.astype("int64" if col in INT_COLUMNS else "float64")
    bad = ~df["modality"].isin(MODALITIES)
    if bad.any():
        i = int(bad.to_numpy().nonzero()[0][0])
        raise UserError(f"{path}:{i + 2}", f"unknown modality {df['modality'].iloc[i]!r}; valid: {choices(MODALITIES)}")
    return df

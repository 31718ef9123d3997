"""Run summary: latency percentiles, throughput, goodput, SLO attainment, GPU use.

Definitions (all over the requests of one run that arrived: a request whose
arrival lies past ``sim.horizon_s`` is counted in ``num_not_arrived`` and in
nothing else; statuses in :mod:`lmmsim.engine.simulation`):

* latency blocks (``ttft_s``, ``tpot_s``, ``e2e_s``,
  ``normalized_latency_s_per_token``) are over finished requests; TPOT only
  over requests with more than one output token; ``std`` is the population
  standard deviation (numpy's default, as ``vllm bench serve`` reports it);
* ``itl_s`` pools the inter-token gaps of all finished requests, as vLLM does
  (:mod:`lmmsim.metrics.itl`);
* the measurement window runs from the first arrival to the last completion
  (or the horizon, if requests were left unfinished); throughputs and goodput
  are counts over that window;
* a request meets its SLO when it finished, its TTFT is within the SLO of its
  modality (if one is set) and its TPOT within the TPOT SLO (if set);
  ``slo_attainment`` is over all arrived requests, ``unfinished`` ones (still
  in the system at the horizon) and ``rejected`` ones counting as misses;
* ``slo_violation_severity``: mean of ``ttft / bound - 1`` over the finished
  requests that missed their TTFT bound;
* ``gpu_utilization`` is each GPU's busy time over the window;
* ``prefix_cache`` (only when the frame has ``num_cached_tokens``, a run with
  ``deployment.prefix_caching``): ``hit_rate`` = cached prompt tokens / prompt tokens
  and ``hit_requests_share`` = share of requests with a hit, both over finished
  requests; ``cached_tokens`` their sum; ``evictions``: cached blocks handed out again,
  all engines together (None when the caller did not pass them).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

QUANTILES = (("p50", 50), ("p90", 90), ("p95", 95), ("p99", 99))
LATENCIES = ("ttft_s", "tpot_s", "e2e_s", "normalized_latency_s_per_token")


def latency_stats(values) -> dict[str, float | None]:
    """``{mean, p50, p90, p95, p99, max, std}`` of the finite values (None if none)."""
    arr = np.asarray(values, dtype=float)
    arr = arr[np.isfinite(arr)]
    if arr.size == 0:
        return {"mean": None, **{k: None for k, _ in QUANTILES}, "max": None, "std": None}
    out = {"mean": float(arr.mean())}
    qs = np.percentile(arr, [q for _, q in QUANTILES])
    out.update({k: float(v) for (k, _), v in zip(QUANTILES, qs)})
    out["max"] = float(arr.max())
    out["std"] = float(arr.std())
    return out


def slo_met(df, ttft_slo: dict[str, float], tpot_slo: float | None) -> pd.Series:
    ok = df["status"].eq("finished")
    if ttft_slo:
        limit = df["modality"].map(ttft_slo).astype(float)
        ok &= ~(df["ttft_s"] > limit)  # NaN limit: no TTFT SLO for that modality
    if tpot_slo is not None:
        ok &= ~(df["tpot_s"] > tpot_slo)
    return ok


def violation_severity(df, ttft_slo: dict[str, float]) -> float | None:
    """Mean relative excess ``ttft / bound - 1`` over the finished requests that
    missed their TTFT SLO (RPS-Serve Fig. 13's severity); 0 if none missed,
    None without a TTFT SLO."""
    if not ttft_slo:
        return None
    done = df["status"].eq("finished")  # column by column: ``df`` may be a dict of columns
    limit = df["modality"][done].map(ttft_slo).astype(float)
    excess = df["ttft_s"][done] / limit - 1
    missed = excess[excess > 0]
    return float(missed.mean()) if len(missed) else 0.0


def _itl_by_modality(modality: pd.Series, itl) -> dict:
    """The ITL block per modality of ``itl``'s requests (``modality``: the frame's column)."""
    if itl is None:
        return {}
    if hasattr(itl, "by_modality"):  # spilled gaps (lmmsim.metrics.stream)
        return itl.by_modality(pd.unique(modality))
    modality_at = modality.reindex(range(len(itl.per_request_max))).to_numpy()
    return {str(m): itl.stats(modality_at == m) for m in pd.unique(modality)}


def summarize(
    df: pd.DataFrame,
    *,
    gpu_busy_s: list[float],
    end_at: float,
    ttft_slo: dict[str, float],
    tpot_slo: float | None,
    num_preemptions: int,
    itl=None,
    prefix_cache_evictions: int | None = None,
) -> dict:
    """The run summary of the requests frame ``df`` (positional index, as
    :func:`~lmmsim.metrics.records.requests_frame` builds it); ``itl``: its
    :class:`~lmmsim.metrics.itl.TokenGaps` (anything with its ``stats(rows)`` and
    ``per_request_max``, or ``stats()`` and ``by_modality(modalities)``), for the ``itl_s`` blocks."""
    num_not_arrived = int(df["status"].eq("not_arrived").sum())
    if num_not_arrived:
        df = df[df["status"].ne("not_arrived")]
    return summarize_columns(df.__getitem__, set(df.columns), num_not_arrived, gpu_busy_s=gpu_busy_s,
                             end_at=end_at, ttft_slo=ttft_slo, tpot_slo=tpot_slo, num_preemptions=num_preemptions,
                             itl=itl, prefix_cache_evictions=prefix_cache_evictions)


def summarize_columns(column, names: set, num_not_arrived: int, *, gpu_busy_s, end_at, ttft_slo, tpot_slo,
                      num_preemptions, itl=None, prefix_cache_evictions=None) -> dict:
    """:func:`summarize` of a frame given column by column: ``column(name)`` is that column
    of the arrived requests (same index for every name), ``names`` the frame's columns.
    A run's written requests.parquet is summarised this way, a few columns at a time."""
    status, modality = column("status"), column("modality")
    finished = status.eq("finished")
    arrived_at = column("arrived_at")
    start = float(arrived_at.min()) if len(status) else 0.0
    del arrived_at
    last = float(column("finished_at")[finished].max()) if finished.any() else start
    stop = end_at if (~finished & ~status.eq("rejected")).any() else last
    window = max(stop - start, 0.0)
    slo_columns = {"status": status, "modality": modality, "ttft_s": column("ttft_s"), "tpot_s": column("tpot_s")}
    met = slo_met(slo_columns, ttft_slo, tpot_slo)
    severity = violation_severity(slo_columns, ttft_slo)
    del slo_columns

    def rate(x: float) -> float | None:
        return x / window if window > 0 else None

    groups = {str(m): (modality == m).to_numpy() for m in sorted(pd.unique(modality))}
    fin = finished.to_numpy()
    latency, by_group = _latency_columns(column, fin, groups)
    tokens = {c: column(c)[finished] for c in ("num_prompt_tokens", "num_output_tokens")}
    summary = {
        "num_requests": int(len(status)) + num_not_arrived,
        "num_finished": int(finished.sum()),
        "num_rejected": int(status.eq("rejected").sum()),
        "num_unfinished": int(status.eq("unfinished").sum()),
        "num_not_arrived": num_not_arrived,
        "window_s": window,
        **latency,
        **({} if itl is None else {"itl_s": itl.stats()}),
        "throughput": {
            "requests_per_s": rate(float(finished.sum())),
            "input_tokens_per_s": rate(float(tokens["num_prompt_tokens"].sum())),
            "output_tokens_per_s": rate(float(tokens["num_output_tokens"].sum())),
        },
        "goodput_requests_per_s": rate(float(met.sum())),
        "slo_attainment": float(met.mean()) if len(status) else None,
        "slo_violation_severity": severity,
        "gpu_utilization": {
            "per_gpu": [min(b / window, 1.0) if window > 0 else 0.0 for b in gpu_busy_s],
            "mean": (sum(min(b / window, 1.0) for b in gpu_busy_s) / len(gpu_busy_s))
            if window > 0 and gpu_busy_s else 0.0,
        },
        "num_preemptions": int(num_preemptions),
        "by_modality": {},
    }
    if "num_cached_tokens" in names:
        done = pd.DataFrame({"num_prompt_tokens": tokens["num_prompt_tokens"],
                             "num_cached_tokens": column("num_cached_tokens")[finished]})
        summary["prefix_cache"] = prefix_cache_stats(done, prefix_cache_evictions)
    itl_parts = _itl_by_modality(modality, itl)
    for m, rows in groups.items():
        part_itl = itl_parts.get(m)
        summary["by_modality"][m] = {
            "num_requests": int(rows.sum()),
            "num_finished": int((rows & fin).sum()),
            **by_group[m],
            **({} if part_itl is None and itl is None else {"itl_s": part_itl}),
            "slo_attainment": float(met[rows].mean()),
        }
    return summary


def _latency_columns(column, finished: np.ndarray, groups: dict) -> tuple[dict, dict]:
    """The latency blocks of the finished requests, all and per group (``groups``: name ->
    row mask), reading one latency column at a time."""
    out: dict = {}
    by_group: dict = {m: {} for m in groups}
    for name in LATENCIES:
        values = column(name).to_numpy()
        out[name] = latency_stats(values[finished])
        for m, rows in groups.items():
            by_group[m][name] = latency_stats(values[rows & finished])
    return out, by_group


def prefix_cache_stats(done: pd.DataFrame, evictions: int | None) -> dict:
    """The ``prefix_cache`` block over the finished requests ``done``."""
    prompt = int(done["num_prompt_tokens"].sum())
    cached = int(done["num_cached_tokens"].sum())
    return {
        "hit_rate": cached / prompt if prompt else None,
        "hit_requests_share": float(done["num_cached_tokens"].gt(0).mean()) if len(done) else None,
        "cached_tokens": cached,
        "evictions": None if evictions is None else int(evictions),
    }


def clean_json(obj):
    """Replace NaN/inf floats by None so ``summary.json`` is valid JSON."""
    if isinstance(obj, dict):
        return {k: clean_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean_json(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj

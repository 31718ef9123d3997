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


def slo_met(df: pd.DataFrame, ttft_slo: dict[str, float], tpot_slo: float | None) -> pd.Series:
    ok = df["status"].eq("finished")
    if ttft_slo:
        limit = df["modality"].map(ttft_slo).astype(float)
        ok &= ~(df["ttft_s"] > limit)  # NaN limit: no TTFT SLO for that modality
    if tpot_slo is not None:
        ok &= ~(df["tpot_s"] > tpot_slo)
    return ok


def violation_severity(df: pd.DataFrame, ttft_slo: dict[str, float]) -> float | None:
    """Mean relative excess ``ttft / bound - 1`` over the finished requests that
    missed their TTFT SLO (RPS-Serve Fig. 13's severity); 0 if none missed,
    None without a TTFT SLO."""
    if not ttft_slo:
        return None
    done = df[df["status"].eq("finished")]
    limit = done["modality"].map(ttft_slo).astype(float)
    excess = done["ttft_s"] / limit - 1
    missed = excess[excess > 0]
    return float(missed.mean()) if len(missed) else 0.0


def _latency_blocks(df: pd.DataFrame, itl=None) -> dict:
    """The latency blocks of ``df``'s finished requests; ``itl_s`` too when ``itl``
    (their ITL block) is given."""
    done = df[df["status"].eq("finished")]
    out = {name: latency_stats(done[name]) for name in LATENCIES}
    if itl is not None:
        out["itl_s"] = itl
    return out


def _itl_by_modality(df: pd.DataFrame, itl) -> dict:
    """The ITL block per modality of ``itl``'s requests (``df``: the requests frame)."""
    if itl is None:
        return {}
    modality = df["modality"].reindex(range(len(itl.per_request_max))).to_numpy()
    return {str(m): itl.stats(modality == m) for m in pd.unique(df["modality"])}


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
    ``per_request_max``), for the ``itl_s`` blocks."""
    num_not_arrived = int(df["status"].eq("not_arrived").sum())
    if num_not_arrived:
        df = df[df["status"].ne("not_arrived")]
    finished = df["status"].eq("finished")
    start = float(df["arrived_at"].min()) if len(df) else 0.0
    last = float(df.loc[finished, "finished_at"].max()) if finished.any() else start
    stop = end_at if (~finished & ~df["status"].eq("rejected")).any() else last
    window = max(stop - start, 0.0)
    met = slo_met(df, ttft_slo, tpot_slo)

    def rate(x: float) -> float | None:
        return x / window if window > 0 else None

    summary = {
        "num_requests": int(len(df)) + num_not_arrived,
        "num_finished": int(finished.sum()),
        "num_rejected": int(df["status"].eq("rejected").sum()),
        "num_unfinished": int(df["status"].eq("unfinished").sum()),
        "num_not_arrived": num_not_arrived,
        "window_s": window,
        **_latency_blocks(df, None if itl is None else itl.stats()),
        "throughput": {
            "requests_per_s": rate(float(finished.sum())),
            "input_tokens_per_s": rate(float(df.loc[finished, "num_prompt_tokens"].sum())),
            "output_tokens_per_s": rate(float(df.loc[finished, "num_output_tokens"].sum())),
        },
        "goodput_requests_per_s": rate(float(met.sum())),
        "slo_attainment": float(met.mean()) if len(df) else None,
        "slo_violation_severity": violation_severity(df, ttft_slo),
        "gpu_utilization": {
            "per_gpu": [min(b / window, 1.0) if window > 0 else 0.0 for b in gpu_busy_s],
            "mean": (sum(min(b / window, 1.0) for b in gpu_busy_s) / len(gpu_busy_s))
            if window > 0 and gpu_busy_s else 0.0,
        },
        "num_preemptions": int(num_preemptions),
        "by_modality": {},
    }
    if "num_cached_tokens" in df:
        summary["prefix_cache"] = prefix_cache_stats(df[finished], prefix_cache_evictions)
    itl_parts = _itl_by_modality(df, itl)
    for modality, part in df.groupby("modality", sort=True):
        summary["by_modality"][str(modality)] = {
            "num_requests": int(len(part)),
            "num_finished": int(part["status"].eq("finished").sum()),
            **_latency_blocks(part, itl_parts.get(str(modality))),
            "slo_attainment": float(met[part.index].mean()),
        }
    return summary


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

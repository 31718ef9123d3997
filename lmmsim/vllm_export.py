"""``lmmsim export vllm``: a run folder as ``vllm bench serve --save-result`` writes it.

The keys, their order and units (milliseconds, flat ``mean_ttft_ms`` / ``p99_itl_ms``
...) follow ``vllm/benchmarks/serve.py`` of vllm-project/vllm (``main_async`` and
``benchmark``, checked at commit 009e6d4a1cd6, 2026): :data:`SETUP_KEYS`, then
:data:`RESULT_KEYS`, then per metric of ``--percentile-metrics`` (vLLM's default
``ttft,tpot,itl``) ``mean_*_ms, median_*_ms, std_*_ms`` and ``p<P>_*_ms`` per
``--metric-percentiles`` (default ``99``). ``--save-detailed`` adds
:data:`DETAILED_KEYS` (per-request lists).

What the simulator fills: TTFT, TPOT and E2EL statistics from ``requests.parquet``
(vLLM's formulas: ``np.mean / np.median / np.std / np.percentile`` over the finished
requests; TPOT over those with more than one output token); ITL from the run's
``summary.json`` ``itl_s`` block (pooled gaps, as vLLM pools them), so ITL
percentiles are those it holds (50, 90, 95, 99); ``duration`` is the summary's
measurement window; ``failed`` counts arrived requests that did not finish (rejected,
or unfinished at the horizon; requests due past the horizon count in ``num_prompts``
only); ``label`` is the scenario's name, ``backend`` ``"lmmsim"``; ``request_goodput`` is the summary's goodput when the
scenario sets an SLO (vLLM: ``None`` without ``--goodput``); ``max_concurrent_requests``
is the peak number of requests between arrival and completion. What it cannot know:
``max_output_tokens_per_s`` (vLLM bins token timestamps per second) is ``None``,
``rtfx`` 0.0, ``queue_times`` 0.0 (no client-side queue), ``generated_texts`` empty
strings, ``errors`` empty strings (``"rejected: REASON"`` / ``"unfinished"`` for the
requests that failed), and ``itls`` (``--save-detailed``) empty lists: per-token gaps
are not stored in a run folder.
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd

from lmmsim.errors import UserError

#: Keys written before the benchmark result (vLLM's "Setup" and "Traffic").
SETUP_KEYS = ("date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts",
              "request_rate", "burstiness", "max_concurrency")
#: The benchmark result of a generation task, in vLLM's order, per-request lists included.
RESULT_KEYS = ("duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
               "request_throughput", "request_goodput", "output_throughput", "total_token_throughput",
               "input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "queue_times",
               "generated_texts", "errors", "max_output_tokens_per_s", "max_concurrent_requests", "rtfx")
#: The per-request lists vLLM drops unless ``--save-detailed`` (``latencies`` and
#: ``queue_times`` it keeps).
DETAILED_KEYS = ("input_lens", "output_lens", "start_times", "ttfts", "itls", "generated_texts", "errors")
#: ``--percentile-metrics`` names and the requests.parquet column of each.
METRIC_COLUMNS = {"ttft": "ttft_s", "tpot": "tpot_s", "itl": None, "e2el": "e2e_s"}
ITL_PERCENTILES = (50.0, 90.0, 95.0, 99.0)


def vllm_keys(metrics=("ttft", "tpot", "itl"), percentiles=(99.0,), detailed: bool = False) -> list[str]:
    """The keys, in order, that ``vllm bench serve --save-result`` writes for these options."""
    keys = list(SETUP_KEYS) + [k for k in RESULT_KEYS if detailed or k not in DETAILED_KEYS]
    for m in metrics:
        keys += [f"mean_{m}_ms", f"median_{m}_ms", f"std_{m}_ms"] + [f"p{_p_word(p)}_{m}_ms" for p in percentiles]
    return keys


def _p_word(p: float) -> str:
    return str(int(p)) if int(p) == p else str(p)


def _stats_ms(values) -> tuple[float, float, float]:
    arr = np.asarray(values, dtype=float)
    arr = arr[np.isfinite(arr)]
    if arr.size == 0:
        arr = np.zeros(1)  # vLLM: ``np.mean(x or 0)``
    return float(np.mean(arr)) * 1000, float(np.median(arr)) * 1000, float(np.std(arr)) * 1000


def _read_run(run_dir: Path) -> tuple[pd.DataFrame, dict, dict]:
    if not run_dir.exists():
        raise UserError("RUN_DIR", f"{run_dir} not found")
    if not run_dir.is_dir() or not (run_dir / "summary.json").is_file() or not (run_dir / "requests.parquet").is_file():
        raise UserError("RUN_DIR", f"{run_dir} is not a run folder (needs requests.parquet and summary.json "
                                   "from `lmmsim run`)")
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
        df = pd.read_parquet(run_dir / "requests.parquet")
    except (ValueError, OSError) as err:
        raise UserError("RUN_DIR", f"{run_dir}: cannot read its results ({err})") from None
    scenario: dict = {}
    resolved = run_dir / "scenario.resolved.yaml"
    if resolved.is_file():
        from lmmsim.yamlio import read_yaml

        scenario = read_yaml(resolved) or {}
    return df, summary, scenario


def _traffic(scenario: dict) -> tuple[object, object, object]:
    """(request_rate, burstiness, max_concurrency) as vLLM's options would say it."""
    arrival = (scenario.get("workload") or {}).get("arrival") or {}
    kind = arrival.get("kind")
    if kind == "closed_loop":
        return "inf", 1.0, arrival.get("concurrency")
    rate = arrival.get("rate")
    if kind == "poisson":
        return rate, 1.0, None
    if kind == "gamma":
        return rate, 1.0 / float(arrival["cv"]) ** 2, None  # vLLM's gamma shape
    if kind == "deterministic":
        return rate, None, None  # infinite shape: no JSON number
    return None, None, None  # a trace replay: no configured rate


def _peak_concurrency(df: pd.DataFrame) -> int:
    arrived = df["arrived_at"].to_numpy(dtype=float)
    ended = df["finished_at"].to_numpy(dtype=float)
    ok = np.isfinite(arrived) & np.isfinite(ended)
    if not ok.any():
        return 0
    times = np.concatenate([arrived[ok], ended[ok]])
    delta = np.concatenate([np.ones(ok.sum(), dtype=np.int64), -np.ones(ok.sum(), dtype=np.int64)])
    order = np.lexsort((delta, times))  # at equal times a completion leaves before an arrival counts
    return int(np.cumsum(delta[order]).max())


def export_vllm(run_dir: Path, *, metrics=("ttft", "tpot", "itl"), percentiles=(99.0,),
                detailed: bool = False, date: str | None = None) -> dict:
    """The ``vllm bench serve --save-result`` dictionary of a run folder."""
    for m in metrics:
        if m not in METRIC_COLUMNS:
            raise UserError("--percentile-metrics", f"unknown metric {m!r}; valid: ttft, tpot, itl, e2el")
    if "itl" in metrics:
        missing = [p for p in percentiles if p not in ITL_PERCENTILES]
        if missing:
            raise UserError("--metric-percentiles", f"ITL percentile {_p_word(missing[0])} is not in the run's "
                            "summary (it holds 50, 90, 95, 99); drop itl from --percentile-metrics")
    df, summary, scenario = _read_run(run_dir)
    df = df[df["status"].ne("not_arrived")]
    done = df[df["status"].eq("finished")]
    window = summary.get("window_s") or 0.0
    total_in = int(done["num_prompt_tokens"].sum())
    total_out = int(done["num_output_tokens"].sum())
    slo = scenario.get("slo") or {}
    has_slo = slo.get("ttft_s") is not None or slo.get("tpot_s") is not None
    rate, burstiness, concurrency = _traffic(scenario)
    model = scenario.get("model") or (summary.get("deployment") or {}).get("model")
    out: dict = {
        "date": date or datetime.now().strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": "lmmsim", "backend": "lmmsim", "label": scenario.get("name"),
        "model_id": model, "tokenizer_id": model, "num_prompts": int(summary.get("num_requests", len(df))),
        "request_rate": rate, "burstiness": burstiness, "max_concurrency": concurrency,
        "duration": window, "completed": int(len(done)), "failed": int(len(df) - len(done)),
        "total_input_tokens": total_in, "total_output_tokens": total_out,
        "request_throughput": len(done) / window if window > 0 else 0.0,
        "request_goodput": summary.get("goodput_requests_per_s") if has_slo else None,
        "output_throughput": total_out / window if window > 0 else 0.0,
        "total_token_throughput": (total_in + total_out) / window if window > 0 else 0.0,
    }
    if detailed:
        errors = np.where(df["status"].eq("finished"), "",
                          np.where(df["status"].eq("rejected"), "rejected: " + df["reject_reason"].fillna("").astype(str),
                                   df["status"].astype(str)))
        out.update({"input_lens": df["num_prompt_tokens"].astype(int).tolist(),
                    "output_lens": df["num_output_tokens"].where(df["status"].eq("finished"), 0).astype(int).tolist(),
                    "ttfts": df["ttft_s"].where(df["status"].eq("finished"), 0.0).astype(float).tolist(),
                    "itls": [[] for _ in range(len(df))], "start_times": df["arrived_at"].astype(float).tolist(),
                    "generated_texts": [""] * len(df), "errors": errors.tolist()})
    out["latencies"] = df["e2e_s"].where(df["status"].eq("finished"), 0.0).astype(float).tolist()
    out["queue_times"] = [0.0] * len(df)
    out.update({"max_output_tokens_per_s": None, "max_concurrent_requests": _peak_concurrency(df), "rtfx": 0.0})
    itl = summary.get("itl_s") or {}
    for m in metrics:
        column = METRIC_COLUMNS[m]
        if column is None:  # ITL: the summary's pooled block
            mean, median, std = ((itl.get(k) or 0.0) * 1000 for k in ("mean", "p50", "std"))
            pct = {p: (itl.get(f"p{int(p)}") or 0.0) * 1000 for p in percentiles}
        else:
            values = done[column].to_numpy(dtype=float)
            values = values[np.isfinite(values)]
            mean, median, std = _stats_ms(values)
            pct = {p: float(np.percentile(values if values.size else np.zeros(1), p)) * 1000 for p in percentiles}
        out[f"mean_{m}_ms"], out[f"median_{m}_ms"], out[f"std_{m}_ms"] = mean, median, std
        for p in percentiles:
            out[f"p{_p_word(p)}_{m}_ms"] = pct[p]
    return _json_safe({k: out[k] for k in vllm_keys(metrics, percentiles, detailed)})


def _json_safe(obj):
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_json_safe(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj

"""Sweep figures: the plot kinds drawn from a sweep's ``results.parquet`` (and its run folders).

A sweep folder ``DIR`` holds ``DIR/results.parquet`` (one row per run: the swept
values under their dotted scenario keys, ``repeat``, ``seed``, ``run_id``,
``status`` and every summary metric flattened with dots) and one folder per run,
``DIR/runs/<run_id>/`` (``requests.parquet``, ``summary.json``, maybe
``trace.json``). :func:`plot` draws one figure kind from it; :data:`KINDS` lists
the kinds. :func:`make_figure` builds the same figure from a frame without
saving it (tests inspect its axes). Reading the results and choosing rows
(``where``, failed runs) live in :mod:`lmmsim.plotting.results`.

Conventions shared by every kind:

* ``x`` is a column (default ``workload.arrival.rate``), ``series`` a column
  (default ``system``) giving one line / bar colour per value, in order of first
  appearance in the results. Colours, markers and line styles come from
  :func:`lmmsim.plotting.palette.series_styles` (Okabe-Ito: a known system looks
  the same in every figure, and the series of one figure never share a look). If the
  default ``system`` column is absent, all rows form one series ``all``.
* rows repeated at the same (series, x) point (``repeat``) are averaged: lines
  show the mean, a shaded band mean ± standard deviation (bars: error bars).
  Rows whose status is ``failed``/``error`` or whose plotted metric is missing
  are dropped.
* ``where``: ``"key=value"`` strings (or a dict) keep only matching rows
  (numeric columns compare numerically) before anything is drawn.
* a missing column or results file raises ``UserError("RESULTS", ...)``, an
  unknown kind ``UserError("KIND", ...)``, a bad option ``UserError(<option>, ...)``,
  each naming the valid choices.

Figures use :func:`~lmmsim.plotting.style.paper_style` (one paper column) and
:class:`matplotlib.figure.Figure` (no pyplot), so this runs headless.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from lmmsim.errors import UserError, choices
from lmmsim.plotting.results import (
    FAILED_STATUSES,
    filter_rows,
    load_results,
    require,
    usable,
)
from lmmsim.plotting.style import (
    FIGURE_SUFFIXES,
    fit_tick_labels,
    modality_color,
    new_figure,
    paper_style,
    save,
    series_styles,
)

DEFAULT_X = "workload.arrival.rate"
DEFAULT_SERIES = "system"
STATS = ("mean", "p50", "p90", "p95", "p99", "max")

#: Plot kind -> one-line description.
KINDS: dict[str, str] = {
    "ttft-vs-rate": "TTFT (mean; stat=p99 etc.) vs request rate, log y (log_y=False: linear), one line per series",
    "throughput-vs-rate": "throughput (req/s; metric=input_tokens|output_tokens) vs request rate",
    "slo-attainment-vs-rate": "SLO attainment (%) vs request rate, one line per series",
    "goodput-vs-slo-scale": "goodput (req/s) vs SLO scale (x defaults to slo_scale)",
    "line": "any metric (metric=..., e.g. normalized_latency_s_per_token.mean) vs x, one line per series",
    "pareto": "normalized latency vs idle GPU fraction, one point per run, Pareto frontier",
    "cdf": "TTFT CDF per modality from the runs' requests.parquet (filter with where)",
    "bars": "ablation: a metric (metric=...) per series as bars with error bars",
    "utilization": "GPU busy fraction over time per track (trace.json) or per-GPU utilization bars",
}

_X_LABELS = {
    "workload.arrival.rate": "request rate (req/s)",
    "workload.arrival.concurrency": "concurrent users (closed loop)",
    "slo_scale": "SLO scale (×)",
    "slo.scale": "SLO scale (×)",
    "deployment.encoder.dispatch.embedding_batch_tokens": "embedding batch size C (tokens)",
    "cum_sim_cost_s": "search cost so far (simulated s)",
}
_METRIC_LABELS = {
    "ttft_s": "TTFT (s)",
    "tpot_s": "TPOT (s)",
    "e2e_s": "end-to-end latency (s)",
    "normalized_latency_s_per_token": "normalized latency (s/token)",
    "throughput.requests_per_s": "throughput (req/s)",
    "throughput.input_tokens_per_s": "input throughput (tokens/s)",
    "throughput.output_tokens_per_s": "output throughput (tokens/s)",
    "goodput_requests_per_s": "goodput (req/s)",
    "slo_attainment": "SLO attainment (%)",
    "gpu_utilization.mean": "GPU utilization (%)",
    "best_throughput_rps": "best throughput so far (req/s)",
}
_PERCENT_METRICS = ("slo_attainment", "gpu_utilization.mean")
_THROUGHPUT_METRICS = {
    "requests": "throughput.requests_per_s",
    "input_tokens": "throughput.input_tokens_per_s",
    "output_tokens": "throughput.output_tokens_per_s",
}


def _with_series(frame: pd.DataFrame, series: str) -> pd.DataFrame:
    if series not in frame.columns:
        if series == DEFAULT_SERIES:
            frame = frame.copy()
            frame[series] = "all"
            return frame
        require(frame, series)
    return frame


def _series_order(frame: pd.DataFrame, series: str) -> list:
    return list(pd.unique(frame[series]))


def _styles(order) -> dict[str, dict[str, str]]:
    """Colour, marker and line style per series value of one figure (distinct; see lmmsim.plotting.palette)."""
    return series_styles(str(v) for v in order)


def _x_label(x: str) -> str:
    return _X_LABELS.get(x, x)


def _metric_label(metric: str) -> str:
    """Axis label with units for a flattened metric column (``by_modality.image.ttft_s.p99`` etc.)."""
    parts = metric.split(".")
    prefix = ""
    if parts[0] == "by_modality" and len(parts) > 2:
        prefix = parts[1] + " "
        parts = parts[2:]
    if parts[-1] in STATS and len(parts) > 1:
        base = ".".join(parts[:-1])
        if base in _METRIC_LABELS:
            return f"{prefix}{parts[-1]} {_METRIC_LABELS[base]}"
    base = ".".join(parts)
    return prefix + _METRIC_LABELS.get(base, base)


def _scale(metric: str) -> float:
    return 100.0 if metric.endswith(_PERCENT_METRICS) else 1.0


def aggregate(frame: pd.DataFrame, x: str, series: str, metric: str) -> pd.DataFrame:
    """Mean, std (0 for a single repeat) and count of ``metric`` per (series, x), x ascending."""
    g = frame.groupby([series, x], sort=False)[metric]
    out = g.agg(["mean", "std", "count"]).reset_index()
    out["std"] = out["std"].fillna(0.0)
    return out


def _option(name: str, value, valid: Iterable[str]):
    valid = tuple(valid)
    if value not in valid:
        raise UserError(name, f"unknown {name} {value!r}; choose from {choices(valid)}")
    return value


def _legend(fig: Figure, ax, n: int) -> None:
    if n > 1:
        handles, labels = ax.get_legend_handles_labels()
        # as many columns as fit the figure's width (~0.6 em per character, plus the handle)
        chars = fig.get_figwidth() * 72.0 / (0.6 * 7.0)
        ncols = max(1, min(n, 4, int(chars // (max((len(t) for t in labels), default=1) + 6))))
        fig.legend(handles, labels, loc="outside upper center", ncols=ncols, columnspacing=1.0)


def _new_fig() -> tuple[Figure, object]:
    fig = new_figure()
    fig.set_layout_engine("constrained")
    return fig, fig.add_subplot()


# --------------------------------------------------------------------------- line kinds


def _lines(frame: pd.DataFrame, x: str, series: str, metric: str, *, ylabel: str | None = None,
           log_y: bool = False, title: str | None = None) -> Figure:
    require(frame, x, metric)
    frame = usable(_with_series(frame, series), x, metric)
    scale = _scale(metric)
    fig, ax = _new_fig()
    order = _series_order(frame, series)
    agg = aggregate(frame, x, series, metric)
    styles = _styles(order)
    for value in order:
        part = agg[agg[series] == value].sort_values(x)
        xs = part[x].to_numpy(dtype=float)
        mean = part["mean"].to_numpy(dtype=float) * scale
        std = part["std"].to_numpy(dtype=float) * scale
        style = styles[str(value)]
        ax.plot(xs, mean, label=str(value), **style)
        if (std > 0).any():
            lo = mean - std
            if log_y:  # keep the band on a log axis
                lo = np.where(lo > 0, lo, mean / 10)
            ax.fill_between(xs, lo, mean + std, color=style["color"], alpha=0.2, linewidth=0)
    ax.set_xlabel(_x_label(x))
    ax.set_ylabel(ylabel or _metric_label(metric))
    if log_y:
        ax.set_yscale("log")
    ax.grid(True, which="major")
    if title:
        ax.set_title(title)
    _legend(fig, ax, len(order))
    return fig


def _modality_metric(metric: str, modality: str | None) -> str:
    return f"by_modality.{modality}.{metric}" if modality else metric


def _ttft_vs_rate(frame, x, series, *, stat="mean", modality=None, log_y=True, **_):
    _option("stat", stat, STATS)
    return _lines(frame, x, series, _modality_metric(f"ttft_s.{stat}", modality), log_y=bool(log_y))


def _throughput_vs_rate(frame, x, series, *, metric="requests", **_):
    _option("metric", metric, _THROUGHPUT_METRICS)
    return _lines(frame, x, series, _THROUGHPUT_METRICS[metric])


def _slo_vs_rate(frame, x, series, *, modality=None, **_):
    return _lines(frame, x, series, _modality_metric("slo_attainment", modality))


def _goodput_vs_slo_scale(frame, x, series, **_):
    return _lines(frame, x, series, "goodput_requests_per_s")


def _line(frame, x, series, *, metric="normalized_latency_s_per_token.mean", log_y=False, **_):
    return _lines(frame, x, series, metric, log_y=bool(log_y))


# --------------------------------------------------------------------------- pareto


def pareto_frontier(idle: np.ndarray, latency: np.ndarray) -> np.ndarray:
    """Indices of the points no other point beats in both idle fraction and latency (lower is better),
    ordered by idle fraction."""
    order = np.lexsort((latency, idle))
    best = math.inf
    keep = []
    for i in order:
        if latency[i] < best:
            keep.append(i)
            best = latency[i]
    return np.asarray(keep, dtype=int)


def _pareto(frame, x, series, *, stat="mean", normalize="x", baseline=None, **_):
    _option("stat", stat, STATS)
    _option("normalize", normalize, ("x", "overall", "none"))
    metric = f"normalized_latency_s_per_token.{stat}"
    need = [metric, "gpu_utilization.mean"] + ([x] if normalize == "x" else [])
    require(frame, *need)
    frame = usable(_with_series(frame, series), *need).copy()
    order = _series_order(frame, series)
    if baseline is None:
        baseline = order[0]
    else:
        matches = [v for v in order if str(v) == str(baseline)]
        if not matches:
            raise UserError("baseline", f"no series {baseline!r}; choose from {choices(map(str, order))}")
        baseline = matches[0]
        order = [baseline] + [v for v in order if v != baseline]
    ref_rows = frame[frame[series] == baseline]
    if normalize == "x":
        ref = ref_rows.groupby(x)[metric].mean()
        frame["_ref"] = frame[x].map(ref)
    elif normalize == "overall":
        frame["_ref"] = ref_rows[metric].mean()
    else:
        frame["_ref"] = 1.0
    frame = frame[frame["_ref"] > 0].dropna(subset=["_ref"])
    if frame.empty:
        raise UserError("RESULTS", f"the baseline series {baseline!r} shares no {x} value with the others")
    frame["_lat"] = frame[metric] / frame["_ref"]
    frame["_idle"] = 1.0 - frame["gpu_utilization.mean"].astype(float)

    fig, ax = _new_fig()
    styles = _styles(order)
    for value in order:
        part = frame[frame[series] == value]
        if part.empty:
            continue
        ax.plot(part["_idle"], part["_lat"], label=str(value),
                **{**styles[str(value)], "linestyle": "none"})
    front = pareto_frontier(frame["_idle"].to_numpy(float), frame["_lat"].to_numpy(float))
    ax.plot(frame["_idle"].to_numpy(float)[front], frame["_lat"].to_numpy(float)[front],
            color="black", linestyle="--", linewidth=0.8, drawstyle="steps-post", label="Pareto frontier",
            marker="o", markersize=7, fillstyle="none", markeredgewidth=0.6, zorder=3)
    ax.set_xlabel("idle GPU fraction")
    if normalize == "none":
        ax.set_ylabel(_metric_label(metric))
    else:
        ax.set_ylabel(f"normalized latency (× {baseline})")
    ax.grid(True)
    _legend(fig, ax, len(order) + 1)
    return fig


# --------------------------------------------------------------------------- run folders


def _run_dirs(frame: pd.DataFrame, root: Path | None) -> list[tuple[object, Path]]:
    if frame.attrs.get("run_dir"):  # a single run's folder (load_results)
        return [(frame["run_id"].iloc[0], Path(frame.attrs["run_dir"]))] if len(frame) else []
    require(frame, "run_id")
    if root is None:
        raise UserError("RESULTS", "this kind reads the run folders; give the sweep folder or its results.parquet")
    out = []
    for run_id in frame["run_id"]:
        path = Path(root) / "runs" / str(run_id)
        if not path.is_dir():
            raise UserError("RESULTS", f"run folder {path} not found")
        out.append((run_id, path))
    return out


def _cdf(frame, x, series, *, root=None, log_x=False, metric="ttft_s", **_):
    if "status" in frame.columns:
        frame = frame[~frame["status"].astype(str).str.lower().isin(FAILED_STATUSES)]
    parts = []
    for _, path in _run_dirs(frame, root):
        req = path / "requests.parquet"
        if not req.exists():
            raise UserError("RESULTS", f"{req} not found")
        df = pd.read_parquet(req, columns=["modality", "status", metric])
        parts.append(df[df["status"] == "finished"])
    if not parts:
        raise UserError("RESULTS", "no run to draw")
    reqs = pd.concat(parts, ignore_index=True).dropna(subset=[metric])
    if reqs.empty:
        raise UserError("RESULTS", f"no finished request with a {metric} in the selected runs")
    fig, ax = _new_fig()
    modalities = sorted(reqs["modality"].astype(str).unique())
    for m in modalities:
        vals = np.sort(reqs.loc[reqs["modality"].astype(str) == m, metric].to_numpy(float))
        ys = np.arange(1, len(vals) + 1) / len(vals)
        ax.plot(vals, ys, drawstyle="steps-post", color=modality_color(m), label=f"{m} (n={len(vals)})")
    ax.set_xlabel(_metric_label(metric))
    ax.set_ylabel("CDF")
    ax.set_ylim(0, 1.02)
    if log_x:
        ax.set_xscale("log")
    ax.grid(True)
    ax.legend(loc="lower right")
    return fig


def busy_fraction(steps: pd.DataFrame, bins: int = 50, *, exclude_links: bool = True) -> tuple[np.ndarray, dict]:
    """Busy fraction per track in ``bins`` equal time bins over the trace's span.

    ``steps`` as :func:`lmmsim.tracing.read_chrome_trace` returns it. Overlapping
    steps of one track count once. Returns (bin edges, {track: fractions}), tracks
    in the trace's order; links (``link:...``) are left out unless ``exclude_links`` is false.
    """
    if bins < 1:
        raise UserError("bins", f"must be at least 1, got {bins}")
    if steps.empty:
        raise UserError("RESULTS", "the trace has no steps")
    t0, t1 = float(steps["start_at"].min()), float(steps["end_at"].max())
    edges = np.linspace(t0, t1 if t1 > t0 else t0 + 1e-9, bins + 1)
    workers = list(steps.attrs.get("workers") or pd.unique(steps["worker"]))
    out = {}
    for w in workers:
        if exclude_links and str(w).startswith("link:"):
            continue
        part = steps[steps["worker"] == w]
        if part.empty:
            continue
        s = part["start_at"].to_numpy(float)
        e = part["end_at"].to_numpy(float)
        idx = np.argsort(s, kind="stable")
        s, e = s[idx], e[idx]
        reach = np.maximum.accumulate(e)
        new = np.concatenate([[True], s[1:] > reach[:-1]])
        ms = s[new]
        me = np.maximum.reduceat(e, np.flatnonzero(new))
        lengths = me - ms
        cum = np.concatenate([[0.0], np.cumsum(lengths)])
        k = np.searchsorted(ms, edges, side="right") - 1  # last interval starting at or before the edge
        kk = np.clip(k, 0, None)
        busy_to = np.where(k >= 0, cum[kk] + np.clip(edges - ms[kk], 0.0, lengths[kk]), 0.0)
        out[str(w)] = np.diff(busy_to) / np.diff(edges)
    return edges, out


def _utilization(frame, x, series, *, root=None, run_id=None, bins=50, **_):
    if run_id is not None:
        require(frame, "run_id")
        frame = frame[frame["run_id"].astype(str) == str(run_id)]
        if frame.empty:
            raise UserError("run_id", f"no run {run_id!r} in the results")
    runs = _run_dirs(frame.iloc[:1], root)
    rid, path = runs[0]
    trace = path / "trace.json"
    if not trace.exists() and (path / "trace.json.gz").exists():
        trace = path / "trace.json.gz"
    fig, ax = _new_fig()
    if trace.exists():
        from lmmsim.tracing import read_chrome_trace

        edges, tracks = busy_fraction(read_chrome_trace(trace), int(bins))
        mids = (edges[:-1] + edges[1:]) / 2 - edges[0]
        styles = _styles(tracks)
        for name, frac in tracks.items():
            ax.plot(mids, frac, label=name, drawstyle="default", color=styles[name]["color"],
                    linestyle=styles[name]["linestyle"])
        ax.set_xlabel("time (s)")
        ax.set_ylabel("GPU busy fraction")
        ax.set_ylim(0, 1.05)
        ax.grid(True)
        _legend(fig, ax, len(tracks))
    else:
        summ = path / "summary.json"
        if not summ.exists():
            raise UserError("RESULTS", f"{path} has neither trace.json nor summary.json")
        per_gpu = (json.loads(summ.read_text()).get("gpu_utilization") or {}).get("per_gpu") or []
        if not per_gpu:
            raise UserError("RESULTS", f"{summ} has no gpu_utilization.per_gpu")
        label = str(frame[series].iloc[0]) if series in frame.columns else None
        color = _styles([label])[label]["color"] if label else None
        ax.bar(range(len(per_gpu)), [100.0 * (u or 0.0) for u in per_gpu], color=color, label=label)
        ax.set_xticks(range(len(per_gpu)))
        ax.set_xlabel("GPU")
        ax.set_ylabel("GPU utilization (%)")
        ax.set_ylim(0, 105)
        ax.grid(True, axis="y")
        ax.set_axisbelow(True)
    ax.set_title(f"run {rid}")
    return fig


# --------------------------------------------------------------------------- bars


_HATCHES = (None, "//", "..", "xx")  # bars past the palette's colours: a repeated colour gets a hatch


def _bars(frame, x, series, *, metric="ttft_s.mean", group=None, **_):
    """One bar per series (mean ± std over its rows); with ``group`` (a column), grouped bars per value."""
    require(frame, metric)
    if group is not None:
        require(frame, group)
    frame = usable(_with_series(frame, series), metric)
    scale = _scale(metric)
    order = _series_order(frame, series)
    groups = sorted(pd.unique(frame[group])) if group is not None else [None]
    fig, ax = _new_fig()
    width = 0.8 / len(order) if group is not None else 0.7
    styles, seen = _styles(order), []
    for i, value in enumerate(order):
        means, stds, pos = [], [], []
        for j, gval in enumerate(groups):
            part = frame[frame[series] == value]
            if group is not None:
                part = part[part[group] == gval]
            if part.empty:
                continue
            vals = part[metric].astype(float) * scale
            means.append(vals.mean())
            stds.append(vals.std() if len(vals) > 1 else 0.0)
            pos.append(j + (i - (len(order) - 1) / 2) * width if group is not None else i)
        color = styles[str(value)]["color"]
        ax.bar(pos, means, width=width, yerr=stds, color=color, label=str(value),
               hatch=_HATCHES[seen.count(color) % len(_HATCHES)], edgecolor="white", linewidth=0.3,
               error_kw={"elinewidth": 0.6, "capsize": 2})
        seen.append(color)
    if group is not None:
        fit_tick_labels(ax, [f"{g:g}" if isinstance(g, float) else str(g) for g in groups])
        ax.set_xlabel(_x_label(group))
        _legend(fig, ax, len(order))
    else:
        fit_tick_labels(ax, [str(v) for v in order])
        ax.set_xlabel(series)
    ax.set_ylabel(_metric_label(metric))
    ax.grid(True, axis="y")
    ax.set_axisbelow(True)
    return fig


# --------------------------------------------------------------------------- entry points

_BUILDERS: dict[str, Callable[..., Figure]] = {
    "ttft-vs-rate": _ttft_vs_rate,
    "throughput-vs-rate": _throughput_vs_rate,
    "slo-attainment-vs-rate": _slo_vs_rate,
    "goodput-vs-slo-scale": _goodput_vs_slo_scale,
    "line": _line,
    "pareto": _pareto,
    "cdf": _cdf,
    "bars": _bars,
    "utilization": _utilization,
}
assert set(_BUILDERS) == set(KINDS)


def _default_x(kind: str, frame: pd.DataFrame) -> str:
    if kind == "goodput-vs-slo-scale":
        if "slo_scale" in frame.columns:
            return "slo_scale"
        if "slo.scale" in frame.columns:
            return "slo.scale"
        scales = [c for c in frame.columns if "slo" in str(c) and "scale" in str(c)]
        if len(scales) == 1:
            return scales[0]
        raise UserError("RESULTS", "no 'slo_scale' column; pass x=<the SLO scale column>")
    return DEFAULT_X


def make_figure(kind: str, frame: pd.DataFrame, *, x: str | None = None, series: str = DEFAULT_SERIES,
                root: Path | None = None, where=None, **options) -> Figure:
    """Build (do not save) figure ``kind`` from a results ``frame`` (as :func:`load_results` returns it).

    ``root``: the sweep folder holding ``runs/`` (default ``frame.attrs["root"]``), needed by
    ``cdf`` and ``utilization``. ``where``: ``key=value`` filters. Other options go to the kind.
    """
    if kind not in _BUILDERS:
        raise UserError("KIND", f"unknown plot kind {kind!r}; choose from {choices(KINDS)}")
    if root is None and frame.attrs.get("root"):
        root = Path(frame.attrs["root"])
    frame = filter_rows(frame, where)
    if x is None:
        x = _default_x(kind, frame)
    with paper_style():
        if kind in ("cdf", "utilization"):
            return _BUILDERS[kind](frame, x, series, root=root, **options)
        return _BUILDERS[kind](frame, x, series, **options)


def plot(kind: str, results: Path, out: Path, *, x: str | None = None, series: str = DEFAULT_SERIES,
         force: bool = False, **options) -> Path:
    """Draw figure ``kind`` from a sweep (its folder or ``results.parquet``) and save it to ``out``.

    ``out`` ends in ``.png``, ``.pdf`` or ``.svg``; an existing file raises ``FileExistsError`` unless ``force``.
    Options per kind: ``stat`` (ttft-vs-rate, pareto), ``modality`` (ttft-vs-rate,
    slo-attainment-vs-rate), ``metric`` (throughput-vs-rate: requests|input_tokens|output_tokens;
    bars: any metric column; cdf: a requests.parquet latency column), ``normalize`` (pareto:
    x|overall|none) and ``baseline``, ``group`` (bars), ``run_id``/``bins`` (utilization),
    ``log_x`` (cdf), ``log_y`` (ttft-vs-rate: default true; line: default false), ``where`` (all).
    Returns ``out``.
    """
    if kind not in _BUILDERS:
        raise UserError("KIND", f"unknown plot kind {kind!r}; choose from {choices(KINDS)}")
    out = Path(out)
    if out.suffix.lower() not in FIGURE_SUFFIXES:
        raise UserError("-o", f"figure must end in .png, .pdf or .svg, got {out.name!r}")
    if out.exists() and not force:
        raise FileExistsError(f"{out} exists; pass force=True to overwrite")
    frame = load_results(Path(results))
    with paper_style():
        fig = make_figure(kind, frame, x=x, series=series, **options)
        return save(fig, out, force=force)

"""Sweep figures (lmmsim.plotting.figures) on a tiny synthetic sweep folder; headless and fast."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from lmmsim.engine.steplog import StepRecord
from lmmsim.errors import UserError
from lmmsim.plotting.figures import (
    KINDS,
    busy_fraction,
    load_results,
    make_figure,
    pareto_frontier,
    plot,
)
from lmmsim.plotting.style import system_color
from lmmsim.tracing import read_chrome_trace, write_chrome_trace

SYSTEMS = ("vllm", "gllm")
RATES = (1.0, 2.0, 4.0)


def _run_folder(path, rng, *, trace: bool) -> None:
    path.mkdir(parents=True)
    n = 30
    modality = np.array(["text", "image", "video"] * (n // 3))
    status = np.array(["finished"] * (n - 1) + ["unfinished"])
    ttft = rng.uniform(0.05, 2.0, n)
    ttft[-1] = np.nan
    pd.DataFrame({"request_id": np.arange(n), "modality": modality, "status": status,
                  "ttft_s": ttft}).to_parquet(path / "requests.parquet", index=False)
    (path / "summary.json").write_text(json.dumps({"gpu_utilization": {"per_gpu": [0.5, 0.75], "mean": 0.625}}))
    if trace:
        recs = [StepRecord("replica0", 0.0, 1.0, "prefill", (0,), 10, 1),
                StepRecord("replica0", 2.0, 4.0, "decode", (0,), 1, 1),
                StepRecord("encoder0", 0.0, 0.5, "encode", (0,), 5, 1),
                StepRecord("link:encoder0->replica0", 0.5, 0.6, "transfer", (0,), 0, 1)]
        write_chrome_trace(recs, path / "trace.json")


@pytest.fixture
def sweep(tmp_path):
    rng = np.random.default_rng(0)
    rows = []
    for system in SYSTEMS:
        k = 1.0 if system == "vllm" else 2.0
        for rate in RATES:
            for repeat in range(2):
                run_id = f"{system}-r{rate:g}-{repeat}"
                util = min(0.2 * rate / k + 0.05 * repeat, 1.0)
                rows.append({
                    "system": system, "workload.arrival.rate": rate, "slo_scale": rate,
                    "repeat": repeat, "seed": repeat, "run_id": run_id, "status": "ok",
                    "ttft_s.mean": k * 0.1 * rate * (1 + 0.1 * repeat),
                    "ttft_s.p99": k * 0.5 * rate * (1 + 0.1 * repeat),
                    "normalized_latency_s_per_token.mean": k * 0.01 * rate,
                    "throughput.requests_per_s": rate * 0.9 / k,
                    "throughput.input_tokens_per_s": rate * 900,
                    "throughput.output_tokens_per_s": rate * 90,
                    "goodput_requests_per_s": rate * 0.8 / k,
                    "slo_attainment": 1.0 / (k * rate),
                    "gpu_utilization.mean": util,
                    "by_modality.image.ttft_s.mean": k * 0.2 * rate,
                })
    frame = pd.DataFrame(rows)
    frame.to_parquet(tmp_path / "results.parquet", index=False)
    for i, run_id in enumerate(frame["run_id"][:3]):
        _run_folder(tmp_path / "runs" / run_id, rng, trace=(i == 0))
    _run_folder(tmp_path / "runs" / frame["run_id"].iloc[-1], rng, trace=False)
    return tmp_path


def _frame(sweep):
    return load_results(sweep)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_renders_png(sweep, kind):
    where = ["system=vllm", "workload.arrival.rate=1"] if kind in ("cdf",) else None
    out = plot(kind, sweep, sweep / "figs" / f"{kind}.png", where=where)
    assert out.exists() and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_pdf_by_suffix_and_parquet_path(sweep):
    out = plot("throughput-vs-rate", sweep / "results.parquet", sweep / "t.pdf")
    assert out.read_bytes()[:5] == b"%PDF-"


def test_ttft_vs_rate_log_y_one_line_per_system(sweep):
    fig = make_figure("ttft-vs-rate", _frame(sweep))
    ax = fig.axes[0]
    assert ax.get_yscale() == "log"
    assert ax.get_xlabel() == "request rate (req/s)"
    assert ax.get_ylabel() == "mean TTFT (s)"
    lines = ax.get_lines()
    assert [ln.get_label() for ln in lines] == list(SYSTEMS)
    assert [ln.get_color() for ln in lines] == [system_color(s) for s in SYSTEMS]
    # mean over the two repeats: vllm at rate 1 -> 0.1 * (1 + 1.1) / 2
    np.testing.assert_allclose(lines[0].get_xdata(), RATES)
    assert lines[0].get_ydata()[0] == pytest.approx(0.105)
    assert len(ax.collections) == 2  # a ± std band per system


def test_ttft_stat_and_modality_options(sweep):
    ax = make_figure("ttft-vs-rate", _frame(sweep), stat="p99").axes[0]
    assert ax.get_ylabel() == "p99 TTFT (s)"
    assert ax.get_lines()[1].get_ydata()[0] == pytest.approx(2 * 0.5 * 1.05)
    ax = make_figure("ttft-vs-rate", _frame(sweep), modality="image").axes[0]
    assert ax.get_ylabel() == "image mean TTFT (s)"
    with pytest.raises(UserError, match="p99"):
        make_figure("ttft-vs-rate", _frame(sweep), stat="p42")


@pytest.mark.parametrize(
    "kind, xlabel, ylabel",
    [
        ("throughput-vs-rate", "request rate (req/s)", "throughput (req/s)"),
        ("slo-attainment-vs-rate", "request rate (req/s)", "SLO attainment (%)"),
        ("goodput-vs-slo-scale", "SLO scale (×)", "goodput (req/s)"),
    ],
)
def test_line_kinds_labels(sweep, kind, xlabel, ylabel):
    ax = make_figure(kind, _frame(sweep)).axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == (xlabel, ylabel)
    assert len(ax.get_lines()) == len(SYSTEMS)
    assert ax.get_yscale() == "linear"


def test_slo_attainment_in_percent(sweep):
    ax = make_figure("slo-attainment-vs-rate", _frame(sweep)).axes[0]
    np.testing.assert_allclose(ax.get_lines()[0].get_ydata(), [100.0, 50.0, 25.0])


def test_pareto(sweep):
    ax = make_figure("pareto", _frame(sweep)).axes[0]
    assert ax.get_xlabel() == "idle GPU fraction"
    assert ax.get_ylabel() == "normalized latency (× vllm)"
    lines = ax.get_lines()
    assert [ln.get_label() for ln in lines] == [*SYSTEMS, "Pareto frontier"]
    assert len(lines[0].get_xdata()) == 6  # one point per run
    np.testing.assert_allclose(lines[0].get_ydata(), 1.0)  # baseline normalised to itself at each x
    np.testing.assert_allclose(lines[1].get_ydata(), 2.0)
    ax = make_figure("pareto", _frame(sweep), normalize="overall", baseline="gllm").axes[0]
    assert ax.get_ylabel() == "normalized latency (× gllm)"


def test_pareto_frontier_points():
    idle = np.array([0.1, 0.2, 0.3, 0.15, 0.4])
    lat = np.array([3.0, 2.0, 1.0, 3.5, 1.5])
    assert pareto_frontier(idle, lat).tolist() == [0, 1, 2]


def test_cdf_per_modality(sweep):
    frame = _frame(sweep)
    ax = make_figure("cdf", frame, where={"run_id": frame["run_id"].iloc[0]}).axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("TTFT (s)", "CDF")
    lines = ax.get_lines()
    assert [ln.get_label().split(" ")[0] for ln in lines] == ["image", "text", "video"]
    assert lines[0].get_ydata()[-1] == pytest.approx(1.0)
    assert sum(len(ln.get_xdata()) for ln in lines) == 29  # the unfinished request is left out
    # all runs with a folder: vllm's first three plus gllm's last
    with pytest.raises(UserError, match="run folder"):
        make_figure("cdf", frame)


def test_bars(sweep):
    frame = _frame(sweep)
    ax = make_figure("bars", frame, where="workload.arrival.rate=2", metric="throughput.requests_per_s").axes[0]
    assert ax.get_ylabel() == "throughput (req/s)"
    assert len(ax.patches) == 2
    assert [t.get_text() for t in ax.get_xticklabels()] == list(SYSTEMS)
    assert ax.patches[0].get_height() == pytest.approx(1.8)
    ax = make_figure("bars", frame, group="workload.arrival.rate").axes[0]
    assert len(ax.patches) == 6 and ax.get_xlabel() == "request rate (req/s)"


def test_utilization_from_trace_and_summary(sweep):
    frame = _frame(sweep)
    ax = make_figure("utilization", frame, bins=4).axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("time (s)", "GPU busy fraction")
    assert sorted(ln.get_label() for ln in ax.get_lines()) == ["encoder0", "replica0"]  # no link track
    ax = make_figure("utilization", frame, run_id=frame["run_id"].iloc[1]).axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("GPU", "GPU utilization (%)")
    assert [p.get_height() for p in ax.patches] == [50.0, 75.0]


def test_busy_fraction_bins(tmp_path):
    recs = [StepRecord("replica0", 0.0, 1.0, "prefill", (0,), 1, 1),
            StepRecord("replica0", 0.5, 1.5, "prefill", (1,), 1, 1),  # overlaps: counted once
            StepRecord("replica0", 3.0, 4.0, "decode", (0,), 1, 1)]
    write_chrome_trace(recs, tmp_path / "t.json")
    edges, tracks = busy_fraction(read_chrome_trace(tmp_path / "t.json"), 4)
    np.testing.assert_allclose(edges, [0, 1, 2, 3, 4])
    np.testing.assert_allclose(tracks["replica0"], [1.0, 0.5, 0.0, 1.0])


def test_refuses_overwrite(sweep):
    out = sweep / "f.png"
    plot("bars", sweep, out)
    with pytest.raises(FileExistsError):
        plot("bars", sweep, out)
    plot("bars", sweep, out, force=True)


def test_unknown_kind_lists_kinds(sweep):
    with pytest.raises(UserError) as err:
        plot("nope", sweep, sweep / "x.png")
    assert err.value.key == "KIND"
    for kind in KINDS:
        assert repr(kind) in str(err.value)


def test_missing_column_and_results(sweep, tmp_path):
    with pytest.raises(UserError) as err:
        make_figure("ttft-vs-rate", _frame(sweep), x="workload.nope")
    assert err.value.key == "RESULTS" and "workload.nope" in str(err.value)
    with pytest.raises(UserError) as err:
        make_figure("throughput-vs-rate", _frame(sweep).drop(columns=["throughput.requests_per_s"]))
    assert err.value.key == "RESULTS"
    with pytest.raises(UserError) as err:
        plot("bars", tmp_path / "missing", tmp_path / "x.png")
    assert err.value.key == "RESULTS"
    with pytest.raises(UserError, match="policy.nope"):
        make_figure("bars", _frame(sweep), series="policy.nope")


def test_reproduce_rps_quick_writes_figures_and_report(tmp_path):
    from lmmsim.reproduce import reproduce

    report = reproduce("rps", tmp_path / "rep", quick=True, jobs=1, figures=["fig4"])
    text = report.read_text()
    assert text.count("| fig4 |") == 4  # one row per headline claim
    for name in ("fig4-pareto.png", "fig4-bars.png"):
        assert (tmp_path / "rep" / name).stat().st_size > 1000
    with pytest.raises(UserError):
        reproduce("nope", tmp_path / "x")


def test_reproduce_rserve_one_figure_reports_its_claims(tmp_path):
    from lmmsim.reproduce import reproduce

    report = reproduce("rserve", tmp_path / "rep", quick=True, jobs=1, figures=["fig16-high"])
    lines = [line for line in report.read_text().splitlines() if line.startswith("| fig16-high |")]
    assert len(lines) == 4
    for line in lines:  # numbers filled in, never NaN
        cells = [c.strip() for c in line.split("|")]
        assert cells[4] not in ("nan", "")
    assert (tmp_path / "rep" / "fig16-high-ttft-vs-rate.png").stat().st_size > 1000
    with pytest.raises(UserError, match="fig99"):
        reproduce("rserve", tmp_path / "x", figures=["fig99"])


def test_reproduce_easerve_one_figure(tmp_path):
    from lmmsim.reproduce import reproduce

    report = reproduce("easerve", tmp_path / "rep", quick=True, jobs=1, figures=["table6"],
                       sets=("host.cpu_speed=2",))
    text = report.read_text()
    rows = [line for line in text.splitlines() if line.startswith("| table6 |")]
    assert len(rows) == 7 and all("nan" not in r for r in rows)
    assert (tmp_path / "rep" / "table6-bars.png").stat().st_size > 1000
    # the fixed override is in every run and named in the title; a quick run is a smoke test: no verdicts
    assert "Every run with: `host.cpu_speed=2`" in text and "smoke test" in text
    assert "direction" not in text and all(r.count("|") == 5 for r in rows)
    runs = pd.read_parquet(tmp_path / "rep" / "table6" / "results.parquet")
    assert (runs["host.cpu_speed"] == 2).all()
    with pytest.raises(UserError, match="--set"):
        reproduce("easerve", tmp_path / "x", figures=["table6"], sets=("host.cpu_speed",))


def test_reproduce_easerve_goodput_tiers(tmp_path):
    """Fig. 9: a systems x rates sweep turned into goodput per tier (the highest rate meeting it)."""
    import pandas as pd

    from lmmsim.reproduce import reproduce

    report = reproduce("easerve", tmp_path / "rep", quick=True, jobs=1, figures=["fig9-image"])
    rows = [line for line in report.read_text().splitlines() if line.startswith("| fig9-image |")]
    assert len(rows) == 9 and all("nan" not in r for r in rows)
    tiers = pd.read_parquet(tmp_path / "rep" / "fig9-image" / "results.parquet")
    runs = pd.read_parquet(tmp_path / "rep" / "fig9-image" / "sweep" / "results.parquet")
    assert len(tiers) == 8 * 5 and set(tiers["slo.scale"]) == {2, 5, 10, 20, 50}
    # the tiers scale the slowest of the paper's systems' P99s at the lowest rate (not the searched best ones)
    lowest = runs[(runs["workload.arrival.rate"] == runs["workload.arrival.rate"].min())
                  & ~runs["name"].str.endswith("-best")]
    two = tiers[tiers["slo.scale"] == 2].iloc[0]
    assert two["slo.ttft_p99_s"] == 2 * lowest["ttft_s.p99"].max()
    assert two["slo.tpot_p99_s"] == 2 * lowest["tpot_s.p99"].max()
    for _name, part in tiers.groupby("name"):  # a looser tier never lowers goodput
        values = part.sort_values("slo.scale")["goodput_requests_per_s"].tolist()
        assert values == sorted(values) and values[-1] <= runs["workload.arrival.rate"].max()


def test_claim_misses_by_direction_or_magnitude():
    from lmmsim.reproduce.core import Claim

    ratio = Claim("x", 2.0, lambda df: 0.0, why="because")
    assert not ratio.misses(2.2)  # magnitude 1.2
    assert ratio.misses(3.0)  # magnitude 2.0
    assert ratio.misses(0.9)  # wrong side of 1
    holds = Claim("y", 1, lambda df: 0.0, kind="holds")
    assert holds.misses(0.0) and not holds.misses(1.0)
    level = Claim("z", 4.0, lambda df: 0.0, kind="level")
    assert not level.misses(3.0) and level.misses(2.0)  # no direction; 0.75 in range, 0.5 out


def test_quick_overrides_never_collide_with_a_figures_axes():
    """--quick adds fixed overrides; a key the sweep also varies would make the sweep invalid."""
    import yaml

    from lmmsim.reproduce import PAPERS
    from lmmsim.reproduce.core import ROOT

    for paper, figures in PAPERS.items():
        for fig in figures:
            if fig.make is not None or not fig.quick_set:
                continue
            spec = yaml.safe_load((ROOT / paper / fig.sweep).read_text())
            varied = {k for ax in spec.get("axes", []) for k in ax.get("params", {})}
            quick = {s.split("=", 1)[0] for s in fig.quick_set}
            assert not varied & quick, (paper, fig.name, varied & quick)

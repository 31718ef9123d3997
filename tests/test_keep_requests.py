"""sim.keep_requests: false (bounded memory): the same requests table and summary as the
in-memory run, with requests built on demand and step ends dropped as they go."""

from __future__ import annotations

import math

import pandas as pd
import pytest

import lmmsim.engine.decode_cohort as decode_cohort
import lmmsim.metrics.stream as stream
from lmmsim import catalog
from lmmsim.errors import UserError
from lmmsim.results import run_scenario, write_results
from lmmsim.scenario import load_scenario
from lmmsim.workload.generator import RequestDraws, generate_requests

from test_itl import ROOT

STRINGS = ("class_name", "modality", "status", "reject_reason")


@pytest.fixture
def small_chunks(monkeypatch):
    """Trim step ends, spill gaps and write row groups often, so a small run exercises them."""
    monkeypatch.setattr(decode_cohort, "TRIM_EVERY", 8)
    monkeypatch.setattr(stream, "SPILL_EVERY", 500)
    monkeypatch.setattr(stream, "ROWS_PER_GROUP", 64)
    trims = []
    on_trim = stream.ItlStream.on_trim
    monkeypatch.setattr(stream.ItlStream, "on_trim", lambda self, ends, new_base: (
        trims.append(new_base - ends.base), on_trim(self, ends, new_base)))
    return trims


def _pair(path, sets, tmp_path):
    scn, base = load_scenario(path, sets)
    kept = run_scenario(scn, base)
    scn_b, base = load_scenario(path, [*sets, "sim.keep_requests=false"])
    bounded = run_scenario(scn_b, base)
    write_results(bounded, scn_b, tmp_path / "bounded")
    kept.requests.to_parquet(tmp_path / "kept.parquet", index=False)
    return kept, bounded


def _table(path) -> pd.DataFrame:
    """A written requests.parquet by request id, string columns as Python objects."""
    df = pd.read_parquet(path).sort_values("request_id").reset_index(drop=True)
    for c in STRINGS:
        df[c] = df[c].astype(object).where(df[c].notna(), None)
    return df


def _same_summary(a, b, path=""):
    """Equal, but for the run's wall time and provenance; the ITL mean and std of the spilled
    gaps sum in another order (lmmsim.metrics.stream), so they agree to float rounding."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            if k not in ("sim_wall_time_s", "provenance"):
                _same_summary(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _same_summary(x, y, f"{path}[{i}]")
    elif ".itl_s." in path + "." and path.rsplit(".", 1)[-1] in ("mean", "std") and a is not None:
        assert b == pytest.approx(a, rel=1e-12, abs=1e-18), path
    else:
        assert a == b, path


CASES = [
    ("bench/rps_mix_llava7b.yaml", ["workload.num_requests=300"]),  # host stage, 4 modalities
    ("scenarios/text-pd.yaml", ["workload.num_requests=120"]),  # disaggregated prefill / decode
    ("scenarios/baselines/rps-mix-llava72b-gllm-epd.yaml", ["workload.num_requests=120"]),  # E-P-D
    # PP (system gllm) and a monolithic engine, both preempting hundreds of times (spans pinned)
    ("scenarios/baselines/rps-mix-llava72b-gllm.yaml", ["workload.num_requests=200", "workload.arrival.rate=50",
                                                        "deployment.gpu_memory_utilization=0.5"]),
    ("bench/rps_mix_llava7b.yaml", ["workload.num_requests=300", "workload.arrival.rate=50",
                                    "deployment.gpu_memory_utilization=0.3"]),
    ("scenarios/closed-loop.yaml", ["workload.num_requests=150"]),
    ("scenarios/closed-loop.yaml", ["sim.horizon_s=20"]),  # never sent: not_arrived
    ("scenarios/trace-replay.yaml", []),
    ("scenarios/quickstart.yaml", ["workload.num_requests=300", "sim.horizon_s=40"]),  # unfinished, not_arrived
    ("scenarios/quickstart.yaml", ["workload.num_requests=120", "deployment.max_model_len=4096"]),  # rejected
    ("scenarios/multi-turn-chat.yaml", ["deployment.prefix_caching=true"]),  # num_cached_tokens, conversations
]


@pytest.mark.parametrize("path,sets", CASES, ids=[f"{p.split('/')[-1]}{''.join(s)}" for p, s in CASES])
def test_bounded_run_equals_the_in_memory_run(path, sets, tmp_path, small_chunks):
    kept, bounded = _pair(str(ROOT / path), sets, tmp_path)
    assert bounded.requests is None
    pd.testing.assert_frame_equal(_table(tmp_path / "bounded" / "requests.parquet"),
                                  _table(tmp_path / "kept.parquet"), check_exact=True)
    _same_summary(kept.summary, bounded.summary)


def test_step_end_trimming_keeps_itl_exact(tmp_path, small_chunks):
    path = str(ROOT / "bench/rps_mix_llava7b.yaml")
    kept, bounded = _pair(path, ["workload.num_requests=400"], tmp_path)
    assert len(small_chunks) > 20 and sum(small_chunks) > 1000  # steps were dropped, many times
    cohort = bounded.built.simulation.frontend.llm_engines[0].scheduler.cohorts[0]
    assert cohort.step_ends.base > 0 and not cohort.step_ends.pins
    assert len(cohort.step_ends) < cohort.step_no / 4  # what a run keeps: the live tail only
    for key in ("itl_s", "by_modality"):
        _same_summary(kept.summary[key], bounded.summary[key])
    itl_max = _table(tmp_path / "bounded" / "requests.parquet")["itl_max_s"]
    pd.testing.assert_series_equal(itl_max, kept.requests["itl_max_s"], check_exact=True)


def test_requests_on_demand_are_the_generated_ones():
    scn, base = load_scenario(str(ROOT / "bench/rps_mix_llava7b.yaml"), ["workload.num_requests=500"])
    model = catalog.get_model(scn.model)
    listed = generate_requests(scn.workload, model, scn.seed, base)
    draws = RequestDraws(scn.workload, model, scn.seed, base)
    assert list(draws) == listed
    assert [draws[i] for i in (0, 17, 499, -1)] == [listed[i] for i in (0, 17, 499, -1)]
    assert draws[10:20] == listed[10:20]


def test_approximate_summary_is_close(tmp_path):
    path = str(ROOT / "bench/rps_mix_llava7b.yaml")
    scn, base = load_scenario(path, ["workload.num_requests=400"])
    exact = run_scenario(scn, base).summary
    scn, base = load_scenario(path, ["workload.num_requests=400", "sim.keep_requests=false",
                                     "sim.exact_summary=false"])
    run = run_scenario(scn, base)
    approx = run.summary
    for key in ("num_requests", "num_finished", "num_unfinished", "throughput", "goodput_requests_per_s"):
        assert approx[key] == pytest.approx(exact[key], rel=1e-12), key
    for block in ("ttft_s", "e2e_s", "itl_s"):
        for stat in ("mean", "std", "max"):
            assert approx[block][stat] == pytest.approx(exact[block][stat], rel=1e-9), (block, stat)
        for stat in ("p50", "p90", "p99"):  # buckets 2**-8 wide, read at their middle
            assert approx[block][stat] == pytest.approx(exact[block][stat], rel=2.5e-3), (block, stat)
    assert [p.name for p in run.requests_path.parent.iterdir()] == ["requests.parquet"]  # no gaps spilled


def test_bad_values_and_a_trace_are_one_line_errors():
    path = str(ROOT / "scenarios/quickstart.yaml")
    with pytest.raises(UserError) as err:
        load_scenario(path, ["sim.keep_requests=sometimes"])
    assert "sim.keep_requests" in str(err.value) and "\n" not in str(err.value)
    scn, base = load_scenario(path, ["workload.num_requests=10", "sim.keep_requests=false"])
    with pytest.raises(UserError) as err:
        run_scenario(scn, base, trace=True)
    assert "sim.keep_requests" in str(err.value) and "\n" not in str(err.value)


def test_written_csv_and_spill_folder_cleanup(tmp_path):
    scn, base = load_scenario(str(ROOT / "scenarios/quickstart.yaml"),
                              ["workload.num_requests=50", "sim.keep_requests=false"])
    run = run_scenario(scn, base)
    spill = run.requests_path.parent
    write_results(run, scn, tmp_path / "out", csv=True)
    csv = pd.read_csv(tmp_path / "out" / "requests.csv")
    assert len(csv) == 50 and sorted(csv["request_id"]) == list(range(50))
    assert math.isclose(csv["ttft_s"].mean(), run.summary["ttft_s"]["mean"], rel_tol=1e-12)
    del run
    import gc

    gc.collect()
    assert not spill.exists()


@pytest.mark.parametrize("distinct", [3, 50, 100_000])
def test_spilled_percentiles_equal_the_in_memory_ones_under_heavy_ties(distinct):
    """The radix selection gives weighted_stats' very floats, whether the gaps tie massively (a
    fleet of identical replicas) or not, across chunk boundaries; and it never holds the ties."""
    import numpy as np

    from lmmsim.metrics.itl import weighted_stats

    rng = np.random.default_rng(distinct)
    pool = rng.lognormal(-4, 0.6, distinct)  # a few values or many, 1 ms - 100 ms
    values = pool[rng.integers(0, distinct, 300_000)]
    counts = rng.integers(1, 5, values.size)
    chunks = lambda: ((values[i:i + 7_000], counts[i:i + 7_000]) for i in range(0, values.size, 7_000))
    got, want = stream.spilled_stats(chunks), weighted_stats(values, counts)
    for key in ("p50", "p90", "p95", "p99", "max"):
        assert got[key] == want[key], key
    assert got["mean"] == pytest.approx(want["mean"], rel=1e-12)
    assert got["std"] == pytest.approx(want["std"], rel=1e-9)


def test_a_bounded_run_spills_beside_its_output_and_links_the_table_into_it(tmp_path, monkeypatch):
    """Not in the system's temporary folder (often a RAM-backed tmpfs): ``lmmsim run -o``
    spills in the output's nearest existing ancestor, and the finished table is linked, not
    copied, into the output; the spill folder is gone afterwards."""
    from lmmsim.cli import main

    elsewhere = tmp_path / "system-tmp"
    elsewhere.mkdir()
    monkeypatch.setenv("TMPDIR", str(elsewhere))
    monkeypatch.setattr(stream.tempfile, "tempdir", None)  # read TMPDIR afresh
    places, links = [], []
    spill_folder = stream.spill_folder
    monkeypatch.setattr(stream, "spill_folder", lambda near=None: places.append(near) or spill_folder(near))
    import lmmsim.results as results

    link = results.os.link
    monkeypatch.setattr(results.os, "link", lambda a, b: links.append(a) or link(a, b))
    out = tmp_path / "runs" / "one"
    rc = main(["run", str(ROOT / "scenarios/quickstart.yaml"), "-o", str(out), "--quiet",
               "--set", "workload.num_requests=40", "--set", "sim.keep_requests=false"])
    assert rc == 0
    assert places == [tmp_path.resolve()]  # runs/ does not exist yet: its parent
    assert len(links) == 1 and links[0].parent.parent == tmp_path.resolve()
    assert len(pd.read_parquet(out / "requests.parquet")) == 40
    import gc

    gc.collect()
    assert not list(tmp_path.glob(".lmmsim-run-*")) and not list(elsewhere.iterdir())

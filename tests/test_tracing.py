"""Step log -> Chrome trace -> frame round trip, worker order, and the timeline plot (headless)."""

from __future__ import annotations

import gzip
import json
import math

import pandas as pd
import pytest

from lmmsim.engine.steplog import STEP_COLUMNS, StepLog, StepRecord
from lmmsim.plotting import style
from lmmsim.plotting.timeline import layout_timeline, plot_timeline, timeline_figure
from lmmsim.tracing import (
    order_workers,
    read_chrome_trace,
    worker_sort_key,
    write_chrome_trace,
)


def _records() -> StepLog:
    """Two encoders, a link, a 2-stage prefill pipeline, a decode worker; requests 0..5."""
    R = StepRecord
    log = StepLog()
    # deliberately not in worker order, and with awkward floats
    log.append(R("prefill0/stage1", 0.35, 0.45, "prefill", (0,), 512, 1))
    log.append(R("encoder1", 0.0, 0.2, "encode", (1,), 729, 1))
    log.append(R("encoder0", 0.0, 0.1 + 0.2, "encode", (0, 2), 1458, 2))
    log.append(R("link:encoder0->prefill0", 0.3, 0.3 + 1e-3 / 3, "transfer", (0, 2), 0, 2))
    log.append(R("prefill0/stage0", 0.301, 0.35, "prefill", (0,), 512, 1))
    log.append(R("prefill0/stage0", 0.35, 0.41, "mixed", (1, 2, 5), 900, 3))
    log.append(R("prefill0/stage1", 0.45, 0.5, "mixed", (1, 2, 5), 900, 3))
    log.append(R("link:prefill0->decode0", 0.5, 0.51, "transfer", (0,), 0, 1))
    log.append(R("decode0", 0.51, 0.52, "decode", (0, 1, 2, 3, 4, 5), 6, 6))
    log.append(R("decode0", 0.52, 0.92, "decode_run", (), 240, 40))
    log.append(R("encoder1", 0.6, 0.7, "encode", (7,), 100, 1))  # outside any shown request's window
    log.append(R("encoder1", 0.25, 0.3, "encode", (9,), 50, 1))  # inside it: grey
    return log


WORKER_ORDER = [
    "encoder0",
    "encoder1",
    "prefill0/stage0",
    "prefill0/stage1",
    "decode0",
    "link:encoder0->prefill0",
    "link:prefill0->decode0",
]


def _requests_frame() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "request_id": [0, 1, 2, 3],
            "arrived_at": [0.0, 0.0, 0.01, 0.5],
            "first_token_at": [0.45, 0.5, 0.5, math.nan],
            "finished_at": [0.9, 0.9, 0.9, math.nan],
        }
    )


def test_steplog_is_a_list_and_frames():
    log = _records()
    assert len(log) == 12 and next(iter(log)).worker == "prefill0/stage1"
    frame = log.to_frame()
    assert list(frame.columns) == list(STEP_COLUMNS)
    assert frame["request_ids"].iloc[2] == (0, 2)
    assert frame["num_tokens"].dtype == "int64"
    with pytest.raises(AttributeError):
        log.foo = 1  # __slots__: no per-instance dict


def test_worker_order_is_natural_and_grouped():
    names = ["decode0", "link:prefill1->decode0", "replica10", "prefill0/stage10", "encoder2",
             "link:encoder0->prefill1", "replica2", "prefill0/stage2", "prefill0", "weird", "encoder10",
             "link:encoder0->prefill0"]
    assert order_workers(names) == [
        "encoder2", "encoder10",
        "prefill0", "prefill0/stage2", "prefill0/stage10", "replica2", "replica10",
        "decode0",
        "link:encoder0->prefill0", "link:encoder0->prefill1", "link:prefill1->decode0",
        "weird",
    ]
    assert sorted(WORKER_ORDER, key=worker_sort_key) == WORKER_ORDER


def test_trace_structure(tmp_path):
    path = tmp_path / "trace.json"
    write_chrome_trace(_records(), path, title="unit", requests=_requests_frame())
    doc = json.loads(path.read_text())
    assert set(doc) == {"traceEvents", "displayTimeUnit", "otherData"}
    assert doc["displayTimeUnit"] == "ms"
    assert doc["otherData"]["workers"] == WORKER_ORDER
    events = doc["traceEvents"]

    proc = [e for e in events if e["ph"] == "M" and e["name"] == "process_name"]
    assert proc == [{"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "unit"}}]
    names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert sorted(names.values()) == sorted(WORKER_ORDER + ["requests"])  # one per track
    sort_idx = {e["tid"]: e["args"]["sort_index"] for e in events if e["name"] == "thread_sort_index"}
    by_index = [names[t] for t in sorted(sort_idx, key=sort_idx.get)]
    assert by_index == ["requests"] + WORKER_ORDER

    xs = [e for e in events if e["ph"] == "X"]
    assert len(xs) == 12
    for e in xs:
        assert {"ts", "dur", "pid", "tid", "name", "cat", "args"} <= set(e)
        assert e["pid"] == 1 and e["dur"] >= 0 and e["tid"] in names and names[e["tid"]] != "requests"
        assert set(e["args"]) >= {"request_ids", "num_tokens", "batch_size"}
    assert xs[0]["ts"] == pytest.approx(350_000) and xs[0]["dur"] == pytest.approx(100_000)
    assert xs[0]["name"] == "prefill r0"
    assert xs[5]["name"] == "mixed r1,2,5"
    assert xs[8]["name"] == "decode r0,1,2,3 (+2)"
    assert xs[9]["name"] == "decode_run"

    inst = [e for e in events if e["ph"] == "i"]
    assert len(inst) == 4 + 3  # 4 arrivals, 3 first tokens (NaN skipped)
    assert all(e["tid"] == 0 and e["s"] == "t" for e in inst)
    assert {e["name"] for e in inst} >= {"arrive r3", "first token r2"}


def test_round_trip_exact(tmp_path):
    records = _records()
    for name in ("trace.json", "trace.json.gz"):
        path = tmp_path / name
        write_chrome_trace(records, path, requests=_requests_frame())
        back = read_chrome_trace(path)
        assert list(back.columns) == list(STEP_COLUMNS)
        assert [StepRecord(*row) for row in back.itertuples(index=False)] == list(records)
        pd.testing.assert_frame_equal(back, records.to_frame())
        assert back.attrs["workers"] == WORKER_ORDER
    assert gzip.decompress((tmp_path / "trace.json.gz").read_bytes()) == (tmp_path / "trace.json").read_bytes()


def test_trace_is_deterministic_and_rejects_bad_intervals(tmp_path):
    write_chrome_trace(_records(), tmp_path / "a.json")
    write_chrome_trace(_records(), tmp_path / "b.json")
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    with pytest.raises(ValueError):
        write_chrome_trace([StepRecord("replica0", 1.0, 0.5, "decode", (0,), 1, 1)], tmp_path / "c.json")


def test_read_foreign_trace_without_args(tmp_path):
    path = tmp_path / "foreign.json"
    path.write_text(json.dumps([
        {"ph": "M", "pid": 3, "tid": 9, "name": "thread_name", "args": {"name": "gpu"}},
        {"ph": "X", "pid": 3, "tid": 9, "name": "prefill r1", "ts": 1000, "dur": 500},
    ]))
    back = read_chrome_trace(path)
    assert back.iloc[0].tolist() == ["gpu", 0.001, 0.0015, "prefill", (), 0, 0]


def test_layout_respects_first_n():
    frame = _records().to_frame()
    lay = layout_timeline(frame, first_n=2)
    assert lay.request_ids == [0, 1]
    assert lay.workers == WORKER_ORDER  # no attrs: falls back to the natural order
    # request 0: enc0, link, stage1, stage0, link, decode; request 1: enc1, stage0 mixed, stage1 mixed, decode
    assert sorted(b.request_id for b in lay.colored) == [0] * 6 + [1] * 4
    assert lay.t0 == 0.0 and lay.t1 == 0.52
    # decode0 step with both shown requests: two stripes filling the row
    stripes = [b for b in lay.colored if b.worker == "decode0"]
    assert [b.height for b in stripes] == [0.4, 0.4] and stripes[0].y0 < stripes[1].y0
    # transfers half height, light shade; LLM steps dark
    link = [b for b in lay.colored if b.kind == "transfer" and b.worker.startswith("link:encoder0")]
    assert [b.height for b in link] == [0.4]
    enc0 = next(b for b in lay.colored if b.worker == "encoder0")
    pre0 = next(b for b in lay.colored if b.worker == "prefill0/stage0" and b.request_id == 0)
    assert enc0.color != pre0.color
    # grey: steps without shown requests that overlap the window (not the decode_run starting at its end)
    grey = [b for b in lay.bars if b.request_id is None]
    assert [(b.worker, b.request_id, b.start_at) for b in grey] == [("encoder1", None, 0.25)]

    assert len(layout_timeline(frame, first_n=1).colored) == 6
    assert len(layout_timeline(frame, first_n=3).colored) == 6 + 4 + 5
    with pytest.raises(ValueError):
        layout_timeline(frame, first_n=0)


def test_plot_timeline_png_pdf_and_no_overwrite(tmp_path):
    trace = tmp_path / "trace.json"
    write_chrome_trace(_records(), trace, requests=_requests_frame())
    png = plot_timeline(trace, tmp_path / "fig" / "timeline.png", first_n=2, title="unit")
    pdf = plot_timeline(trace, tmp_path / "fig" / "timeline.pdf", first_n=2)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 1000
    assert pdf.read_bytes()[:5] == b"%PDF-" and pdf.stat().st_size > 1000
    before = png.read_bytes()
    with pytest.raises(FileExistsError):
        plot_timeline(trace, png, first_n=3)
    assert png.read_bytes() == before
    plot_timeline(trace, png, first_n=3, force=True)
    assert png.read_bytes() != before


def test_timeline_figure_draws_one_rect_per_colored_bar():
    frame = _records().to_frame()
    with style.paper_style():
        fig, lay = timeline_figure(frame, first_n=2)
    ax = fig.axes[0]
    drawn = sum(len(c.get_paths()) for c in ax.collections if c.get_gid() == "request")
    assert drawn == len(lay.colored) == 10
    assert [t.get_text() for t in ax.get_yticklabels()] == WORKER_ORDER
    assert ax.get_xlabel() == "time (s)"


def test_style_colors_and_save(tmp_path):
    known = ["vllm", "vllm-pp", "gllm", "gllm-epd", "modserve", "dynamo", "rserve", "rserve-intra",
             "rps-serve", "easerve"]
    assert len({style.system_marker(s) for s in known}) == len(known)
    assert style.system_color("my-system") == style.system_color("my-system")
    assert style.system_style("vllm") == {"color": "#0072B2", "marker": "o", "linestyle": "-", "label": "vllm"}
    # more series than colours (tests/test_plot_palette.py checks the palette itself): still no two alike
    looks = style.series_styles(known + ["my-system"])
    assert len({(v["color"], v["linestyle"]) for v in looks.values()}) == len(known) + 1
    assert set(style.MODALITY_COLORS) == {"text", "image", "video", "audio"}
    with style.paper_style():
        fig = style.new_figure()
        assert fig.get_figwidth() == pytest.approx(3.3)
        import matplotlib as mpl
        assert mpl.rcParams["font.size"] == 8
        fig.add_subplot().plot([0, 1], [0, 1], **style.system_style("rserve"))
        out = style.save(fig, tmp_path / "new" / "f.pdf")
    first = out.read_bytes()
    with pytest.raises(FileExistsError):
        style.save(fig, out)
    style.save(fig, out, force=True)
    assert out.read_bytes() == first  # no creation date: same bytes
    with pytest.raises(ValueError):
        style.save(fig, tmp_path / "f.eps")

"""Public trace formats (Azure LLM/LMM, Mooncake, BurstGPT): parsing, detection, windows, errors,
and the benchmark-dataset export. Fixtures are tiny hand-written files; the real traces under
../shared/data/traces/ replay in an opt-in check when that folder exists."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from lmmsim.errors import UserError
from lmmsim.workload.config import WorkloadConfig
from lmmsim.workload.generator import generate_requests
from lmmsim.workload.trace import read_trace, write_trace
from lmmsim.workload.trace_formats import detect_format, read_any_trace

from conftest import FakeModel, assert_user_error, run_cli

MODEL = FakeModel()
ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT.parent / "shared" / "data" / "traces"

AZURE = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,374,44
2023-11-16 18:15:50.9951690,396,109
2023-11-16 18:15:51.5000000,12,1
2023-11-16 18:16:46.6805900,800,20
"""
AZURE_MM = """TIMESTAMP,NumImages,ContextTokens,GeneratedTokens
2024-10-15 00:00:00.000000,2,100,30
2024-10-15 00:00:01.500000,0,50,10
"""
MOONCAKE = """{"timestamp": 0, "input_length": 1200, "output_length": 50, "hash_ids": [0, 1, 2]}
{"timestamp": 250, "input_length": 700, "output_length": 5, "hash_ids": [0, 3]}
{"timestamp": 3000, "input_length": 13, "output_length": 1, "hash_ids": [9]}
"""
BURST = """Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type
5,ChatGPT,472,18,490,Conversation log
45,ChatGPT,1087,0,1087,Conversation log
118,GPT-4,417,276,693,API log
"""


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_azure(tmp_path):
    p = write(tmp_path, "azure.csv", AZURE)
    assert detect_format(p) == "azure"
    rs = read_any_trace(p, MODEL)
    assert [r.request_id for r in rs] == [0, 1, 2, 3]
    assert rs[0].arrived_at == 0.0
    assert rs[1].arrived_at == pytest.approx(4.314579)
    assert rs[3].arrived_at == pytest.approx(60.0)
    assert [(r.num_prompt_tokens, r.num_output_tokens, r.modality) for r in rs[:2]] == [(374, 44, "text"), (396, 109, "text")]
    assert all(r.prefix_hash_ids == () for r in rs)


def test_azure_multimodal_images(tmp_path):
    p = write(tmp_path, "mm.csv", AZURE_MM)
    rs = read_any_trace(p, MODEL, image=(560, 280))
    assert rs[0].modality == "image" and len(rs[0].media_segments) == 2
    assert rs[0].media_segments[0].item.source == (560, 280)
    assert rs[0].num_text_tokens == 100 and rs[0].num_mm_tokens == 2 * 20 * 10
    assert rs[1].modality == "text" and rs[1].arrived_at == 1.5
    assert read_any_trace(p, MODEL)[0].media_segments[0].item.source == (1024, 1024)  # the default
    with pytest.raises(UserError, match=r"mm\.csv:2: NumImages 2: .*does not take image"):
        read_any_trace(p, FakeModel(modalities=("text",)))


def test_mooncake_hash_ids(tmp_path):
    p = write(tmp_path, "mc.jsonl", MOONCAKE)
    assert detect_format(p) == "mooncake"
    rs = read_any_trace(p, MODEL)
    assert [r.arrived_at for r in rs] == [0.0, 0.25, 3.0]  # ms -> s
    assert [r.num_prompt_tokens for r in rs] == [1200, 700, 13]
    assert [r.num_output_tokens for r in rs] == [50, 5, 1]
    assert rs[0].prefix_hash_ids == (0, 1, 2) and rs[1].prefix_hash_ids == (0, 3)
    # an lmmsim trace keeps them through a write / read round trip
    for suffix in (".jsonl", ".csv"):
        out = tmp_path / f"back{suffix}"
        write_trace(rs, out)
        assert [r.prefix_hash_ids for r in read_trace(out, MODEL)] == [(0, 1, 2), (0, 3), (9,)]


def test_burstgpt_skips_failures_and_keeps_model(tmp_path):
    p = write(tmp_path, "burst.csv", BURST)
    assert detect_format(p) == "burstgpt"
    rs = read_any_trace(p, MODEL)
    assert [(r.arrived_at, r.num_prompt_tokens, r.num_output_tokens, r.class_name) for r in rs] == [
        (5.0, 472, 18, "ChatGPT"), (118.0, 417, 276, "GPT-4")]


def test_speedup_and_window(tmp_path):
    p = write(tmp_path, "mc.jsonl", MOONCAKE)
    rs = read_any_trace(p, MODEL, speedup=2.0)
    assert [r.arrived_at for r in rs] == [0.0, 0.125, 1.5]
    rs = read_any_trace(p, MODEL, start_s=0.2, duration_s=1.0)
    assert [r.request_id for r in rs] == [0]
    assert rs[0].arrived_at == pytest.approx(0.05) and rs[0].num_prompt_tokens == 700
    rs = read_any_trace(p, MODEL, start_s=0.2, speedup=0.5)
    assert [r.arrived_at for r in rs] == pytest.approx([0.1, 5.6])
    assert read_any_trace(p, MODEL, limit=2)[-1].num_prompt_tokens == 700
    with pytest.raises(UserError, match=r"no requests in \[10, 11\) s"):
        read_any_trace(p, MODEL, start_s=10, duration_s=1)
    # lmmsim's own format windows too
    native = tmp_path / "native.jsonl"
    write_trace(read_any_trace(p, MODEL), native)
    rs = read_any_trace(native, MODEL, start_s=0.2, duration_s=5)
    assert [(r.request_id, r.arrived_at) for r in rs] == [(0, pytest.approx(0.05)), (1, pytest.approx(2.8))]


def test_gzip_and_explicit_format(tmp_path):
    p = tmp_path / "azure.csv.gz"
    with gzip.open(p, "wt") as fh:
        fh.write(AZURE)
    assert detect_format(p) == "azure"
    assert len(read_any_trace(p, MODEL, fmt="azure")) == 4


@pytest.mark.parametrize("name, text, fmt, needles", [
    ("a.csv", AZURE.replace("374", "x"), None, ["a.csv:2", "ContextTokens: not a number", "TIMESTAMP, ContextTokens"]),
    ("a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens,Extra\n", "azure", ["a.csv:1", "unknown column 'Extra'",
                                                                              "expected columns"]),
    ("a.csv", AZURE.replace("44", "0"), None, ["a.csv:2", "GeneratedTokens: must be >= 1"]),
    ("a.csv", AZURE.replace("2023-11-16 18:15:50.9951690", "yesterday"), None, ["a.csv:3", "TIMESTAMP"]),
    ("m.jsonl", MOONCAKE.replace('"output_length": 5,', '"out": 5,'), None, ["m.jsonl:2", "unknown field 'out'",
                                                                            "input_length, output_length"]),
    ("m.jsonl", MOONCAKE.replace("[0, 3]", '"abc"'), None, ["m.jsonl:2", "hash_ids"]),
    ("m.jsonl", MOONCAKE + "{oops\n", None, ["m.jsonl:4", "invalid JSON"]),
    ("b.csv", BURST.replace("417,276,693", "417,276"), None, ["b.csv:4", "expected 6 columns, got 5",
                                                              "Request tokens"]),
])
def test_malformed_rows_name_file_line_and_columns(tmp_path, name, text, fmt, needles):
    p = write(tmp_path, name, text)
    with pytest.raises(UserError) as exc:
        read_any_trace(p, MODEL, fmt=fmt)
    message = str(exc.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, message


def test_workload_config_and_cli_error(tmp_path, capsys):
    write(tmp_path, "burst.csv", BURST.replace("472", "-1"))
    cfg = WorkloadConfig.model_validate({"arrival": {"kind": "trace", "path": "burst.csv", "format": "burstgpt",
                                                     "speedup": 10, "image": {"width": 64, "height": 64}}})
    with pytest.raises(UserError, match="burst.csv:2: Request tokens: must be >= 0"):
        generate_requests(cfg, MODEL, 0, tmp_path)
    with pytest.raises(Exception, match="format"):
        WorkloadConfig.model_validate({"arrival": {"kind": "trace", "path": "x.csv", "format": "sharegpt"}})
    scn = (ROOT / "scenarios" / "trace-replay.yaml").read_text().replace(
        "traces/quickstart-100.jsonl", str(tmp_path / "burst.csv"))
    (tmp_path / "s.yaml").write_text(scn)
    assert_user_error(capsys, ["run", tmp_path / "s.yaml", "-o", tmp_path / "out"], "burst.csv:2",
                      "Request tokens", "expected columns")


def test_replay_scenario_on_imported_trace(tmp_path, capsys):
    write(tmp_path, "mc.jsonl", MOONCAKE)
    scn = (ROOT / "scenarios" / "trace-replay.yaml").read_text().replace(
        "traces/quickstart-100.jsonl", str(tmp_path / "mc.jsonl"))
    (tmp_path / "s.yaml").write_text(scn)
    code, out, err = run_cli(capsys, "run", tmp_path / "s.yaml", "-o", tmp_path / "out", "-q")
    assert code == 0, err
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["num_finished"] == 3


@pytest.mark.parametrize("fmt, keys", [("vllm-dataset", {"prompt", "output_tokens"}),
                                       ("guidellm", {"prompt", "prompt_tokens_count", "output_tokens_count"})])
def test_workload_export_for_benchmark_tools(tmp_path, capsys, fmt, keys):
    out = tmp_path / "data.jsonl"
    code, stdout, err = run_cli(capsys, "workload", ROOT / "scenarios" / "quickstart.yaml", "--set",
                                "workload.num_requests=30", "--format", fmt, "-o", out)
    assert code == 0, err
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 30 and all(set(r) == keys for r in rows)
    from lmmsim import catalog
    from lmmsim.scenario import load_scenario

    scn, base = load_scenario(ROOT / "scenarios" / "quickstart.yaml", ["workload.num_requests=30"])
    reqs = generate_requests(scn.workload, catalog.get_model(scn.model), scn.seed, base)
    for r, row in zip(reqs, rows):
        assert len(row["prompt"].split()) == max(r.num_text_tokens, 1)
        assert row.get("output_tokens", row.get("output_tokens_count")) == r.num_output_tokens
    assert len({row["prompt"][:40] for row in rows}) == 30  # no shared prefixes
    if any(r.media_segments for r in reqs):
        assert "carry media" in err
    assert_user_error(capsys, ["workload", ROOT / "scenarios" / "quickstart.yaml", "--format", fmt,
                               "-o", tmp_path / "x.csv"], "-o", ".jsonl")


@pytest.mark.skipif(not REAL.is_dir(), reason="needs ../shared/data/traces/ (real Azure and Mooncake traces)")
def test_real_traces_replay():
    """Opt-in: the real Azure 2023 and Mooncake FAST'25 files parse, and a window of each runs."""
    from lmmsim import catalog
    from lmmsim.build import build
    from lmmsim.scenario import load_scenario

    model = catalog.get_model("llama-3-8b")
    for name, fmt in (("azure-llm-2023-code.csv", "azure"), ("azure-llm-2023-conv.csv", "azure"),
                      ("mooncake-fast25-conversation.jsonl", "mooncake"),
                      ("mooncake-fast25-synthetic.jsonl", "mooncake")):
        path = REAL / name
        if not path.exists():
            continue
        assert detect_format(path) == fmt
        rs = read_any_trace(path, model)
        assert len(rs) > 1000 and all(a.arrived_at <= b.arrived_at for a, b in zip(rs, rs[1:]))
        if fmt == "mooncake":
            assert all(r.prefix_hash_ids for r in rs)
        scn, base = load_scenario(ROOT / "scenarios" / "trace-replay.yaml", [
            "model=llama-3-8b", f"workload.arrival.path={path}", "workload.arrival.start_s=600",
            "workload.arrival.duration_s=20"])
        result = build(scn, base).simulation.run()
        assert any(s.status == "finished" for s in result.seqs)

"""Trace files: round trips, hand-written traces, and row errors keyed ``file:line``."""

from __future__ import annotations

import json

import pytest

from lmmsim.errors import UserError
from lmmsim.workload.config import WorkloadConfig
from lmmsim.workload.generator import generate_requests
from lmmsim.workload.request import MediaItem, Request, build_segments
from lmmsim.workload.trace import read_trace, write_trace

from conftest import FakeModel


MODEL = FakeModel()

MIXED = WorkloadConfig.model_validate({
    "num_requests": 300,
    "arrival": {"kind": "gamma", "rate": 3.0, "cv": 2.0},
    "mix": [
        {"name": "chat", "weight": 3, "text_tokens": {"kind": "lognormal", "mean": 400, "sigma": 1.0}},
        {"name": "photo", "weight": 2, "text_tokens": {"kind": "uniform", "low": 10, "high": 200},
         "images": {"count": 3, "width": 1024, "height": 768}},
        {"name": "clip", "weight": 1, "text_tokens": {"kind": "fixed", "value": 64},
         "video": {"frames": 16, "width": 384, "height": 384}, "layout": "text_first"},
        {"name": "speech", "weight": 1, "text_tokens": {"kind": "fixed", "value": 8},
         "audio": {"seconds": {"kind": "uniform", "low": 1, "high": 40}},
         "output_tokens": {"kind": "fixed", "value": 32}},
        {"name": "av", "weight": 1, "text_tokens": {"kind": "fixed", "value": 5},
         "video": {"frames": 8, "width": 224, "height": 224}, "audio": {"seconds": 7.25}},
    ],
    "output_tokens": {"kind": "lognormal", "mean": 200, "sigma": 0.6},
})


def write(path, text):
    path.write_text(text)
    return path


def key_of(call) -> str:
    with pytest.raises(UserError) as info:
        call()
    return info.value.key, info.value.message


# ---------------------------------------------------------------- round trip
@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_round_trip_is_exact(tmp_path, suffix):
    original = generate_requests(MIXED, MODEL, seed=11)
    assert {r.class_name for r in original} == {"chat", "photo", "clip", "speech", "av"}
    path = tmp_path / f"trace{suffix}"
    write_trace(original, path)
    back = read_trace(path, MODEL)
    assert back == original
    assert [r.arrived_at for r in back] == [r.arrived_at for r in original]  # bit-exact floats


def test_round_trip_keeps_zero_text_and_awkward_floats(tmp_path):
    image = MODEL.image_item(640, 480)
    image = MediaItem(image.modality, image.num_llm_tokens, image.encoder, (640, 480))
    reqs = [
        Request(0, 0.1 + 0.2, "image", "a,b \"quoted\"", build_segments([image]), 5),
        Request(1, 1 / 3, "text", "t", build_segments([17]), 1),
    ]
    for suffix in (".csv", ".jsonl"):
        write_trace(reqs, tmp_path / f"t{suffix}")
        assert read_trace(tmp_path / f"t{suffix}", MODEL) == reqs


def test_write_keeps_interleaved_and_rejects_other_layouts(tmp_path):
    image = read_trace(write(tmp_path / "one.jsonl", json.dumps(
        {"timestamp": 0, "text_tokens": 0, "output_tokens": 1,
         "media": [{"type": "image", "width": 28, "height": 28}]}) + "\n"), MODEL)[0].segments[0].item
    even = Request(0, 0.0, "image", "x", build_segments([5, image, 5]), 3)  # the interleaved layout
    write_trace([even], tmp_path / "even.jsonl")
    assert read_trace(tmp_path / "even.jsonl", MODEL)[0].segments == even.segments
    uneven = Request(0, 0.0, "image", "x", build_segments([5, image, 1]), 3)
    with pytest.raises(ValueError, match="none of media_first, text_first, interleaved"):
        write_trace([uneven], tmp_path / "out.jsonl")


# ------------------------------------------------------ hand-written traces
def test_read_jsonl_by_hand(tmp_path):
    path = write(tmp_path / "t.jsonl", "\n".join([
        '{"timestamp": 0.5, "text_tokens": 80, "output_tokens": 128}',
        "",
        '{"timestamp": 1.5, "text_tokens": 20, "output_tokens": 64, "class_name": "vqa", "layout": "text_first",'
        ' "media": [{"type": "image", "width": 1024, "height": 768}]}',
        '{"timestamp": 1.5, "modality": "audio", "text_tokens": 0, "output_tokens": 9,'
        ' "media": [{"type": "audio", "seconds": 12.5}]}',
    ]) + "\n")
    a, b, c = read_trace(path, MODEL, speedup=2.0)
    assert [r.request_id for r in (a, b, c)] == [0, 1, 2]
    assert (a.arrived_at, a.modality, a.class_name, a.num_prompt_tokens) == (0.25, "text", "trace", 80)
    assert (b.arrived_at, b.modality, b.class_name) == (0.75, "image", "vqa")
    assert b.segments[0].item is None and b.segments[1].item.source == (1024, 768)
    assert b.num_mm_tokens == 37 * 28 and b.num_output_tokens == 64
    assert c.modality == "audio" and c.num_text_tokens == 0 and c.media_segments[0].item.source == (12.5,)
    assert len(read_trace(path, MODEL, limit=2)) == 2


def test_read_csv_by_hand(tmp_path):
    path = write(tmp_path / "t.csv", (
        "timestamp,text_tokens,output_tokens,media\n"
        "0,100,10,\n"
        '2.0,5,20,"[{""type"": ""video"", ""frames"": 32, ""width"": 384, ""height"": 384}]"\n'
    ))
    a, b = read_trace(path, MODEL)
    assert a.modality == "text" and a.num_prompt_tokens == 100
    assert b.modality == "video" and b.media_segments[0].item.source == (32, 384, 384)


# ------------------------------------------------------------------- errors
GOOD = {"timestamp": 1.0, "text_tokens": 10, "output_tokens": 5}


def jsonl(tmp_path, *rows):
    lines = [r if isinstance(r, str) else json.dumps(r) for r in rows]
    return write(tmp_path / "t.jsonl", "\n".join(lines) + "\n")


@pytest.mark.parametrize(
    "bad, words",
    [
        ({**GOOD, "text_tokens": "many"}, "text_tokens: not a number"),
        ({**GOOD, "text_tokens": 2.5}, "text_tokens: expected a whole number"),
        ({**GOOD, "output_tokens": 0}, "output_tokens: must be >= 1"),
        ({**GOOD, "timestamp": -1}, "timestamp: must be >= 0"),
        ({"timestamp": 1.0, "text_tokens": 10}, "missing output_tokens"),
        ({**GOOD, "speed": 3}, "unknown field 'speed'"),
        ({**GOOD, "media": "[{'type': 'image'"}, "media: invalid JSON"),
        ({**GOOD, "media": [{"type": "hologram"}]}, "media[0].type: expected one of"),
        ({**GOOD, "media": [{"type": "image", "width": 10}]}, "media[0]: image needs 'height'"),
        ({**GOOD, "media": [{"type": "image", "width": 0, "height": 5}]}, "media[0].width: must be >= 1"),
        ({**GOOD, "media": [{"type": "audio", "seconds": 0}]}, "media[0].seconds: must be > 0"),
        ({**GOOD, "modality": "image"}, "modality: 'image' does not match the media"),
        ({**GOOD, "layout": "sideways"}, "layout: expected one of"),
        ({**GOOD, "text_tokens": 0}, "empty prompt"),
        ({**GOOD, "timestamp": 0.5}, "timestamp 0.5 is before the previous row's 1.0"),
        ("{not json", "invalid JSON"),
        ("[1, 2]", "expected a JSON object"),
    ],
)
def test_jsonl_row_errors_are_keyed_by_line(tmp_path, bad, words):
    path = jsonl(tmp_path, GOOD, "", bad, GOOD)
    key, message = key_of(lambda: read_trace(path, MODEL))
    assert key == f"{path}:3"
    assert words in message


@pytest.mark.parametrize(
    "row, words",
    [
        ("abc,10,5,", "timestamp: not a number: 'abc'"),
        ("2.0,,5,", "missing text_tokens"),
        ('2.0,10,5,"[{""type"": ""image"", ""width"": 3"', "media: invalid JSON"),
        ("0.5,10,5,", "is before the previous row's"),
        ("2.0,10,5", "expected 4 columns, got 3"),
    ],
)
def test_csv_row_errors_are_keyed_by_line(tmp_path, row, words):
    path = write(tmp_path / "t.csv", f"timestamp,text_tokens,output_tokens,media\n1.0,10,5,\n{row}\n3.0,1,1,\n")
    key, message = key_of(lambda: read_trace(path, MODEL))
    assert key == f"{path}:3"
    assert words in message


def test_csv_header_errors_are_line_one(tmp_path):
    path = write(tmp_path / "t.csv", "timestamp,text_tokens,output_tokens,colour\n1,1,1,red\n")
    key, message = key_of(lambda: read_trace(path, MODEL))
    assert key == f"{path}:1" and "unknown column 'colour'" in message
    path = write(tmp_path / "u.csv", "timestamp,text_tokens\n1,1\n")
    assert key_of(lambda: read_trace(path, MODEL)) == (f"{path}:1", "missing column 'output_tokens'")


def test_unsupported_medium_is_a_row_error(tmp_path):
    path = jsonl(tmp_path, GOOD, {**GOOD, "media": [{"type": "audio", "seconds": 3}]})
    key, message = key_of(lambda: read_trace(path, FakeModel(("text", "image"))))
    assert key == f"{path}:2" and "does not take audio" in message


def test_file_level_errors(tmp_path):
    assert key_of(lambda: read_trace(tmp_path / "nope.jsonl", MODEL)) == (
        str(tmp_path / "nope.jsonl"), "trace file not found")
    key, message = key_of(lambda: read_trace(write(tmp_path / "t.txt", "x"), MODEL))
    assert key == str(tmp_path / "t.txt") and "use a .jsonl or .csv file" in message
    key, message = key_of(lambda: read_trace(write(tmp_path / "e.jsonl", "\n"), MODEL))
    assert message == "trace file has no requests"
    key, message = key_of(lambda: read_trace(write(tmp_path / "e.csv", ""), MODEL))
    assert key == f"{tmp_path / 'e.csv'}:1"

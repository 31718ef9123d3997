"""Repeated media in workloads: the generator's ``reuse`` key, media ids in traces, and
the cache counters a run reports."""

from __future__ import annotations

import json

import pytest
import yaml

from lmmsim.errors import UserError
from lmmsim.results import run_scenario
from lmmsim.scenario import load_scenario, validate_scenario
from lmmsim.workload.config import WorkloadConfig
from lmmsim.workload.generator import generate_requests
from lmmsim.workload.trace import read_trace, write_trace

from conftest import FakeModel, assert_user_error

MODEL = FakeModel()

BASE = {
    "num_requests": 3000,
    "arrival": {"kind": "poisson", "rate": 5.0},
    "mix": [
        {"name": "chat", "weight": 2, "text_tokens": {"kind": "lognormal", "mean": 300, "sigma": 0.8}},
        {"name": "photo", "weight": 2, "text_tokens": {"kind": "fixed", "value": 50},
         "images": {"count": 2, "width": 640, "height": 480}},
        {"name": "speech", "weight": 1, "text_tokens": {"kind": "fixed", "value": 8},
         "audio": {"seconds": {"kind": "uniform", "low": 1, "high": 30}}},
    ],
}


def workload(reuse=None, per_class=None, **extra):
    raw = json.loads(json.dumps({**BASE, **extra}))
    if reuse is not None:
        raw["reuse"] = reuse
    for name, spec in (per_class or {}).items():
        next(c for c in raw["mix"] if c["name"] == name)["reuse"] = spec
    return WorkloadConfig.model_validate(raw)


def items_of(requests, class_name=None):
    return [s.item for r in requests if class_name in (None, r.class_name) for s in r.media_segments]


def repeated_share(items) -> float:
    """Share of the items whose id an earlier item carried."""
    seen: set = set()
    repeats = 0
    for it in items:
        repeats += it.media_id in seen
        seen.add(it.media_id)
    return repeats / len(items)


# --------------------------------------------------------------------- generator
def test_reuse_off_or_zero_leaves_requests_identical():
    plain = generate_requests(workload(), MODEL, seed=3)
    assert all(it.media_id is None for it in items_of(plain))
    for cfg in (workload(reuse={"probability": 0.0}), workload(per_class={"photo": {"probability": 0}}),
                workload(reuse={"probability": 0, "popularity": "zipf", "window": 5})):
        assert generate_requests(cfg, MODEL, seed=3) == plain


@pytest.mark.parametrize("p", [0.2, 0.5, 0.9])
def test_about_p_of_the_items_repeat_and_nothing_else_moves(p):
    plain = generate_requests(workload(), MODEL, seed=7)
    reused = generate_requests(workload(reuse={"probability": p}), MODEL, seed=7)
    for name in ("photo", "speech"):
        items = items_of(reused, name)
        # ~2,400 photo items, ~600 clips: binomial sd <= 0.02; the bound is 4 sd
        assert repeated_share(items) == pytest.approx(p, abs=0.08 if name == "speech" else 0.04)
    # arrivals, classes, text and output lengths are drawn as without reuse
    for a, b in zip(plain, reused):
        assert (a.arrived_at, a.class_name, a.num_text_tokens, a.num_output_tokens) == \
               (b.arrived_at, b.class_name, b.num_text_tokens, b.num_output_tokens)


def test_a_copy_has_its_originals_shape_and_new_items_keep_theirs():
    plain = generate_requests(workload(), MODEL, seed=1)
    reused = generate_requests(workload(reuse={"probability": 0.6}), MODEL, seed=1)
    by_id: dict = {}
    for it in items_of(reused):
        first = by_id.setdefault(it.media_id, it)
        assert (it.modality, it.source, it.num_llm_tokens, it.encoder) == \
               (first.modality, first.source, first.num_llm_tokens, first.encoder)
    # the first item of each id is the one the workload drew there
    fresh = {}
    for a, b in zip(items_of(plain), items_of(reused)):
        if b.media_id not in fresh:
            fresh[b.media_id] = True
            assert (a.source, a.num_llm_tokens) == (b.source, b.num_llm_tokens)
    assert any(it.media_id.startswith("speech/audio/") for it in items_of(reused))


def test_reuse_is_deterministic_and_per_class():
    cfg = workload(reuse={"probability": 0.5})
    one = generate_requests(cfg, MODEL, seed=4)
    assert generate_requests(cfg, MODEL, seed=4) == one
    assert [it.media_id for it in items_of(generate_requests(cfg, MODEL, seed=5))] != \
           [it.media_id for it in items_of(one)]
    # a class's own key wins; changing speech's reuse leaves photo's draws alone
    own = generate_requests(workload(reuse={"probability": 0.5}, per_class={"speech": {"probability": 0}}),
                            MODEL, seed=4)
    assert all(it.media_id is None for it in items_of(own, "speech"))
    assert items_of(own, "photo") == items_of(one, "photo")


def test_window_and_zipf_favour_recent_items():
    def newest_share(spec):
        """Share of the copies that repeat the most recently introduced item."""
        newest, hits, copies = None, 0, 0
        seen: set = set()
        for it in items_of(generate_requests(workload(reuse=spec), MODEL, seed=2), "photo"):
            if it.media_id in seen:
                copies += 1
                hits += it.media_id == newest
            else:
                seen.add(it.media_id)
                newest = it.media_id
        return hits / copies

    assert newest_share({"probability": 0.5, "window": 1}) == 1.0
    assert newest_share({"probability": 0.5}) < 0.1  # uniform over ~1,200 items
    # Zipf with exponent 2: the newest has weight 1 / zeta(2) ~ 0.61
    assert newest_share({"probability": 0.5, "popularity": "zipf", "zipf_exponent": 2.0}) == \
        pytest.approx(0.61, abs=0.06)


def test_reuse_keys_are_validated():
    raw = {"model": "qwen2.5-vl-7b", "hardware": {"gpu": "h100-sxm-80gb"},
           "workload": {**BASE, "reuse": {"probability": 1.5}}}
    with pytest.raises(UserError) as info:
        validate_scenario(raw)
    assert info.value.key == "workload.reuse.probability"
    raw["workload"] = {"arrival": {"kind": "trace", "path": "t.jsonl"}, "reuse": {"probability": 0.5}}
    with pytest.raises(UserError) as info:
        validate_scenario(raw)
    assert info.value.key == "workload.reuse" and '"id"' in info.value.message


# ------------------------------------------------------------------------ traces
def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def row(t, *media):
    return {"timestamp": t, "text_tokens": 20, "output_tokens": 2, "media": list(media)}


IMG = {"type": "image", "width": 280, "height": 280}


def test_trace_media_ids_are_read_and_written_back(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [
        row(0.0, {**IMG, "id": "cat.jpg"}, {**IMG}),
        row(1.0, {**IMG, "id": "cat.jpg"}, {"type": "audio", "seconds": 2.5, "id": 17}),
    ])
    reqs = read_trace(path, MODEL)
    ids = [[s.item.media_id for s in r.media_segments] for r in reqs]
    assert ids == [["cat.jpg", None], ["cat.jpg", "17"]]
    for suffix in (".jsonl", ".csv"):
        write_trace(reqs, tmp_path / f"back{suffix}")
        assert read_trace(tmp_path / f"back{suffix}", MODEL) == reqs
    # generated reuse survives a trace round trip
    generated = generate_requests(workload(reuse={"probability": 0.5}, num_requests=200), MODEL, seed=0)
    write_trace(generated, tmp_path / "gen.jsonl")
    assert read_trace(tmp_path / "gen.jsonl", MODEL) == generated


@pytest.mark.parametrize("bad, words", [
    ({**IMG, "id": ""}, "media[0].id: expected a non-empty string"),
    ({**IMG, "id": 1.5}, "media[0].id: expected a non-empty string"),
    ({**IMG, "id": True}, "media[0].id: expected a non-empty string"),
    ({**IMG, "id": None}, "media[0].id: expected a non-empty string"),
    ({**IMG, "id": ["a"]}, "media[0].id: expected a non-empty string"),
    ({**IMG, "width": 560, "id": "cat"}, "media[0].id: 'cat' already names image (280, 280)"),
    ({**IMG, "hash": "x"}, "unknown key 'hash' for image"),
])
def test_malformed_media_ids_are_row_errors(tmp_path, bad, words):
    path = write_jsonl(tmp_path / "t.jsonl", [row(0.0, {**IMG, "id": "cat"}), row(1.0, bad)])
    with pytest.raises(UserError) as info:
        read_trace(path, MODEL)
    assert info.value.key == f"{path}:2"
    assert words in info.value.message


SCENARIO = {
    "name": "reuse", "seed": 0, "model": "llava-onevision-qwen2-7b",
    "hardware": {"gpu": "h100-sxm-80gb", "count": 1},
    "deployment": {"kind": "monolithic", "max_model_len": 8192},
    "workload": {"arrival": {"kind": "trace", "path": "t.jsonl"}},
    "host": {"processor_cache": {"capacity_gib": 0}},  # the encoder cache alone
}


def test_a_bad_media_id_fails_the_run_with_one_line(tmp_path, capsys):
    write_jsonl(tmp_path / "t.jsonl", [row(0.0, {**IMG, "id": "cat"}), row(1.0, {**IMG, "id": 2.5})])
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(SCENARIO))
    assert_user_error(capsys, ["workload", tmp_path / "s.yaml", "-o", tmp_path / "out.jsonl"], "t.jsonl:2",
                      "media[0].id: expected a non-empty string")


@pytest.mark.parametrize("deployment", [
    {"kind": "monolithic", "max_model_len": 8192},
    {"kind": "e_pd", "max_model_len": 8192, "llm": {"workers": 1}},
])
def test_a_run_counts_encoder_cache_hits(tmp_path, deployment):
    write_jsonl(tmp_path / "t.jsonl", [row(0.0, {**IMG, "id": "cat"}), row(2.0, {**IMG, "id": "cat"}),
                                       row(4.0, {**IMG})])
    scn = {**SCENARIO, "deployment": deployment, "hardware": {"gpu": "h100-sxm-80gb", "count": 2}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(scn))
    scenario, base = load_scenario(tmp_path / "s.yaml")
    out = run_scenario(scenario, base)
    stats = out.summary["encoder_cache"]
    assert (stats["hits"], stats["misses"], stats["caches"]) == (1, 2, 1)
    df = out.requests.set_index("request_id")
    encode = df.encode_finished_at - df.encode_started_at
    assert encode[1] == 0.0 and encode[0] > 0 and encode[2] == pytest.approx(encode[0])
    assert df.ttft_s[1] == pytest.approx(df.ttft_s[0] - encode[0])
    # off: every item encoded
    (tmp_path / "off.yaml").write_text(yaml.safe_dump(
        {**scn, "deployment": {**deployment, "encoder_cache_tokens": 0}}))
    scenario, base = load_scenario(tmp_path / "off.yaml")
    assert run_scenario(scenario, base).summary["encoder_cache"]["hits"] == 0

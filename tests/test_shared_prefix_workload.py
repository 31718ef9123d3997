"""Shared system prompts, multi-turn conversations and the infinite-cache hit rate."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from lmmsim.errors import UserError
from lmmsim.workload.config import WorkloadConfig
from lmmsim.workload.generator import generate_requests
from lmmsim.workload.request import content_runs
from lmmsim.workload.shared_prefix import infinite_cache_hit_tokens, infinite_cache_hits
from lmmsim.workload.trace import read_trace, write_trace

from conftest import FakeModel

CHAT = {"name": "chat", "weight": 1, "text_tokens": {"kind": "uniform", "low": 20, "high": 200}}


def workload(*classes, n=200, rate=2.0, **extra) -> WorkloadConfig:
    return WorkloadConfig.model_validate({"num_requests": n, "arrival": {"kind": "poisson", "rate": rate},
                                          "mix": list(classes),
                                          "output_tokens": {"kind": "uniform", "low": 5, "high": 50}, **extra})


def make(cfg, seed=0):
    return generate_requests(cfg, FakeModel(), seed)


def test_system_prompt_is_shared_within_a_variant():
    cfg = workload({**CHAT, "system_prompt": {"tokens": 700, "variants": 3}})
    reqs = make(cfg)
    plain = make(workload(CHAT))
    by_variant: dict = {}
    for r, p in zip(reqs, plain):
        (key, tokens), = r.shared_content
        assert key[0] == "system" and key[1] == "chat" and tokens == 700
        by_variant.setdefault(key, []).append(r)
        # the system prompt comes on top of the user's own text, which is unchanged
        assert r.num_prompt_tokens == p.num_prompt_tokens + 700
        assert (r.arrived_at, r.num_output_tokens) == (p.arrived_at, p.num_output_tokens)
        assert content_runs(r) == r.shared_content
    assert sorted(k[2] for k in by_variant) == [0, 1, 2]
    assert all(len(v) > 30 for v in by_variant.values())  # uniform over 3 variants, 200 requests


def test_system_prompt_pools_by_name_across_classes():
    image = {"name": "image", "weight": 1, "text_tokens": {"kind": "fixed", "value": 30},
             "images": {"count": 1, "width": 448, "height": 448}, "layout": "text_first",
             "system_prompt": {"tokens": 500, "name": "assistant"}}
    text = {**CHAT, "system_prompt": {"tokens": 500, "name": "assistant"}}
    reqs = make(workload(text, image))
    keys = {r.shared_content[0][0] for r in reqs}
    assert keys == {("system", "assistant", 0)}
    img = next(r for r in reqs if r.class_name == "image")
    # text_first: the system prompt joins the leading text segment, then the image
    assert img.segments[0].item is None and img.segments[0].length == 530
    assert img.segments[1].item is not None
    with pytest.raises(ValidationError, match="same tokens and variants"):
        workload(text, {**image, "system_prompt": {"tokens": 400, "name": "assistant"}})


def test_without_the_keys_requests_are_unchanged():
    """No extra draws: a class without the keys generates what it did before, even next to one with them."""
    other = {"name": "other", "weight": 1, "text_tokens": {"kind": "fixed", "value": 10}}
    base = make(workload(CHAT, other))
    with_sys = make(workload(CHAT, {**other, "system_prompt": {"tokens": 100, "variants": 2}}))
    for a, b in zip(base, with_sys):
        assert (a.arrived_at, a.class_name, a.num_output_tokens) == (b.arrived_at, b.class_name, b.num_output_tokens)
        if a.class_name == "chat":
            assert a == b


CONV = {**CHAT, "system_prompt": {"tokens": 300, "variants": 2},
        "conversation": {"turns": {"kind": "uniform", "low": 1, "high": 6}, "turn_gap_s": 20}}


def _by_conversation(reqs):
    out: dict = {}
    for r in reqs:
        user = [k for k, _ in r.shared_content if k[0] == "conversation"]
        out.setdefault(user[0][1], []).append(r)
    return out


def test_conversation_turns_resend_the_history_in_order():
    reqs = make(workload(CONV, n=300, rate=0.5))
    convs = _by_conversation(reqs)
    assert max(len(v) for v in convs.values()) >= 4
    for c, turns in convs.items():
        for t, r in enumerate(turns):
            runs = r.shared_content
            assert sum(n for _, n in runs) == r.num_prompt_tokens  # the whole text prompt is keyed
            assert runs[0][0][0] == "system"
            keys = [k for k, _ in runs[1:]]
            expect = [("conversation", c, 0, "user")]
            for j in range(1, t + 1):
                expect += [("conversation", c, j - 1, "answer"), ("conversation", c, j, "user")]
            assert keys == expect
            if t:
                prev = turns[t - 1]
                # the previous turn's runs, in order, then its answer and the new message
                assert runs[:len(prev.shared_content)] == prev.shared_content
                answer, user = runs[len(prev.shared_content):]
                assert answer == (("conversation", c, t - 1, "answer"), prev.num_output_tokens)
                assert r.num_prompt_tokens == prev.num_prompt_tokens + prev.num_output_tokens + user[1]
                assert r.arrived_at == pytest.approx(prev.arrived_at + 20.0)
                assert r.request_id > prev.request_id
            if t + 1 < len(turns):  # a later turn resends its answer: it is keyed
                assert r.answer_content == ("conversation", c, t, "answer")
    # a conversation's last turn has no later prompt to repeat its answer: not keyed (the
    # prefix cache would keep blocks no one can hit). One-turn conversations, whose second turn
    # would have been kept (it would arrive 20 s later, before the last kept request), are such turns
    single = [v[0] for v in convs.values() if len(v) == 1 and v[0].arrived_at + 20.0 < reqs[-1].arrived_at]
    assert single and all(r.answer_content is None for r in single)


def test_conversation_ids_follow_arrivals_and_count_turns():
    reqs = make(workload(CONV, n=150, rate=1.0))
    assert len(reqs) == 150
    assert [r.request_id for r in reqs] == list(range(150))
    assert all(a.arrived_at <= b.arrived_at for a, b in zip(reqs, reqs[1:]))
    assert sum(1 for r in reqs if len(r.shared_content) > 2) > 20  # follow-up turns are there
    dur = WorkloadConfig.model_validate({**workload(CONV).model_dump(), "num_requests": None, "duration_s": 60.0})
    assert all(r.arrived_at < 60.0 for r in make(dur))


def test_first_turns_are_the_plain_requests():
    plain = make(workload({**CHAT, "system_prompt": CONV["system_prompt"]}, n=100, rate=0.01))
    conv = make(workload(CONV, n=100, rate=0.01))  # gaps of 20 s << 100 s between starts
    firsts = [r for r in conv if len(r.shared_content) == 2]
    assert [(r.arrived_at, r.num_prompt_tokens, r.num_output_tokens) for r in firsts[:20]] == \
        [(r.arrived_at, r.num_prompt_tokens, r.num_output_tokens) for r in plain[:20]]


def test_conversation_media_keep_one_id_through_the_history():
    image = {"name": "image", "weight": 1, "text_tokens": {"kind": "fixed", "value": 30},
             "images": {"count": 1, "width": 448, "height": 448},
             "conversation": {"turns": 3, "turn_gap_s": 5}}
    reqs = make(workload(image, n=30, rate=0.05))
    convs = _by_conversation(reqs)
    for c, turns in convs.items():
        ids = {s.item.media_id for r in turns for s in r.media_segments}
        assert ids == {f"conversation/{c}/0"}
        assert all(r.num_mm_tokens == turns[0].num_mm_tokens for r in turns)


def test_same_seed_same_requests():
    cfg = workload(CONV, {**CHAT, "name": "solo", "system_prompt": {"tokens": 50, "variants": 4}})
    assert make(cfg, 7) == make(cfg, 7)
    assert make(cfg, 7) != make(cfg, 8)


def test_conversation_refuses_closed_loop():
    with pytest.raises(ValidationError, match="closed_loop"):
        WorkloadConfig.model_validate({"num_requests": 10, "arrival": {"kind": "closed_loop", "concurrency": 2},
                                       "mix": [CONV]})


def test_infinite_cache_hits_on_hand_built_hash_ids():
    hashes = [
        [0, 1, 2],      # all new
        [0, 1, 3],      # 0, 1 seen
        [0, 4],         # 0 seen
        [5, 1, 2],      # 1, 2 were seen but under another prefix: misses
        [0, 1, 3, 6],   # 0, 1, 3 seen
        [],
    ]
    assert infinite_cache_hits(hashes) == (2 + 1 + 0 + 3, 3 + 3 + 2 + 3 + 4)
    assert infinite_cache_hits([]) == (0, 0)


def test_infinite_cache_hit_tokens_reads_content_runs():
    reqs = make(workload(CONV, n=120, rate=0.5))
    hit, total = infinite_cache_hit_tokens(reqs)
    assert total == sum(r.num_prompt_tokens for r in reqs)
    # reference: a run hits when the chain of keys up to it was seen in an earlier request
    # (and, once a request is done, its prompt's chain followed by its answer's key)
    expect = 0
    seen: set = set()
    for r in reqs:
        prefix = ()
        for key, n in r.shared_content:
            prefix += (key,)
            if prefix in seen:
                expect += n
            seen.add(prefix)
        if r.answer_content is not None:
            seen.add(prefix + (r.answer_content,))
    assert hit == expect and 0 < hit < total
    assert any(r.answer_content is not None for r in reqs)


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_traces_carry_shared_content(tmp_path, suffix):
    image = {"name": "image", "weight": 1, "text_tokens": {"kind": "fixed", "value": 30},
             "images": {"count": 1, "width": 448, "height": 448},  # media_first: system text, image, text
             "system_prompt": {"tokens": 500, "variants": 2}, "conversation": {"turns": 2, "turn_gap_s": 3}}
    reqs = make(workload(CONV, image, n=60, rate=0.5))
    path = tmp_path / f"t{suffix}"
    write_trace(reqs, path)
    assert read_trace(path, FakeModel()) == reqs


def test_trace_shared_field_is_checked(tmp_path):
    path = tmp_path / "t.jsonl"
    row = {"timestamp": 0, "text_tokens": 10, "output_tokens": 1}
    for extra, message in [({"shared": [[["s"], 11]]}, "more than the prompt"),
                           ({"shared": [["s", 3]]}, "each run is"),
                           ({"lead_text": 11}, "more than text_tokens")]:
        path.write_text(json.dumps({**row, **extra}) + "\n")
        with pytest.raises(UserError, match=message):
            read_trace(path, FakeModel())

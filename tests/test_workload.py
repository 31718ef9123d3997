"""Workload config, length distributions, arrival processes and the request generator."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from pydantic import TypeAdapter, ValidationError

from lmmsim.errors import UserError
from lmmsim.workload.arrivals import DeterministicArrival, GammaArrival, PoissonArrival
from lmmsim.workload.config import ArrivalProcess, LengthDist, WorkloadConfig
from lmmsim.workload.distributions import FixedDist, LognormalDist, UniformDist
from lmmsim.workload.generator import generate_requests
from lmmsim.workload.trace import write_trace

from conftest import FakeModel


def rng(seed=0):
    return np.random.default_rng(seed)


def dist(spec) -> object:
    return TypeAdapter(LengthDist).validate_python(spec)


def arrival(spec) -> object:
    return TypeAdapter(ArrivalProcess).validate_python(spec)


MIX = [
    {"name": "short_text", "weight": 0.4, "text_tokens": {"kind": "lognormal", "mean": 300, "sigma": 0.8}},
    {"name": "long_text", "weight": 0.3, "text_tokens": {"kind": "uniform", "low": 1024, "high": 8192}},
    {"name": "image", "weight": 0.2, "text_tokens": {"kind": "fixed", "value": 100},
     "images": {"count": 2, "width": 1024, "height": 768}},
    {"name": "video", "weight": 0.1, "text_tokens": {"kind": "fixed", "value": 100},
     "video": {"frames": 32, "width": 384, "height": 384}, "layout": "text_first"},
]


def workload(**overrides) -> WorkloadConfig:
    spec = {"num_requests": 2000, "arrival": {"kind": "poisson", "rate": 4.0}, "mix": MIX,
            "output_tokens": {"kind": "lognormal", "mean": 256, "sigma": 0.7}}
    spec.update(overrides)
    return WorkloadConfig.model_validate(spec)


def errors_of(spec) -> list[dict]:
    with pytest.raises(ValidationError) as info:
        WorkloadConfig.model_validate(spec)
    return info.value.errors()


# ------------------------------------------------------------ distributions
def test_fixed_is_constant_and_rounded():
    d = dist({"kind": "fixed", "value": 100})
    out = d.sample(rng(), 5, Path("."))
    assert out.dtype == np.int64 and out.tolist() == [100] * 5
    assert dist({"kind": "fixed", "value": 12.5}).sample_float(rng(), 2).tolist() == [12.5, 12.5]


def test_uniform_integers_inclusive():
    out = dist({"kind": "uniform", "low": 3, "high": 7}).sample(rng(), 50_000)
    assert out.dtype == np.int64
    assert set(out.tolist()) == {3, 4, 5, 6, 7}
    assert out.mean() == pytest.approx(5.0, rel=0.01)


def test_lognormal_mean_is_the_mean():
    d = dist({"kind": "lognormal", "mean": 300, "sigma": 0.8})
    out = d.sample(rng(), 200_000)
    assert out.mean() == pytest.approx(300, rel=0.02)
    assert out.min() >= 1
    # The median is mean * exp(-sigma^2 / 2), not the mean.
    assert np.median(out) == pytest.approx(300 * math.exp(-0.32), rel=0.02)
    floats = d.sample_float(rng(1), 200_000)
    assert floats.mean() == pytest.approx(300, rel=0.02)


def test_lognormal_bounds_clip():
    out = dist({"kind": "lognormal", "mean": 100, "sigma": 1.5, "min": 20, "max": 150}).sample(rng(), 20_000)
    assert out.min() == 20 and out.max() == 150


def test_normal_mean_and_floor():
    out = dist({"kind": "normal", "mean": 500, "std": 50}).sample(rng(), 100_000)
    assert out.mean() == pytest.approx(500, rel=0.01)
    assert out.std() == pytest.approx(50, rel=0.03)
    wide = dist({"kind": "normal", "mean": 5, "std": 50}).sample(rng(), 10_000)
    assert wide.min() == 1  # clipped, never 0 or negative


def test_empirical_text_and_csv(tmp_path):
    (tmp_path / "lens.txt").write_text("# prompt lengths\n10\n\n20\n30.0\n")
    (tmp_path / "lens.csv").write_text("id,tokens\n1,7\n2,9\n")
    out = dist({"kind": "empirical", "path": "lens.txt"}).sample(rng(), 3000, tmp_path)
    assert set(out.tolist()) == {10, 20, 30}
    out = dist({"kind": "empirical", "path": "lens.csv", "column": "tokens"}).sample(rng(), 100, tmp_path)
    assert set(out.tolist()) == {7, 9}


def test_empirical_file_errors(tmp_path):
    (tmp_path / "bad.txt").write_text("10\nten\n")
    with pytest.raises(UserError) as info:
        dist({"kind": "empirical", "path": "bad.txt"}).sample(rng(), 3, tmp_path)
    assert info.value.key == f"{tmp_path / 'bad.txt'}:2"
    with pytest.raises(UserError, match="not found"):
        dist({"kind": "empirical", "path": "nope.txt"}).sample(rng(), 3, tmp_path)
    (tmp_path / "c.csv").write_text("a,b\n1,2\n")
    with pytest.raises(UserError, match="no column 'tokens'"):
        dist({"kind": "empirical", "path": "c.csv", "column": "tokens"}).sample(rng(), 3, tmp_path)


def test_empirical_reads_file_once(tmp_path, monkeypatch):
    import builtins

    (tmp_path / "lens.txt").write_text("5\n6\n")
    opened = []
    real_open = builtins.open
    monkeypatch.setattr(builtins, "open", lambda p, *a, **k: (opened.append(str(p)), real_open(p, *a, **k))[1])
    d = dist({"kind": "empirical", "path": "lens.txt"})
    for _ in range(3):
        d.sample(rng(), 10, tmp_path)
    assert opened.count(str(tmp_path / "lens.txt")) == 1


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"kind": "fixed", "value": 0}, "must be > 0"),
        ({"kind": "uniform", "low": 10, "high": 5}, "high must be >= low"),
        ({"kind": "lognormal", "mean": -1, "sigma": 1}, "must be > 0"),
        ({"kind": "lognormal", "mean": 100, "sigma": 1, "min": 50, "max": 10}, "max must be >= min"),
        ({"kind": "normal", "mean": 100, "std": -1}, "must be >= 0"),
        ({"kind": "poisson", "value": 3}, "does not match any of the expected tags"),
        ({"kind": "fixed", "value": 3, "extra": 1}, "Extra inputs are not permitted"),
    ],
)
def test_distribution_validation(spec, message):
    with pytest.raises(ValidationError, match=message):
        dist(spec)


# ----------------------------------------------------------------- arrivals
def test_poisson_rate_and_first_gap():
    times = arrival({"kind": "poisson", "rate": 5.0}).times(rng(), num_requests=100_000)
    gaps = np.diff(np.concatenate([[0.0], times]))
    assert times[0] > 0 and np.all(gaps >= 0)
    assert len(times) / times[-1] == pytest.approx(5.0, rel=0.02)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.03)


@pytest.mark.parametrize("cv", [0.5, 2.0, 4.0])
def test_gamma_cv_and_rate(cv):
    times = arrival({"kind": "gamma", "rate": 2.0, "cv": cv}).times(rng(), num_requests=200_000)
    gaps = np.diff(np.concatenate([[0.0], times]))
    assert gaps.mean() == pytest.approx(0.5, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.05)


def test_deterministic_is_exact():
    times = arrival({"kind": "deterministic", "rate": 4.0}).times(rng(), num_requests=5)
    assert times.tolist() == [0.25, 0.5, 0.75, 1.0, 1.25]
    assert arrival({"kind": "deterministic", "rate": 4.0}).times(rng(), duration_s=1.0).tolist() == [0.25, 0.5, 0.75]


def test_duration_stops_before_end():
    proc = arrival({"kind": "gamma", "rate": 50.0, "cv": 3.0})
    times = proc.times(rng(), duration_s=200.0)
    assert times[-1] < 200.0 and np.all(np.diff(times) >= 0)
    assert len(times) == pytest.approx(50 * 200, rel=0.15)
    assert len(proc.times(rng(), num_requests=10, duration_s=200.0)) == 10


def test_arrival_needs_a_size():
    with pytest.raises(ValueError):
        PoissonArrival(rate=1.0).times(rng())
    assert isinstance(arrival({"kind": "deterministic", "rate": 1}), DeterministicArrival)
    assert isinstance(arrival({"kind": "gamma", "rate": 1, "cv": 1}), GammaArrival)


# ------------------------------------------------------------ config checks
def test_example_config_parses_and_is_frozen():
    cfg = workload()
    assert cfg.arrival.rate == 4.0 and len(cfg.mix) == 4
    assert isinstance(cfg.mix[0].text_tokens, LognormalDist)
    assert isinstance(cfg.mix[1].text_tokens, UniformDist)
    assert cfg.mix[3].layout == "text_first" and cfg.mix[0].layout == "media_first"
    assert WorkloadConfig.model_validate({"num_requests": 1, "arrival": {"kind": "poisson", "rate": 1},
                                          "mix": MIX[:1]}).output_tokens == FixedDist(value=128)
    with pytest.raises(ValidationError):
        cfg.num_requests = 5


def test_audio_seconds_may_be_a_number():
    cfg = workload(mix=[{"name": "a", "weight": 1, "text_tokens": {"kind": "fixed", "value": 5},
                         "audio": {"seconds": 12.5}}])
    assert cfg.mix[0].audio.seconds == FixedDist(value=12.5)


@pytest.mark.parametrize(
    "overrides, loc, message",
    [
        ({"arrival": {"kind": "poisson", "rate": 0}}, ("arrival", "poisson", "rate"), "must be > 0"),
        ({"arrival": {"kind": "gamma", "rate": -2, "cv": 1}}, ("arrival", "gamma", "rate"), "must be > 0"),
        ({"arrival": {"kind": "gamma", "rate": 2, "cv": 0}}, ("arrival", "gamma", "cv"), "must be > 0"),
        ({"arrival": {"kind": "trace", "path": "t.csv", "speedup": 0}, "mix": []},
         ("arrival", "trace", "speedup"), "must be > 0"),
        ({"mix": []}, ("mix",), "must list at least one request class"),
        ({"mix": MIX[:2] + [dict(MIX[2], weight=0)]}, ("mix", 2, "weight"), "must be > 0"),
        ({"mix": MIX + [MIX[0]]}, ("mix",), "class names must be unique; 'short_text'"),
        ({"mix": [dict(MIX[2], images={"count": 0, "width": 5, "height": 5})]}, ("mix", 0, "images", "count"),
         "must be > 0"),
        ({"num_requests": 0}, ("num_requests",), "must be > 0"),
        ({"num_requests": None}, (), "give one of num_requests or duration_s"),
        ({"duration_s": 60.0}, (), "give num_requests or duration_s, not both"),
        ({"arrival": {"kind": "trace", "path": "t.csv"}}, ("mix",), "must be empty with a trace arrival"),
        ({"arrival": {"kind": "trace", "path": "t.csv"}, "mix": [], "output_tokens": {"kind": "fixed", "value": 9}},
         ("output_tokens",), "not used with a trace"),
    ],
)
def test_config_errors_name_the_key(overrides, loc, message):
    spec = {"num_requests": 100, "arrival": {"kind": "poisson", "rate": 4.0}, "mix": MIX}
    spec.update(overrides)
    errs = errors_of(spec)
    assert len(errs) == 1, errs
    assert errs[0]["loc"] == loc
    assert message in errs[0]["msg"]


def test_missing_mix_is_an_error():
    errs = errors_of({"num_requests": 10, "arrival": {"kind": "poisson", "rate": 1}})
    assert errs[0]["loc"] == ("mix",) and errs[0]["msg"] == "must list at least one request class"


def test_unknown_kind_and_unknown_key():
    errs = errors_of({"num_requests": 10, "arrival": {"kind": "bursty", "rate": 1}, "mix": MIX})
    assert errs[0]["type"] == "union_tag_invalid" and errs[0]["loc"] == ("arrival",)
    errs = errors_of({"num_requests": 10, "arrival": {"kind": "poisson", "rate": 1}, "mix": MIX, "seed": 3})
    assert errs[0]["type"] == "extra_forbidden" and errs[0]["loc"] == ("seed",)
    errs = errors_of({"num_requests": 10, "arrival": {"kind": "poisson", "rate": 1},
                      "mix": [dict(MIX[0], colour="red")]})
    assert errs[0]["loc"] == ("mix", 0, "colour")


def test_trace_needs_neither_size():
    cfg = WorkloadConfig.model_validate({"arrival": {"kind": "trace", "path": "t.jsonl"}})
    assert cfg.num_requests is None and cfg.mix == []
    cfg = WorkloadConfig.model_validate({"arrival": {"kind": "trace", "path": "t.jsonl"}, "num_requests": 5})
    assert cfg.num_requests == 5


# ---------------------------------------------------------------- generator
def test_same_seed_same_requests_different_seed_differs():
    cfg = workload()
    a = generate_requests(cfg, FakeModel(), seed=7)
    b = generate_requests(cfg, FakeModel(), seed=7)
    c = generate_requests(cfg, FakeModel(), seed=8)
    assert a == b
    assert [r.arrived_at for r in a] != [r.arrived_at for r in c]
    assert [r.class_name for r in a] != [r.class_name for r in c]


def test_ids_and_order():
    reqs = generate_requests(workload(), FakeModel(), seed=0)
    assert len(reqs) == 2000
    assert [r.request_id for r in reqs] == list(range(2000))
    times = [r.arrived_at for r in reqs]
    assert times == sorted(times) and times[0] > 0
    assert all(type(r.arrived_at) is float and type(r.num_output_tokens) is int for r in reqs)


def test_changing_the_mix_keeps_arrival_times():
    a = generate_requests(workload(), FakeModel(), seed=3)
    b = generate_requests(workload(mix=MIX[:2]), FakeModel(), seed=3)
    assert [r.arrived_at for r in a] == [r.arrived_at for r in b]


def test_class_weights_respected():
    reqs = generate_requests(workload(num_requests=20_000), FakeModel(), seed=1)
    counts = {c["name"]: 0 for c in MIX}
    for r in reqs:
        counts[r.class_name] += 1
    for c in MIX:
        assert counts[c["name"]] / len(reqs) == pytest.approx(c["weight"], abs=0.012)


def test_request_contents_follow_their_class():
    reqs = generate_requests(workload(), FakeModel(), seed=2)
    by_class = {}
    for r in reqs:
        by_class.setdefault(r.class_name, r)
    text = by_class["long_text"]
    assert text.modality == "text" and text.media_segments == () and 1024 <= text.num_prompt_tokens <= 8192
    img = by_class["image"]
    assert img.modality == "image"
    assert [s.item is not None for s in img.segments] == [True, True, False]  # media_first
    assert img.num_text_tokens == 100 and img.media_segments[0].item.source == (1024, 768)
    vid = by_class["video"]
    assert vid.modality == "video"
    assert [s.item is not None for s in vid.segments] == [False, True]  # text_first
    assert vid.segments[0].length == 100


def test_duration_honoured():
    cfg = workload(num_requests=None, duration_s=120.0)
    reqs = generate_requests(cfg, FakeModel(), seed=0)
    assert reqs[-1].arrived_at < 120.0
    assert len(reqs) == pytest.approx(4.0 * 120, rel=0.2)


def test_output_tokens_default_and_override():
    mix = [dict(MIX[0], weight=1, output_tokens={"kind": "fixed", "value": 7}),
           dict(MIX[1], weight=1)]
    cfg = workload(mix=mix, output_tokens={"kind": "fixed", "value": 99})
    reqs = generate_requests(cfg, FakeModel(), seed=0)
    assert {r.num_output_tokens for r in reqs if r.class_name == "short_text"} == {7}
    assert {r.num_output_tokens for r in reqs if r.class_name == "long_text"} == {99}


def test_media_items_memoised():
    model = FakeModel()
    generate_requests(workload(num_requests=5000), model, seed=0)
    assert model.calls == 2  # one image shape, one video shape


def test_audio_class():
    mix = [{"name": "speech", "weight": 1, "text_tokens": {"kind": "fixed", "value": 20},
            "audio": {"seconds": {"kind": "lognormal", "mean": 12, "sigma": 0.5}}}]
    reqs = generate_requests(workload(mix=mix), FakeModel(), seed=0)
    secs = [r.media_segments[0].item.source[0] for r in reqs]
    assert all(r.modality == "audio" for r in reqs)
    assert np.mean(secs) == pytest.approx(12, rel=0.05)
    assert all(s == round(s, 2) for s in secs)


@pytest.mark.parametrize("index, key", [(2, "workload.mix.2.images"), (3, "workload.mix.3.video")])
def test_unsupported_medium_names_the_class(index, key):
    model = FakeModel(modalities=("text", "video") if index == 2 else ("text", "image"))
    with pytest.raises(UserError) as info:
        generate_requests(workload(), model, seed=0)
    assert info.value.key == key and "does not take" in info.value.message


def test_unsupported_medium_fails_even_without_requests():
    mix = MIX[:1] + [{"name": "speech", "weight": 1e-9, "text_tokens": {"kind": "fixed", "value": 5},
                      "audio": {"seconds": 3}}]
    with pytest.raises(UserError) as info:
        generate_requests(workload(num_requests=3, mix=mix), FakeModel(("text",)), seed=0)
    assert info.value.key == "workload.mix.1.audio"


def test_empirical_lengths_relative_to_base_dir(tmp_path):
    (tmp_path / "lens.txt").write_text("11\n22\n")
    mix = [{"name": "t", "weight": 1, "text_tokens": {"kind": "empirical", "path": "lens.txt"}}]
    reqs = generate_requests(workload(mix=mix), FakeModel(), seed=0, base_dir=tmp_path)
    assert {r.num_prompt_tokens for r in reqs} == {11, 22}


def test_trace_arrival_replays_file(tmp_path):
    original = generate_requests(workload(num_requests=50), FakeModel(), seed=0)
    write_trace(original, tmp_path / "t.jsonl")
    cfg = WorkloadConfig.model_validate({"arrival": {"kind": "trace", "path": "t.jsonl"}})
    assert generate_requests(cfg, FakeModel(), seed=123, base_dir=tmp_path) == original
    cfg = WorkloadConfig.model_validate({"arrival": {"kind": "trace", "path": "t.jsonl", "speedup": 2.0},
                                         "num_requests": 10})
    fast = generate_requests(cfg, FakeModel(), seed=0, base_dir=tmp_path)
    assert len(fast) == 10
    assert [r.arrived_at for r in fast] == [r.arrived_at / 2.0 for r in original[:10]]
    cutoff = original[20].arrived_at
    cfg = WorkloadConfig.model_validate({"arrival": {"kind": "trace", "path": "t.jsonl"}, "duration_s": cutoff})
    assert generate_requests(cfg, FakeModel(), seed=0, base_dir=tmp_path) == original[:20]

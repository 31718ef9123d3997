"""RPS-Serve offline components: Workload Profiler, Impact Estimator, Request Classifier."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest

from lmmsim.build import simulate_requests
from lmmsim.errors import UserError
from lmmsim.rps.classifier import (
    Classifier,
    NaiveClassifier,
    RequestClassifier,
    class_names,
)
from lmmsim.rps.estimator import ImpactEstimator
from lmmsim.rps.profiler import (
    COLUMNS,
    profile_isolated,
    profiling_requests,
    read_measured,
)
from lmmsim.scenario import load_scenario
from lmmsim.workload.request import Request

SCENARIO = """
name: rps-small
seed: 3
system: vllm
model: llava-onevision-qwen2-7b
hardware: {gpu: h100-sxm-80gb, count: 1}
deployment: {kind: monolithic, tp: 1, max_model_len: 32768}
policy:
  batching: {kind: chunked_prefill, token_budget: 2048, max_running: 64}
workload:
  num_requests: 50
  arrival: {kind: poisson, rate: 20}
  mix:
    - {name: short_text, weight: 0.4, text_tokens: {kind: lognormal, mean: 300, sigma: 0.8, max: 1023}}
    - {name: long_text, weight: 0.3, text_tokens: {kind: uniform, low: 1025, high: 8192}}
    - name: image
      weight: 0.2
      text_tokens: {kind: uniform, low: 50, high: 1000}
      images: {count: 1, width: 1024, height: 768}
    - name: video
      weight: 0.1
      text_tokens: {kind: fixed, value: 100}
      video: {frames: 32, width: 384, height: 384}
  output_tokens: {kind: lognormal, mean: 256, sigma: 0.7, max: 2048}
"""


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    path = tmp_path_factory.mktemp("rps") / "small.yaml"
    path.write_text(SCENARIO)
    return load_scenario(path)


@pytest.fixture(scope="module")
def profile(small):
    scn, base = small
    return profile_isolated(scn, base, simulate=simulate_requests, num_requests=60)


def _alone(scn, base, request: Request) -> float:
    """First-token latency of ``request`` run on its own (FCFS, one output token)."""
    from lmmsim.build import build
    from lmmsim.policies.queueing import FcfsConfig

    scn = scn.model_copy(update={"policy": scn.policy.model_copy(update={"queue": FcfsConfig()})})
    solo = Request(request.request_id, 0.0, request.modality, request.class_name, request.segments, 1)
    seq = build(scn, base, requests=[solo]).simulation.run().seqs[0]
    return seq.first_token_at - solo.arrived_at


# ------------------------------------------------------------------ profiler
def test_profile_columns_and_isolation(small, profile):
    scn, base = small
    assert list(profile.columns[: len(COLUMNS)]) == list(COLUMNS)
    assert len(profile) == 60  # nothing is too long for max_model_len here
    assert profile.attrs["spacing_s"] == 60.0
    assert set(profile["modality"]) == {"text", "image", "video"}
    # Every row is what the request takes on an empty deployment.
    requests = {r.request_id: r for r in profiling_requests(scn, base, num_requests=60)}
    for modality in ("text", "image", "video"):
        row = profile[profile["modality"] == modality].iloc[-1]
        assert row["latency_s"] == pytest.approx(_alone(scn, base, requests[row["request_id"]]), rel=1e-9)
    text = profile[profile["modality"] == "text"]
    assert (text["encode_s"] == 0).all() and (text["media_tokens"] == 0).all() and (text["num_items"] == 0).all()
    media = profile[profile["modality"] != "text"]
    assert (media["encode_s"] > 0).all() and (media["num_items"] == 1).all()
    assert np.allclose(profile["prefill_s"] + profile["encode_s"], profile["latency_s"])
    assert (profile["prefill_tokens"] == profile["text_tokens"] + profile["media_tokens"]).all()


def test_profile_latency_ordering(profile):
    mean = profile.groupby("class_name")["latency_s"].mean()
    assert mean["video"] > mean["image"] > mean["short_text"]
    assert mean["long_text"] > mean["short_text"]
    # Longer prompts take longer (alone, prefill grows with the prompt).
    text = profile[profile["modality"] == "text"].sort_values("text_tokens")
    assert text["latency_s"].iloc[-1] > 5 * text["latency_s"].iloc[0]


def test_profile_is_deterministic(small, profile):
    scn, base = small
    again = profile_isolated(scn, base, simulate=simulate_requests, num_requests=60)
    pd.testing.assert_frame_equal(profile, again)
    other = profile_isolated(scn, base, simulate=simulate_requests, num_requests=60, seed_offset=1)
    assert not other["latency_s"].equals(profile["latency_s"])


def test_profile_runs_fcfs_without_horizon(small, monkeypatch):
    import lmmsim.build

    scn, base = small
    scn = scn.model_copy(update={"sim": scn.sim.model_copy(update={"horizon_s": 5.0})})
    seen = []
    real = lmmsim.build.build

    def spy(s, *args, **kwargs):
        seen.append(s)
        return real(s, *args, **kwargs)

    monkeypatch.setattr(lmmsim.build, "build", spy)
    df = profile_isolated(scn, base, simulate=simulate_requests, num_requests=12)
    assert len(df) == 12  # a 5 s horizon would have cut all but the first request off
    assert seen and all(s.policy.queue.kind == "fcfs" and s.sim.horizon_s is None for s in seen)


def test_profile_widens_spacing_when_runs_overlap(small):
    from lmmsim.rps import profiler

    scn, base = small
    reqs = profiling_requests(scn, base, num_requests=8)
    seqs, rejected, spacing = profiler.run_isolated(scn, base, reqs, simulate=simulate_requests, spacing_s=0.01)
    assert spacing > 0.01
    assert spacing / 0.01 == 2 ** round(math.log2(spacing / 0.01))  # doubled
    ran = [s for s in seqs if s.request.request_id not in rejected]
    assert all(a.finished_at < b.request.arrived_at for a, b in itertools.pairwise(ran))


def test_profile_skips_requests_too_long(small):
    scn, base = small
    scn = scn.model_copy(update={"deployment": scn.deployment.model_copy(update={"max_model_len": 4096})})
    df = profile_isolated(scn, base, simulate=simulate_requests, num_requests=40)
    assert df.attrs["rejected"]
    assert len(df) == 40 - len(df.attrs["rejected"])
    assert (df["prefill_tokens"] < 4096).all()


def test_read_measured(tmp_path, profile):
    path = tmp_path / "measured.csv"
    profile.to_csv(path, index=False)
    back = read_measured(path)
    pd.testing.assert_frame_equal(back[list(COLUMNS)], profile[list(COLUMNS)].reset_index(drop=True),
                                  check_dtype=False)
    profile.drop(columns=["encode_s"]).to_csv(path, index=False)
    with pytest.raises(UserError) as err:
        read_measured(path)
    msg = str(err.value)
    assert "\n" not in msg and "'encode_s'" in msg and "latency_s" in msg and "prefill_tokens" in msg
    bad = profile.copy()
    bad.loc[3, "latency_s"] = -1.0
    bad.to_csv(path, index=False)
    with pytest.raises(UserError, match=r"measured.csv:5: latency_s"):
        read_measured(path)
    with pytest.raises(UserError, match="not found"):
        read_measured(tmp_path / "nope.csv")


# ----------------------------------------------------------------- estimator
def _synthetic(n=400, seed=1):
    rng = np.random.default_rng(seed)
    text = rng.integers(10, 4000, n)
    tokens = rng.integers(500, 8000, n)
    items = rng.integers(1, 4, n)
    noise = rng.normal(0.0, 0.01, n)
    rows = pd.DataFrame({"modality": "image", "text_tokens": text, "media_tokens": tokens, "num_items": items,
                         "latency_s": 0.02 + 3e-5 * text + 6e-5 * tokens + 0.01 * items + np.abs(noise)})
    t = rng.integers(1, 8000, n)
    text_rows = pd.DataFrame({"modality": "text", "text_tokens": t, "media_tokens": 0, "num_items": 0,
                              "latency_s": 0.005 + 4e-5 * t})
    return pd.concat([rows, text_rows], ignore_index=True)


def test_quantile_model_over_predicts_about_90_percent():
    df = _synthetic()
    est = ImpactEstimator.fit(df, seed=0)
    img = df[df["modality"] == "image"]
    pred = est.predict_frame(img)
    coverage = float(np.mean(pred >= img["latency_s"].to_numpy() - 1e-12))
    assert 0.8 <= coverage <= 1.0
    assert est.models["image"].kind == "quantile"
    # A least-squares fit would sit near the middle of the noise, not above 90% of it.
    assert est.models["image"].coef[1] == pytest.approx(6e-5, rel=0.1)


def test_linear_text_model_recovers_relation():
    est = ImpactEstimator.fit(_synthetic(), seed=0)
    m = est.models["text"]
    assert m.kind == "linear"
    assert m.intercept == pytest.approx(0.005, abs=1e-9)
    assert m.coef[0] == pytest.approx(4e-5, rel=1e-9)
    assert est.mae_s["text"] == pytest.approx(0.0, abs=1e-9)
    lat, mem = est.predict("text", 1000, 0, 0)
    assert lat == pytest.approx(0.045) and mem == 1000
    assert isinstance(lat, float) and isinstance(mem, int)


def test_estimator_on_profile(profile):
    est = ImpactEstimator.fit(profile, test_fraction=0.2, seed=0)
    for m in ("text", "image", "video"):
        n = int((profile["modality"] == m).sum())
        assert est.held_out[m] == min(round(0.2 * n), n - 1)
        mean = profile.loc[profile["modality"] == m, "latency_s"].mean()
        if est.held_out[m]:
            assert est.mae_s[m] < 0.1 * mean
    # Estimates of the profiled requests track what they measured.
    pred = est.predict_frame(profile)
    assert np.corrcoef(pred, profile["latency_s"])[0, 1] > 0.95
    report = est.report()
    assert set(report["modality"]) == {"text", "image", "video"}


def test_estimator_fallback_clipping_and_errors():
    df = _synthetic()
    est = ImpactEstimator.fit(df[df["modality"] == "image"])
    lat_v, _ = est.predict("video", 100, 3000, 1)
    assert lat_v == est.predict("image", 100, 3000, 1)[0]  # closest modality present
    lat_t, mem = est.predict("text", 500, 0, 0)
    assert lat_t >= 0.0 and mem == 500
    text_only = ImpactEstimator.fit(df[df["modality"] == "text"])
    # A media request on the text model is priced as a prompt of all its tokens.
    assert text_only.predict("image", 100, 900, 1)[0] == pytest.approx(text_only.predict("text", 1000, 0, 0)[0])
    with pytest.raises(ValueError, match="unknown modality"):
        est.predict("smell", 1, 1, 1)
    with pytest.raises(ValueError, match="no fitted model"):
        ImpactEstimator().predict("text", 1, 0, 0)
    # Clipped at zero: a negative intercept and a tiny prompt.
    neg = ImpactEstimator.fit(pd.DataFrame({"modality": "text", "text_tokens": [100, 200, 300],
                                            "media_tokens": 0, "num_items": 0, "latency_s": [0.0, 0.1, 0.2]}))
    assert neg.predict("text", 1, 0, 0)[0] == 0.0
    rebuilt = ImpactEstimator.from_dict(est.to_dict())
    assert rebuilt.predict("image", 10, 2000, 2) == est.predict("image", 10, 2000, 2)


def test_estimator_degenerate_media_features():
    # A single image shape: only the text tokens vary; the fit must not invent media slopes.
    rng = np.random.default_rng(0)
    t = rng.integers(50, 1000, 50)
    df = pd.DataFrame({"modality": "image", "text_tokens": t, "media_tokens": 4725, "num_items": 1,
                       "latency_s": 0.3 + 5e-5 * t})
    est = ImpactEstimator.fit(df)
    m = est.models["image"]
    assert m.coef[1] == 0.0 and m.coef[2] == 0.0
    assert m.coef[0] == pytest.approx(5e-5, rel=1e-6)
    assert est.predict("image", 500, 4725, 1)[0] == pytest.approx(0.325, rel=1e-6)


# ---------------------------------------------------------------- classifier
def _blobs(seed=0, n=60):
    rng = np.random.default_rng(seed)
    centers = [(2.0, 20000.0), (0.05, 300.0), (0.5, 5000.0)]  # heavy, light, middle
    lat = np.concatenate([rng.normal(c[0], c[0] * 0.05, n) for c in centers])
    mem = np.concatenate([rng.normal(c[1], c[1] * 0.05, n) for c in centers])
    return lat, mem, centers


def test_classifier_orders_labels_by_weight():
    lat, mem, _ = _blobs()
    clf = RequestClassifier.fit(lat, mem, k=3, seed=0)
    assert clf.names == ("sand", "pebbles", "rocks")
    assert clf.classify(0.05, 300) == 0
    assert clf.classify(0.5, 5000) == 1
    assert clf.classify(2.0, 20000) == 2
    # Training labels: the light blob (second) is all sand, the heavy one all rocks.
    assert set(clf.labels_[60:120]) == {0} and set(clf.labels_[:60]) == {2} and set(clf.labels_[120:]) == {1}
    cents = clf.centroids
    assert [c[0] for c in cents] == sorted(c[0] for c in cents)
    assert cents[0][0] == pytest.approx(0.05, rel=0.05) and cents[2][1] == pytest.approx(20000, rel=0.05)
    sums = [a + b for a, b in clf.centroids_scaled]
    assert sums == sorted(sums)
    assert np.array_equal(clf.classify_many(lat, mem), [clf.classify(a, b) for a, b in zip(lat, mem)])
    assert isinstance(clf, Classifier) and clf.classify_request("video", 0.05, 300) == 0
    assert list(clf.describe()["points"]) == [60, 60, 60]


@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_classifier_k(k):
    rng = np.random.default_rng(k)
    lat = rng.uniform(0, 3, 300)
    mem = lat * 5000 + rng.normal(0, 200, 300)
    clf = RequestClassifier.fit(lat, mem, k=k, seed=0)
    assert clf.k == k and clf.names == class_names(k) and len(clf.centroids) == k
    assert clf.classify(lat.min(), mem.min()) == 0 and clf.classify(lat.max(), mem.max()) == k - 1
    assert sorted(set(clf.labels_)) == list(range(k))


def test_class_names():
    assert class_names(2) == ("sand", "rocks")
    assert class_names(4) == ("sand", "pebbles", "rocks", "boulders")
    assert class_names(5) == ("dust", "sand", "pebbles", "rocks", "boulders")
    assert class_names(7)[6] == "class6"
    with pytest.raises(ValueError):
        class_names(0)


def test_classifier_too_few_points_and_determinism():
    with pytest.raises(ValueError, match="distinct"):
        RequestClassifier.fit([0.1, 0.1, 0.2, 0.2], [10, 10, 20, 20], k=3)
    lat, mem, _ = _blobs(seed=4)
    a = RequestClassifier.fit(lat, mem, k=3, seed=7)
    b = RequestClassifier.fit(lat, mem, k=3, seed=7)
    assert a.centroids == b.centroids
    c = RequestClassifier.from_dict(a.to_dict())
    assert all(c.classify(x, y) == a.classify(x, y) for x, y in zip(lat, mem))


def test_naive_classifier():
    naive = NaiveClassifier()
    assert [naive.classify(m) for m in ("text", "image", "audio", "video")] == [0, 1, 1, 2]
    assert naive.names == ("sand", "pebbles", "rocks") and naive.k == 3
    assert isinstance(naive, Classifier) and naive.classify_request("video", 0.0, 1) == 2
    with pytest.raises(ValueError):
        naive.classify("smell")


def test_classifier_on_profile(profile):
    est = ImpactEstimator.fit(profile)
    clf = RequestClassifier.fit_profile(profile, estimator=est, k=3, seed=0)
    labels = pd.Series(clf.labels_, index=profile.index)
    by_class = labels.groupby(profile["class_name"]).mean()
    assert by_class["short_text"] < by_class["image"] and by_class["short_text"] < by_class["video"]
    assert math.isfinite(clf.centroids[2][0])

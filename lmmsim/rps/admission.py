"""Wiring RPS-Serve's offline components into a run: profile, estimate, classify.

At build time, for a scenario whose ``policy.queue`` is ``rps``: the Workload
Profiler runs isolated requests drawn from the scenario's own mix on its own
deployment (or reads a file of measured runs), the Impact Estimator fits
per-modality latency models, and the Request Classifier clusters the
profiled (latency, memory) points. Online, a request is classified from its
estimated (latency, memory). The fitted pieces are cached per (model,
hardware, deployment, batching, mix, seed): a sweep over request rates
profiles once; with ``$LMMSIM_PREP_CACHE`` also on disk, across processes
(:mod:`lmmsim.rps.prep_cache`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from lmmsim.errors import UserError


@dataclass
class AdmissionModel:
    """What a run's RPS queue classifies with, and what the results report."""

    classify: object  # Request -> class index (0 = lightest)
    profile: pd.DataFrame | None = None
    report: dict = field(default_factory=dict)


_CACHE: dict[str, AdmissionModel] = {}


def _cache_key(scn, base_dir: Path) -> str:
    raw = json.loads(scn.model_dump_json())
    for key in ("name", "slo", "sim"):
        raw.pop(key, None)
    arrival = raw["workload"].get("arrival") or {}
    for key in ("arrival", "num_requests", "duration_s"):
        raw["workload"].pop(key, None)
    raw["policy"].pop("router", None)
    raw["base_dir"] = str(Path(base_dir).resolve())
    if arrival.get("kind") == "trace":  # the profile runs the trace's first rows: its file and window count
        raw["trace"] = {**arrival, "sha256": _file_sha256(Path(base_dir) / arrival["path"])}
    profile = scn.policy.queue.profile
    if profile is not None:  # a measured profile: its contents, not just its name
        raw["profile_sha256"] = _file_sha256(Path(base_dir) / profile)
    return json.dumps(raw, sort_keys=True)


def _file_sha256(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def admission_model(scn, base_dir: Path, simulate) -> AdmissionModel:
    """Profile, fit and build the classifier of an ``rps`` queue (cached in memory, and on
    disk with ``$LMMSIM_PREP_CACHE``: :mod:`lmmsim.rps.prep_cache`); ``simulate`` runs the
    profiling simulations (:func:`lmmsim.rps.profiler.run_isolated`)."""
    cfg = scn.policy.queue
    key = _cache_key(scn, base_dir)
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    if cfg.classifier == "naive" and cfg.profile is None:
        model = AdmissionModel(classify=_naive(), report={"classifier": "naive"})
    else:
        model = _from_disk_or_fitted(scn, base_dir, simulate, key)
    _CACHE[key] = model
    return model


def _from_disk_or_fitted(scn, base_dir: Path, simulate, key: str) -> AdmissionModel:
    from lmmsim.rps import prep_cache

    name = prep_cache.digest(key, base_dir) if prep_cache.cache_dir() is not None else None
    stored = prep_cache.load(name) if name is not None else None
    if stored is not None:
        return _assemble(*stored)
    data, profile = _fitted(scn, base_dir, simulate)
    if name is not None:
        prep_cache.save(name, data, profile)
    return _assemble(data, profile)


def _naive():
    """text -> sand, image and audio -> pebbles, video -> rocks (the paper's naive variant)."""
    from lmmsim.rps.classifier import NaiveClassifier

    by_modality = NaiveClassifier().classify
    return lambda request: by_modality(request.modality)


def _fitted(scn, base_dir: Path, simulate) -> tuple[dict, pd.DataFrame]:
    """The admission model as plain data (the estimator's and classifier's parameters, the
    report), and the profile it was fitted on."""
    from lmmsim.rps.classifier import RequestClassifier
    from lmmsim.rps.estimator import ImpactEstimator
    from lmmsim.rps.profiler import profile_isolated, read_measured

    cfg = scn.policy.queue
    if cfg.profile is not None:
        profile = read_measured(Path(base_dir) / cfg.profile)
        source = f"measured runs from {cfg.profile}"
    else:
        profile = profile_isolated(scn, base_dir, simulate=simulate, num_requests=cfg.profile_requests)
        source = f"{len(profile)} isolated simulated runs"
        if profile.empty:  # nothing to learn from: say why instead of failing inside the fit
            refused, stuck = profile.attrs.get("rejected", []), profile.attrs.get("unfinished", [])
            raise UserError("policy.queue", f"RPS-Serve's workload profiler has no run to fit: of "
                            f"{cfg.profile_requests} profiled requests {len(refused)} were refused at arrival "
                            f"({profile.attrs.get('first_reason') or 'see lmmsim validate'}) and {len(stuck)} never "
                            "produced a token; raise deployment.max_model_len, or give measured runs in "
                            "policy.queue.profile")
    estimator = ImpactEstimator.fit(profile, seed=scn.seed)
    report = {"profile_source": source, "estimator_mae_s": {m: float(v) for m, v in estimator.mae_s.items()}}
    data = {"estimator": estimator.to_dict(), "classifier": None, "report": report}
    if cfg.classifier == "naive":
        report["classifier"] = "naive"
        return data, profile
    # k-means on the profiled (latency, memory) points, as the paper fits it offline;
    # online a request is placed by its estimated point.
    try:
        clf = RequestClassifier.fit(profile["latency_s"].to_numpy(), profile["prefill_tokens"].to_numpy(),
                                    k=cfg.num_classes, seed=scn.seed)
    except ValueError as exc:
        raise UserError("policy.queue.num_classes", str(exc)) from None
    report["classifier"] = "kmeans"
    report["centroids_latency_s_memory_tokens"] = [[float(x) for x in c] for c in clf.centroids]
    data["classifier"] = clf.to_dict()
    return data, profile


def _assemble(data: dict, profile: pd.DataFrame | None) -> AdmissionModel:
    """The AdmissionModel of :func:`_fitted`'s data (fresh or read back: the same floats)."""
    from lmmsim.rps.classifier import RequestClassifier
    from lmmsim.rps.estimator import ImpactEstimator

    if data["classifier"] is None:
        return AdmissionModel(classify=_naive(), profile=profile, report=data["report"])
    predict = ImpactEstimator.from_dict(data["estimator"]).predict_request
    classify_point = RequestClassifier.from_dict(data["classifier"]).classify

    def classify(request) -> int:
        return classify_point(*predict(request))

    return AdmissionModel(classify=classify, profile=profile, report=data["report"])


def edf_deadline(scn):
    """Deadline of a request under the EDF ablation: arrival + its modality's TTFT SLO."""
    slo = scn.slo.ttft_by_modality()
    modalities = sorted({c_modality for c_modality in _mix_modalities(scn)})
    missing = [m for m in modalities if m not in slo]
    if missing:
        raise UserError("slo.ttft_s", f"policy.queue.priority edf needs a TTFT SLO for {missing[0]!r} "
                        f"(the workload has {', '.join(modalities)})")
    return lambda request: request.arrived_at + slo[request.modality]


def _mix_modalities(scn) -> set[str]:
    out = set()
    for c in scn.workload.mix:
        if c.video is not None:
            out.add("video")
        elif c.images is not None:
            out.add("image")
        elif c.audio is not None:
            out.add("audio")
        else:
            out.add("text")
    return out or {"text", "image", "video", "audio"}

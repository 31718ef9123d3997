"""Impact Estimator (rps-serve.txt section 3.3): a request's GPU admission cost.

The admission cost is the pair (prefill latency, memory):

* memory is exact, not estimated: the request's prompt tokens
  (``text_tokens + media_tokens``), the paper's proxy for its KV footprint;
* latency comes from one small model per modality, fitted on a profile
  (:mod:`lmmsim.rps.profiler`):

  - text: ordinary least squares, ``latency ~ text_tokens`` (the paper's
    "lightweight linear regression");
  - image, video, audio: linear quantile regression at the 0.9 quantile
    (so that estimates err on the high side), on
    ``[text_tokens, media_tokens, num_items]``. The paper says "image and
    video"; audio is treated like them.

Choices (where the paper leaves room):

* **Degenerate features.** A profile drawn from a fixed mix often holds a
  single image or video shape, so a media feature can be constant, or two
  can be proportional. An unregularised quantile regression then has a
  whole family of optimal coefficient vectors and the solver's pick decides
  the extrapolation. Before fitting, features are taken in the order
  ``text_tokens, media_tokens, num_items`` and one is kept only if it adds
  rank to the (centred) feature matrix; dropped features get a coefficient
  of 0. With no feature left the model is an intercept: the mean (text) or
  the 0.9 quantile (``inverted_cdf``: an observed value at or above 90% of
  them) of the latencies.
* **Held-out error.** Per modality, a seeded shuffle puts
  ``round(test_fraction * n)`` rows aside (at most ``n - 1``); the model is
  fitted on the rest, its mean absolute error on the held-out rows is
  :attr:`ImpactEstimator.mae_s`, and the model is then refitted on all rows.
  A modality with too few rows for a split reports ``nan`` and 0 held out.
* **Missing modality.** Asked for a modality the profile lacked, the
  estimator uses the closest one present (:data:`FALLBACK`): another media
  model first, text last. A media request on the text model is priced as a
  text prompt of all its tokens (the encoder cost is then not counted). No
  model at all, or an unknown modality, raises ``ValueError``.
* **Speed.** Requests are estimated online, thousands per run, so the
  fitted coefficients are copied out once and evaluated in plain Python,
  memoised on the feature tuple. Estimates are clipped at 0.

Replace the regressions by subclassing and overriding :meth:`_fit_one`.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

import numpy as np

from lmmsim.workload.request import MODALITIES

#: Quantile used for media modalities.
MEDIA_QUANTILE = 0.9
#: Feature columns of the media models (the text model uses the first only).
FEATURES = ("text_tokens", "media_tokens", "num_items")
#: Closest modalities to fall back on, in order, when one has no model.
FALLBACK = {
    "text": ("image", "audio", "video"),
    "image": ("video", "audio", "text"),
    "video": ("image", "audio", "text"),
    "audio": ("image", "video", "text"),
}
#: Memo entries kept before the memo is cleared.
MEMO_LIMIT = 200_000


def request_features(request) -> tuple[int, int, int]:
    """``(text_tokens, media_tokens, num_items)`` of a :class:`~lmmsim.workload.request.Request`."""
    return request.num_text_tokens, request.num_mm_tokens, len(request.media_segments)


@dataclass(frozen=True)
class LinearLatencyModel:
    """``latency = intercept + sum(coef * features)``, features as in :data:`FEATURES`."""

    kind: str  # "linear" or "quantile"
    intercept: float
    coef: tuple[float, float, float]

    def __call__(self, text_tokens: float, media_tokens: float, num_items: float) -> float:
        c = self.coef
        return self.intercept + c[0] * text_tokens + c[1] * media_tokens + c[2] * num_items


def _independent_columns(X: np.ndarray) -> list[int]:
    """Columns of ``X``, in order, that each add rank to the centred matrix."""
    if len(X) < 2:
        return []
    Xc = X - X.mean(axis=0)
    scale = np.abs(Xc).max(axis=0)
    Xc = Xc / np.where(scale > 0, scale, 1.0)
    kept: list[int] = []
    for j in range(X.shape[1]):
        if scale[j] == 0:
            continue
        if np.linalg.matrix_rank(Xc[:, kept + [j]]) == len(kept) + 1:
            kept.append(j)
    return kept


class ImpactEstimator:
    """Per-modality prefill latency models plus the exact memory (prompt tokens).

    Use :meth:`fit` (a classmethod) on a profile table; then :meth:`predict`.
    """

    def __init__(self, models: dict[str, LinearLatencyModel] | None = None):
        self.models: dict[str, LinearLatencyModel] = dict(models or {})
        self.mae_s: dict[str, float] = {}
        self.held_out: dict[str, int] = {}
        self.num_rows: dict[str, int] = {}
        self.mean_latency_s: dict[str, float] = {}
        self._memo: dict = {}

    # ------------------------------------------------------------------ fit
    @classmethod
    def fit(cls, profile_df, *, test_fraction: float = 0.2, seed: int = 0) -> ImpactEstimator:
        """Fit one model per modality present in ``profile_df`` (columns
        ``modality`` and :data:`FEATURES` and ``latency_s``)."""
        if not 0.0 <= test_fraction < 1.0:
            raise ValueError(f"test_fraction must be in [0, 1), got {test_fraction}")
        missing = [c for c in ("modality", *FEATURES, "latency_s") if c not in profile_df.columns]
        if missing:
            raise ValueError(f"profile lacks column {missing[0]!r}")
        if len(profile_df) == 0:
            raise ValueError("cannot fit on an empty profile")
        est = cls()
        for modality in sorted(set(profile_df["modality"]), key=_modality_order):
            if modality not in MODALITIES:
                raise ValueError(f"unknown modality {modality!r} in profile; valid: {', '.join(MODALITIES)}")
            rows = profile_df[profile_df["modality"] == modality]
            X = rows[list(FEATURES)].to_numpy(dtype=np.float64)
            y = rows["latency_s"].to_numpy(dtype=np.float64)
            n = len(y)
            n_test = min(round(test_fraction * n), n - 1)
            mae = math.nan
            if n_test > 0:
                rng = np.random.default_rng([seed, zlib.crc32(modality.encode())])
                order = rng.permutation(n)
                test, train = order[:n_test], order[n_test:]
                model = est._fit_one(modality, X[train], y[train])
                pred = np.array([max(0.0, model(*x)) for x in X[test]])
                mae = float(np.mean(np.abs(pred - y[test])))
            est.models[modality] = est._fit_one(modality, X, y)
            est.mae_s[modality] = mae
            est.held_out[modality] = n_test
            est.num_rows[modality] = n
            est.mean_latency_s[modality] = float(y.mean())
        return est

    def _fit_one(self, modality: str, X: np.ndarray, y: np.ndarray) -> LinearLatencyModel:
        """Fit one modality's model on features ``X`` (columns :data:`FEATURES`)."""
        if modality == "text":
            X = X[:, :1]
        kept = _independent_columns(X)
        coef = [0.0, 0.0, 0.0]
        if modality == "text":
            if not kept:
                return LinearLatencyModel("linear", float(y.mean()), tuple(coef))
            from sklearn.linear_model import LinearRegression

            reg = LinearRegression().fit(X[:, kept], y)
        else:
            if not kept:
                q = float(np.quantile(y, MEDIA_QUANTILE, method="inverted_cdf"))
                return LinearLatencyModel("quantile", q, tuple(coef))
            from sklearn.linear_model import QuantileRegressor

            reg = QuantileRegressor(quantile=MEDIA_QUANTILE, alpha=0, solver="highs").fit(X[:, kept], y)
        for j, c in zip(kept, reg.coef_):
            coef[j] = float(c)
        return LinearLatencyModel("linear" if modality == "text" else "quantile", float(reg.intercept_),
                                  tuple(coef))

    # -------------------------------------------------------------- predict
    def model_for(self, modality: str) -> tuple[str, LinearLatencyModel]:
        """``(modality used, model)`` for ``modality``, after any fallback."""
        model = self.models.get(modality)
        if model is not None:
            return modality, model
        if modality not in FALLBACK:
            raise ValueError(f"unknown modality {modality!r}; valid: {', '.join(MODALITIES)}")
        for other in FALLBACK[modality]:
            if other in self.models:
                return other, self.models[other]
        raise ValueError("the impact estimator has no fitted model (fit it on a non-empty profile)")

    def predict(self, modality: str, text_tokens: int, media_tokens: int, num_items: int) -> tuple[float, int]:
        """``(latency_s, memory_tokens)`` of a request; latency >= 0."""
        key = (modality, text_tokens, media_tokens, num_items)
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        used, model = self.model_for(modality)
        if used == "text" and modality != "text":
            latency = float(model(text_tokens + media_tokens, 0, 0))
        else:
            latency = float(model(text_tokens, media_tokens, num_items))
        out = (max(0.0, latency), int(text_tokens) + int(media_tokens))
        if len(self._memo) >= MEMO_LIMIT:
            self._memo.clear()
        self._memo[key] = out
        return out

    def predict_request(self, request) -> tuple[float, int]:
        """:meth:`predict` for a :class:`~lmmsim.workload.request.Request`."""
        return self.predict(request.modality, *request_features(request))

    def predict_frame(self, df) -> np.ndarray:
        """Latency estimates for the rows of a profile-like table."""
        cols = [df[c].tolist() for c in ("modality", *FEATURES)]
        return np.array([self.predict(m, t, a, k)[0] for m, t, a, k in zip(*cols)], dtype=np.float64)

    # --------------------------------------------------------------- report
    def report(self):
        """Per-modality table: model kind, rows, held-out rows, MAE, mean latency, coefficients."""
        import pandas as pd

        rows = []
        for m, model in self.models.items():
            rows.append({"modality": m, "kind": model.kind, "rows": self.num_rows.get(m, 0),
                         "held_out": self.held_out.get(m, 0), "mae_s": self.mae_s.get(m, math.nan),
                         "mean_latency_s": self.mean_latency_s.get(m, math.nan), "intercept": model.intercept,
                         **{f"coef_{f}": c for f, c in zip(FEATURES, model.coef)}})
        return pd.DataFrame(rows)

    def to_dict(self) -> dict:
        """Plain data (JSON-able) from which :meth:`from_dict` rebuilds the estimator."""
        return {m: {"kind": md.kind, "intercept": md.intercept, "coef": list(md.coef),
                    "mae_s": self.mae_s.get(m), "held_out": self.held_out.get(m)}
                for m, md in self.models.items()}

    @classmethod
    def from_dict(cls, data: dict) -> ImpactEstimator:
        est = cls({m: LinearLatencyModel(d["kind"], float(d["intercept"]), tuple(float(c) for c in d["coef"]))
                   for m, d in data.items()})
        for m, d in data.items():
            if d.get("mae_s") is not None:
                est.mae_s[m] = float(d["mae_s"])
            if d.get("held_out") is not None:
                est.held_out[m] = int(d["held_out"])
        return est


def _modality_order(m: str) -> int:
    return MODALITIES.index(m) if m in MODALITIES else len(MODALITIES)

"""Request Classifier (rps-serve.txt section 3.4): rocks, pebbles and sand.

:class:`RequestClassifier` clusters requests by their GPU admission cost,
the (prefill latency, memory) pair of the Impact Estimator:

* offline, the two features are standard-scaled and grouped by k-means
  (Euclidean, ``k = 3`` by default);
* clusters are labelled ``0 .. k-1`` in increasing order of the sum of the
  centroid's two *scaled* coordinates (the paper's "sum of latency and
  memory"; scaled, because raw seconds and tokens are not commensurable).
  Label 0 is the lightest class (sand); ties are broken by the scaled
  latency, then by k-means' own index, so labels are deterministic;
* online, a request goes to the nearest centroid (Euclidean, in the scaled
  space), computed in plain Python: a handful of multiplications per call.

:class:`NaiveClassifier` is the ablation of section 4.3: the class follows
from the modality alone (text -> sand, image and audio -> pebbles,
video -> rocks; audio is not in the paper and is put with images).

Both follow :class:`Classifier`: ``k``, ``names`` and
``classify_request(modality, latency_s, memory_tokens) -> label``, so a
scheduling policy can take either.

Class names for other ``k`` (:func:`class_names`): 1: sand; 2: sand, rocks;
3: sand, pebbles, rocks; 4: sand, pebbles, rocks, boulders; 5: dust, sand,
pebbles, rocks, boulders; beyond that ``class0 .. class{k-1}``.
"""

from __future__ import annotations

import math
from typing import Protocol, runtime_checkable

import numpy as np

_NAMES = {
    1: ("sand",),
    2: ("sand", "rocks"),
    3: ("sand", "pebbles", "rocks"),
    4: ("sand", "pebbles", "rocks", "boulders"),
    5: ("dust", "sand", "pebbles", "rocks", "boulders"),
}

#: The naive classifier's modality -> label (k = 3: sand, pebbles, rocks).
NAIVE_LABELS = {"text": 0, "image": 1, "audio": 1, "video": 2}


def class_names(k: int) -> tuple[str, ...]:
    """Names of labels ``0 .. k-1``, lightest first."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    return _NAMES.get(k, tuple(f"class{i}" for i in range(k)))


@runtime_checkable
class Classifier(Protocol):
    """What a scheduling policy needs from a classifier."""

    k: int
    names: tuple[str, ...]

    def classify_request(self, modality: str, latency_s: float, memory_tokens: float) -> int:
        """Label ``0 .. k-1`` (0 lightest) of a request."""
        ...


class RequestClassifier:
    """k-means over standard-scaled (latency, memory); build with :meth:`fit`."""

    def __init__(self, mean: tuple[float, float], scale: tuple[float, float],
                 centroids_scaled: list[tuple[float, float]], labels=None):
        self.k = len(centroids_scaled)
        self.names = class_names(self.k)
        self.mean = (float(mean[0]), float(mean[1]))
        self.scale = (float(scale[0]), float(scale[1]))
        # index = label
        self.centroids_scaled = [(float(a), float(b)) for a, b in centroids_scaled]
        #: labels of the points the classifier was fitted on (None when rebuilt from data)
        self.labels_ = labels

    @classmethod
    def fit(cls, latency, memory, *, k: int = 3, seed: int = 0) -> RequestClassifier:
        """Cluster the points ``(latency[i], memory[i])`` into ``k`` classes."""
        X = np.column_stack([np.asarray(latency, dtype=np.float64), np.asarray(memory, dtype=np.float64)])
        if X.ndim != 2 or X.shape[1] != 2:
            raise ValueError("latency and memory must be 1-D sequences of the same length")
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        if not np.isfinite(X).all():
            raise ValueError("latency and memory must be finite")
        distinct = len(np.unique(X, axis=0)) if len(X) else 0
        if distinct < k:
            raise ValueError(f"need at least k={k} distinct (latency, memory) points to form {k} classes, "
                             f"got {distinct}")
        from sklearn.cluster import KMeans
        from sklearn.preprocessing import StandardScaler

        scaler = StandardScaler().fit(X)
        Z = scaler.transform(X)
        km = KMeans(n_clusters=k, n_init=10, random_state=seed).fit(Z)
        cents = km.cluster_centers_
        order = sorted(range(k), key=lambda i: (cents[i, 0] + cents[i, 1], cents[i, 0], i))
        relabel = np.empty(k, dtype=np.int64)
        relabel[order] = np.arange(k)
        return cls(tuple(scaler.mean_), tuple(scaler.scale_), [tuple(cents[i]) for i in order],
                   labels=relabel[km.labels_])

    @classmethod
    def fit_profile(cls, profile_df, *, estimator=None, k: int = 3, seed: int = 0) -> RequestClassifier:
        """Fit on a profile table (:mod:`lmmsim.rps.profiler`).

        Memory is ``prefill_tokens``. Latency is the measured ``latency_s``
        (what the paper clusters) unless ``estimator`` is given; then it is
        the estimator's prediction for each row, i.e. the same kind of number
        the classifier sees online.
        """
        latency = profile_df["latency_s"].to_numpy() if estimator is None else estimator.predict_frame(profile_df)
        return cls.fit(latency, profile_df["prefill_tokens"].to_numpy(), k=k, seed=seed)

    # ------------------------------------------------------------ classify
    def classify(self, latency_s: float, memory_tokens: float) -> int:
        """Label of the nearest centroid (0 lightest)."""
        x = (latency_s - self.mean[0]) / self.scale[0]
        y = (memory_tokens - self.mean[1]) / self.scale[1]
        best, best_d = 0, math.inf
        for i, (cx, cy) in enumerate(self.centroids_scaled):
            d = (x - cx) * (x - cx) + (y - cy) * (y - cy)
            if d < best_d:
                best, best_d = i, d
        return best

    def classify_request(self, modality: str, latency_s: float, memory_tokens: float) -> int:
        """:class:`Classifier` protocol; the modality is not used (it acts through the estimate)."""
        return self.classify(latency_s, memory_tokens)

    def classify_many(self, latency, memory) -> np.ndarray:
        """Vectorised :meth:`classify` (same tie rule: the lowest label wins)."""
        Z = np.column_stack([(np.asarray(latency, dtype=np.float64) - self.mean[0]) / self.scale[0],
                             (np.asarray(memory, dtype=np.float64) - self.mean[1]) / self.scale[1]])
        C = np.asarray(self.centroids_scaled)
        return np.argmin(((Z[:, None, :] - C[None, :, :]) ** 2).sum(axis=2), axis=1)

    # ------------------------------------------------------------- report
    @property
    def centroids(self) -> list[tuple[float, float]]:
        """Centroids in original units, ``(latency_s, memory_tokens)``, index = label."""
        return [(cx * self.scale[0] + self.mean[0], cy * self.scale[1] + self.mean[1])
                for cx, cy in self.centroids_scaled]

    def describe(self):
        """Per-class table: label, name, centroid latency and memory, training points."""
        import pandas as pd

        counts = np.bincount(self.labels_, minlength=self.k) if self.labels_ is not None else [None] * self.k
        return pd.DataFrame([{"label": i, "name": self.names[i], "latency_s": c[0], "memory_tokens": c[1],
                              "points": None if n is None else int(n)}
                             for i, (c, n) in enumerate(zip(self.centroids, counts))])

    def to_dict(self) -> dict:
        return {"mean": list(self.mean), "scale": list(self.scale),
                "centroids_scaled": [list(c) for c in self.centroids_scaled]}

    @classmethod
    def from_dict(cls, data: dict) -> RequestClassifier:
        return cls(tuple(data["mean"]), tuple(data["scale"]), [tuple(c) for c in data["centroids_scaled"]])


class NaiveClassifier:
    """Modality-only classes (the paper's ablation): text 0, image/audio 1, video 2."""

    k = 3
    names = class_names(3)

    def __init__(self, mapping: dict[str, int] | None = None):
        self.mapping = dict(NAIVE_LABELS if mapping is None else mapping)
        self.k = max(self.mapping.values()) + 1
        self.names = class_names(self.k)

    def classify(self, modality: str) -> int:
        try:
            return self.mapping[modality]
        except KeyError:
            raise ValueError(f"no class for modality {modality!r}; known: {', '.join(sorted(self.mapping))}") from None

    def classify_request(self, modality: str, latency_s: float = 0.0, memory_tokens: float = 0.0) -> int:
        return self.classify(modality)

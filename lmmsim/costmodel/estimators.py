"""The candidate estimators of a class: roofline, log-log polynomials, random forest.

All fit ``X -> log seconds``; :meth:`fit` returns self.

* ``roofline``: :class:`RooflineRegressor` on ``(flops, bytes, count)``, the
  v0 form with fitted efficiencies and the GPU's peaks as constants
  (link bandwidth for ``allreduce`` / ``p2p``). Extrapolates like physics.
* ``poly2`` / ``poly3``: StandardScaler -> PolynomialFeatures -> RidgeCV on the
  log features (log-log polynomial: a power law with curvature).
* ``forest``: RandomForestRegressor on the log features (fixed seed, 40 trees,
  depth <= 12, leaves >= 2 rows). Flat outside the data: the predictor hands
  shapes outside the fitted feature box to the class's fitted roofline.

scikit-learn and scipy are imported inside the functions that fit, so loading
a saved fit (:mod:`lmmsim.costmodel.fitstore`) never needs them. Which
candidate wins is :mod:`lmmsim.costmodel.selection`'s business.
"""

from __future__ import annotations

import math

import numpy as np

from lmmsim.costmodel.features import CLASSES
from lmmsim.costmodel.npmodels import RooflineModel, occupancy

SEED = 0
#: Estimators tried, in tie-break preference order (the ones that extrapolate first).
ESTIMATORS = ("roofline", "poly2", "poly3", "forest")
EXTRAPOLATING = ("roofline", "poly2", "poly3")
RIDGE_ALPHAS = (1e-6, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0)
FOREST_PARAMS = {"n_estimators": 40, "max_depth": 12, "min_samples_leaf": 2}


class RooflineRegressor:
    """The v0 roofline with fitted efficiencies; ``X = [flops, bytes, count]``, ``y = log seconds``.

    Model (with the peaks ``P`` FLOP/s and ``Bw`` B/s as constants)::

        t = max((flops + chalf) / (P cmax), (bytes + mhalf) / (Bw mmax)) + launch * count

    i.e. ``max(flops / (P ec(flops)), bytes / (Bw em(bytes)))`` with
    ``ec(x) = cmax x / (x + chalf)``, ``em`` likewise; a term is 0 when its work
    is 0 (a pure-traffic kernel has no compute term).

    Fitted by :func:`scipy.optimize.least_squares` on log time, in log
    parameters (all positive), from four fixed starting points (best kept),
    with a weak pull (``prior_weight`` per log-parameter) towards ``prior``
    (the catalog's v0 efficiencies) that only matters for parameters the data
    do not determine (e.g. the compute term when every row is memory-bound).

    Identifiability: with one latency per kernel (``count`` constant), launch
    and the two half-saturation costs only enter through
    ``chalf / (P cmax) + launch`` and ``mhalf / (Bw mmax) + launch``; any launch up
    to the smaller of the two fits equally. The fit uses the canonical choice
    launch = that smaller fixed cost (so ``chalf`` or ``mhalf`` is 0), unless
    ``launch_s`` pins it. When ``count`` varies (all-reduce over several world
    sizes), launch is the fitted per-step latency.

    Occupancy (attention prefill, ``X = [flops, bytes, count, ctas]`` and a
    ``num_sms`` in ``prior``): a FlashAttention grid of ``ctas`` thread blocks
    (query blocks x heads) streams K and V from at most ``ctas`` SMs, so a grid
    smaller than the GPU reaches ``min(1, ctas / num_sms)`` of the bandwidth a
    full one does; the memory term's bytes are divided by that. Why: fitted
    without it on Vidur's A100 prefill attention (every row compute-bound at
    peak rates, small chunks over long contexts run with 32-64 thread blocks
    on 108 SMs and are slower than their FLOPs say), the max() let the memory
    term stand in for under-occupancy at 5 % of HBM bandwidth, and every
    memory-heavy shape outside the data with a full grid (a 64-token encoder
    window over thousands of heads) then cost bytes / (0.05 Bw). With it the
    A100 memory term is not needed by the data at all (it stays at the prior)
    and the H100 aiconfigurator data put it at ~0.3 (those rows are small
    kernels). Efficiencies are bounded by ``max_efficiency`` (default 4 for the
    historical fits, where peaks may be conservative; 1 with occupancy: a
    physical fraction of peak).

    Fitted attributes: ``compute_max_, compute_half_flops_, memory_max_,
    memory_half_bytes_, launch_s_, cost_``.
    """

    def __init__(self, peak_flops: float | None = None, peak_bytes_per_s: float = 1.0, *,
                 launch_s: float | None = None, prior: dict | None = None, prior_weight: float = 0.03,
                 max_efficiency: float | None = None):
        self.peak_flops = peak_flops
        self.peak_bytes_per_s = peak_bytes_per_s
        self.launch_s = launch_s
        self.prior = prior
        self.prior_weight = prior_weight
        self.max_efficiency = max_efficiency

    def _num_sms(self, X) -> int | None:
        sms = (self.prior or {}).get("num_sms")
        return int(sms) if sms and X.shape[1] > 3 else None

    def _max_eff(self, X) -> float:
        if self.max_efficiency is not None:
            return float(self.max_efficiency)
        return 1.0 if self._num_sms(X) else 4.0

    def fit(self, X, y):
        X = np.asarray(X, float)
        self._top = self._max_eff(X)
        self.num_sms_ = self._num_sms(X)
        if self.num_sms_:  # occupancy-scaled bytes (class docstring); the joint fit sees 3 columns
            X = np.column_stack([X[:, 0], X[:, 1] / occupancy(X[:, 3], self.num_sms_), X[:, 2]])
        return self._fit_joint(X[:, :3], y)

    def _fit_joint(self, X, y):
        from scipy.optimize import least_squares

        X = np.asarray(X, float)
        y = np.asarray(y, float)
        flops, nbytes = X[:, 0], X[:, 1]
        count = X[:, 2] if X.shape[1] > 2 else np.ones(len(y))
        P, Bw = self.peak_flops, float(self.peak_bytes_per_s)
        compute = P is not None and bool(np.any(flops > 0))
        fit_launch = self.launch_s is None and np.ptp(count) > 0
        fixed_launch = 0.0 if self.launch_s is None else float(self.launch_s)
        has_c, has_m = flops > 0, nbytes > 0

        # theta: [log mmax, log a_m] (+ [log cmax, log a_c]) (+ [log launch]); a_* = fixed cost in s.
        def unpack(th):
            mmax, a_m = math.exp(th[0]), math.exp(th[1])
            cmax, a_c = (math.exp(th[2]), math.exp(th[3])) if compute else (1.0, 0.0)
            launch = math.exp(th[-1]) if fit_launch else fixed_launch
            return cmax, a_c, mmax, a_m, launch

        def predict_s(th):
            cmax, a_c, mmax, a_m, launch = unpack(th)
            tm = np.where(has_m, a_m + nbytes / (Bw * mmax), 0.0)
            t = np.maximum(np.where(has_c, a_c + flops / (P * cmax), 0.0), tm) if compute else tm
            return t + launch * count

        th0, lo, hi = self._prior_theta(compute, fit_launch)
        w = self.prior_weight

        def residuals(th):
            r = np.log(np.maximum(predict_s(th), 1e-300)) - y
            return np.concatenate([r, w * (th - th0)]) if w > 0 else r

        t_small = float(np.exp(np.quantile(y, 0.05)))
        best = None
        for eff_c in (0.1, 0.7) if compute else (None,):
            for eff_m in (0.1, 0.7):
                start = [math.log(eff_m), math.log(t_small / 2)]
                if compute:
                    start += [math.log(eff_c), math.log(t_small / 2)]
                if fit_launch:
                    start.append(math.log(t_small / (4 * float(np.mean(count)))))
                start = np.clip(start, lo + 1e-9, hi - 1e-9)
                res = least_squares(residuals, start, bounds=(lo, hi), method="trf", x_scale=1.0)
                if best is None or res.cost < best.cost:
                    best = res
        cmax, a_c, mmax, a_m, launch = unpack(best.x)
        if self.launch_s is None and not fit_launch:  # canonical split (see the class docstring)
            shift = min(a_c, a_m) if compute else a_m
            a_c, a_m = (a_c - shift if compute else 0.0), a_m - shift
            launch = shift / float(count[0]) if len(count) else 0.0
        self.compute_max_ = cmax if compute else None
        self.compute_half_flops_ = a_c * P * cmax if compute else None
        self.memory_max_ = mmax
        self.memory_half_bytes_ = a_m * Bw * mmax
        self.launch_s_ = launch
        self.cost_ = float(best.cost)
        return self

    def _prior_theta(self, compute: bool, fit_launch: bool):
        p = self.prior or {}
        P, Bw = self.peak_flops, float(self.peak_bytes_per_s)
        launch0 = float(p.get("launch_s", 3e-6))
        shift = 0.0 if (fit_launch or self.launch_s is not None) else launch0
        mmax0 = float(p.get("memory_max", 0.9))
        th = [math.log(mmax0), math.log(float(p.get("memory_half_bytes", 0.0)) / (Bw * mmax0) + shift + 1e-9)]
        top = self._top
        mmax0 = min(mmax0, top)
        th[0] = math.log(mmax0)
        lo, hi = [math.log(1e-4), math.log(1e-12)], [math.log(top), math.log(10.0)]
        if compute:
            cmax0 = min(float(p.get("compute_max", 0.8)), top)
            th += [math.log(cmax0), math.log(float(p.get("compute_half_flops", 0.0)) / (P * cmax0) + shift + 1e-9)]
            lo += [math.log(1e-4), math.log(1e-12)]
            hi += [math.log(top), math.log(10.0)]
        if fit_launch:
            th.append(math.log(launch0 + 1e-9))
            lo.append(math.log(1e-12))
            hi.append(math.log(1.0))
        return np.array(th), np.array(lo), np.array(hi)

    def params(self) -> dict:
        return {"compute_max": self.compute_max_, "compute_half_flops": self.compute_half_flops_,
                "memory_max": self.memory_max_, "memory_half_bytes": self.memory_half_bytes_,
                "launch_s": self.launch_s_, "peak_flops": self.peak_flops,
                "peak_bytes_per_s": float(self.peak_bytes_per_s), "uses_compute": self.compute_max_ is not None,
                "num_sms": self.num_sms_}

    def predict(self, X):
        return np.log(RooflineModel(self.params()).predict_s(np.asarray(X, float)))


def make_estimator(name: str, op_class: str, peaks: tuple[float | None, float], prior: dict | None):
    """A fresh, unfitted candidate estimator ``name`` for ``op_class``."""
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.linear_model import RidgeCV
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import PolynomialFeatures, StandardScaler

    if name == "roofline":
        peak_flops = peaks[0] if CLASSES[op_class].uses_compute else None
        return RooflineRegressor(peak_flops, peaks[1], prior=prior)
    if name in ("poly2", "poly3"):
        return Pipeline([("scale", StandardScaler()),
                         ("poly", PolynomialFeatures(int(name[-1]), include_bias=False)),
                         ("ridge", RidgeCV(alphas=RIDGE_ALPHAS))])
    if name == "forest":
        return RandomForestRegressor(**(CLASSES[op_class].forest_params or FOREST_PARAMS), random_state=SEED)
    raise ValueError(f"unknown estimator {name!r}; valid: {', '.join(ESTIMATORS)}")


def estimator_inputs(name: str, op_class: str) -> tuple[str, ...]:
    return CLASSES[op_class].work_features if name == "roofline" else CLASSES[op_class].log_features


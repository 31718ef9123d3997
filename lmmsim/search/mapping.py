"""A search configuration ``(alloc, B, s)`` and the scenario it stands for.

HAS (easerve.txt §3.1) picks, for a target arrival rate Λ and a GPU budget,
the configuration of an ``e_p_d`` deployment: the GPU allocation ``alloc``
(encoder, prefill and decode workers and their TP, plus the TP of the local
prefill workers on the encoder GPUs; :class:`lmmsim.search.capacity.Allocation`),
the encode batch bound ``B`` (``encoder.dispatch.max_batch`` of the
``poisson_gap`` rule) and the offload ratio ``s``
(``local_prefill.offload.remote_fraction``). Here every "deployment" is a
simulated run of the scenario: :class:`Problem` writes a configuration into
the scenario's own mapping (:meth:`Problem.deployment`), so everything the
configuration does not set -- model, GPU, links, policies, the other dispatch
and local-prefill settings -- is the scenario's. A key the system preset sets
and the configuration makes meaningless (``gpu_ids``, ``gpu_sharing``) is set
to null rather than dropped, so the preset's value does not come back.

A configuration is *feasible* when :func:`lmmsim.build.build` accepts its
scenario (memory fit, head divisibility); the answer is kept per allocation.

Beyond EAServe. The allocation knobs (worker counts and TPs of the three
pools) apply to any ``e_p_d`` scenario, whatever its system preset, and are
written into the pools the scenario already declares. Three EAServe
assumptions remain, deliberately (lifting them changes the search space, not
this mapping): encoders are TP1 (the allocation has no encoder TP); ``B`` is
the ``poisson_gap`` rule's bound, so a scenario with another encode dispatch
rule (Dynamo's ``per_request``, ``queue_length``) is searched with
``poisson_gap`` in its place; and a pipeline-parallel pool is flattened to
``pp = 1`` at the configuration's TP. Deployments other than ``e_p_d`` are
refused: the allocation is E/P/D by construction.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from lmmsim.errors import UserError
from lmmsim.search.capacity import Allocation, LocalSettings

DEFAULT_TRIAL_REQUESTS = 200
DEPLOY_S = 120.0  # seconds to start a trial's workers (weights, warm-up); our assumption, see lmmsim.search.trials


@dataclass(frozen=True)
class Config:
    """One search point: an allocation, the encode batch bound ``B`` and the offload ratio ``s``."""

    alloc: Allocation
    batch_bound: int
    offload_s: float

    def key(self) -> tuple:
        return (self.alloc, self.batch_bound, round(self.offload_s, 6))


def read_raw(path: str | Path, overrides: Sequence[str] = ()) -> tuple[dict, object, Path]:
    """The scenario file as a mapping (``--set`` applied), its validated form and base dir."""
    from lmmsim.scenario import apply_override, load_scenario

    scn, base_dir = load_scenario(path, list(overrides))  # all user errors reported here
    raw = yaml.safe_load(Path(path).read_text()) or {}
    for assignment in overrides:
        apply_override(raw, assignment)
    return raw, scn, base_dir


class Problem:
    """The scenario being tuned: turns configurations into scenario mappings, checks
    feasibility, and knows the workload shape and local-prefill settings."""

    def __init__(self, raw: dict, scn, base_dir: Path, rate: float | None = None,
                 trial_requests: int | None = DEFAULT_TRIAL_REQUESTS, deploy_s: float = DEPLOY_S):
        from lmmsim.systems import get_system

        if scn.deployment.kind != "e_p_d":
            raise UserError("deployment.kind", f"search tunes an e_p_d deployment (EAServe's E+P+D); "
                                               f"got {scn.deployment.kind!r}")
        arrival = scn.workload.arrival
        if not hasattr(arrival, "rate"):
            raise UserError("workload.arrival", "search needs an arrival process with a rate "
                                                "(poisson, gamma or deterministic), not a trace")
        if rate is not None and not (rate > 0 and math.isfinite(rate)):
            raise UserError("--rate", f"must be a positive number of requests/s (got {rate})")
        if trial_requests is not None and trial_requests < 1:
            raise UserError("--trial-requests", f"must be >= 1 (got {trial_requests})")
        if not (deploy_s >= 0 and math.isfinite(deploy_s)):
            raise UserError("--deploy-cost", f"must be >= 0 seconds (got {deploy_s})")
        self.deploy_s = float(deploy_s)
        self.raw = copy.deepcopy(raw)
        self.scn = scn
        self.base_dir = Path(base_dir)
        self.rate = float(rate if rate is not None else arrival.rate)
        self.trial_requests = trial_requests
        self.budget = scn.hardware.count
        dep = scn.deployment
        self.has_local = dep.local_prefill is not None
        lp = dep.local_prefill
        self.local = (LocalSettings(lp.sm_partitioning, lp.static_encoder_share, min(lp.sm_levels)) if lp is not None
                      else LocalSettings())
        self.preset_dep = get_system(scn.system).defaults_for(scn.hardware.count).get("deployment", {}) or {}
        disp = dep.encoder.dispatch
        self.base_dispatch = {"kind": "poisson_gap"}
        if disp.kind == "poisson_gap":  # keep its other settings (non-default ones only)
            self.base_dispatch.update(disp.model_dump(mode="json", exclude_defaults=True))
        self.base_local = None
        if lp is not None:
            self.base_local = {"tp": lp.tp, **lp.model_dump(mode="json", exclude_defaults=True)}
            self.base_local["offload"] = {"kind": lp.offload.kind,
                                          **lp.offload.model_dump(mode="json", exclude_defaults=True)}
            self.base_local["sm_partitioning"] = lp.sm_partitioning
        self._feasible: dict[Allocation, str | None] = {}

    # ------------------------------------------------------------ scenario mappings
    def _unset(self, dep: dict, pool: str | None, key: str) -> None:
        """Remove ``key`` (of ``pool``) so the preset's value does not come back."""
        holder = dep if pool is None else dep.setdefault(pool, {})
        preset = self.preset_dep if pool is None else (self.preset_dep.get(pool) or {})
        if isinstance(preset, dict) and key in preset:
            holder[key] = None
        else:
            holder.pop(key, None)

    def deployment(self, config: Config) -> dict:
        """The scenario's ``deployment`` mapping with ``config`` applied."""
        a = config.alloc
        dep = copy.deepcopy(self.raw.get("deployment") or {})
        dep["kind"] = "e_p_d"
        enc = dict(dep.get("encoder") or {})
        enc.update(workers=a.n_e, tp=1)
        dep["encoder"] = enc
        self._unset(dep, "encoder", "gpu_ids")
        disp = copy.deepcopy(self.base_dispatch)
        disp.update(kind="poisson_gap", max_batch=int(config.batch_bound))
        enc["dispatch"] = disp
        for pool, n, tp in (("prefill", a.n_p, a.tp_p), ("decode", a.n_d, a.tp_d)):
            spec = dict(dep.get(pool) or {})
            spec.update(workers=n, tp=tp)
            if "pp" in spec:
                spec["pp"] = 1
            dep[pool] = spec
            self._unset(dep, pool, "gpu_ids")
        if a.local_tp:
            local = copy.deepcopy(self.base_local) or {}
            local["tp"] = a.local_tp
            local["offload"] = {**local.get("offload", {"kind": "deficit"}), "remote_fraction": float(config.offload_s)}
            dep["local_prefill"] = local
            self._unset(dep, None, "gpu_sharing")
        elif self.has_local or "local_prefill" in dep:
            dep["local_prefill"] = None
        return dep

    def scenario_raw(self, config: Config, *, num_requests: int | None = None, rate: float | None = None) -> dict:
        """A full scenario mapping for one trial (``num_requests`` None: ``trial_requests``)."""
        raw = copy.deepcopy(self.raw)
        raw["deployment"] = self.deployment(config)
        wl = raw.setdefault("workload", {})
        n = num_requests if num_requests is not None else self.trial_requests
        if n is not None:
            wl["num_requests"] = int(n)
            wl.pop("duration_s", None)
        arrival = dict(wl.get("arrival") or {})
        arrival["rate"] = float(rate if rate is not None else self.rate)
        wl["arrival"] = arrival
        return raw

    def best_scenario(self, config: Config) -> dict:
        """The original scenario (workload untouched) with the chosen deployment."""
        raw = copy.deepcopy(self.raw)
        raw["deployment"] = self.deployment(config)
        return raw

    def validated(self, raw: dict):
        from lmmsim.scenario import validate_scenario

        return validate_scenario(raw)

    def check(self, raw: dict) -> str | None:
        """None when the scenario builds, else the one-line reason."""
        from lmmsim.build import build

        try:
            build(self.validated(raw), self.base_dir)
        except UserError as exc:
            return str(exc)
        return None

    def feasible(self, alloc: Allocation) -> str | None:
        if alloc not in self._feasible:
            cfg = Config(alloc, 1, 0.5 if alloc.local_tp else 1.0)
            self._feasible[alloc] = self.check(self.scenario_raw(cfg, num_requests=1))
        return self._feasible[alloc]

    def default_config(self) -> Config:
        """The scenario's own configuration (its allocation may not be a candidate)."""
        dep = self.scn.deployment
        lp = dep.local_prefill
        alloc = Allocation(dep.encoder.workers, dep.prefill.workers, dep.prefill.tp * dep.prefill.pp,
                           dep.decode.workers, dep.decode.tp * dep.decode.pp, lp.tp if lp is not None else None)
        disp = dep.encoder.dispatch
        b = getattr(disp, "max_batch", 1)
        s = lp.offload.remote_fraction if lp is not None else 1.0
        return Config(alloc, int(b), float(s))

    def profile_key(self) -> str:
        """What capacities depend on: model, GPU, links, cost model, workload shape, policy, dispatch."""
        keep = {k: self.raw.get(k) for k in ("model", "hardware", "policy", "seed", "system")}
        keep["hardware"] = {k: v for k, v in (keep["hardware"] or {}).items() if k != "count"}
        wl = copy.deepcopy(self.raw.get("workload") or {})
        wl.pop("arrival", None)
        wl.pop("num_requests", None)
        wl.pop("duration_s", None)
        keep["workload"] = wl
        keep["max_model_len"] = (self.raw.get("deployment") or {}).get("max_model_len")
        keep["dispatch"] = self.base_dispatch
        return hashlib.sha256(json.dumps(keep, sort_keys=True, default=str).encode()).hexdigest()


"""Stage 1 of HAS, by simulation: per-worker stage capacities from stress runs.

*Capacities* (requests/s of one worker, saturated), from stress runs of the
scenario's own model, GPU and request mix (:func:`profile_capacities`):

* Every stress run: the scenario's requests arrive at ``STRESS_RATE`` (1000
  req/s: a burst, so the stage under test always has a full queue), on a
  virtual machine with as many GPUs as the run needs (the paper profiles "on
  disjoint GPU subsets"), the front-end router set to ``round_robin`` so
  over-provisioned pools share the load evenly, no local prefill. The stage
  under test has **one** worker; its capacity is its completions per second
  over its busy span, ``N / (last completion - first start)`` of that stage's
  per-request timestamps.
* ``C_E`` (one TP1 encoder): completions = ``encode_finished_at``, start =
  ``encode_started_at``. Encoding never waits for downstream (embedding
  sends queue behind it), so nothing else needs isolating. ``B`` doubles
  (1, 2, 4, ...) until the capacity grows by no more than 5%; ``C_E`` is the
  largest capacity seen (``encode_batch``: its B); the curve (capacity per
  B) and the encoder GPU's busy share of each run (``u_E``: a call's host-side
  time leaves it idle) are kept. Runs hold ``8 B`` requests, at least 64
  (or the trial size if smaller). Text-only requests count in ``N`` (so
  ``C_E`` is "requests of this mix per second"); a mix without media has
  ``C_E = inf``.
* ``C_P(tp)`` (one prefill worker at ``tp``): completions = ``first_token_at``,
  start = ``prefill_started_at``; every request asks for one output token,
  so the (largest-TP) decode worker never pushes back; the encoder pool is
  sized to at least twice ``C_P`` (checked after the run, rerun bigger if not).
* ``C_D(tp)`` (one decode worker at ``tp``): real output lengths, completions
  = ``finished_at``. A burst is a poor stress here: equal output lengths
  finish together and the next wave waits for its KV transfers, and an
  overloaded decode worker thrashes (admitted requests outgrow the KV cache
  and are preempted). So a step probe first gives ``c0``: the rate the
  worker's full batch sustains (concurrency / (mean output tokens x the step
  time at that batch and the mix's mean context), from its memory plan and
  cost model: what timing ten full-batch decode steps measures); then
  Poisson streams at ``c0 1.4^k``, k = -2 .. 2, all at once (each its own
  worker), prefill (the TP with the highest capacity) and encoders sized to
  1.25x the stream. A stream's rate = completions between the 20% and the
  80% completion per second; ``C_D`` = the highest ``min(rate, stream
  rate)`` (a stream that keeps up only shows the capacity is at least its
  rate). Runs hold 2x the worker's concurrency (KV capacity / tokens per
  request, at most ``max_running``; at least 64, at most 2000 requests).
  Before issue 17 a burst gave c0 and the streams walked up one after the
  other (4-7 trials of Stage 1 cost, most of it there).

Capacities are cached in memory per (profile-relevant scenario keys, stage,
TP or B): a second search of the same scenario reprofiles nothing.

Sizes (issue 17; the paper: the profiles "together cost less than a single
end-to-end trial"): a prefill stress run holds ``PROFILE_REQUESTS`` (64)
requests, a decode run 2x the worker's concurrency (at least 64), whatever
the trial size; before issue 17 they held the trial's requests (200-500),
and the decode streams ran one after the other, which made Stage 1 cost 4-7
trials.

Cost (:func:`stage1_cost`): every profiling worker (the encoder, a prefill
and a decode worker per TP, a decode worker per stream) deploys at once on
its own GPUs, as the paper's profiles "run in parallel on disjoint GPU
subsets": one deployment, then the longest chain of runs (a worker's runs
follow each other; the decode streams start together after the burst).
HAS's search cost starts from it (:mod:`lmmsim.search.trials`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from lmmsim.errors import UserError
from lmmsim.search.capacity import Allocation, Capacities
from lmmsim.search.mapping import Config, Problem

ENCODE_GROWTH = 0.05  # B doubles while the encode capacity grows by more than this
MAX_PROFILE_BATCH = 256
STRESS_RATE = 1000.0  # req/s of the profiling stress runs (a burst)
TP_CHOICES = (1, 2, 4)
PROFILE_REQUESTS = 64  # requests of a prefill stress run (and the floor of the others)
DECODE_LADDER = (-2, -1, 0, 1, 2)  # decode streams at c0 x 1.4^k (x0.51 .. x1.96), all at once
DECODE_PROBE_STEPS = 10  # full-batch decode steps the step probe times

# (profile key, stage, setting, allocation, B, requests, rate) -> ProfileRun; process-wide, so a
# second search of the same scenario reprofiles nothing.
_CAPACITY_CACHE: dict[tuple, Any] = {}


@dataclass
class ProfileRun:
    stage: str
    setting: int  # B for encode, TP otherwise
    setup: str  # the profiling allocation's label
    requests: int
    capacity_rps: float
    sim_duration_s: float
    wall_s: float
    arrival_rps: float = STRESS_RATE
    cached: bool = False
    gpu_busy_fraction: float = 1.0
    # when the run starts on its worker's own GPUs (s after Stage 1 began, deployment not
    # counted): runs of one (stage, setting) follow each other, except the decode streams,
    # which run at once on disjoint GPU subsets after the burst (stage1_cost)
    starts_at_s: float = 0.0


def _span_rate(df, start_col: str, end_col: str) -> float:
    starts, ends = df[start_col].dropna(), df[end_col].dropna()
    if ends.empty:
        return math.inf
    span = float(ends.max() - starts.min())
    return len(df) / span if span > 0 else math.inf


def _window_rate(df, end_col: str, low: float = 0.2, high: float = 0.8) -> float:
    """Completions per second between the ``low`` and ``high`` quantiles of the completions."""
    ends = df[end_col].dropna().sort_values().to_numpy()
    k1, k2 = int(low * len(ends)), math.ceil(high * len(ends)) - 1
    if k2 <= k1 or ends[k2] <= ends[k1]:
        return math.inf
    return (k2 - k1) / float(ends[k2] - ends[k1])


def _stress_raw(problem: Problem, alloc: Allocation, batch: int, n: int, *, one_token: bool,
                rate: float = STRESS_RATE) -> dict:
    raw = problem.scenario_raw(Config(alloc, batch, 1.0), num_requests=n, rate=rate)
    raw["hardware"] = {**raw["hardware"], "count": alloc.gpus}
    policy = dict(raw.get("policy") or {})
    policy["router"] = {"kind": "round_robin"}
    raw["policy"] = policy
    # a stage's capacity is read from its requests' rows (a few hundred): keep them in memory
    # even when the user's scenario streams its requests to disk
    raw["sim"] = {**(raw.get("sim") or {}), "keep_requests": True}
    wl = raw["workload"]
    wl["arrival"] = {"kind": "poisson", "rate": float(rate)}
    if one_token:
        wl["output_tokens"] = {"kind": "fixed", "value": 1}
        for cls in wl.get("mix") or []:
            if isinstance(cls, dict) and cls.get("output_tokens") is not None:
                cls["output_tokens"] = {"kind": "fixed", "value": 1}
    return raw


def usable_tps(problem: Problem, tp_choices: Sequence[int] = TP_CHOICES) -> dict[str, list[int]]:
    """The TPs (within the GPU budget) each role can use: a worker at that TP builds (memory,
    heads) while the other role runs at the largest TP."""
    tps = sorted(t for t in set(tp_choices) if 1 <= t <= problem.budget)
    if not tps:
        raise UserError("search", f"no TP in {list(tp_choices)} fits a budget of {problem.budget} GPUs")
    big = max(tps)
    out: dict[str, list[int]] = {"prefill": [], "decode": []}
    for tp in tps:
        for role, alloc in (("prefill", Allocation(1, 1, tp, 1, big)), ("decode", Allocation(1, 1, big, 1, tp))):
            if problem.check(_stress_raw(problem, alloc, 1, 1, one_token=False)) is None:
                out[role].append(tp)
    if not out["prefill"] or not out["decode"]:
        why = problem.check(_stress_raw(problem, Allocation(1, 1, big, 1, big), 1, 1, one_token=False))
        raise UserError("search", f"no prefill/decode TP in {tps} fits {problem.scn.model} on "
                                  f"{problem.scn.hardware.gpu}: {why}")
    return out


def _decode_probe(problem: Problem, alloc: Allocation, max_running: int) -> tuple[int, float, float]:
    """``(concurrency, c0, probe_s)`` of one decode worker, from its memory plan and cost model
    (no simulation): the requests it holds at once (KV capacity / tokens per request, at
    most ``max_running``); the rate that batch sustains, ``c0 = concurrency / (mean output
    tokens x step time)``, a step at that batch and the mix's mean context half-way through
    decoding (what timing a few full-batch decode steps on the worker measures); and
    ``probe_s``, the time of ten such steps."""
    from lmmsim.build import build

    raw = _stress_raw(problem, alloc, 1, 64, one_token=False)
    built = build(problem.validated(raw), problem.base_dir)
    kv = built.memory["decode"].kv_capacity_tokens
    reqs = built.requests
    prompt = sum(r.num_prompt_tokens for r in reqs) / max(len(reqs), 1)
    out = sum(r.num_output_tokens for r in reqs) / max(len(reqs), 1)
    conc = max(1, min(max_running, int(kv // max(prompt + out, 1))))
    step = built.costs["decode"].llm_step_s([], conc, conc * (prompt + out / 2), conc)
    c0 = conc / (max(out, 1.0) * step) if step > 0 else math.inf
    return conc, c0, DECODE_PROBE_STEPS * step


def _profile_run(raw: dict, base_dir: Path):
    from lmmsim.results import run_scenario
    from lmmsim.scenario import validate_scenario

    return run_scenario(validate_scenario(raw), base_dir)


def _encoders_for(rate: float, c_e: float) -> int:
    """Encoders for a stream of ``rate`` req/s: twice its load on the encode capacity."""
    return 1 if math.isinf(c_e) else max(1, math.ceil(2 * rate / c_e))


class _StageProfiler:
    """The stress runs of one profiling: each through the in-memory cache, recorded in ``runs``."""

    def __init__(self, problem: Problem, log: Callable[[str], None]):
        self.problem = problem
        self.key = problem.profile_key()
        self.runs: list[ProfileRun] = []
        self.log = log
        self.clock: dict[tuple, float] = {}  # (stage, setting) -> when its worker is free again

    @staticmethod
    def lane(stage: str, setting: int) -> tuple:
        """The worker a run uses: one encoder for every B (B changes at run time), one
        prefill or decode worker per TP."""
        return (stage,) if stage == "encode" else (stage, setting)

    def _start(self, stage: str, setting: int, at: float | None) -> float:
        """When a run starts: ``at`` (a parallel stream), else when its worker's previous run ended."""
        return self.clock.get(self.lane(stage, setting), 0.0) if at is None else at

    def _done(self, rec: ProfileRun) -> None:
        key = self.lane(rec.stage, rec.setting)
        self.clock[key] = max(self.clock.get(key, 0.0), rec.starts_at_s + rec.sim_duration_s)
        self.runs.append(rec)

    def stress(self, stage: str, setting: int, alloc: Allocation, batch: int, n: int, one_token: bool,
               start_col: str, end_col: str, rate_in: float = STRESS_RATE, at: float | None = None) -> float:
        """The capacity one stress run measures (burst: busy-span rate; a slower stream:
        the 20%-80% completion window's rate). ``at``: the run starts then, in parallel
        with the worker's other runs (on its own GPUs), instead of after them."""
        start = self._start(stage, setting, at)
        ck = (self.key, stage, setting, alloc, batch, n, round(rate_in, 6))
        if ck in _CAPACITY_CACHE:
            rec = _CAPACITY_CACHE[ck]
            self._done(ProfileRun(**{**asdict(rec), "cached": True, "starts_at_s": start}))
            return rec.capacity_rps
        raw = _stress_raw(self.problem, alloc, batch, n, one_token=one_token, rate=rate_in)
        t0 = time.perf_counter()
        run = _profile_run(raw, self.problem.base_dir)
        if rate_in >= STRESS_RATE:
            rate = _span_rate(run.requests, start_col, end_col)
        else:
            rate = _window_rate(run.requests, end_col)
        # A stage profile stops once the stage under test is done (a real one runs that
        # stage alone): its cost is the time to the stage's last completion.
        ends = run.requests[end_col].dropna()
        # The first GPU's busy time over the stage's span (encode: the encoder's GPU
        # passes, without its host-side call time).
        span = float(ends.max() - run.requests[start_col].min()) if len(ends) else 0.0
        busy = run.summary["gpu_utilization"]["per_gpu"][0] * (run.summary["window_s"] or 0.0)
        rec = ProfileRun(stage, setting, alloc.label, n, rate, float(ends.max()) if len(ends) else 0.0,
                         time.perf_counter() - t0, arrival_rps=rate_in,
                         gpu_busy_fraction=min(1.0, busy / span) if span > 0 else 1.0, starts_at_s=start)
        _CAPACITY_CACHE[ck] = rec
        self._done(rec)
        return rate

    def encode(self, n0: int, p_big: int, d_big: int) -> tuple[dict[int, float], dict[int, float]]:
        """The encode curve and GPU share per B: B doubles until the capacity stops
        growing by more than 5%."""
        curve: dict[int, float] = {}
        gpu_share: dict[int, float] = {}
        b, prev = 1, None
        while True:
            n = max(min(n0, 64), 8 * b)
            c = self.stress("encode", b, Allocation(1, 1, p_big, 1, d_big), b, n, True,
                            "encode_started_at", "encode_finished_at")
            curve[b] = c
            gpu_share[b] = self.runs[-1].gpu_busy_fraction
            self.log(f"  encode B={b}: {c:.2f} req/s")
            if math.isinf(c) or (prev is not None and c <= prev * (1 + ENCODE_GROWTH)) or b >= MAX_PROFILE_BATCH:
                break
            prev, b = c, b * 2
        return curve, gpu_share

    def prefill(self, n0: int, tps: Sequence[int], d_big: int, b_sat: int, c_e: float) -> dict[int, float]:
        """One worker per TP; encoders >= 2x its capacity; one output token."""
        c_p: dict[int, float] = {}
        for tp in tps:
            n_e, c = 1, None
            for _ in range(4):
                c = self.stress("prefill", tp, Allocation(n_e, 1, tp, 1, d_big), b_sat, n0, True,
                                "prefill_started_at", "first_token_at")
                if _encoders_for(c, c_e) <= n_e:
                    break
                n_e = _encoders_for(c, c_e)
            c_p[tp] = c
            self.log(f"  prefill TP{tp}: {c:.3f} req/s")
        return c_p

    def decode(self, n0: int, tps: Sequence[int], c_p: dict[int, float], b_sat: int, c_e: float) -> dict[int, float]:
        """One worker per TP: the step probe's c0, then streams around it (module docstring)."""
        tp_up = max(c_p, key=lambda t: (c_p[t], -t))
        max_running = getattr(self.problem.scn.policy.batching, "max_running", 256)
        c_d: dict[int, float] = {}
        for tp in tps:
            conc, c0, probe_s = _decode_probe(self.problem, Allocation(1, 1, tp_up, 1, tp), max_running)
            self.clock[self.lane("decode", tp)] = probe_s  # the streams start after the step probe
            n = max(min(n0, PROFILE_REQUESTS), min(2 * conc, 2000))
            c_d[tp] = self._decode_streams(tp, tp_up, c_p[tp_up], b_sat, n, c_e, c0)
            self.log(f"  decode TP{tp}: {c_d[tp]:.3f} req/s (step probe {c0:.3f})")
        return c_d

    def _decode_streams(self, tp: int, tp_up: int, c_p_up: float, b_sat: int, n: int, c_e: float,
                        c0: float) -> float:
        """Poisson streams at c0 x 1.4^k (k in :data:`DECODE_LADDER`), all at once on
        disjoint GPU subsets; ``C_D`` = the highest of ``min(completion rate, stream rate)``
        (a stream that keeps up shows only that the capacity is at least its rate; one
        that falls behind shows the capacity)."""
        start = self.clock[self.lane("decode", tp)]
        best = 0.0
        for k in DECODE_LADDER:
            rate_in = c0 * 1.4 ** k
            up = Allocation(_encoders_for(rate_in, c_e), max(1, math.ceil(1.25 * rate_in / c_p_up)), tp_up, 1, tp)
            c = self.stress("decode", tp, up, b_sat, n, False, "first_token_at", "finished_at",
                            rate_in=rate_in, at=start)
            best = max(best, min(c, rate_in))
        return best


def profile_capacities(problem: Problem, *, tp_choices: Sequence[int] = TP_CHOICES,
                       requests: int | None = None, log: Callable[[str], None] = lambda m: None
                       ) -> tuple[Capacities, list[ProfileRun], dict[str, list[int]]]:
    """Stage 1 profiling (module docstring). Returns the capacities, the runs made and
    the TPs each role can use (``{"prefill": [...], "decode": [...]}``)."""
    n0 = max(requests or min(PROFILE_REQUESTS, problem.trial_requests or PROFILE_REQUESTS), 32)
    profiler = _StageProfiler(problem, log)
    role_tps = usable_tps(problem, tp_choices)
    p_big, d_big = max(role_tps["prefill"]), max(role_tps["decode"])
    curve, gpu_share = profiler.encode(n0, p_big, d_big)
    c_e = max(curve.values())
    b_sat = min(bb for bb, v in curve.items() if v == c_e)
    c_p = profiler.prefill(n0, role_tps["prefill"], d_big, b_sat, c_e)
    c_d = profiler.decode(n0, role_tps["decode"], c_p, b_sat, c_e)
    return Capacities(c_e, c_p, c_d, b_sat, curve, gpu_share), profiler.runs, role_tps


def stage1_cost(runs: Sequence[ProfileRun], deploy_s: float = 0.0) -> float:
    """Simulated profiling time (easerve.txt §3.1: "the three profiles run in parallel on
    disjoint GPU subsets and together cost less than a single end-to-end trial"): every
    profiling worker -- the encoder, one prefill and one decode worker per TP, one decode
    worker per stream -- deploys at once on its own GPUs (one ``deploy_s``), then runs its
    stress runs one after the other (``starts_at_s``); the cost is the deployment plus the
    last run's end. A run answered from the in-memory cache still counts: the cost belongs
    to the method."""
    if not runs:
        return 0.0
    return deploy_s + max(r.starts_at_s + r.sim_duration_s for r in runs)

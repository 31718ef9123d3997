"""RPS-Serve's Queue Manager (rps-serve.txt sections 3.6-3.7): one queue per class.

Requests are classified once, when they first enter (the classifier comes
from :mod:`lmmsim.rps`, fitted at build time from isolated profiling runs),
and kept in their class's queue in arrival order. Within a class every
request has the same static priority and aging grows with waiting time, so
the class's oldest request is its most urgent: the queue's next entry is the
class head with the best (lowest) score -- strict global priority order
across sand, pebbles and rocks. ``refresh(now)`` sets the clock the scores
are computed at (the Priority Regulator runs every iteration).

``priority: edf`` is the ablation's Earliest Deadline First: one queue,
ordered by arrival + the request modality's TTFT SLO.

The queue also scores requests that already run (:meth:`score`), which the
priority scheduler (:mod:`lmmsim.engine.priority_scheduler`) uses to order
prefill chunks and to pick preemption victims.
"""

from __future__ import annotations

import bisect
from typing import Callable, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator

from lmmsim.policies.queueing import QueuePolicy
from lmmsim.policies.registry import register
from lmmsim.rps.priority import ClassParams, PriorityRegulator, default_classes


class ClassParamsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    static: float = Field(ge=0)
    p: float = Field(gt=0)
    k: float = Field(gt=0)


class RpsQueueConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["rps"] = "rps"
    num_classes: int = Field(3, ge=2, le=5)
    # kmeans: clusters of estimated (latency, memory) from isolated profiling
    # runs; naive: text -> sand, image/audio -> pebbles, video -> rocks.
    classifier: Literal["kmeans", "naive"] = "kmeans"
    priority: Literal["rps", "static-only", "aging-only", "edf"] = "rps"
    # (static, p, k) per class, lightest first; default: the paper's for 3 classes
    classes: list[ClassParamsConfig] | None = None
    profile_requests: PositiveInt = 240  # isolated runs the Workload Profiler makes
    profile: str | None = None  # CSV of measured isolated runs instead (same columns)
    preemption: bool = True  # a higher-priority request may evict a lower-priority one
    # When a step's token budget runs out, which running requests the walk did not reach are
    # preempted (KV freed, recompute): "all" is RPS-Serve's artifact (its scheduler.py preempts
    # every RUNNING request past the budget, decodes included, and orders decodes by priority);
    # "prefills" only the running prefills; "none" defers them with their KV kept
    # (lmmsim.engine.priority_scheduler explains the three).
    budget_preemption: Literal["none", "prefills", "all"] = "all"
    # A preempted request resumes from vLLM V1's prefix cache: the leading full blocks of its KV that
    # allocations since have not reused are not recomputed, nor the media inside them (vLLM enables
    # prefix caching by default, and the artifact keeps it); false: recompute and re-encode it all
    # (lmmsim.engine.resume_cache).
    resume_cache: bool = True

    @model_validator(mode="after")
    def _check(self):
        if self.classes is not None and len(self.classes) != self.num_classes:
            raise ValueError(f"classes lists {len(self.classes)} entries but num_classes is {self.num_classes}")
        if self.classifier == "naive" and self.num_classes != 3:
            raise ValueError("the naive classifier has exactly 3 classes (text, image/audio, video)")
        return self

    def class_params(self) -> tuple[ClassParams, ...]:
        if self.classes is None:
            return default_classes(self.num_classes)
        return tuple(ClassParams(c.static, c.p, c.k) for c in self.classes)


def _arrival_key(seq) -> tuple:
    r = seq.request
    return (r.arrived_at, r.request_id)


@register("queue", RpsQueueConfig, "RPS-Serve: per-class queues (sand/pebbles/rocks), priority = static + aging")
class RpsQueue(QueuePolicy):
    """Class queues served in global priority order (lower score first)."""

    preemptive = True  # the scheduler may evict lower-priority running requests

    def __init__(self, config: RpsQueueConfig, *, classify: Callable | None = None,
                 deadline: Callable | None = None):
        self.config = config
        self.preemptive = config.preemption
        self.budget_preemption = config.budget_preemption
        self.resume_cache = config.resume_cache
        edf = config.priority == "edf"
        if edf and deadline is None:
            raise ValueError("priority edf needs a deadline function")
        if not edf and classify is None:
            raise ValueError("the rps queue needs a classifier (built by lmmsim.build)")
        self._classify = (lambda request: 0) if edf else classify
        self._deadline = deadline
        self._edf = edf
        num = 1 if edf else config.num_classes
        self.regulator = None if edf else PriorityRegulator(config.class_params(), config.priority)
        self._keys: list[list[tuple]] = [[] for _ in range(num)]  # sorted (order key, id) per class
        self._entries: list[dict] = [{} for _ in range(num)]  # id -> seq per class
        self._class_of: dict[int, int] = {}
        self.now = 0.0
        self._best: tuple | None = None  # cached (score key, class) of the head, valid until a change

    # ---------------------------------------------------------------- classes
    def class_of(self, seq) -> int:
        rid = seq.request.request_id
        cls = self._class_of.get(rid)
        if cls is None:
            cls = self._class_of[rid] = int(self._classify(seq.request))
        return cls

    def class_counts(self) -> list[int]:
        """Requests classified so far per class (for reports)."""
        counts = [0] * len(self._keys)
        for cls in self._class_of.values():
            counts[cls] += 1
        return counts

    def _order_key(self, seq) -> tuple:
        if self._edf:
            r = seq.request
            return (self._deadline(r), r.request_id)
        return _arrival_key(seq)

    # ---------------------------------------------------------------- scores
    def score(self, seq) -> float:
        """The request's score now (waiting or running): lower runs first."""
        if self._edf:
            return self._deadline(seq.request)
        cls = self.class_of(seq)
        return self.regulator.score(cls, self.now - seq.request.arrived_at, len(self._keys[cls]))

    def sort_key(self, seq) -> tuple:
        """Total order for scheduling: score, then arrival, then id."""
        r = seq.request
        return (self.score(seq), r.arrived_at, r.request_id)

    # ------------------------------------------------------------ QueuePolicy
    def order_key(self, entry) -> tuple:
        return self.sort_key(entry)

    def refresh(self, now: float) -> None:
        if now != self.now:
            self.now = now
            self._best = None

    def add(self, entry) -> None:
        cls = self.class_of(entry)
        key = self._order_key(entry)
        bisect.insort(self._keys[cls], key)
        self._entries[cls][key[-1]] = entry
        self._best = None

    prepend = add  # a preempted request goes back to its place in its class (arrival order)

    def _head_class(self) -> int:
        if self._best is None:
            best = None
            for cls, keys in enumerate(self._keys):
                if keys:
                    seq = self._entries[cls][keys[0][-1]]
                    k = self.sort_key(seq)
                    if best is None or k < best[0]:
                        best = (k, cls)
            self._best = best
        return self._best[1]

    def peek(self):
        cls = self._head_class()
        return self._entries[cls][self._keys[cls][0][-1]]

    def pop(self):
        cls = self._head_class()
        key = self._keys[cls].pop(0)
        self._best = None
        return self._entries[cls].pop(key[-1])

    def __len__(self) -> int:
        return sum(len(k) for k in self._keys)

    def __iter__(self):
        for cls, keys in enumerate(self._keys):
            for key in keys:
                yield self._entries[cls][key[-1]]



"""Waiting-queue policies: in what order waiting requests are offered to the batch.

The protocol follows vLLM v1's request queue: the scheduler peeks the head,
pops it once admitted, and a preempted request is put back in front
(``prepend``) so it resumes first. Entries are engine request states; a policy
only reads their static request (``entry.request``: ``arrived_at``,
``request_id``, ``modality``, ...). Ties are broken on
``(arrived_at, request_id)``, never on hash order, so runs are deterministic.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from typing import Literal

from pydantic import BaseModel, ConfigDict

from lmmsim.policies.registry import register


class QueuePolicy(ABC):
    """Order of the waiting queue. ``refresh(now)`` is called once per engine
    step before the scheduler reads the queue (time-dependent priorities)."""

    @abstractmethod
    def add(self, entry) -> None: ...

    @abstractmethod
    def prepend(self, entry) -> None:
        """Put a preempted entry back so that it is offered first."""

    @abstractmethod
    def peek(self):
        """The entry to offer next (queue must be non-empty)."""

    @abstractmethod
    def pop(self):
        """Remove and return the entry :meth:`peek` returned."""

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def __iter__(self):
        """The waiting entries (any order)."""

    def refresh(self, now: float) -> None:  # noqa: B027 - optional hook
        """Update time-dependent priorities; FCFS has none."""

    def order_key(self, entry) -> tuple:
        """A sort key of ``entry``'s place in the order the queue offers entries now
        (smaller first); the default, arrival order, is FCFS's up to preempted entries
        put back in front. Used outside the batch path (embedding buffer eviction)."""
        r = entry.request
        return (r.arrived_at, r.request_id)


class FcfsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["fcfs"] = "fcfs"


@register("queue", FcfsConfig, "first come, first served (vLLM's default)")
class FcfsQueue(QueuePolicy):
    """First come, first served; preempted requests go back to the head."""

    def __init__(self, config: FcfsConfig | None = None):
        self._entries: deque = deque()

    def add(self, entry) -> None:
        self._entries.append(entry)

    def prepend(self, entry) -> None:
        self._entries.appendleft(entry)

    def peek(self):
        return self._entries[0]

    def pop(self):
        return self._entries.popleft()

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self):
        return iter(self._entries)

"""Step records: what an engine appends, once per step, when step logging is on.

A :class:`StepRecord` is one busy interval of one *track* (a worker, a pipeline
stage or a link): an engine step, an encoder batch, a transfer, or a
fast-forwarded stretch of identical decode steps (``kind="decode_run"``).
:class:`StepLog` collects them. It is a plain ``list`` subclass, so
``log.append(record)`` costs exactly a list append; engines that receive
``step_log=None`` skip logging entirely.

Track names (``worker``) follow one scheme so that traces and plots can order
them (see :func:`lmmsim.tracing.worker_sort_key`): ``"replica0"``,
``"encoder1"``, ``"prefill0"``, ``"prefill0/stage2"``, ``"decode0"``,
``"link:encoder0->prefill0"``.

The log is written out as a Chrome/Perfetto trace by
:func:`lmmsim.tracing.write_chrome_trace`; plots read only that saved file.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

#: Column order of :meth:`StepLog.to_frame` (and of :func:`lmmsim.tracing.read_chrome_trace`).
STEP_COLUMNS: tuple[str, ...] = (
    "worker",
    "start_at",
    "end_at",
    "kind",
    "request_ids",
    "num_tokens",
    "batch_size",
)

#: Known values of :attr:`StepRecord.kind`.
STEP_KINDS: tuple[str, ...] = ("encode", "prefill", "decode", "mixed", "transfer", "decode_run")


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One busy interval of one track.

    ``num_tokens``: LLM tokens computed in the step (an encoder step: LLM
    tokens its outputs become; a transfer: 0). ``batch_size``: sequences or
    media items in the step; for ``decode_run`` the number of decode steps the
    record stands for (each over the same batch). ``request_ids`` may be empty
    for a ``decode_run``.

    ``kv_blocks_used``, ``num_waiting``, ``num_running``: the engine's KV blocks
    in use and its waiting / running request counts when the step starts (after
    admission), for the trace's counter tracks; -1 (the default) where the track
    has none (encoders, links, host workers, later pipeline stages). They take no
    part in equality and are not columns of :meth:`StepLog.to_frame`.
    """

    worker: str
    start_at: float
    end_at: float
    kind: str
    request_ids: tuple[int, ...]
    num_tokens: int
    batch_size: int
    kv_blocks_used: int = field(default=-1, compare=False)
    num_waiting: int = field(default=-1, compare=False)
    num_running: int = field(default=-1, compare=False)

    @property
    def duration_s(self) -> float:
        return self.end_at - self.start_at


def engine_counters(sched) -> dict[str, int]:
    """Counter fields of a :class:`StepRecord` for an engine with scheduler ``sched`` (KV pool and queue)."""
    pool, queue = getattr(sched, "pool", None), getattr(sched, "queue", None)
    return {"kv_blocks_used": pool.num_used if pool is not None else -1,
            "num_waiting": len(queue) if queue is not None else -1,
            "num_running": getattr(sched, "num_running", -1)}


class StepLog(list):
    """Append-only collector of :class:`StepRecord` (a ``list``; append is list.append)."""

    __slots__ = ()

    def to_frame(self) -> pd.DataFrame:
        """One row per record, columns :data:`STEP_COLUMNS`; ``request_ids`` stays a tuple."""
        return records_to_frame(self)


def records_to_frame(records) -> pd.DataFrame:
    """Frame of any iterable of :class:`StepRecord` (columns :data:`STEP_COLUMNS`)."""
    records = list(records)
    frame = pd.DataFrame(
        {
            "worker": pd.Series([r.worker for r in records], dtype=object),
            "start_at": pd.Series([r.start_at for r in records], dtype="float64"),
            "end_at": pd.Series([r.end_at for r in records], dtype="float64"),
            "kind": pd.Series([r.kind for r in records], dtype=object),
            "request_ids": pd.Series([tuple(r.request_ids) for r in records], dtype=object),
            "num_tokens": pd.Series([r.num_tokens for r in records], dtype="int64"),
            "batch_size": pd.Series([r.batch_size for r in records], dtype="int64"),
        },
        columns=list(STEP_COLUMNS),
    )
    return frame

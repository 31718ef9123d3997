"""A pipeline whose every slot decodes, computed without events.

Inside a run ahead (:mod:`lmmsim.engine.pipeline_ff`), once every slot's cohort
has members and no grant or change event is queued, nothing zero-time is left to
order: no slot waits on the change signal (a slot only waits after an empty
batch) and every grant is immediate. Then the engine's events are only batches
leaving stage 0 and batches leaving the last stage, and the engine state is the
holder of stage 0, the FIFO of slots waiting for it and the FIFO of batches past
it (they leave the last stage in the order they left stage 0: each enters a
stage after the one ahead left it). :func:`run_steady` advances that state in
a plain loop, exactly as the handlers would, and stops before the first event
the handlers must see: an outside event may come first (``barrier``), a
completion finishes a request, the next grant's KV blocks do not fit, or two
events tie (the handlers order them by event id). It then puts the pending
events back in the private queue, their event ids drawn in the order the
handlers would have drawn them.
"""

from __future__ import annotations

import math
from collections import deque
from heapq import heapify

from lmmsim.engine.clock import LATE
from lmmsim.engine.pipeline_batch import pass_stages


def steady(engine, ahead) -> bool:
    """May :func:`run_steady` take over now (every slot decoding, nothing zero-time queued)?"""
    return ahead.all_decode and not engine._zero_pending


def run_steady(engine, ahead, queue, barrier: float) -> int:
    """Advance the steady pipeline; returns the batches it completed."""
    state = _queued_state(ahead, queue)
    if state is None:
        return 0
    holder, (hold_end, hold, flight) = engine._holder, state
    waiting = engine._waiting0
    step, blocks_needed, step0 = ahead.step, ahead.blocks_needed, ahead.step0
    size, ctx0, act, finish_step = ahead.size, ahead.ctx0, ahead.act, ahead.finish_step
    free, busy = engine._stage_free, engine.stage_busy_s
    num_stages, llm_step_s, ends = engine.num_stages, ahead.llm_step_s, ahead.ends
    cpp, eid = engine.chunk_pipelining, engine.env._eid
    created = []  # events built here ([when, slot, step, None, start, stage_s] lists), in creation order
    # the change signals, kept as their keys (None until triggered) and made objects only at the
    # end for those still held: index 0 is the engine's signal as it was, ``cur`` the engine's
    # current one, ``held[slot]`` the one each slot took when it last asked here
    first = engine._changed
    signals, cur, held = [first.key if first.triggered else None], 0, {}
    done_count, kv_free, last_grant = 0, ahead.kv_free, None
    while True:
        d = flight[0][0] if flight else math.inf
        if hold_end < d:  # the holder leaves stage 0; the first in line takes it
            t = hold_end
            if t >= barrier:
                break
            if waiting:
                need = blocks_needed[waiting[0]](step[waiting[0]])
                if need > kv_free:
                    break
            start, stage_s, s_step = (hold[4], hold[5], hold[2]) if hold[3] is None else hold[:3]
            busy[0] += stage_s + 0.0
            if cpp and signals[cur] is None:  # stage 0's notify (nobody waits: drawn, not queued)
                signals[cur] = (t, LATE, next(eid))
            hold[3] = False  # its event has run
            item = [pass_stages(free, busy, t, act[holder], stage_s, num_stages), holder, s_step, None, start, stage_s]
            created.append(item)
            flight.append(item)
            if not waiting:
                holder, hold_end, hold = None, math.inf, None
                continue
            holder = waiting.popleft()
        elif d < hold_end:  # a batch leaves the last stage; its slot asks again
            t, s, s_step = flight[0][0], flight[0][1], flight[0][2]
            if t >= barrier or s_step == finish_step[s]:
                break
            step[s] += 1
            if holder is None:
                need = blocks_needed[s](step[s])
                if need > kv_free:
                    step[s] -= 1
                    break
            flight.popleft()[3] = False
            ends[s].append(t)
            done_count += 1
            if signals[cur] is None:  # the completion notifies, then its slot's ask takes a fresh signal
                signals[cur] = (t, LATE, next(eid))
            cur = held[s] = len(signals)
            signals.append(None)
            if holder is not None:
                waiting.append(s)
                continue
            holder = s
        else:
            break
        # stage 0 granted to ``holder`` at ``t``: its batch is built from its cohort's counters
        n, k = size[holder], step[holder] - step0[holder]
        kv_free -= need
        stage_s = llm_step_s((), n, ctx0[holder] + n * k, n) / num_stages
        last_grant = t
        hold = [t + (stage_s + 0.0), holder, step[holder], None, t, stage_s]
        created.append(hold)
        hold_end = hold[0]
    engine.num_steps += done_count
    engine._holder = holder
    _signals_out(engine, signals, cur, held)
    ahead.kv_free = kv_free
    if last_grant is not None:
        ahead.last_grant = last_grant
    _rebuild(ahead, queue, flight, hold, created)
    return done_count


def _signals_out(engine, signals: list, cur: int, held: dict) -> None:
    """The change signals still held, as the engine's objects: the one it had, triggered if
    it was here, and one new object per signal made here that the engine or a slot holds."""
    first = engine._changed
    if signals[0] is not None and not first.triggered:
        first.triggered, first.key = True, signals[0]
    made = {0: first}
    for i in {cur, *held.values()} - {0}:
        change = made[i] = type(first)()
        if signals[i] is not None:
            change.triggered, change.key = True, signals[i]
    engine._changed = made[cur]
    for s, i in held.items():
        engine._slot_changed[s] = made[i]


def _queued_state(ahead, queue):
    """(end of the holder's stage 0, the holder's batch, the FIFO of batches past stage 0) read
    from the private queue; None if it holds another kind of event or is out of pipeline order."""
    hold_end, hold = math.inf, None
    flight: deque = deque()  # [done_at, slot, step, queued entry or None], in completion order
    for entry in sorted(queue.heap):
        if entry[3] is ahead.h_left0:
            run = entry[4]
            hold_end, hold = entry[0], [run.start, run.stage_s, run.step, entry]
        elif entry[3] is ahead.h_done:
            flight.append([entry[0], entry[4].slot, entry[4].step, entry])
        else:
            return None
    if any(a[0] >= b[0] for a, b in zip(flight, list(flight)[1:])):
        return None
    return hold_end, hold, flight


def _rebuild(ahead, queue, flight, hold, created) -> None:
    """The pending events back in the private queue: those that were queued keep their keys,
    those built here get event ids in the order the handlers would have drawn them."""
    eid = queue.env._eid
    heap = [item[3] for item in flight if item[3]]
    if hold is not None and hold[3]:
        heap.append(hold[3])
    for item in created:
        key_id = next(eid)  # drawn whether or not its event has run since, as the handlers draw it
        if item[3] is not None:
            continue  # it has run
        when, s, s_step, _, start, stage_s = item
        run = ahead.new_run(s, s_step, start, stage_s)
        if item is hold:
            heap.append((when, LATE, key_id, ahead.h_left0, run))
        else:
            run.done_at = when
            heap.append((when, LATE, key_id, ahead.h_done, run))
    heapify(heap)
    queue.heap[:] = heap

"""A pipeline whose slots decode or sit empty, computed without events.

Inside a run ahead (:mod:`lmmsim.engine.pipeline_ff`), once no grant or change
event is queued and the slots without members move as one block (below),
nothing zero-time is left to order: the engine's timed events are only batches
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

Empty slots. A slot whose cohort has no members gets an empty batch at each
grant: it frees stage 0 at once and waits on the change signal, which wakes it
at the next notify to ask again. Members never join or leave while running
ahead, so those slots stay empty and all of them do the same thing at the same
instants: they are granted, ask and wait one after the other, keeping their
order, all holding the same signal, either all in that signal's waiters or
side by side in stage 0's line. :class:`_Block` moves them as one, which costs
nothing in time (their batches take none) and leaves every decoding slot's
grant where the handlers put it; what it tracks is where the block is and which
signal it holds, so that what follows the stretch -- an arrival waking the
first of them -- sees the state the handlers would have left.
"""

from __future__ import annotations

import math
from collections import deque
from heapq import heapify
from itertools import count

from lmmsim.engine.clock import LATE

BLOCK = -1  # the empty slots' place in stage 0's line


def steady(engine, ahead) -> bool:
    """May :func:`run_steady` take over now (a slot decoding, nothing zero-time queued)?"""
    return ahead.any_decode and not engine._zero_pending


class _Signals:
    """The change signals while the loop runs, kept as their keys (None until triggered):
    index 0 is the engine's signal as it was (1: an older one the empty slots hold), ``cur``
    the engine's current one, ``held[slot]`` the one each decoding slot took when it last
    asked here, ``fired`` those processed (the empty slots waited on them)."""

    __slots__ = ("keys", "cur", "held", "fired", "objects")

    def __init__(self, engine):
        first = engine._changed
        self.keys = [first.key if first.triggered else None]
        self.objects = {0: first}
        self.cur, self.held, self.fired = 0, {}, set()

    def fresh(self) -> int:
        """A slot asks: it takes the engine's signal, a new one if that has been triggered."""
        if self.keys[self.cur] is not None:
            self.cur = len(self.keys)
            self.keys.append(None)
        return self.cur

    def write_back(self, engine, block) -> None:
        """The signals still held, as the engine's objects: the ones it had, triggered or
        processed if they were here, and one new object per signal made here that is held."""
        made = self.objects
        for i in {self.cur, *self.held.values(), *((block.sig,) if block else ())} - made.keys():
            made[i] = type(engine._changed)()
        for i, change in made.items():
            if self.keys[i] is not None and not change.triggered:
                change.triggered, change.key = True, self.keys[i]
            if i in self.fired:
                change.queued, change.waiters = True, None
        engine._changed = made[self.cur]
        for s, i in self.held.items():
            engine._slot_changed[s] = made[i]
        if block is not None:
            block.write_back(engine, made[block.sig])


class _Block:
    """The empty slots, in their order: in the waiters of signal ``sig`` (``waits``) or at
    :data:`BLOCK`'s place in stage 0's line, holding ``sig``."""

    __slots__ = ("slots", "sig", "waits")

    def __init__(self, slots: tuple, sig: int, waits: bool):
        self.slots, self.sig, self.waits = slots, sig, waits

    @classmethod
    def read(cls, engine, signals: _Signals, empty: list, line: deque):
        """The empty slots as one block, with ``line`` (stage 0's) holding :data:`BLOCK` in
        their place; None if there is none, False if they are not one block."""
        if not empty:
            return None
        change = engine._changed
        if change.waiters and len(change.waiters) == len(empty) and set(change.waiters) == set(empty):
            return cls(tuple(change.waiters), 0, True) if not change.triggered and not set(line) & set(empty) else False
        held = {id(engine._slot_changed[s]) for s in empty}
        at = [i for i, s in enumerate(line) if s in empty]
        if change.waiters or len(at) != len(empty) or at[-1] - at[0] != len(at) - 1 or len(held) != 1:
            return False
        x = engine._slot_changed[empty[0]]
        slots = tuple(line[i] for i in at)
        for _ in at:
            del line[at[0]]
        line.insert(at[0], BLOCK)
        if x is change:
            return cls(slots, 0, False)
        if not x.triggered or x.waiters is None:
            return False
        signals.keys.append(x.key)
        signals.objects[1] = x
        return cls(slots, 1, False)

    def asked(self, signals: _Signals, line: deque, holder) -> bool:
        """The signal the block waits on fired: its slots ask; with stage 0 free they are
        granted, freeing it at once, and wait on the (untriggered) signal they took. True if
        they were granted."""
        signals.fired.add(self.sig)
        self.sig = signals.fresh()
        if holder is not None:
            line.append(BLOCK)
            self.waits = False
            return False
        self.waits = True
        return True

    def granted(self, signals: _Signals, line: deque, t: float):
        """The block took stage 0 at ``t``, first in line: each slot frees it and waits on its
        signal -- or asks again at once if that was triggered before ``t``. Returns the
        decoding slot granted after it, or None."""
        key = signals.keys[self.sig]
        if key is None:  # untriggered: they wait on it
            self.waits = True
            return line.popleft() if line else None
        if key[0] < t:  # processed: they ask again, behind whoever is in line
            self.sig = signals.fresh()
            if line:
                nxt = line.popleft()
                line.append(BLOCK)
                self.waits = False
                return nxt
            self.waits = True  # alone: granted again, they wait on the new signal
            return None
        nxt = line.popleft() if line else None  # triggered now: its fire runs after that grant
        self.asked(signals, line, nxt)
        return nxt

    def write_back(self, engine, change) -> None:
        for s in self.slots:
            engine._slot_changed[s] = change
        if self.waits:
            change.waiters = list(self.slots)
            return
        line = engine._waiting0
        at = line.index(BLOCK)
        line.remove(BLOCK)
        for s in reversed(self.slots):
            line.insert(at, s)


def run_steady(engine, ahead, queue, barrier: float) -> int:
    """Advance the steady pipeline; returns the batches it completed."""
    state = _queued_state(ahead, queue)
    if state is None:
        return 0
    busy = engine.stage_busy_s
    if any(b != busy[1] for b in busy[2:]):  # stages 1 and on are charged together (pass_stages)
        return 0
    signals = _Signals(engine)
    line = deque(engine._waiting0)
    block = _Block.read(engine, signals, [s for s, n in enumerate(ahead.size) if not n], line)
    if block is False:
        return 0
    env = engine.env
    first_id = next(env._eid)  # the loop numbers the events it draws itself, from here on
    holder, hold, done_count, kv_free, last_grant, next_id, made = _advance(
        engine, ahead, barrier, signals, block, line, state, first_id)
    env._eid = count(next_id + made)  # as if drawn one by one: those of the loop, then one per event made
    engine.num_steps += done_count
    engine._holder = holder
    engine._waiting0.clear()
    engine._waiting0.extend(line)
    signals.write_back(engine, block)
    ahead.kv_free = kv_free
    if last_grant is not None:
        ahead.last_grant = last_grant
    _rebuild(ahead, queue, state[2], hold, next_id)  # state[2]: the batches past stage 0, as _advance left them
    return done_count


def _advance(engine, ahead, barrier, signals, block, line, state, next_id):
    """The loop: each turn one batch leaves stage 0 or the last stage, and stage 0's next holder
    builds its batch. Event ids are numbered from ``next_id``: the change signals' keys as drawn,
    then the events made ``(when, slot, step, None, start, stage_s, k)``, by k (:func:`_rebuild`).
    Returns (holder, its batch, batches done, KV free, last grant, next event id, events made)."""
    holder, (hold_end, hold, flight), keys, held = engine._holder, state, signals.keys, signals.held
    step, phase, block_size, size, need = ahead.step, ahead.phase, ahead.block_size, ahead.size, 0
    free, busy, stages, finish_step = engine._stage_free, engine.stage_busy_s, range(1, engine.num_stages), ahead.finish_step
    num_stages, step_cost, ends, kv_free, act = engine.num_stages, ahead.step_cost, ahead.ends, ahead.kv_free, ahead.act
    cpp, cur, made, done_count, last_grant, inf = engine.chunk_pipelining, signals.cur, 0, 0, None, math.inf
    later = busy[1] if num_stages > 1 else 0.0  # stages 1 and on are charged alike (run_steady)
    ctx = [c + n * (k - k0) for c, n, k, k0 in zip(ahead.ctx0, size, step, ahead.step0)]  # each slot's context
    while True:
        d = flight[0][0] if flight else inf
        if hold_end < d:  # the holder leaves stage 0; the first decoding slot in line takes it
            t = hold_end
            if t >= barrier:
                break
            nxt = (line[0] if line[0] != BLOCK else line[1] if len(line) > 1 else None) if line else None
            if nxt is not None and (need := phase[nxt][-step[nxt] % block_size]) > kv_free:
                break
            start, stage_s, s_step = hold[4], hold[5], hold[2]
            busy[0] += stage_s  # (the handlers add stage_s + 0.0: the same float, stage_s > 0)
            fire = cpp and keys[cur] is None
            if fire:  # stage 0's notify (drawn; queued if the block waits)
                keys[cur], next_id = (t, LATE, next_id), next_id + 1
                fire = block is not None and block.waits and block.sig == cur
            u, a = t, act[holder]  # stages 1 and on, as pass_stages (lmmsim.engine.pipeline_batch) runs them
            for s in stages:
                u += a
                f = free[s]
                u = (f if f > u else u) + stage_s
                free[s] = u
            later += stage_s
            flight.append((u, holder, s_step, None, start, stage_s, made))
            made += 1
            holder = line.popleft() if line else None
            if holder == BLOCK or fire:  # the empty slots' turn
                holder, cur, last_grant = _block_turn(signals, block, line, holder, fire, t, cur, last_grant)
            if holder is None:
                hold_end, hold = inf, None
                continue
        elif d < hold_end:  # a batch leaves the last stage; its slot asks again
            t, s, s_step = flight[0][0], flight[0][1], flight[0][2]
            if t >= barrier or s_step == finish_step[s]:
                break
            step[s] += 1
            if holder is None and (need := phase[s][-step[s] % block_size]) > kv_free:
                step[s] -= 1
                break
            flight.popleft()
            ctx[s] += size[s]
            ends[s].append(t)
            done_count += 1
            fire = keys[cur] is None
            if fire:  # the completion notifies, then its slot's ask takes a fresh signal
                keys[cur], next_id = (t, LATE, next_id), next_id + 1
                fire = block is not None and block.waits and block.sig == cur
            cur = held[s] = len(keys)  # the signal is triggered now: the ask takes a new one
            keys.append(None)
            granted = holder is None
            holder = s if granted else holder
            if not granted:
                line.append(s)
            if fire:
                _, cur, _ = _block_turn(signals, block, line, holder, fire, t, cur, None)
            if not granted:
                continue
        else:
            break
        # stage 0 granted to ``holder`` at ``t``: its batch is built from its cohort's counters
        kv_free -= need
        stage_s = step_cost[holder](ctx[holder]) / num_stages
        last_grant, hold = t, (t + stage_s, holder, step[holder], None, t, stage_s, made)
        made += 1
        hold_end = hold[0]
    signals.cur = cur
    for s in stages:
        busy[s] = later
    return holder, hold, done_count, kv_free, last_grant, next_id, made


def _block_turn(signals, block, line, holder, fire, t, cur, last_grant):
    """In :func:`_advance` at ``t``: the empty slots' block is granted stage 0 (``holder`` is
    :data:`BLOCK`) and/or the signal it waits on fired; returns (the holder after it, the
    current signal, the last grant)."""
    signals.cur = cur
    if holder == BLOCK:
        holder, last_grant = block.granted(signals, line, t), t
    if fire and block.asked(signals, line, holder):
        last_grant = t
    return holder, signals.cur, last_grant


def _queued_state(ahead, queue):
    """(end of the holder's stage 0, the holder's batch, the FIFO of batches past stage 0) read
    from the private queue, laid out as :func:`_advance` makes them but with their queued entry
    at item 3; None if it holds another kind of event or is out of pipeline order (completions
    at strictly increasing times)."""
    hold_end, hold = math.inf, None
    flight: deque = deque()  # (done_at, slot, step, queued entry), in completion order
    left0, done, last = ahead.h_left0, ahead.h_done, -math.inf
    for entry in sorted(queue.heap):
        fn, run = entry[3], entry[4]
        if fn is done:
            if entry[0] <= last:
                return None
            last = entry[0]
            flight.append((last, run.slot, run.step, entry))
        elif fn is left0:
            hold_end, hold = entry[0], (entry[0], run.slot, run.step, entry, run.start, run.stage_s)
        else:
            return None
    return hold_end, hold, flight


def _rebuild(ahead, queue, flight, hold, next_id: int) -> None:
    """The pending events back in the private queue: those that were queued keep their keys,
    those made here take ids from ``next_id`` in the order they were made, as the handlers
    would have drawn them."""
    heap = [item[3] for item in flight if item[3]]
    made = [item for item in flight if item[3] is None]
    if hold is not None and hold[3]:
        heap.append(hold[3])
    elif hold is not None and hold[3] is None:
        made.append(hold)
    for item in made:
        when, s, s_step, _, start, stage_s, k = item
        run = ahead.new_run(s, s_step, start, stage_s)
        if item is hold:
            heap.append((when, LATE, next_id + k, ahead.h_left0, run))
        else:
            run.done_at = when
            heap.append((when, LATE, next_id + k, ahead.h_done, run))
    heapify(heap)
    queue.heap[:] = heap

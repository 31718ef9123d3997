"""Decoding requests that advance in lock step: one batch slot of an engine.

Every step a cohort runs, each member computes one token. Members are kept as
offsets from the cohort's step counter, so a step costs O(1) per member that
joins or leaves, not per member:

* ``num_computed`` of a member is ``dec_base + step_no`` (before the step runs);
* its KV grows a block whenever that is a multiple of the block size; members
  are counted per residue class (``_phase_counts``), so the blocks a step
  needs are one look-up;
* the attended context sum is ``sum(dec_base) + n * (step_no + 1)``;
* completions sit in a heap keyed by the step that produces the last token;
* ``step_ends[k]`` is when step ``k`` ended (one float per step, fast-forwarded
  ones included), and a member that leaves appends ``(step_ends, first, stop)``
  to its ``token_spans``: it emitted one token at each ``step_ends[first:stop]``
  (:mod:`lmmsim.metrics.itl` expands them into inter-token latencies).

Bounded memory (``sim.keep_requests: false``): ``step_ends`` is a :class:`StepEnds`,
a list whose item ``k - step_ends.base`` is step ``k``'s end. :meth:`DecodeCohort.bound_ends`
has the cohort drop, now and then, the steps no request can still need: those before
the oldest member's entry step and before every span not yet consumed (a span is
*pinned* from :meth:`leave` until its request's ITL is taken, :meth:`StepEnds.unpin`). Before
dropping them it hands them to ``on_trim(step_ends, new_base)``, which counts the gaps
there (lmmsim.metrics.stream). Without it nothing is ever dropped (``base`` stays 0).

A monolithic engine has one cohort. A pipeline-parallel engine has one per
micro-batch slot (vLLM's virtual engines): a member stays in its slot.
"""

from __future__ import annotations

import heapq

from lmmsim.engine.kv_cache import blocks_for


#: Steps between two looks for droppable step ends (bounded-memory runs only).
TRIM_EVERY = 16384


def decode_step_cost(cost, batch: int):
    """``context_sum -> cost.llm_step_s((), batch, context_sum, batch)``: a cohort's decode-only
    step of ``batch`` members at a given attended context, as the fast-forwards price one
    every step. The cost model's own folded function where it has one (``decode_step_at``:
    the same floats, fewer calls), else a wrapper."""
    at = getattr(cost, "decode_step_at", None)
    if at is not None:
        return at(batch)
    step = cost.llm_step_s
    return lambda context_sum: step((), batch, context_sum, batch)


def plan_step_s(cost, plan) -> float:
    """``cost.llm_step_s`` of the batch ``plan`` (a non-empty one): a decode-only batch through
    :func:`decode_step_cost` -- the same float in fewer calls (under a light load most batches
    that are not fast-forwarded are decode-only ones)."""
    if not plan.chunks and plan.num_sampled == plan.num_decodes:
        return decode_step_cost(cost, plan.num_decodes)(plan.decode_context_sum)
    return cost.llm_step_s(plan.chunk_shapes, plan.num_decodes, plan.decode_context_sum, plan.num_sampled)


class StepEnds(list):
    """A cohort's step end times; item ``k - base`` is step ``k``'s (``base``: steps dropped)."""

    __slots__ = ("base", "cover", "pins")

    def __init__(self):
        super().__init__()
        self.base = 0
        self.cover: list = []  # (lo, hi, modality code) of consumed spans (lmmsim.metrics.stream)
        self.pins: dict[int, int] | None = None  # first step of an unconsumed span -> how many

    def unpin(self, first: int) -> None:
        """The span that started at step ``first`` has been consumed."""
        if self.pins is None:
            return
        left = self.pins[first] - 1
        if left:
            self.pins[first] = left
        else:
            del self.pins[first]


class DecodeCohort:
    def __init__(self, block_size: int):
        self.block_size = block_size
        self.step_no = 0  # index of the next step this cohort runs
        self.members: dict[int, object] = {}  # request_id -> SeqState, join order
        self._finish_heap: list = []  # (finish_step, admit_order, request_id)
        self._phase_counts = [0] * block_size
        self._base_sum = 0
        self.step_ends = StepEnds()  # end time of each step run so far (from ``step_ends.base``)
        self._next_trim = float("inf")  # step_no at which to look for droppable steps (bound_ends)
        self._on_trim = None
        self.version = 0  # counts joins and leaves: views of the members are current while it stands

    def __len__(self) -> int:
        return len(self.members)

    @property
    def phase_counts(self) -> list:
        """Members by ``dec_base`` residue: step ``k`` needs ``phase_counts[-k % block_size]`` new
        blocks (a fast-forward's loop reads it inline; never to be changed by the reader)."""
        return self._phase_counts

    def blocks_needed(self, step_no: int) -> int:
        """New KV blocks the members need in step ``step_no``."""
        return self._phase_counts[-step_no % self.block_size]

    def context_sum(self, step_no: int) -> int:
        """Total attended context of the members in step ``step_no``."""
        return self._base_sum + len(self.members) * (step_no + 1)

    def steps_to_next_finish(self) -> int:
        """Steps until (and including) the next completion; 0 if none."""
        heap = self._finish_heap
        while heap:
            fstep, _, rid = heap[0]
            seq = self.members.get(rid)
            if seq is not None and seq.finish_step == fstep:
                return fstep - self.step_no + 1
            heapq.heappop(heap)  # stale entry of a request that left early
        return 0

    def enter(self, seq) -> None:
        """Join at the current step boundary with the request's counters as they are."""
        step = self.step_no
        self.version += 1
        seq.in_decode = True
        seq.cohort = self
        seq.dec_base = seq.num_computed - step
        seq.gen_base = seq.num_generated - step
        seq.finish_step = seq.request.num_output_tokens - 1 - seq.gen_base
        self._phase_counts[seq.dec_base % self.block_size] += 1
        self._base_sum += seq.dec_base
        self.members[seq.request.request_id] = seq
        heapq.heappush(self._finish_heap, (seq.finish_step, seq.admit_order, seq.request.request_id))

    def leave(self, seq) -> None:
        """Leave at the current step boundary; materialises the request's counters."""
        del self.members[seq.request.request_id]
        self.version += 1
        self._phase_counts[seq.dec_base % self.block_size] -= 1
        self._base_sum -= seq.dec_base
        seq.in_decode = False
        seq.cohort = None
        first = seq.num_generated - seq.gen_base  # the step it entered at (num_generated is not yet moved)
        if self.step_no > first:
            seq.token_spans.append((self.step_ends, first, self.step_no))
            pins = self.step_ends.pins
            if pins is not None:
                pins[first] = pins.get(first, 0) + 1
        seq.num_computed = seq.num_scheduled = seq.dec_base + self.step_no
        seq.num_generated = seq.gen_base + self.step_no
        seq.num_blocks = blocks_for(seq.num_computed, self.block_size)

    def advance(self, ended_at: float) -> list:
        """Count one step, ended at ``ended_at``, as run (see :meth:`advance_many`)."""
        self.step_ends.append(ended_at)
        last = self.step_no
        self.step_no = last + 1
        if last >= self._next_trim:
            self._trim()
        heap = self._finish_heap
        if not heap or heap[0][0] > last:  # the common case: nobody finished
            return []
        return self._pop_finished(last)

    def advance_many(self, ends: list) -> list:
        """Count ``len(ends)`` steps, ended at ``ends``, as run; return members that
        produced their last token in them (they are left, in completion-step then
        admission order)."""
        self.step_ends.extend(ends)
        self.step_no += len(ends)
        done = self._pop_finished(self.step_no - 1)
        if self.step_no > self._next_trim:
            self._trim()
        return done

    # ------------------------------------------------ bounded memory (module docstring)
    def bound_ends(self, on_trim) -> None:
        """Drop step ends no request can need any more, handing them to ``on_trim`` first."""
        self.step_ends.pins, self._on_trim = {}, on_trim
        self._next_trim = self.step_no + TRIM_EVERY

    def needed_from(self) -> int:
        """The first step whose end a member or an unconsumed span may still read."""
        low = self.step_no
        for seq in self.members.values():  # join order: the first joined earliest
            low = min(low, seq.num_generated - seq.gen_base)
            break
        return min(low, min(self.step_ends.pins, default=low))

    def _trim(self) -> None:
        self._next_trim = self.step_no + TRIM_EVERY
        ends = self.step_ends
        new_base = self.needed_from()
        if new_base - ends.base < TRIM_EVERY // 2:
            return
        self._on_trim(ends, new_base)
        del ends[: new_base - ends.base]
        ends.base = new_base

    def _pop_finished(self, last: int) -> list:
        done = []
        heap = self._finish_heap
        while heap and heap[0][0] <= last:
            fstep, _, rid = heapq.heappop(heap)
            seq = self.members.get(rid)
            if seq is None or seq.finish_step != fstep:
                continue
            self.leave(seq)
            done.append(seq)
        return done

    def newest(self):
        """The most recently admitted member, or None."""
        best = None
        for seq in self.members.values():
            if best is None or seq.admit_order > best.admit_order:
                best = seq
        return best

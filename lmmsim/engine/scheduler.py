"""Continuous batching with chunked prefill, as vLLM v1 and Sarathi-Serve do it.

Pure Python, no SimPy: :meth:`ContinuousBatchingScheduler.schedule` builds the
next step's batch and :meth:`complete` applies its outcome, so the scheduler is
testable with hand-built requests and an explicit clock.

Per step, with a token budget decremented per decision:

1. every decoding request gets one token (they always fit: the scenario
   requires ``max_running <= token_budget``, as vLLM requires
   ``max_num_seqs <= max_num_batched_tokens``);
2. running requests still in prefill get ``min(remaining, budget)`` tokens, in
   admission order;
3. if nothing was preempted, waiting requests are admitted in queue-policy
   order while budget, ``max_running`` and KV blocks allow.

Decodes go first (Sarathi-Serve's stall-free order). vLLM v1 walks its running
list in admission order instead; the two orders differ only when an earlier
admitted request is still in prefill while a later one decodes, which needs an
encoder-budget cut and is rare.

Multimodal input follows vLLM v1's encoder cache: a chunk whose positions
overlap a not-yet-encoded media item encodes the whole item in this step,
within a per-step encoder budget (in LLM tokens); if the budget cannot take the
item, the chunk stops just before it. Encoded items stay cached until their
positions are computed; a preempted request re-encodes.

KV blocks run out -> preempt by recompute the most recently admitted running
request (vLLM's victim), which returns to the head of the waiting queue and
later recomputes its prompt plus the tokens it had generated.

Decoding requests advance in lock step, so their state is kept as offsets
from the step counter: a step costs O(1) per decoding request joining or
leaving, not per running request. ``num_computed`` of a decoding request is
``dec_base + step_no``; its KV grows a block whenever that is a multiple of
the block size, counted per residue class (``_phase_counts``).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

from lmmsim.engine.kv_cache import BlockPool, blocks_for
from lmmsim.workload.request import PromptSegment, Request

NAN = math.nan


class SeqState:
    """Mutable engine state of one request (and its timeline record)."""

    __slots__ = (
        "request", "num_computed", "num_generated", "next_media", "admit_order",
        "in_decode", "dec_base", "gen_base", "finish_step", "num_blocks",
        "prefill_started_at", "first_token_at", "finished_at",
        "encode_started_at", "encode_finished_at", "num_preemptions", "replica", "status",
    )

    def __init__(self, request: Request, replica: int = 0):
        self.request = request
        self.num_computed = 0
        self.num_generated = 0
        self.next_media = 0  # first media segment not yet encoded in this pass
        self.admit_order = -1
        self.in_decode = False
        self.dec_base = 0
        self.gen_base = 0
        self.finish_step = -1
        self.num_blocks = 0  # only maintained while not decoding
        self.prefill_started_at = NAN
        self.first_token_at = NAN
        self.finished_at = NAN
        self.encode_started_at = NAN
        self.encode_finished_at = NAN
        self.num_preemptions = 0
        self.replica = replica
        self.status = "waiting"

    @property
    def num_tokens(self) -> int:
        """Tokens that must be in the KV cache before the next token is sampled."""
        return self.request.num_prompt_tokens + self.num_generated


@dataclass(slots=True)
class StepPlan:
    """What one engine step runs."""

    step_no: int
    chunks: list = field(default_factory=list)  # (SeqState, num_new_tokens), prefill work
    encodes: list = field(default_factory=list)  # (SeqState, PromptSegment) items encoded now
    num_decodes: int = 0
    decode_context_sum: int = 0
    num_sampled: int = 0
    num_tokens: int = 0
    preempted: list = field(default_factory=list)

    @property
    def chunk_shapes(self) -> tuple:
        """(new_tokens, context_after) per prefill chunk, for the cost model."""
        return tuple((n, s.num_computed + n) for s, n in self.chunks)


class ContinuousBatchingScheduler:
    def __init__(
        self,
        queue,
        pool: BlockPool,
        token_budget: int,
        max_running: int,
        encoder_budget: int,
    ):
        if max_running > token_budget:
            raise ValueError("max_running must be <= token_budget")
        self.queue = queue
        self.pool = pool
        self.token_budget = token_budget
        self.max_running = max_running
        self.encoder_budget = encoder_budget
        self.block_size = pool.block_size
        self.step_no = 0
        self._admit_counter = 0
        self.prefilling: list[SeqState] = []  # running, still in prefill, admission order
        self.decoding: dict[int, SeqState] = {}  # request_id -> state (insertion = join order)
        self._finish_heap: list = []  # (finish_step, admit_order, request_id)
        self._phase_counts = [0] * pool.block_size
        self._dec_base_sum = 0
        self.num_preemptions = 0

    # ------------------------------------------------------------------ queries
    @property
    def num_running(self) -> int:
        return len(self.prefilling) + len(self.decoding)

    @property
    def num_outstanding(self) -> int:
        return self.num_running + len(self.queue)

    def has_work(self) -> bool:
        return bool(self.decoding or self.prefilling or len(self.queue))

    def decode_blocks_needed(self, step_no: int) -> int:
        """New KV blocks the decoding set needs in step ``step_no``."""
        return self._phase_counts[-step_no % self.block_size]

    def decode_context_sum(self, step_no: int) -> int:
        """Total attended context of the decoding set in step ``step_no``."""
        return self._dec_base_sum + len(self.decoding) * (step_no + 1)

    def steps_to_next_finish(self) -> int:
        """Decode-only steps until (and including) the next decode completion."""
        heap = self._finish_heap
        while heap:
            fstep, _, rid = heap[0]
            seq = self.decoding.get(rid)
            if seq is not None and seq.finish_step == fstep:
                return fstep - self.step_no + 1
            heapq.heappop(heap)  # stale entry of a preempted request
        return 0

    def can_fast_forward(self) -> bool:
        """Is the next step decode-only with nothing that could join the batch?"""
        return bool(self.decoding) and not self.prefilling and not len(self.queue)

    # ---------------------------------------------------------------- mutations
    def add(self, seq: SeqState) -> None:
        self.queue.add(seq)

    def _enter_decode(self, seq: SeqState, next_step: int) -> None:
        seq.in_decode = True
        seq.dec_base = seq.num_computed - next_step
        seq.gen_base = seq.num_generated - next_step
        seq.finish_step = seq.request.num_output_tokens - 1 - seq.gen_base
        self._phase_counts[seq.dec_base % self.block_size] += 1
        self._dec_base_sum += seq.dec_base
        self.decoding[seq.request.request_id] = seq
        heapq.heappush(self._finish_heap, (seq.finish_step, seq.admit_order, seq.request.request_id))

    def _leave_decode(self, seq: SeqState) -> None:
        """Materialise a decoding request's counters at the current step boundary."""
        del self.decoding[seq.request.request_id]
        self._phase_counts[seq.dec_base % self.block_size] -= 1
        self._dec_base_sum -= seq.dec_base
        seq.in_decode = False
        seq.num_computed = seq.dec_base + self.step_no
        seq.num_generated = seq.gen_base + self.step_no
        seq.num_blocks = blocks_for(seq.num_computed, self.block_size)

    def _preempt(self, seq: SeqState, plan: StepPlan) -> None:
        if seq.in_decode:
            self._leave_decode(seq)
        else:
            self.prefilling.remove(seq)
        self.pool.free(seq.num_blocks)
        seq.num_blocks = 0
        seq.num_computed = 0
        seq.next_media = 0
        seq.num_preemptions += 1
        seq.status = "waiting"
        self.num_preemptions += 1
        self.queue.prepend(seq)
        plan.preempted.append(seq)

    def _victim(self) -> SeqState:
        """The most recently admitted running request."""
        best = self.prefilling[-1] if self.prefilling else None
        for seq in self.decoding.values():
            if best is None or seq.admit_order > best.admit_order:
                best = seq
        return best

    def _fit_to_encoder_budget(self, seq: SeqState, num_new: int, enc_left: int, out: list) -> tuple[int, int]:
        """Cut ``num_new`` before the first media item the encoder budget cannot take.

        Appends the items to encode to ``out``; returns (num_new, encoder tokens used).
        """
        start = seq.num_computed
        end = start + num_new
        used = 0
        media = seq.request.media_segments
        idx = seq.next_media
        while idx < len(media):
            seg: PromptSegment = media[idx]
            if seg.start >= end:
                break
            if used + seg.length > enc_left:
                return seg.start - start, used
            used += seg.length
            out.append(seg)
            idx += 1
        return num_new, used

    def schedule(self, now: float) -> StepPlan:
        """Build the step that starts at ``now``. The plan may be empty if nothing fits."""
        step = self.step_no
        plan = StepPlan(step)
        budget = self.token_budget
        enc_left = self.encoder_budget
        pool = self.pool
        self.queue.refresh(now)

        # 1. decodes: one token each; preempt the newest running requests if the
        #    KV cache cannot take their next block.
        need = self.decode_blocks_needed(step)
        while need > pool.num_free:
            self._preempt(self._victim(), plan)
            need = self.decode_blocks_needed(step)
        if self.decoding:
            pool.allocate(need)
            plan.num_decodes = len(self.decoding)
            plan.decode_context_sum = self.decode_context_sum(step)
            plan.num_sampled = plan.num_decodes
            budget -= plan.num_decodes

        # 2. running prefills, admission order.
        i = 0
        while i < len(self.prefilling) and budget > 0:
            seq = self.prefilling[i]
            items: list = []
            n, used = self._fit_to_encoder_budget(seq, min(seq.num_tokens - seq.num_computed, budget), enc_left, items)
            if n <= 0:
                i += 1
                continue
            extra = blocks_for(seq.num_computed + n, self.block_size) - seq.num_blocks
            # Victims come from the prefill tail only: decodes already hold
            # their slot in this step's batch.
            while extra > pool.num_free:
                victim = self.prefilling[-1]
                self._preempt(victim, plan)
                if victim is seq:
                    break
            if seq.status == "waiting":  # preempted itself: nothing more fits
                break
            pool.allocate(extra)
            seq.num_blocks += extra
            self._add_chunk(plan, seq, n, items)
            budget -= n
            enc_left -= used
            i += 1

        # 3. admit waiting requests (vLLM: not in a step that preempted).
        if not plan.preempted:
            queue = self.queue
            while budget > 0 and len(queue) and self.num_running < self.max_running:
                seq = queue.peek()
                items = []
                n, used = self._fit_to_encoder_budget(seq, min(seq.num_tokens - seq.num_computed, budget), enc_left, items)
                if n <= 0:
                    break
                blocks = blocks_for(n, self.block_size)
                if blocks > pool.num_free:
                    break
                queue.pop()
                pool.allocate(blocks)
                seq.num_blocks = blocks
                seq.admit_order = self._admit_counter
                self._admit_counter += 1
                seq.status = "running"
                self.prefilling.append(seq)
                self._add_chunk(plan, seq, n, items)
                budget -= n
                enc_left -= used

        plan.num_tokens = self.token_budget - budget
        return plan

    def _add_chunk(self, plan: StepPlan, seq: SeqState, n: int, items: list) -> None:
        plan.chunks.append((seq, n))
        for seg in items:
            plan.encodes.append((seq, seg))
        seq.next_media += len(items)
        if seq.num_computed + n == seq.num_tokens:
            plan.num_sampled += 1

    def complete(self, plan: StepPlan, started_at: float, encoded_at: float, ended_at: float) -> list[SeqState]:
        """Apply a finished step: advance prefills, sample tokens, finish requests.

        ``encoded_at`` is when the step's encoder work ended (== ``started_at``
        when it had none). Returns the requests that finished.
        """
        finished: list[SeqState] = []
        for seq, _seg in plan.encodes:
            # Encode times describe the pass before the first token; a request
            # preempted after it re-encodes without moving them.
            if seq.first_token_at == seq.first_token_at:  # not NaN
                continue
            if seq.encode_started_at != seq.encode_started_at:  # NaN: first encode
                seq.encode_started_at = started_at
            seq.encode_finished_at = encoded_at
        next_step = plan.step_no + 1
        for seq, n in plan.chunks:
            if seq.prefill_started_at != seq.prefill_started_at:
                seq.prefill_started_at = started_at
            seq.num_computed += n
            if seq.num_computed == seq.num_tokens:
                seq.num_generated += 1
                if seq.first_token_at != seq.first_token_at:
                    seq.first_token_at = ended_at
                self.prefilling.remove(seq)
                if seq.num_generated >= seq.request.num_output_tokens:
                    self._finish(seq, ended_at, finished)
                else:
                    self._enter_decode(seq, next_step)
        self.step_no = next_step
        if plan.num_decodes:
            self._pop_decode_finishes(plan.step_no, ended_at, finished)
        return finished

    def advance_decodes(self, num_steps: int, ended_at: float) -> list[SeqState]:
        """Apply ``num_steps`` decode-only steps at once (fast-forward).

        Only valid when :meth:`can_fast_forward` held, the KV pool can take the
        stretch's blocks, and no decode finishes before its last step; the
        result then equals stepping one by one.
        """
        first = self.step_no
        need = sum(self.decode_blocks_needed(first + j) for j in range(num_steps))
        self.pool.allocate(need)
        self.step_no = first + num_steps
        finished: list[SeqState] = []
        self._pop_decode_finishes(self.step_no - 1, ended_at, finished)
        return finished

    def _pop_decode_finishes(self, step_no: int, ended_at: float, finished: list) -> None:
        heap = self._finish_heap
        while heap and heap[0][0] <= step_no:
            fstep, _, rid = heapq.heappop(heap)
            seq = self.decoding.get(rid)
            if seq is None or seq.finish_step != fstep:
                continue  # stale entry of a preempted request
            self._leave_decode(seq)
            self._finish(seq, ended_at, finished)

    def _finish(self, seq: SeqState, ended_at: float, finished: list) -> None:
        self.pool.free(seq.num_blocks)
        seq.num_blocks = 0
        seq.finished_at = ended_at
        seq.status = "finished"
        finished.append(seq)

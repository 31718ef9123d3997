"""Continuous batching with chunked prefill, as vLLM v1 and Sarathi-Serve do it.

Pure Python, no SimPy: :meth:`ContinuousBatchingScheduler.schedule` builds the
next batch and :meth:`complete` applies its outcome, so the scheduler is
testable with hand-built requests and an explicit clock.

Per batch, with a token budget decremented per decision:

1. every decoding request of the batch slot gets one token (they always fit:
   the scenario requires ``max_running <= token_budget``, as vLLM requires
   ``max_num_seqs <= max_num_batched_tokens``);
2. running requests still in prefill get ``min(remaining, budget)`` tokens, in
   admission order;
3. if nothing was preempted, waiting requests are admitted in queue-policy
   order while budget, ``max_running`` and KV blocks allow.

Decodes go first (Sarathi-Serve's stall-free order). vLLM v1 walks its running
list in admission order instead; the two orders differ only when an earlier
admitted request is still in prefill while a later one decodes, which needs an
encoder-budget cut and is rare.

Multimodal input comes one of two ways (``media``):

* ``local`` (monolithic engines): vLLM v1's encoder cache. A chunk whose
  positions overlap a not-yet-encoded media item encodes the whole item in
  this step, within a per-step encoder budget (in LLM tokens); if the budget
  cannot take the item, the chunk stops just before it. A preempted request
  re-encodes. An ``encoder_cache`` (:mod:`lmmsim.engine.media_cache`, in LLM tokens)
  serves an item whose ``media_id`` it holds: no encoder work, no budget. A miss is
  stored when its chunk is scheduled (vLLM allocates the entry then), so later items
  with its id hit, in this batch too (vLLM encodes a hash once per step).
* ``remote`` (disaggregated encoders): embeddings arrive from encoder workers;
  a chunk stops before the first item whose embeddings have not arrived.
  Simplification: a preempted request keeps its embeddings (its recompute does
  not go back to the encoder).

``encode_before_prefill`` (off by default): a request's media are all encoded
before its first prefill chunk, as systems that run the encoder and the prefill
strictly in sequence do (vLLM v0, gLLM, SGLang as RServe describes them,
rserve.txt section 1). ``local``: the step that schedules a request's first chunk
encodes every media item of the prompt, not only those the chunk overlaps, and
its LLM pass follows that encoder work; the items may exceed the step's encoder
budget when they are the step's first encoder work (else no request with media
could ever start). ``remote``: the first chunk waits until every item's
embeddings have arrived (``admission: after_encode`` at the scheduler).

KV blocks run out -> preempt by recompute the most recently admitted running
request that is not in flight (vLLM's victim); it returns to the head of the
waiting queue and later recomputes its prompt plus the tokens it had generated.
Pipeline slots: when that victim would be the growing prefill itself while a
newer request's batch is in flight (vLLM's real victim, which cannot be
recalled), the prefill waits for that batch instead, and the step admits no one.

Batch slots: a pipeline-parallel engine keeps several batches in flight (one
per slot, vLLM's virtual engines). Each slot has its own
:class:`~lmmsim.engine.decode_cohort.DecodeCohort`; waiting and prefilling
requests are shared, and a request whose work is in flight (``busy``) is not
scheduled again until it is released: at the batch's completion, or — with
chunked pipeline parallelism — a prefill chunk that does not finish the prompt
as soon as it has left the first stage (:meth:`release_chunks`).

Prefix caching (a :class:`~lmmsim.engine.prefix_cache.PrefixBlockPool`, with
``deployment.prefix_caching``): a waiting request about to be considered is looked up
(:meth:`_lookup`) and starts at its cached prefix, sharing those blocks; its media items
wholly inside the prefix are not encoded. Admission takes from the free count only the
blocks it allocates plus the cached free blocks its hit takes out of the free queue
(vLLM's accounting). A chunk that fills shareable blocks makes them findable as it is
scheduled; finishing or preemption gives a request's blocks back by reference.

Roles: a ``prefill_only`` engine hands a request off once its first token is
sampled (its KV blocks stay held until :meth:`release`); requests that arrive
already prefilled join decoding through :meth:`reserve` and :meth:`admit_prefilled`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from lmmsim.engine.chunk_media import CacheHit, ChunkMediaFit
from lmmsim.engine.decode_cohort import DecodeCohort
from lmmsim.engine.kv_cache import BlockPool, blocks_for
from lmmsim.engine.prefix_cache import PrefixLookup
from lmmsim.engine.token_throttle import TokenThrottle
from lmmsim.workload.request import Request

NAN = math.nan


class SeqState:
    """Mutable engine state of one request (and its timeline record)."""

    __slots__ = (
        "request", "num_computed", "num_scheduled", "num_generated", "next_media", "media_ready", "admit_order",
        "in_decode", "cohort", "dec_base", "gen_base", "finish_step", "num_blocks", "busy", "in_flight",
        "prefill_started_at", "first_token_at", "finished_at",
        "encode_started_at", "encode_finished_at", "num_preemptions", "replica", "status", "reject_reason",
        "preprocess_started_at", "preprocess_finished_at", "token_spans", "num_cached_tokens", "queued_pending",
    )

    def __init__(self, request: Request, replica: int = 0):
        self.request = request
        self.num_computed = 0  # tokens whose KV exists (their batch completed)
        self.num_scheduled = 0  # tokens handed to batches, including ones still in flight
        self.num_generated = 0
        self.next_media = 0  # local: first media segment not yet encoded in this pass
        self.media_ready = 0  # remote: leading media segments whose embeddings arrived
        self.admit_order = -1
        self.in_decode = False
        self.cohort = None
        self.dec_base = 0
        self.gen_base = 0
        self.finish_step = -1
        self.num_blocks = 0  # only maintained while not decoding
        self.busy = False  # may not be scheduled again yet (its last chunk has not cleared)
        self.in_flight = 0  # batches holding this request that have not completed
        self.prefill_started_at = NAN
        self.first_token_at = NAN
        self.finished_at = NAN
        self.encode_started_at = NAN
        self.encode_finished_at = NAN
        self.num_preemptions = 0
        self.queued_pending = 0  # Token Throttling: the prefill tokens it brought into the waiting queue
        self.replica = replica
        self.status = "waiting"
        self.reject_reason = None  # why it was refused at arrival (status "rejected")
        self.preprocess_started_at = NAN  # host preprocessing (lmmsim.engine.host), when the stage exists
        self.preprocess_finished_at = NAN
        # Output tokens after the first (lmmsim.metrics.itl): (step_ends, first, stop) per
        # decode stretch in a cohort, and a float for a token a recompute sampled.
        self.token_spans: list = []
        self.num_cached_tokens = None  # prefix caching: prompt tokens its first admission found cached

    @property
    def num_tokens(self) -> int:
        """Tokens that must be in the KV cache before the next token is sampled."""
        return self.request.num_prompt_tokens + self.num_generated


@dataclass(slots=True)
class StepPlan:
    """What one engine batch runs."""

    step_no: int
    slot: int = 0
    chunks: list = field(default_factory=list)  # (SeqState, num_new_tokens, first_position), prefill work
    encodes: list = field(default_factory=list)  # (SeqState, PromptSegment) items encoded now
    cached: list = field(default_factory=list)  # (SeqState, PromptSegment) items the encoder cache serves
    num_decodes: int = 0
    decode_context_sum: int = 0
    num_sampled: int = 0
    num_tokens: int = 0
    preempted: list = field(default_factory=list)
    kv_blocked: bool = False  # a running prefill waits for KV blocks held by a batch in flight

    @property
    def chunk_shapes(self) -> tuple:
        """(new_tokens, context_after) per prefill chunk, for the cost model."""
        return tuple([(n, start + n) for _, n, start in self.chunks])

    @property
    def is_empty(self) -> bool:
        return not self.chunks and not self.num_decodes


class ContinuousBatchingScheduler(ChunkMediaFit, PrefixLookup, TokenThrottle):
    def __init__(
        self,
        queue,
        pool: BlockPool,
        token_budget: int,
        max_running: int,
        encoder_budget: int = 0,
        *,
        num_slots: int = 1,
        media: str = "local",
        prefill_only: bool = False,
        prefill_throttle: tuple[int, int] | None = None,
        encoder_cache=None,
        encode_before_prefill: bool = False,
        max_chunk_tokens: int | None = None,
    ):
        if max_running > token_budget:
            raise ValueError("max_running must be <= token_budget")
        if media not in ("local", "remote"):
            raise ValueError("media must be 'local' or 'remote'")
        self.queue = queue
        self.pool = pool
        self.token_budget = token_budget
        # The longest prefill chunk one request gets per step: the budget, unless one engine
        # stands for several vLLM DP ranks (each caps a chunk at its own budget).
        self.max_chunk = token_budget if max_chunk_tokens is None else min(max_chunk_tokens, token_budget)
        self.max_running = max_running
        self.encoder_budget = encoder_budget
        self.media = media
        self.prefill_only = prefill_only
        self.encoder_cache = encoder_cache  # local media: a MediaCache of encoder outputs, or None
        self.encode_before_prefill = encode_before_prefill  # all media encoded before the first chunk
        # gLLM's Token Throttling: (min, max) prefill tokens per batch, aiming at
        # an even share of the pending prefill work per pipeline slot.
        self.prefill_throttle = prefill_throttle
        # ... and the waiting queue's pending prefill tokens, kept as requests enter and leave it
        # (summing the queue every step made an overloaded engine quadratic in its queue)
        self._waiting_pending = 0
        self.block_size = pool.block_size
        self.cohorts = [DecodeCohort(pool.block_size) for _ in range(num_slots)]
        self._admit_counter = 0
        self.prefilling: list[SeqState] = []  # running, still in prefill, admission order
        self.prefilled: list[SeqState] = []  # arrived with their KV, waiting to join a cohort
        self.num_decoding = 0
        self.num_reserved = 0  # prefilled requests with KV reserved here, their transfer not yet landed
        self.num_preemptions = 0
        self._fit = self._fit_local if media == "local" else self._fit_remote
        # Most requests whose prefill tokens one batch may carry (None: any).
        self.max_prefill_requests: int | None = None
        self.prefix_caching = pool.prefix_caching
        self._hit = None  # prefix caching: (SeqState, its matched blocks) of the request being considered
        if self.prefix_caching:  # every scheduler's walk fits a waiting request's chunk before admitting it
            self._fit_media, self._fit = self._fit, self._fit_looked_up

    # ------------------------------------------------------------------ queries
    @property
    def num_running(self) -> int:
        return len(self.prefilling) + self.num_decoding + len(self.prefilled)

    @property
    def num_places_taken(self) -> int:
        """Requests holding one of the ``max_running`` places: running, or with KV
        reserved here for a transfer still under way (e_p_d decode)."""
        return self.num_running + self.num_reserved

    @property
    def num_outstanding(self) -> int:
        return self.num_running + len(self.queue)

    def has_work(self) -> bool:
        return bool(self.num_running or len(self.queue))

    # Single-slot views used by the monolithic engine's fast-forward.
    @property
    def step_no(self) -> int:
        return self.cohorts[0].step_no

    @property
    def decoding(self) -> dict:
        return self.cohorts[0].members

    def decode_blocks_needed(self, step_no: int) -> int:
        return self.cohorts[0].blocks_needed(step_no)

    def decode_context_sum(self, step_no: int) -> int:
        return self.cohorts[0].context_sum(step_no)

    def steps_to_next_finish(self) -> int:
        return self.cohorts[0].steps_to_next_finish()

    def can_fast_forward(self) -> bool:
        """Is the next step decode-only with nothing that could join the batch?"""
        return bool(self.cohorts[0].members) and not (self.prefilling or self.prefilled or len(self.queue))

    def can_fast_forward_slots(self) -> bool:
        """Pipeline fast-forward: is every slot's next batch its whole cohort (or nothing, for an
        empty one), nothing joining? (Within the token budget: a priority walk may evict decodes
        beyond it.)"""
        return not (self.prefilling or self.prefilled or len(self.queue)) and all(
            len(c) <= self.token_budget for c in self.cohorts)

    # ---------------------------------------------------------------- mutations
    def add(self, seq: SeqState) -> None:
        self.queue.add(seq)
        self._enqueued(seq)

    def media_arrived(self, seq: SeqState, count: int = 1) -> None:
        """Remote media: embeddings of the next ``count`` media items (prompt order) arrived."""
        seq.media_ready += count

    def media_evicted(self, seq: SeqState, num_leading_ready: int) -> None:
        """Remote media: the receiver dropped embeddings of a waiting request; only its
        first ``num_leading_ready`` media items are still there."""
        seq.media_ready = num_leading_ready

    def consumption_rank(self, seq: SeqState) -> tuple:
        """Where ``seq`` stands in the order this engine computes prompts: running
        prefills (admission order) before waiting requests (queue order). The
        embedding buffer evicts waiting requests' embeddings by it."""
        if seq.status == "running":
            return (0, seq.admit_order)
        return (1, *self.queue.order_key(seq))

    def reserve(self, seq: SeqState) -> bool:
        """Reserve KV blocks -- and a place among ``max_running`` -- for a prefilled
        request about to be transferred here."""
        need = blocks_for(seq.num_computed, self.block_size)
        if need > self.pool.num_free or self.num_places_taken >= self.max_running:
            return False
        self.pool.allocate(need)
        seq.num_blocks = need
        self.num_reserved += 1
        return True

    def admit_prefilled(self, seq: SeqState) -> None:
        """A request whose KV (reserved with :meth:`reserve`) has arrived joins decoding."""
        self.num_reserved -= 1
        seq.admit_order = self._admit_counter
        self._admit_counter += 1
        seq.status = "running"
        self.prefilled.append(seq)

    def release(self, seq: SeqState) -> None:
        """Free the KV blocks of a handed-off request (its KV has left)."""
        self._free_blocks(seq)

    def _free_blocks(self, seq: SeqState, preempted: bool = False) -> None:
        """Give back ``seq``'s KV blocks (prefix caching: by reference, last block first)."""
        if self.prefix_caching:
            self.pool.free_request(seq.request, seq.num_blocks, seq.num_computed, preempted)
        else:
            self.pool.free(seq.num_blocks)
        seq.num_blocks = 0

    def release_chunks(self, plan: StepPlan) -> None:
        """Chunked pipelining: prefill chunks that do not end their prompt have left
        the first stage, so the request's next chunk may enter it."""
        for seq, n, start in plan.chunks:
            if start + n < seq.num_tokens:
                seq.busy = False

    def _preempt(self, seq: SeqState, plan: StepPlan) -> None:
        if seq.in_decode:
            seq.cohort.leave(seq)
            self.num_decoding -= 1
        else:
            self.prefilling.remove(seq)
        self._free_blocks(seq, preempted=True)
        seq.num_computed = 0
        seq.num_scheduled = 0
        seq.next_media = 0
        seq.num_preemptions += 1
        seq.status = "waiting"
        self.num_preemptions += 1
        self.queue.prepend(seq)
        self._enqueued(seq)
        plan.preempted.append(seq)

    def _newest_idle_prefill(self) -> SeqState | None:
        """The most recently admitted prefilling request with nothing in flight."""
        for seq in reversed(self.prefilling):
            if not seq.in_flight:
                return seq
        return None

    def _newer_in_flight(self, seq: SeqState) -> bool:
        """Is a request admitted after ``seq`` holding KV blocks in a batch in flight?"""
        order = seq.admit_order
        if any(s.in_flight and s.admit_order > order for s in self.prefilling):
            return True
        return any(s.in_flight and s.admit_order > order for c in self.cohorts for s in c.members.values())

    def _victim(self, cohort: DecodeCohort) -> SeqState | None:
        """The most recently admitted running request this batch may evict."""
        best = self._newest_idle_prefill()
        newest = cohort.newest()
        if newest is not None and (best is None or newest.admit_order > best.admit_order):
            best = newest
        return best

    def schedule(self, now: float, slot: int = 0) -> StepPlan:
        """Build the batch of ``slot`` that starts at ``now``. May be empty."""
        cohort = self.cohorts[slot]
        step = cohort.step_no
        plan = StepPlan(step, slot)
        budget = self.token_budget
        if self.prefill_throttle is not None:
            budget = min(budget, len(cohort) + self._throttled_prefill_tokens())
        enc_left = self.encoder_budget
        pool = self.pool
        self.queue.refresh(now)

        # 0. prefilled arrivals join this slot's cohort at its step boundary.
        if self.prefilled:
            for seq in self.prefilled:
                cohort.enter(seq)
            self.num_decoding += len(self.prefilled)
            self.prefilled.clear()

        # 1. decodes: one token each; preempt the newest running requests if the
        #    KV cache cannot take their next block.
        need = cohort.blocks_needed(step)
        while need > pool.num_free:
            self._preempt(self._victim(cohort), plan)
            need = cohort.blocks_needed(step)
        if cohort.members:
            pool.allocate(need)
            plan.num_decodes = len(cohort.members)
            plan.decode_context_sum = cohort.context_sum(step)
            plan.num_sampled = plan.num_decodes
            budget -= plan.num_decodes

        self._schedule_prefills(plan, budget, enc_left)
        plan.num_tokens = (sum([n for _, n, _ in plan.chunks]) if plan.chunks else 0) + plan.num_decodes
        return plan

    def _schedule_prefills(self, plan: StepPlan, budget: int, enc_left: int) -> None:
        """Steps 2 and 3: running prefills, then (vLLM: not in a step that
        preempted) waiting requests."""
        budget, enc_left, taken = self._schedule_running(plan, budget, enc_left)
        if not plan.preempted and not plan.kv_blocked:
            self._schedule_waiting(plan, budget, enc_left, taken)

    def _schedule_running(self, plan: StepPlan, budget: int, enc_left: int) -> tuple[int, int, int]:
        """Running prefills not in flight, in admission order; one whose next
        embedding is missing is passed over. Returns what is left of the token
        and encoder budgets, and how many requests got tokens."""
        prefilling = self.prefilling
        limit = self.max_prefill_requests
        taken = 0
        i = 0
        while i < len(prefilling) and budget > 0 and taken != limit:  # preemption shortens the list's tail
            seq = prefilling[i]
            i += 1
            if seq.busy:
                continue
            items: list = []
            n, used = self._fit(seq, min(seq.num_tokens - seq.num_scheduled, budget, self.max_chunk), enc_left, items)
            if n <= 0:
                continue
            if not self._grow(seq, n, plan):  # nothing more fits
                break
            self._add_chunk(plan, seq, n, items)
            budget -= n
            enc_left -= used
            taken += 1
        return budget, enc_left, taken

    def _schedule_waiting(self, plan: StepPlan, budget: int, enc_left: int, taken: int) -> None:
        """Waiting requests in queue order; the first that cannot start (no
        tokens it may prefill yet, or no KV blocks) blocks the rest."""
        queue = self.queue
        while budget > 0 and len(queue) and self.num_places_taken < self.max_running:
            seq = queue.peek()
            items: list = []
            n, used = self._fit(seq, min(seq.num_tokens - seq.num_scheduled, budget, self.max_chunk), enc_left, items)
            if n <= 0 or not self._admit(seq, n, plan, items):
                if self.prefix_caching:
                    self._unlookup(seq)
                break
            queue.pop()
            self._dequeued(seq)
            budget -= n
            enc_left -= used

    def _grow(self, seq: SeqState, n: int, plan: StepPlan) -> bool:
        """Allocate the KV blocks a running prefill's next ``n`` tokens need.

        Victims come from the idle prefill tail only: decodes already hold
        their place in this batch, and work in flight cannot be recalled.
        False (nothing allocated) if the blocks cannot be found or ``seq``
        itself was the victim.
        """
        pool = self.pool
        extra = blocks_for(seq.num_scheduled + n, self.block_size) - seq.num_blocks
        while extra > pool.num_free:
            victim = self._newest_idle_prefill()
            if victim is None:
                break
            if victim is seq and self._newer_in_flight(seq):
                # vLLM's victim would be a newer request, but its batch is in flight:
                # wait for it rather than recompute an older one. Preempting ``seq``
                # here let pipeline slots preempt each other's oldest request forever.
                plan.kv_blocked = True
                break
            self._preempt(victim, plan)
            if victim is seq:
                break
        if seq.status == "waiting" or extra > pool.num_free:
            return False
        pool.allocate(extra)
        seq.num_blocks += extra
        return True

    def _admit(self, seq: SeqState, n: int, plan: StepPlan, items: list) -> bool:
        """Start a waiting request with a first chunk of ``n`` tokens, if its KV blocks
        fit (no preemption for admissions). The caller removes it from the queue."""
        blocks = blocks_for(seq.num_scheduled + n, self.block_size) - seq.num_blocks  # resumed: holds a prefix
        hit = self._hit
        if hit is not None and hit[0] is seq:  # prefix caching: share its cached prefix, allocate the rest
            if self._kv_need(seq, n) > self.pool.num_free:
                return False
            shared = hit[1]
            self.pool.take(seq.request.request_id, shared)
            self._hit = None
            seq.num_blocks = len(shared)
            blocks -= len(shared)
            if seq.num_cached_tokens is None:  # as vLLM: the hit of its first scheduling
                seq.num_cached_tokens = seq.num_scheduled
        elif blocks > self.pool.num_free:
            return False
        self.pool.allocate(blocks)
        seq.num_blocks += blocks
        seq.admit_order = self._admit_counter
        self._admit_counter += 1
        seq.status = "running"
        self.prefilling.append(seq)
        self._add_chunk(plan, seq, n, items)
        return True

    def _add_chunk(self, plan: StepPlan, seq: SeqState, n: int, items: list) -> None:
        plan.chunks.append((seq, n, seq.num_scheduled))
        seq.num_scheduled += n
        if self.prefix_caching:
            self.pool.cache_filled(seq.request, seq.num_scheduled)
        seq.busy = True
        seq.in_flight += 1
        cache = self.encoder_cache
        for seg in items:  # the lookups _fit_local decided, committed now the chunk is in
            if type(seg) is CacheHit:
                cache.hit(seg.segment.item.media_id)
                plan.cached.append((seq, seg.segment))
                continue
            if cache is not None:
                cache.miss(seg.item.media_id, seg.length)
            plan.encodes.append((seq, seg))
        seq.next_media += len(items)
        if seq.num_scheduled == seq.num_tokens:
            plan.num_sampled += 1

    def complete(
        self, plan: StepPlan, started_at: float, encoded_at: float, ended_at: float, handoffs: list | None = None
    ) -> list[SeqState]:
        """Apply a finished batch: advance prefills, sample tokens, finish requests.

        ``encoded_at`` is when the batch's encoder work ended (== ``started_at``
        when it had none). Returns the requests that finished; a prefill-only
        engine appends the requests to hand off to ``handoffs``.
        """
        for seq, _seg in plan.cached:  # embeddings from the encoder cache: ready as the step starts
            if seq.first_token_at != seq.first_token_at:  # NaN: before the first token, as below
                if seq.encode_started_at != seq.encode_started_at:
                    seq.encode_started_at = started_at
                if not seq.encode_finished_at >= started_at:  # NaN, or an earlier step's encode
                    seq.encode_finished_at = started_at
        for seq, _seg in plan.encodes:
            # Encode times describe the pass before the first token; a request
            # preempted after it re-encodes without moving them.
            if seq.first_token_at == seq.first_token_at:  # not NaN
                continue
            if seq.encode_started_at != seq.encode_started_at:  # NaN: first encode
                seq.encode_started_at = started_at
            seq.encode_finished_at = encoded_at
        cohort = self.cohorts[plan.slot]
        finished = cohort.advance(ended_at)
        for seq in finished:
            self._finish(seq, ended_at)
        self.num_decoding -= len(finished)
        for seq, n, _start in plan.chunks:
            seq.busy = False
            seq.in_flight -= 1
            if seq.prefill_started_at != seq.prefill_started_at:
                seq.prefill_started_at = started_at
            seq.num_computed += n
            if seq.num_computed == seq.num_tokens:
                seq.num_generated += 1
                if seq.first_token_at != seq.first_token_at:
                    seq.first_token_at = ended_at
                else:  # a recompute after preemption samples the next token
                    seq.token_spans.append(ended_at)
                self.prefilling.remove(seq)
                if seq.num_generated >= seq.request.num_output_tokens:
                    self._finish(seq, ended_at)
                    finished.append(seq)
                elif self.prefill_only:
                    seq.status = "transferring"
                    handoffs.append(seq)
                else:
                    cohort.enter(seq)
                    self.num_decoding += 1
        return finished

    def advance_decodes(self, ends: list[float], num_blocks: int) -> list[SeqState]:
        """Apply ``len(ends)`` decode-only steps of slot 0, ended at ``ends``, at once
        (fast-forward); ``num_blocks``: the KV blocks they take, the sum of
        :meth:`decode_blocks_needed` over them (the caller has it from planning the stretch).

        Only valid when :meth:`can_fast_forward` held, the KV pool can take the
        stretch's blocks, and no decode finishes before its last step; the
        result then equals stepping one by one.
        """
        cohort = self.cohorts[0]
        self.pool.allocate(num_blocks)
        finished = cohort.advance_many(ends)
        ended_at = ends[-1]
        for seq in finished:
            self._finish(seq, ended_at)
        self.num_decoding -= len(finished)
        return finished

    def _finish(self, seq: SeqState, ended_at: float) -> None:
        self._free_blocks(seq)
        seq.finished_at = ended_at
        seq.status = "finished"

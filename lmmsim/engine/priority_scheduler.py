"""Scheduling in global priority order with priority preemption (RPS-Serve, rps-serve.txt 3.7).

With a queue policy that scores requests (:class:`~lmmsim.policies.rps_queue.RpsQueue`),
each iteration:

1. decodes go first, one token each, as in the base scheduler; if the KV
   cache cannot take their next blocks, the *lowest-priority* running request
   is preempted (vLLM's priority policy) instead of the newest;
2. prefill work -- running requests still in prefill and waiting ones --
   is taken in one global priority order (score, then arrival) while the
   token budget lasts. A running prefill is only a candidate like any other:
   chunk boundaries are scheduling points, so a sand request can take the
   budget ahead of a rock that is half-way through its prompt (the rock keeps
   its KV and resumes later);
3. a waiting request that cannot start for lack of KV blocks or a running
   slot preempts (recompute) the lowest-priority running request whose
   priority is *strictly lower* than its own -- never itself, never a higher
   one -- and tries again; when no such victim is left it waits, and so do
   the requests behind it.

Victims are running requests with nothing in flight: idle prefills and the
members of this batch slot's decode cohort (a decode evicted after step 1
is taken back out of the batch). Priority preemption happens only when a
higher-priority request cannot be admitted, as the paper says RPS-Serve
inherits from vLLM.

Budget exhaustion (``budget_preemption``, a setting of the queue policy).
RPS-Serve's artifact (muse-research-lab/rps-serve,
``rps-serve/vllm/v1/core/sched/scheduler.py`` and ``queue_manager.py``) walks
one list of running and waiting requests sorted by score (running before
waiting at equal score), decodes included, while the token budget lasts; when
the budget reaches exactly 0, every request still RUNNING past the walk's
position is preempted: its KV blocks and encoder cache are freed and
``num_computed_tokens`` is set to 0, so it recomputes (and re-encodes) when it
comes back. The modes:

* ``none``: lmmsim's earlier behaviour -- a running request the budget did not
  reach keeps its KV and resumes in a later step; decodes go first.
* ``prefills``: decodes go first; at exhaustion the running prefills the walk
  did not reach are preempted (KV freed, recompute).
* ``all`` (the artifact, the rps queue's default): decodes take their place in
  the priority order -- a decode is reached, and takes its one token, when the
  walk passes its score -- and at exhaustion every running request not reached,
  decode or prefill, is preempted. (Decodes cannot be ordered by priority in
  the other modes: a cohort member that skips a step would have to leave its
  cohort, which is what preemption does.)

Requests with work in flight (pipeline slots) are never budget-preempted.

Resume from the prefix cache (``resume_cache``, a setting of the queue policy, on by
default as vLLM V1's prefix caching is): a preempted request -- by the budget, by
priority or for KV blocks -- comes back at the leading full blocks of its KV that
allocations since its preemption have not reused, and re-encodes only the media items
not wholly inside them (:mod:`lmmsim.engine.resume_cache`). Off: it recomputes and
re-encodes everything. With ``deployment.prefix_caching`` the general lookup
(:mod:`lmmsim.engine.prefix_cache`) replaces it: a request's own blocks are keyed when it is
preempted, so it finds them as any lookup finds cached blocks, and ``resume_cache`` is unused.
Pure Python, no SimPy.
"""

from __future__ import annotations

from lmmsim.engine import resume_cache
from lmmsim.engine.kv_cache import blocks_for
from lmmsim.engine.scheduler import ContinuousBatchingScheduler, SeqState, StepPlan

BUDGET_PREEMPTION = ("none", "prefills", "all")


class PriorityScheduler(ContinuousBatchingScheduler):
    def __init__(self, queue, *args, **kwargs):
        if not hasattr(queue, "sort_key"):
            raise ValueError("the priority scheduler needs a queue policy that scores requests")
        super().__init__(queue, *args, **kwargs)
        self.budget_preemption = getattr(queue, "budget_preemption", "none")
        if self.budget_preemption not in BUDGET_PREEMPTION:
            raise ValueError(f"budget_preemption must be one of {BUDGET_PREEMPTION}, "
                             f"not {self.budget_preemption!r}")
        self._unreached: dict[int, SeqState] = {}  # "all": this batch's decodes the walk has not passed
        self.resume_cache = bool(getattr(queue, "resume_cache", False)) and not self.prefix_caching
        self._freed: dict[int, resume_cache.Freed] = {}  # preempted request id -> its blocks in the free queue

    # ----------------------------------------------------------- priorities
    def _key(self, seq: SeqState) -> tuple:
        return self.queue.sort_key(seq)

    def _idle_running(self, plan: StepPlan | None):
        """Running requests this batch may still evict."""
        for seq in self.prefilling:
            if not seq.in_flight:
                yield seq
        if plan is not None:
            yield from self.cohorts[plan.slot].members.values()

    def _victim(self, cohort):
        # Decode-phase KV shortage: vLLM's priority policy evicts the lowest priority.
        return max((*self._idle_running(None), *cohort.members.values()), key=self._key, default=None)

    # ----------------------------------------------------------- eviction
    def _evict(self, victim: SeqState, plan: StepPlan) -> None:
        """Preempt ``victim``; a member of this batch's decode cohort leaves the batch."""
        if victim.in_decode and plan.num_decodes and victim.cohort is self.cohorts[plan.slot]:
            num_computed = victim.dec_base + victim.cohort.step_no
            plan.num_decodes -= 1
            plan.num_sampled -= 1
            plan.decode_context_sum -= num_computed + 1
            if num_computed % self.block_size == 0:  # its new block was allocated in step 1
                self.pool.free(1)
        self._unreached.pop(victim.request.request_id, None)
        self._preempt(victim, plan)

    def _preempt(self, seq: SeqState, plan: StepPlan) -> None:
        if self.resume_cache:  # where its blocks enter the free queue, to find them again
            computed = seq.dec_base + seq.cohort.step_no if seq.in_decode else seq.num_computed
            held = blocks_for(computed, self.block_size) if seq.in_decode else seq.num_blocks
            self._freed[seq.request.request_id] = resume_cache.record(self.pool, held, computed)
        super()._preempt(seq, plan)

    def _resume(self, seq: SeqState) -> None:
        """A preempted request about to be considered for admission starts at its cached prefix."""
        if self.prefix_caching:  # any waiting request: the general lookup, as its chunk is fitted
            return
        freed = self._freed.get(seq.request.request_id)
        if freed is None:
            return
        cached = resume_cache.cached_tokens(self.pool, freed, seq.num_tokens)
        seq.num_computed = seq.num_scheduled = cached
        seq.next_media = resume_cache.first_uncached_media(seq.request.media_segments, cached)

    def _unresume(self, seq: SeqState) -> None:
        """Not admitted after all: a waiting request holds nothing (looked up again next time)."""
        self._unlookup(seq)

    def _admit(self, seq: SeqState, n: int, plan: StepPlan, items: list) -> bool:
        rid = seq.request.request_id
        freed = self._freed.get(rid)
        if freed is not None and seq.num_scheduled:  # reclaim its cached blocks; the base allocates the rest
            if blocks_for(seq.num_scheduled + n, self.block_size) > self.pool.num_free:
                return False
            seq.num_blocks = resume_cache.reclaim(self.pool, freed, seq.num_scheduled)
        if not super()._admit(seq, n, plan, items):  # (cannot fail once blocks were reclaimed)
            return False
        self._freed.pop(rid, None)
        return True

    def _blocks_freed(self, victim: SeqState, plan: StepPlan) -> int:
        """KV blocks evicting ``victim`` now gives back (prefix caching: not those others hold,
        nor those the hit of the request being admitted would take back out of the free queue --
        :meth:`_kv_need` counted them as in use)."""
        shared = 0
        if self.prefix_caching:
            shared = self.pool.shared_blocks(victim.request.request_id, self._hit[1] if self._hit else ())
        if not victim.in_decode:
            return victim.num_blocks - shared
        num_computed = victim.dec_base + victim.cohort.step_no
        in_batch = plan.num_decodes and victim.cohort is self.cohorts[plan.slot]
        extra = 1 if in_batch and num_computed % self.block_size == 0 else 0
        return blocks_for(num_computed, self.block_size) + extra - shared

    def _make_room(self, seq: SeqState, blocks: int, plan: StepPlan, slots: int = 0) -> bool:
        """Evict strictly lower-priority running requests, lowest first, until ``blocks``
        KV blocks are free and ``slots`` requests have left -- but only if that is
        reachable; otherwise evict nobody (an eviction that cannot make room only
        wastes the victim's work)."""
        if blocks <= self.pool.num_free and slots <= 0:
            return True
        if not self.queue.preemptive:
            return False
        key = self._key(seq)
        candidates = sorted((v for v in self._idle_running(plan) if v is not seq and self._key(v) > key),
                            key=self._key, reverse=True)
        free, chosen = self.pool.num_free, []
        for victim in candidates:
            if free >= blocks and len(chosen) >= slots:
                break
            chosen.append(victim)
            free += self._blocks_freed(victim, plan)
        if free < blocks or len(chosen) < slots:
            return False
        for victim in chosen:
            self._evict(victim, plan)
        return True

    def _grow(self, seq: SeqState, n: int, plan: StepPlan) -> bool:
        if not self.queue.preemptive:
            # No priority evictions, but a full KV cache is still relieved as vLLM does it
            # (recompute the newest idle prefill); refusing every eviction here left partial
            # prefills in pipeline slots each holding blocks none could grow (a deadlock).
            return super()._grow(seq, n, plan)
        extra = blocks_for(seq.num_scheduled + n, self.block_size) - seq.num_blocks
        if not self._make_room(seq, extra, plan):
            return False
        self.pool.allocate(extra)
        seq.num_blocks += extra
        return True

    # ----------------------------------------------------------- prefills
    def _schedule_prefills(self, plan: StepPlan, budget: int, enc_left: int) -> None:
        # ``budget`` is what the decodes left; evicting a decode gives its token back.
        total = budget + plan.num_decodes
        mode = self.budget_preemption
        decodes = (sorted(self.cohorts[plan.slot].members.values(), key=self._key)
                   if mode == "all" and plan.num_decodes else [])
        self._unreached = {d.request.request_id: d for d in decodes}
        j = 0  # decodes[:j] the walk has passed
        used = 0
        queue = self.queue
        admit = not plan.preempted  # as vLLM: no admissions after a decode-phase eviction
        running = sorted((s for s in self.prefilling if not s.busy), key=self._key)
        i = 0
        exhausted = False
        while True:
            # decodes not reached yet hold no token ("all"); elsewhere every decode holds one
            left = total - used - (plan.num_decodes - len(self._unreached))
            while i < len(running) and running[i].status != "running":  # evicted meanwhile
                i += 1
            r = running[i] if i < len(running) else None
            w = queue.peek() if admit and len(queue) else None
            if j < len(decodes) and left > 0:  # "all": pass the decodes ahead of the next candidate
                head = min((self._key(x) for x in (r, w) if x is not None), default=None)
                while j < len(decodes) and left > 0 and (head is None or self._key(decodes[j]) < head):
                    if self._unreached.pop(decodes[j].request.request_id, None) is not None:
                        left -= 1  # this decode is reached: it takes its token
                    j += 1
            if left <= 0:
                exhausted = True
                break
            if r is None and w is None:
                break
            items: list = []
            if w is None or (r is not None and self._key(r) <= self._key(w)):
                i += 1
                n, enc = self._fit(r, min(r.num_tokens - r.num_scheduled, left), enc_left, items)
                if n > 0 and self._grow(r, n, plan):
                    self._add_chunk(plan, r, n, items)
                    used += n
                    enc_left -= enc
                elif plan.kv_blocked:
                    admit = False  # as the base scheduler: its blocks must not go to a newcomer
                continue
            took = self._try_admit(w, left, enc_left, plan, items)
            if took is None:
                admit = False
            else:  # (0, 0): an eviction put another class at the head, decide again
                used += took[0]
                enc_left -= took[1]
        if exhausted and mode != "none":
            self._preempt_unreached(running[i:], plan)
        self._unreached = {}

    def _try_admit(self, w: SeqState, left: int, enc_left: int, plan: StepPlan,
                   items: list) -> tuple[int, int] | None:
        """Admit the waiting head ``w`` with a first chunk of at most ``left`` tokens.

        It is the most urgent candidate: room is made for it by evicting strictly
        lower-priority running requests. Returns (tokens, encoder tokens) taken;
        (0, 0) when an eviction put another request at the queue's head (decide
        again); None when it cannot start (stop admitting). A request evicted in
        this step does not come straight back (no thrash).
        """
        if any(w is v for v in plan.preempted):
            return None
        self._resume(w)
        n, enc = self._fit(w, min(w.num_tokens - w.num_scheduled, left), enc_left, items)
        slots = self.num_places_taken - self.max_running + 1
        if n > 0 and self._make_room(w, self._kv_need(w, n), plan, slots):
            if self.queue.peek() is not w:
                self._unresume(w)
                return 0, 0
            if self._admit(w, n, plan, items):
                self.queue.pop()
                self._dequeued(w)
                return n, enc
        self._unresume(w)
        return None

    def _preempt_unreached(self, running: list, plan: StepPlan) -> None:
        """The token budget ran out: preempt (recompute) the running requests the walk
        did not reach -- idle prefills, and in mode "all" the decodes not passed."""
        victims = [s for s in running if s.status == "running" and not s.in_flight]
        victims += self._unreached.values()  # members of this slot's cohort: none is in flight
        for victim in victims:
            self._evict(victim, plan)

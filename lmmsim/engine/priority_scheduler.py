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
is taken back out of the batch). Preemption happens only when a higher-
priority request cannot be admitted, as the paper says RPS-Serve inherits
from vLLM. Pure Python, no SimPy.
"""

from __future__ import annotations

from lmmsim.engine.scheduler import ContinuousBatchingScheduler, SeqState, StepPlan
from lmmsim.engine.kv_cache import blocks_for


class PriorityScheduler(ContinuousBatchingScheduler):
    def __init__(self, queue, *args, **kwargs):
        if not hasattr(queue, "sort_key"):
            raise ValueError("the priority scheduler needs a queue policy that scores requests")
        super().__init__(queue, *args, **kwargs)

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
        self._preempt(victim, plan)

    def _blocks_freed(self, victim: SeqState, plan: StepPlan) -> int:
        """KV blocks evicting ``victim`` now gives back."""
        if not victim.in_decode:
            return victim.num_blocks
        num_computed = victim.dec_base + victim.cohort.step_no
        in_batch = plan.num_decodes and victim.cohort is self.cohorts[plan.slot]
        extra = 1 if in_batch and num_computed % self.block_size == 0 else 0
        return blocks_for(num_computed, self.block_size) + extra

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
        used = 0
        queue = self.queue
        admit = not plan.preempted  # as vLLM: no admissions after a decode-phase eviction
        running = sorted((s for s in self.prefilling if not s.busy), key=self._key)
        i = 0
        while True:
            left = total - plan.num_decodes - used
            if left <= 0:
                break
            while i < len(running) and running[i].status != "running":  # evicted meanwhile
                i += 1
            r = running[i] if i < len(running) else None
            w = queue.peek() if admit and len(queue) else None
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
            # The waiting head is the most urgent candidate: make room for it by
            # evicting strictly lower-priority running requests, or stop admitting.
            # A request evicted in this step does not come straight back (no thrash).
            n, enc = self._fit(w, min(w.num_tokens - w.num_scheduled, left), enc_left, items)
            slots = self.num_places_taken - self.max_running + 1
            if (n <= 0 or any(w is v for v in plan.preempted)
                    or not self._make_room(w, blocks_for(n, self.block_size), plan, slots)):
                admit = False
                continue
            if queue.peek() is not w:  # an evicted request's class now leads: decide again
                continue
            if not self._admit(w, n, plan, items):
                admit = False
                continue
            queue.pop()
            used += n
            enc_left -= enc

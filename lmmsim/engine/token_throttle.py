"""gLLM's Token Throttling: a micro-batch's prefill tokens are an even share of the pending ones.

A mixin of :class:`~lmmsim.engine.scheduler.ContinuousBatchingScheduler` (which supplies
``prefill_throttle``, ``prefilling``, ``cohorts`` and ``_waiting_pending``). The pending
prefill tokens are those of the running prefills (at most ``max_running``, summed per step)
plus those of the waiting queue, which is unbounded under overload: that part is kept as a
running count, each request adding what it brings when it enters the queue and taking the
same away when it leaves, so a step costs nothing per waiting request. Exact: a request's
pending tokens do not change while it waits (a prefix-cache or resume lookup that starts it
at a cached prefix is undone unless it is admitted, and admission takes it out of the queue).
"""

from __future__ import annotations


class TokenThrottle:
    def _enqueued(self, seq) -> None:
        """``seq`` entered the waiting queue."""
        if self.prefill_throttle is not None:
            seq.queued_pending = seq.num_tokens - seq.num_scheduled
            self._waiting_pending += seq.queued_pending

    def _dequeued(self, seq) -> None:
        """``seq`` left the waiting queue."""
        if self.prefill_throttle is not None:
            self._waiting_pending -= seq.queued_pending

    def _throttled_prefill_tokens(self) -> int:
        """Pending prefill tokens spread over the pipeline slots, within (min, max)."""
        low, high = self.prefill_throttle
        pending = 0
        for s in self.prefilling:
            pending += s.request.num_prompt_tokens + s.num_generated - s.num_scheduled  # (num_tokens inline)
        pending += self._waiting_pending
        share = -(-pending // len(self.cohorts))
        return max(low, min(high, share))

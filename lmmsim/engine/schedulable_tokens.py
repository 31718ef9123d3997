"""RServe's token scheduling: batches of schedulable tokens (rserve.txt Algorithm 2).

A prompt token is *schedulable* when its embedding is at the LLM worker and
every earlier token is computed or itself scheduled (in flight counts: with
chunked pipeline parallelism a request's next chunk may follow the previous
one into the pipeline). Per micro-batch, Algorithm 2 dequeues requests from
the queue Q, adds each one's schedulable tokens while the token budget B
lasts -- a request larger than what is left still joins and takes the rest --
and puts the requests that still have unscheduled prompt tokens back at the
head of Q, in order.

Mapping onto :class:`ContinuousBatchingScheduler`: Q is the running
prefills (admission order) followed by the waiting queue. Requests that got
tokens but are incomplete stay in the running list, which is walked before
the waiting queue, so they are "prepended" in their original order; a
request with zero schedulable tokens (its next embedding has not arrived) is
skipped and keeps its place, instead of blocking the requests behind it as
the Sarathi-style walk does. Decodes go first, one token each (Sarathi-Serve,
as the paper's schemes all use).

Choices where the paper is silent (documented, replaceable by subclassing):

* KV memory: a waiting request starts only if its first chunk's blocks fit,
  and the walk of the waiting queue stops at the first that does not (FCFS
  for memory, as vLLM); running prefills may preempt the newest idle one as
  in the base scheduler.
* ``inter_request=False`` is RServe-intra (section 4.3.2): at most one
  request's prefill tokens per micro-batch.
"""

from __future__ import annotations

from lmmsim.engine.scheduler import ContinuousBatchingScheduler, StepPlan


class SchedulableTokenScheduler(ContinuousBatchingScheduler):
    def __init__(self, *args, inter_request: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        self.inter_request = inter_request
        self.max_prefill_requests = None if inter_request else 1

    def _schedule_waiting(self, plan: StepPlan, budget: int, enc_left: int, taken: int) -> None:
        """Requests not started yet, in queue order, after the running ones
        (which :meth:`_schedule_running` walked as the head of Q)."""
        queue = self.queue
        limit = self.max_prefill_requests
        skipped: list = []
        while budget > 0 and len(queue) and self.num_places_taken < self.max_running and taken != limit:
            seq = queue.pop()
            self._dequeued(seq)
            items: list = []
            n, used = self._fit(seq, min(seq.num_tokens - seq.num_scheduled, budget, self.max_chunk), enc_left, items)
            if n <= 0 or not self._admit(seq, n, plan, items):
                if self.prefix_caching:  # as the base walk: its lookup is redone when next considered
                    self._unlookup(seq)
                skipped.append(seq)
                if n <= 0:  # no schedulable tokens yet: skipped
                    continue
                break  # its KV blocks do not fit: stop here
            budget -= n
            enc_left -= used
            taken += 1
        for seq in reversed(skipped):  # Prepend(U, Q): back at the head, order kept
            queue.prepend(seq)
            self._enqueued(seq)

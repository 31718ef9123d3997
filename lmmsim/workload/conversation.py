"""Multi-turn conversations: later turns resend the whole chat so far.

``conversation: {turns, turn_gap_s}`` on a mix class makes each request the class draws
the first turn of a conversation of ``turns`` turns (a length distribution, at least 1).
Turn ``t``'s prompt is the class's system prompt (if any), then every earlier turn's user
message and answer in order, then the new user message, as a chat API resends the
history; so prompts grow by the previous answer plus the new message each turn. Turn 0
is the request the class would draw anyway (text, media, layout); later user messages
are text drawn from the class's ``text_tokens``, and each turn's answer length from its
output distribution. Every part is keyed in :attr:`Request.shared_content` as
``("conversation", c, turn, "user" | "answer")`` (``c``: the conversation, numbered by its
first turn), so a prefix cache finds turn ``t``'s prompt inside turn ``t + 1``'s. Media of
turn 0 stay in the history; an item without a ``media_id`` gets one,
``"conversation/<c>/<k>"``, so later turns carry the same item (vLLM hashes the same
image in the resent history to the same ``mm_hash``).

Arrival semantics (open loop): turn ``t + 1`` arrives ``turn_gap_s`` after turn ``t``
*arrived*, whatever the system does meanwhile. That is what a trace records (Mooncake's
timestamps are arrivals), and it keeps every arrival time fixed before the run, so one
request list replays against any system and runs stay deterministic. Its cost: a gap
shorter than a turn's response time sends the next turn before its predecessor's answer
exists, which a person could not do; choose gaps that include a response time (the
answer plus the user's reading and typing). A closed loop (next turn a think time after
the previous one *ended*) would need :mod:`lmmsim.engine.closed_loop` to send a given
user's next turn rather than the next request in index order; it is not modelled, and a
conversation class with a ``closed_loop`` arrival is refused.

The arrival process gives the conversations' first turns. ``num_requests`` counts
requests (turns): that many first turns are drawn and the first ``num_requests`` turns
in arrival order are kept; ``duration_s`` keeps the turns that arrive before it. Draws
come from the ``conversation`` stream, one child per class, in a fixed order (turn
counts, gaps, user lengths, answer lengths), so turning conversations on leaves the
first turns as they were.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from pydantic import field_validator

from lmmsim.workload.distributions import LengthDist, StrictModel
from lmmsim.workload.request import MediaItem, PromptSegment, Request

CONVERSATION_KEY = "conversation"


class ConversationSpec(StrictModel):
    """``turns`` per conversation (a length distribution; a number is fixed) and the
    seconds from one turn's arrival to the next (``turn_gap_s``, drawn as floats)."""

    turns: LengthDist
    turn_gap_s: LengthDist

    @field_validator("turns", "turn_gap_s", mode="before")
    @classmethod
    def _number_is_fixed(cls, v):
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return {"kind": "fixed", "value": v}
        return v


def turn_key(conversation: int, turn: int, role: str) -> tuple:
    return (CONVERSATION_KEY, conversation, turn, role)


class _Plan:
    """The drawn follow-up turns of one class: per conversation its first turn's index and
    follow-up count, then per follow-up turn (conversation by conversation) its arrival
    time, turn number, user tokens and answer tokens."""

    def __init__(self, firsts, counts, times, user, answer):
        self.firsts, self.counts, self.times = firsts, counts, times
        starts = np.cumsum(counts) - counts
        self.turn = np.arange(len(times)) - np.repeat(starts, counts) + 1
        self.user, self.answer = user.tolist(), answer.tolist()


def _plan(spec: ConversationSpec, firsts: list[int], arrivals: list[float], text_dist, out_dist,
          rng: np.random.Generator, base_dir) -> _Plan:
    """Draw every follow-up turn of the conversations started by requests ``firsts``."""
    counts = spec.turns.sample(rng, len(firsts), base_dir) - 1  # follow-ups per conversation
    total = int(counts.sum())
    gaps = spec.turn_gap_s.sample_float(rng, total, base_dir)
    user = text_dist.sample(rng, total, base_dir)
    answer = out_dist.sample(rng, total, base_dir)
    # turn t of a conversation arrives at its start plus its first t gaps: a cumulative sum
    # over all gaps, less the sum before the conversation's own
    cum = np.cumsum(gaps)
    before = np.concatenate(([0.0], cum))[np.cumsum(counts) - counts]
    times = np.repeat(np.asarray(arrivals, dtype=np.float64) - before, counts) + cum
    return _Plan(np.asarray(firsts, dtype=np.int64), counts, times, user, answer)


def expand_conversations(first_turns: list[Request], plans: list[_Plan], limit: int | None,
                         horizon: float | None) -> list[Request]:
    """All requests: the first turns plus every planned follow-up, in arrival order (ties:
    conversation, then turn), cut to arrivals before ``horizon`` and to the first
    ``limit``; ids renumbered ``0..n-1``. Only the kept requests are built."""
    times = np.concatenate([[r.arrived_at for r in first_turns], *(p.times for p in plans)])
    firsts = np.concatenate([np.arange(len(first_turns)), *(np.repeat(p.firsts, p.counts) for p in plans)])
    turns = np.concatenate([np.zeros(len(first_turns), dtype=np.int64), *(p.turn for p in plans)])
    order = np.lexsort((turns, firsts, times))
    if horizon is not None:
        order = order[times[order] < horizon]
    if limit is not None:
        order = order[:limit]
    history = _Histories(first_turns, plans)
    return [replace(history.turn(int(firsts[j]), int(turns[j])), request_id=i, arrived_at=float(times[j]))
            for i, j in enumerate(order.tolist())]


class _Histories:
    """Builds turn ``t`` of the conversation started by request ``first`` on demand."""

    def __init__(self, first_turns: list[Request], plans: list[_Plan]):
        self.first = {r.request_id: r for r in first_turns}
        self.turns: dict[int, list[tuple[int, int]]] = {}  # first -> [(user, answer)] of turns 1..
        for plan in plans:
            k = 0
            for first, n in zip(plan.firsts.tolist(), plan.counts.tolist()):
                self.turns[first] = list(zip(plan.user[k:k + n], plan.answer[k:k + n]))
                k += n

    def turn(self, first: int, t: int) -> Request:
        r0 = self.first[first]
        if t == 0:  # a first turn (its answer is resent by the next), or a one-turn conversation's request
            return replace(r0, answer_content=turn_key(first, 0, "answer")) if self.turns.get(first) else r0
        follow = self.turns[first]
        runs = list(r0.shared_content)
        text = r0.num_output_tokens
        runs.append((turn_key(first, 0, "answer"), r0.num_output_tokens))
        for j in range(1, t + 1):
            user, answer = follow[j - 1]
            runs.append((turn_key(first, j, "user"), user))
            text += user
            if j < t:
                runs.append((turn_key(first, j, "answer"), answer))
                text += answer
        return Request(r0.request_id, r0.arrived_at, r0.modality, r0.class_name,
                       _append_text(r0.segments, text), follow[t - 1][1], shared_content=tuple(runs),
                       answer_content=turn_key(first, t, "answer") if t < len(follow) else None)


def _append_text(segments: tuple[PromptSegment, ...], n: int) -> tuple[PromptSegment, ...]:
    """``segments`` then ``n`` text tokens (merged into a trailing text segment)."""
    last = segments[-1]
    if last.item is None:
        return (*segments[:-1], PromptSegment(last.start, last.length + n))
    return (*segments, PromptSegment(last.end, n))


def first_turn(r: Request, system_tokens: int) -> Request:
    """Request ``r`` as a conversation's first turn: its prompt after the system prompt
    keyed as the turn's user message, and its media given ids the history can repeat."""
    names = {id(s): k for k, s in enumerate(r.media_segments)}  # k: the item's place among the media
    segments = tuple(
        s if s.item is None else PromptSegment(s.start, s.length, _named(s.item, r.request_id, names[id(s)]))
        for s in r.segments
    )
    runs = (*r.shared_content, (turn_key(r.request_id, 0, "user"), r.num_prompt_tokens - system_tokens))
    return replace(r, segments=segments, shared_content=runs)


def _named(item: MediaItem, conversation: int, k: int) -> MediaItem:
    if item.media_id is not None:  # already named (reuse): keep it
        return item
    return replace(item, media_id=f"{CONVERSATION_KEY}/{conversation}/{k}")


def plan_class(spec: ConversationSpec, members: list[int], requests: list[Request], text_dist, out_dist,
               rng: np.random.Generator, base_dir) -> _Plan:
    """The follow-ups of one class whose first turns are ``requests[i]`` for ``i`` in ``members``."""
    return _plan(spec, members, [requests[i].arrived_at for i in members], text_dist, out_dist, rng, base_dir)

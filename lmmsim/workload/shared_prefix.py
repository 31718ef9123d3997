"""Prompt content that requests share: system prompts, and how much of a workload an
unbounded prefix cache could reuse.

``system_prompt: {tokens, variants, name}`` on a mix class starts every prompt of the
class with one of ``variants`` shared system prompts of ``tokens`` tokens. The prompt is
keyed in :attr:`Request.shared_content` as ``("system", name, variant)``, so a prefix
cache (which reads only :func:`content_runs`) sees the same text wherever the same
variant recurs. The system prompt comes on top of the class's ``text_tokens`` (the
user's own text) and before any media: chat templates put the system message first.

Which variant a request gets is drawn uniformly from the run's ``shared`` random stream,
a stream no other aspect of the workload draws from, so turning system prompts on or off
leaves arrival times, lengths and media unchanged. Uniform popularity is a choice, not a
measurement: production traces show a few very hot prefixes (Mooncake's tool&agent trace),
which ``variants: 1`` models exactly; a skewed choice would be a new key here.

:func:`infinite_cache_hits` is the reuse an unbounded, never-evicting prefix cache sees:
a block (or run) is a hit when the whole chain of keys up to and including it appeared
in an earlier request. No capacity limit, eviction policy or routing can beat it.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np
from pydantic import Field

from lmmsim.workload.distributions import PositiveCount, StrictModel
from lmmsim.workload.request import Request, content_runs

SYSTEM_KEY = "system"


class SystemPromptSpec(StrictModel):
    """``variants`` shared system prompts of ``tokens`` tokens each, one per request.

    ``name`` (default: the class's name) names the pool: classes giving the same name
    draw from the same prompts, so their requests share them too.
    """

    tokens: PositiveCount
    variants: PositiveCount = 1
    name: str | None = Field(default=None, min_length=1)


def pool_name(spec: SystemPromptSpec, class_name: str) -> str:
    return spec.name if spec.name is not None else class_name


def draw_variants(spec: SystemPromptSpec, rng: np.random.Generator, n: int) -> list[int]:
    """The variant of each of ``n`` requests (uniform; see the module docstring)."""
    if spec.variants == 1:
        return [0] * n
    return rng.integers(0, spec.variants, size=n).tolist()


def system_run(spec: SystemPromptSpec, class_name: str, variant: int) -> tuple[object, int]:
    """The ``(key, tokens)`` run of one system prompt."""
    return ((SYSTEM_KEY, pool_name(spec, class_name), int(variant)), spec.tokens)


# ------------------------------------------------------------ ideal reuse
def _chain_hits(chains: Iterable[Sequence]) -> Iterable[list[bool]]:
    """Per chain, per element: did an earlier chain hold the same prefix up to here?

    A trie of the chains seen so far, one node per distinct prefix: element ``i`` hits
    when the node for ``chain[:i+1]`` existed before this chain was added. Memory and
    time grow with the total length, not its square.
    """
    children: dict[tuple[int, object], int] = {}
    for chain in chains:
        node, hits, fresh = 0, [], False
        for key in chain:
            child = None if fresh else children.get((node, key))
            if child is None:
                fresh = True  # nothing below a new node can have been seen
                child = len(children) + 1
                children[(node, key)] = child
            hits.append(not fresh)
            node = child
        yield hits


def infinite_cache_hits(hash_lists: Iterable[Sequence]) -> tuple[int, int]:
    """(blocks whose prefix chain was seen before, all blocks) over prompts given as
    lists of block hashes in arrival order (Mooncake's ``hash_ids``)."""
    hit = total = 0
    for flags in _chain_hits(hash_lists):
        hit += sum(flags)
        total += len(flags)
    return hit, total


def infinite_cache_hit_tokens(requests: Sequence[Request]) -> tuple[int, int]:
    """(prompt tokens an unbounded prefix cache holds already, all prompt tokens) over
    ``requests`` in arrival order, from their :func:`content_runs` (token-weighted, so a
    trace's last, partial block counts by its tokens). A request naming its answer's
    content (``answer_content``) adds the answer to what later prompts can hit, as if it
    had finished before they arrive (the bound's optimism)."""
    runs = [content_runs(r) for r in requests]

    def chains():  # each prompt (counted), then its prompt + answer (seen, not counted)
        for r, rr in zip(requests, runs):
            keys = [key for key, _ in rr]
            yield keys
            if r.answer_content is not None:
                yield [*keys, r.answer_content]

    hit, flags_of = 0, _chain_hits(chains())
    for r, rr in zip(requests, runs):
        hit += sum(n for (_, n), h in zip(rr, next(flags_of)) if h)
        if r.answer_content is not None:
            next(flags_of)
    return hit, sum(r.num_prompt_tokens for r in requests)

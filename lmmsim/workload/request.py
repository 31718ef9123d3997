"""Requests as the simulator sees them: an ordered prompt of text runs and media items.

A request is static data produced by the workload generator (or read from a
trace). Engines keep their own mutable per-request state; nothing here changes
during a run, so one request list can be replayed against several systems.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MODALITIES = ("text", "image", "video", "audio")


@dataclass(frozen=True, slots=True)
class EncoderWork:
    """Shape of the encoder forward pass one media item needs.

    ``num_units`` independent attention units (image crops/tiles, video frame
    groups, 30-s audio windows), each a sequence of ``seq_len`` encoder tokens
    (patches or audio frames). Hashable so cost predictions can be memoised.
    """

    num_units: int
    seq_len: int

    @property
    def num_tokens(self) -> int:
        return self.num_units * self.seq_len


@dataclass(frozen=True, slots=True)
class MediaItem:
    """One image, video or audio clip in a prompt.

    ``num_llm_tokens`` placeholder tokens it occupies in the LLM prompt (its
    embeddings); ``encoder`` the encoder work that produces them; ``source``
    keeps the raw description (resolution, frames, seconds) for traces.
    ``media_id`` names the content (vLLM's ``mm_hash``): two items with the same
    id are the same image, clip or video, so caches may reuse work done for one
    (:mod:`lmmsim.engine.media_cache`); None is an item seen nowhere else.
    """

    modality: str
    num_llm_tokens: int
    encoder: EncoderWork
    source: tuple = ()
    media_id: str | None = None


@dataclass(frozen=True, slots=True)
class PromptSegment:
    """A run of prompt positions ``[start, start + length)``; ``item`` is None for text."""

    start: int
    length: int
    item: MediaItem | None = None

    @property
    def end(self) -> int:
        return self.start + self.length


@dataclass(slots=True)
class Request:
    """A request: arrival time, ordered prompt segments and output length.

    ``modality`` is the request's class modality (the richest medium it carries:
    video > image > audio > text); ``class_name`` the workload mix class.
    ``prefix_hash_ids``: the trace's prefix-block hashes (Mooncake's ``hash_ids``,
    one per :data:`TRACE_HASH_BLOCK_TOKENS`-token block; equal ids are a shared KV prefix).
    ``shared_content``: the same for generated workloads, as runs ``(key, tokens)`` from
    position 0 (a system prompt, a conversation's earlier turns); two requests whose runs
    agree up to a position hold the same text up to it. Prompt tokens past the runs are
    the request's own. :func:`content_runs` gives either as runs; a prefix cache reads
    only that (media positions are keyed by their ``media_id`` on top, as vLLM's are).
    """

    request_id: int
    arrived_at: float
    modality: str
    class_name: str
    segments: tuple[PromptSegment, ...]
    num_output_tokens: int
    num_prompt_tokens: int = field(init=False)
    num_mm_tokens: int = field(init=False)
    media_segments: tuple[PromptSegment, ...] = field(init=False)
    prefix_hash_ids: tuple = ()
    shared_content: tuple[tuple[object, int], ...] = ()
    # Content key of the request's answer when later prompts repeat it (a conversation's
    # next turn): a prefix cache keys the finished request's generated blocks by it.
    answer_content: object = None

    def __post_init__(self) -> None:
        pos = 0
        for seg in self.segments:
            if seg.start != pos or seg.length <= 0:
                raise ValueError(f"request {self.request_id}: segments must be contiguous and non-empty")
            pos = seg.end
        self.num_prompt_tokens = pos
        self.media_segments = tuple(s for s in self.segments if s.item is not None)
        self.num_mm_tokens = sum(s.length for s in self.media_segments)
        if self.num_output_tokens < 1:
            raise ValueError(f"request {self.request_id}: num_output_tokens must be >= 1")

    @property
    def num_text_tokens(self) -> int:
        return self.num_prompt_tokens - self.num_mm_tokens


TRACE_HASH_BLOCK_TOKENS = 512  # Mooncake's hash_ids block (FAST'25 trace README)


def content_runs(request: Request) -> tuple[tuple[object, int], ...]:
    """The prompt's leading content as runs ``(key, tokens)`` (see :class:`Request`):
    a trace's hash ids as 512-token runs (the last cut to the prompt), else
    ``shared_content``; empty when nothing in the prompt is shared with others."""
    if not request.prefix_hash_ids:
        return request.shared_content
    runs, left = [], request.num_prompt_tokens
    for h in request.prefix_hash_ids:
        if left <= 0:
            break
        n = min(TRACE_HASH_BLOCK_TOKENS, left)
        runs.append((("trace", h), n))
        left -= n
    return tuple(runs)


def build_segments(parts: list[int | MediaItem]) -> tuple[PromptSegment, ...]:
    """Lay out prompt parts in order: an int is a text run of that many tokens, a
    :class:`MediaItem` occupies its ``num_llm_tokens`` positions. Zero-length
    text runs are dropped."""
    segments = []
    pos = 0
    for part in parts:
        if isinstance(part, MediaItem):
            length, item = part.num_llm_tokens, part
        else:
            length, item = int(part), None
        if length <= 0:
            continue
        segments.append(PromptSegment(pos, length, item))
        pos += length
    return tuple(segments)


def prompt_parts(layout: str, text: int, media: tuple) -> list:
    """The prompt in order: text runs (token counts) and media items.

    ``interleaved`` splits the text into ``len(media) + 1`` runs as even as
    possible (earlier runs take the remainder) with one item between each
    pair -- MMMU-style questions that place ``<image k>`` inside the text.
    Empty runs are dropped.
    """
    if layout == "media_first":
        return [*media, text]
    if layout == "text_first":
        return [text, *media]
    runs = len(media) + 1
    q, r = divmod(text, runs)
    parts: list = []
    for j in range(runs):
        n = q + (j < r)
        if n:
            parts.append(n)
        if j < len(media):
            parts.append(media[j])
    return parts


def request_modality(items) -> str:
    """The class modality of a request carrying these media items."""
    kinds = {it.modality for it in items}
    for m in ("video", "image", "audio"):
        if m in kinds:
            return m
    return "text"

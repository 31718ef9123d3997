"""A workload as datasets real benchmark tools replay: ``lmmsim workload --format ...``.

``vllm-dataset``
    JSONL for ``vllm bench serve --dataset-name custom``: one
    ``{"prompt": ..., "output_tokens": N}`` per request (vLLM reads
    ``output_tokens`` when ``--custom-output-len -1``).
``guidellm``
    JSONL for ``guidellm benchmark --data FILE``: ``{"prompt": ...,
    "prompt_tokens_count": n, "output_tokens_count": m}`` per request.

Prompts are synthetic text: ``text_tokens`` common English words drawn per
request (about one token per word for Llama / Qwen BPE tokenizers; the exact
count depends on the tokenizer and chat template). Each prompt starts
differently, so a server's prefix cache sees no shared prefixes the workload
did not have. Media items are not exported (neither format carries them
here): only a request's text is written, and :func:`write_dataset` returns
how many requests lost media. Arrival times are not exported either: these
tools set the load themselves (``--request-rate``, ``--max-concurrency``,
``--rate-type``).
"""

from __future__ import annotations

import json
from pathlib import Path

FORMATS = ("vllm-dataset", "guidellm")

# Common words that are one token each (with their leading space) for Llama-2/3 and Qwen2 tokenizers.
WORDS = (
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on", "not",
    "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "had", "they", "you",
    "were", "their", "one", "all", "we", "can", "her", "has", "there", "been", "if", "more", "when", "will",
    "would", "who", "so", "no", "time", "new", "people", "year", "way", "day", "man", "world", "life", "work",
    "system", "water", "city", "house", "light", "model", "music", "paper", "story", "road", "tree", "river",
)


def synthetic_prompt(request_id: int, tokens: int) -> str:
    """``tokens`` words, deterministic per request (a small LCG seeded by the id)."""
    state = (request_id * 2654435761 + 12345) & 0xFFFFFFFF
    out = []
    for _ in range(max(int(tokens), 1)):
        state = (state * 1664525 + 1013904223) & 0xFFFFFFFF
        out.append(WORDS[(state >> 16) % len(WORDS)])
    return " ".join(out)


def dataset_row(request, fmt: str) -> dict:
    prompt = synthetic_prompt(request.request_id, request.num_text_tokens)
    if fmt == "vllm-dataset":
        return {"prompt": prompt, "output_tokens": request.num_output_tokens}
    return {"prompt": prompt, "prompt_tokens_count": max(request.num_text_tokens, 1),
            "output_tokens_count": request.num_output_tokens}


def write_dataset(requests, path: Path, fmt: str) -> int:
    """Write ``requests`` as a ``fmt`` dataset (JSONL); returns how many carried media (dropped)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown dataset format {fmt!r}")
    with open(path, "w", encoding="utf-8") as fh:
        for r in requests:
            fh.write(json.dumps(dataset_row(r, fmt)) + "\n")
    return sum(1 for r in requests if r.media_segments)

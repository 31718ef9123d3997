"""Prompt tokenisation on the host (``tokenize.csv``, ``tokenize_variants.csv``), with byte-level BPE
vocabularies trained in the run.

A serving frontend (vLLM's API server) tokenises every prompt on CPU before the engine sees it.
No model's tokenizer file can be fetched here, so the vocabularies are trained at the start of the
run with the ``tokenizers`` library: the same algorithm (byte-level BPE) and the same GPT-2 style
``ByteLevel`` pre-tokeniser as the byte-level BPE tokenizers of GPT-2, Llama-3 and Qwen2, at those
models' vocabulary sizes, but with merges learnt from a local corpus (the Python standard library,
then the installed packages, sorted, capped in bytes) instead of theirs. The timed call is one
``encode`` of an English prompt cut to an exact token count; training is not part of any time.

Three ways of calling it are timed (``api``, ``bpe_cache`` columns):

* ``transformers`` / ``warm`` (``tokenize.csv``, one row per vocabulary and length, fitted per
  vocabulary): ``PreTrainedTokenizerFast.encode`` around the trained tokenizer, the call vLLM's
  frontend makes, with the wrapper's Python overhead; the same prompt again, so every word hits the BPE
  word cache (10,000 words): near a server whose prompts share their words;
* ``tokenizers`` / ``warm`` (``tokenize_variants.csv``): ``Tokenizer.encode`` alone, the Rust call
  without the wrapper;
* ``tokenizers`` / ``off`` (``tokenize_variants.csv``): the same vocabulary and merges with the cache
  disabled, so every word is merged from scratch (a prompt of words never seen before).

Before each timed encode the same tokenizer encodes a short passage from elsewhere in the text,
untimed (:attr:`~lmmsim.profiler.host_timing.Case.prepare`): a serving frontend tokenises and
detokenises all the time, so its tokenizer's tables are in the CPU caches; without it, the first case
after another vocabulary's 8192-token prompt paid about 0.3 ms more for the cold caches (measured here).

``tokenizers`` parallelises over a batch (``encode_batch``, which the ``transformers`` wrapper uses
even for one text) unless ``TOKENIZERS_PARALLELISM`` is false; :func:`single_threaded` sets it for the
run so that every number is one thread's, and the run records the CPU-seconds per wall-second of the
largest encode as a check.
"""

from __future__ import annotations

import hashlib
import json
import os
import sysconfig
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lmmsim.profiler.host_timing import Case

# vocabulary size -> the model whose tokenizer has it (Llama-2's is SentencePiece BPE with byte
# fallback, not byte-level: its row is the size, not the exact algorithm)
VOCABS = {32000: "Llama-2", 128256: "Llama-3", 151646: "Qwen2 (151,643 BPE + 3 special)"}
QUICK_VOCABS = {400: "quick", 800: "quick"}
TOKEN_COUNTS = (128, 512, 2048, 8192)
QUICK_TOKEN_COUNTS = (16, 64)
# 48 MB reaches 151,646 tokens with this machine's packages; the standard library alone (31 MB)
# stops the trainer near 140,000 (every distinct pre-token has become one token)
CORPUS_BYTES = 48_000_000
QUICK_CORPUS_BYTES = 200_000
SUFFIXES = (".py", ".txt", ".rst")
HELD_OUT = "pydoc_data/topics.py"  # the prompt text: never part of the training corpus
VARIANTS = (("transformers", "warm"), ("tokenizers", "warm"), ("tokenizers", "off"))
PRIMARY = VARIANTS[0]  # tokenize.csv; the others go to tokenize_variants.csv


@contextmanager
def single_threaded() -> Iterator[None]:
    """``TOKENIZERS_PARALLELISM=false`` for the block (read by ``tokenizers`` at every batch call), then
    the caller's value back."""
    before = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = before


# ------------------------------------------------------------------ corpus and prompt text
def corpus_files() -> Iterator[tuple[str, str, Path]]:
    """(root label, relative path, file) in a fixed order: the standard library's text files sorted by relative path,
    then those of the packages folder (``purelib``) the same way."""
    paths = sysconfig.get_paths()
    for label, root in (("stdlib", Path(paths["stdlib"])), ("purelib", Path(paths["purelib"]))):
        found = []
        for folder, dirs, names in os.walk(root):
            if label == "stdlib" and Path(folder) == root:
                # the packages folder usually sits inside the standard library's: it has its own turn,
                # and pruning it here keeps a quick run from walking every installed package
                dirs[:] = [d for d in dirs if d not in ("site-packages", "dist-packages")]
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in names:
                path = Path(folder, name)
                rel = path.relative_to(root).as_posix()
                if path.suffix in SUFFIXES and rel != HELD_OUT and path.is_file():
                    found.append((rel, path))
        for rel, path in sorted(found):
            yield label, rel, path


def read_corpus(cap_bytes: int) -> tuple[list[str], dict]:
    """The first ``cap_bytes`` bytes of :func:`corpus_files` (the last file cut), as UTF-8 text
    (undecodable bytes dropped), with what is needed to tell whether another run read the same."""
    texts, digest, total, files, last = [], hashlib.sha256(), 0, 0, ""
    for label, rel, path in corpus_files():
        data = path.read_bytes()[: cap_bytes - total]
        digest.update(data)
        texts.append(data.decode("utf-8", "ignore"))
        total, files, last = total + len(data), files + 1, f"{label}:{rel}"
        if total >= cap_bytes:
            break
    return texts, {"sources": f"{', '.join(SUFFIXES)} files of sysconfig stdlib then purelib, sorted by "
                              f"relative path, {HELD_OUT} left out", "cap_bytes": cap_bytes, "bytes": total,
                   "files": files, "last_file": last, "sha256": digest.hexdigest()}


def prompt_text() -> tuple[str, str]:
    """English prose to cut prompts from: the Python reference manual's help topics (held out of the
    corpus); the corpus itself where a distribution strips ``pydoc_data``."""
    try:
        from pydoc_data.topics import topics
    except ImportError:
        texts, _ = read_corpus(2_000_000)
        return "".join(texts), "the training corpus (pydoc_data is missing here), not held out"
    return "\n\n".join(topics[k] for k in sorted(topics)), "pydoc_data.topics (Python help topics), held out"


# ------------------------------------------------------------------ tokenizers
def train_bpe(texts: list[str], vocab_size: int):
    """A byte-level BPE tokenizer trained on ``texts`` up to ``vocab_size`` tokens (fewer if the corpus
    runs out of pairs to merge)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def without_cache(tok):
    """The same vocabulary, merges and pre-tokeniser with the BPE word cache off (public API only: the
    model is rebuilt from the tokenizer's JSON)."""
    from tokenizers import Tokenizer, models

    spec = json.loads(tok.to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ", 1)) for m in spec["merges"]]
    clone = Tokenizer(models.BPE(vocab=spec["vocab"], merges=merges, cache_capacity=0))
    clone.pre_tokenizer, clone.decoder = tok.pre_tokenizer, tok.decoder
    return clone


def cut_to_tokens(tok, text: str, n: int) -> str:
    """The longest prefix of ``text`` that ends on the ``n``-th token's last character."""
    enc = tok.encode(text[: n * 16])  # 16 characters a token is far above any BPE vocabulary's average
    if len(enc.ids) < n:
        enc = tok.encode(text)
    if len(enc.ids) < n:
        raise ValueError(f"prompt text too short for {n} tokens ({len(enc.ids)})")
    return text[: enc.offsets[n - 1][1]]


def _encoders(tok) -> dict[tuple[str, str], object]:
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(tokenizer_object=tok)
    raw, cold = tok, without_cache(tok)
    return {("transformers", "warm"): lambda s: fast.encode(s), ("tokenizers", "warm"): lambda s: raw.encode(s).ids,
            ("tokenizers", "off"): lambda s: cold.encode(s).ids}


def cpu_per_wall(fn, calls: int = 5) -> float:
    """Process CPU seconds per wall second over ``calls`` calls: about 1 for one thread, up to the core
    count for a call that fans out."""
    w, c = time.perf_counter(), time.process_time()
    for _ in range(calls):
        fn()
    return round((time.process_time() - c) / max(time.perf_counter() - w, 1e-9), 2)


def tokenize_cases(quick: bool) -> tuple[list[Case], dict]:
    """Train one vocabulary per target size, cut the prompts, and return the encode cases and the
    provenance for ``meta.json``."""
    vocabs = QUICK_VOCABS if quick else VOCABS
    counts = QUICK_TOKEN_COUNTS if quick else TOKEN_COUNTS
    texts, corpus = read_corpus(QUICK_CORPUS_BYTES if quick else CORPUS_BYTES)
    prose, source = prompt_text()
    other = prose[-600:]  # the prepare call's passage: not part of any prompt (they start at the beginning)
    cases, trained = [], []
    for target, model in vocabs.items():
        t = time.perf_counter()
        tok = train_bpe(texts, target)
        trained.append({"vocab_target": target, "model": model, "vocab_size": tok.get_vocab_size(),
                        "train_s": round(time.perf_counter() - t, 2)})
        encoders = _encoders(tok)
        for n in counts:
            prompt = cut_to_tokens(tok, prose, n)
            row = {"vocab_target": target, "vocab_size": tok.get_vocab_size(), "tokens": len(tok.encode(prompt).ids),
                   "chars": len(prompt)}
            for (api, cache), encode in encoders.items():
                table = "tokenize" if (api, cache) == PRIMARY else "tokenize_variants"
                cases.append(Case(table, {"api": api, "bpe_cache": cache, **row}, lambda f=encode, s=prompt: f(s),
                                  prepare=lambda f=encode: f(other)))
    largest = encoders[PRIMARY], prompt  # the last vocabulary's longest prompt: the thread check
    info = {"what": "encode of one English prompt with byte-level BPE vocabularies trained in this run (the "
                    "models' algorithm and pre-tokeniser, not their merges): an estimate of the cost; training "
                    "time is not in any row",
            "corpus": corpus, "prompt_text": source,
            "pre_tokenizer": "ByteLevel(add_prefix_space=False, use_regex=True): GPT-2 split regex, bytes as "
                             "256 symbols",
            "trainer": "tokenizers BpeTrainer(vocab_size, initial_alphabet=ByteLevel.alphabet())",
            "vocabularies": trained, "variants": [f"{a}/{c}" for a, c in VARIANTS],
            "threads": "TOKENIZERS_PARALLELISM=false for the run (one thread)",
            "cpu_s_per_wall_s": cpu_per_wall(lambda: largest[0](largest[1]))}
    return cases, info

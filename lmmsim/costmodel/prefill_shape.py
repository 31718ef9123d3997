"""Prefill attention of one head shape: a fitted predictor's miss path, specialised.

An engine's prefill chunks ``(new_tokens, context)`` rarely repeat (a prompt's later
chunks each attend over another prefix), so nearly every chunk of a run misses every
memo and is evaluated: the features of :func:`~lmmsim.costmodel.features.attention_prefill_scalar`
(seventeen of them, a dozen logs), the domain check, then the fitted roofline (outside
the data, most later chunks) or the forest. With the heads, KV heads, head size and
mask fixed -- one cost model's LLM -- most of that is constant. :func:`prefill_fn` is
:meth:`~lmmsim.costmodel.fitted.FittedPredictor.attention_prefill_s` for one such shape,
``fn(new_tokens, context) -> seconds``, computing per call only the features that vary
and checking the domain against the boxes of the shape's cell, by octave. It keeps
everything the general path does, under the same keys: the predictor's memo and
counters, the process's memo (:mod:`lmmsim.costmodel.fitcache`), the forest's own
features when the call lies inside the data; every float comes from the same
expressions in the same order (tests/test_prefill_shape.py compares the two paths).

A fit whose prefill domain uses other features than those computed here gets the
general path (``fn`` calls ``attention_prefill_s``).
"""

from __future__ import annotations

import math

from lmmsim.costmodel.features import ATTENTION_TILE, B, attention_prefill_scalar
from lmmsim.costmodel.fitcache import INSIDE, OUTSIDE, SHARED_MEMO_LIMIT

#: Features that vary with the chunk, as the fast path computes them (a domain box may use them).
_VARYING = ("log_new_tokens", "log_prefix", "log_tile_work")


def _const_features(num_heads, num_kv_heads, head_dim, causal) -> dict:
    """The features that do not vary with the chunk, as attention_prefill_scalar computes them."""
    log = math.log
    return {"causal": causal * 1.0, "log_num_heads": log(num_heads), "log_num_kv_heads": log(num_kv_heads),
            "log_head_dim": log(head_dim), "log_gqa": log(num_heads / num_kv_heads)}


def _octave_boxes(check, const: dict) -> dict | None:
    """Per octave of ``log_new_tokens``: the (index in :data:`_VARYING`, lo, hi) bounds a call of this
    shape must meet, or False where a constant feature already lies outside the box; None when
    the domain is not one this path reads (the general path then)."""
    cells, octave, box = check._cells, check._octave, check._box
    if check.domain is None or octave != "log_new_tokens" or any(c not in const for c in cells) or any(
            b not in const and b not in _VARYING for b in box):
        return None
    cell = tuple([round(const[c], 6) for c in cells])
    out = {}
    for key, bounds in check._by_tuple.items():
        if key[:-1] != cell:
            continue
        varying = []
        for nm, (lo, hi) in zip(box, bounds):
            if nm in const:
                v = const[nm]
                if v < lo or v > hi:
                    varying = False
                    break
            else:
                varying.append((_VARYING.index(nm), lo, hi))
        out[key[-1]] = varying if varying is False else tuple(varying)
    return out


def shared_prefill_fn(lc, memo: dict, num_heads, num_kv_heads, head_dim, causal):
    """``ev(new_tokens, context, key) -> (seconds, flag)`` of the loaded class ``lc`` (a forest or
    polynomial answering outside its data by its fitted roofline), memoised in the process's
    ``memo`` under ``key`` (the general path's); None when ``lc`` is not one this path reads."""
    if lc.derived_from or lc.kind == "roofline" or not lc.roofline_outside():
        return None
    const = _const_features(num_heads, num_kv_heads, head_dim, causal)
    boxes = _octave_boxes(lc.domain_check(), const)
    if boxes is None:
        return None
    c = causal * 1.0
    flops_k, bytes_k, heads_hd = 4.0 * num_heads * head_dim, B * head_dim, num_heads * head_dim
    names, roof_s = lc.features, lc.roofline.time_s
    log, ceil, floor, ln2 = math.log, math.ceil, math.floor, math.log(2.0)
    args = (num_heads, num_kv_heads, head_dim, c)

    def ev(new_tokens, context, key):
        # attention_prefill_work and attention_prefill_scalar's expressions, in their order
        keys = context - (c * 1.0) * (new_tokens - 1) / 2.0
        flops = flops_k * new_tokens * keys
        nbytes = bytes_k * (2 * new_tokens * num_heads + 2 * context * num_kv_heads)
        q_tiles = float(ceil(new_tokens / ATTENTION_TILE))
        k_tiles = float(ceil(context / ATTENTION_TILE))
        pairs = q_tiles * k_tiles - c * q_tiles * (q_tiles - 1) / 2.0
        log_new = log(new_tokens)
        varying = (log_new, log(context / new_tokens), log(pairs * num_heads * head_dim))
        bounds = boxes.get(floor(log_new / ln2 + 1e-9))
        inside = bool(bounds is not None and bounds is not False)
        if inside:
            for i, lo, hi in bounds:
                v = varying[i]
                if v < lo or v > hi:
                    inside = False
                    break
        if inside:
            f = attention_prefill_scalar(new_tokens, context, *args)
            hit = (lc.model.scalar_s([f[nm] for nm in names]), INSIDE)
        else:
            hit = (roof_s(flops, nbytes, 1.0, q_tiles * num_heads), OUTSIDE)
        if len(memo) >= SHARED_MEMO_LIMIT:
            memo.clear()
        memo[key] = hit
        return hit

    return ev


def prefill_fn(predictor, num_heads: int, num_kv_heads: int, head_dim: int, causal: bool = True):
    """``fn(new_tokens, context)``: ``predictor.attention_prefill_s(new_tokens, context, num_heads,
    num_kv_heads, head_dim, causal)`` (a :class:`~lmmsim.costmodel.fitted.FittedPredictor`), the same
    seconds, memos and counters (module docstring)."""
    general = predictor.attention_prefill_s
    lc = predictor.fit.classes.get("attention_prefill")
    shared = predictor._shared.scalar("attention_prefill", lc) if lc is not None else None
    ev = shared_prefill_fn(lc, shared.memo, num_heads, num_kv_heads, head_dim, causal) if shared else None
    if ev is None:
        return lambda new_tokens, context: general(new_tokens, context, num_heads, num_kv_heads, head_dim, causal)
    causal = bool(causal)
    memo, store, shared_memo = predictor._prefill_memo, predictor._store, shared.memo
    shape_types = (type(num_heads), type(num_kv_heads), type(head_dim), bool)
    total, extra, counts = predictor.predicted_s, predictor.extrapolated_s, predictor.extrapolated

    def fn(new_tokens, context):
        if new_tokens <= 0 or context < new_tokens:
            return general(new_tokens, context, num_heads, num_kv_heads, head_dim, causal)  # 0, or its error
        key = (new_tokens, context, num_heads, num_kv_heads, head_dim, causal)
        t = memo.get(key)
        if t is None:
            shared_key = (key, (type(new_tokens), type(context), *shape_types))
            hit = shared_memo.get(shared_key)
            if hit is None:
                hit = ev(new_tokens, context, shared_key)
            t, flag = hit
            total["attention_prefill"] += t  # as FittedPredictor._scalar_fn counts an evaluation
            if flag == OUTSIDE:
                extra["attention_prefill"] += t
                counts["attention_prefill"] += 1
            store(memo, key, t)
        return t

    return fn

"""Shape grids: which shapes the profiler times, per operator class, and how to thin them.

Every shape is a :class:`Case`: the CSV row it produces (shape columns of
:mod:`lmmsim.costmodel.opdata` plus descriptive ones), the benchmark that
measures it (:mod:`lmmsim.profiler.ops`), and a rough work estimate (FLOPs,
bytes, kernel launches) the time planner scales by measured rates.

Shapes are per GPU, split the way :mod:`lmmsim.costmodel.composed` splits
them for tensor parallelism (heads and column-parallel outputs divided by
``tp``, KV heads never below one, encoder heads padded up). The grids:

* **gemm** — per model and ``tp`` dividing its heads: the LLM layer's qkv, o,
  gate_up, down over token counts ``tokens`` (log-spaced 1..8192, with the
  1.5x points, so decode batches and prefill chunks are both covered), the LM
  head over ``lm_head_tokens`` (sampled rows only); per encoder: its qkv / o /
  up / down (``enc_*``) over encoder token counts, the patch (or Whisper conv)
  stem at tp 1, and the projector layers over merged tokens.
* **attention_prefill** — causal, one sequence: ``new_tokens x context`` with
  ``context >= new_tokens`` (chunked prefill: a chunk of ``new_tokens`` at the
  end of ``context``; ``context == new_tokens`` is a fresh prefill). Plus
  non-causal encoder rows (``causal=0``): ``num_units`` sequences of
  ``seq_len`` (``num_heads`` = heads x units, as the composition asks), the
  window length for Qwen's window attention.
* **attention_decode** — ``batch x context`` (all sequences equally long),
  capped by ``decode_kv_bytes`` of K+V per call.
* **elementwise** — per (op, width) over token counts; see
  :data:`lmmsim.profiler.ops.ELEMENTWISE_BYTES` for ``num_bytes``.
* **encoder_layer** — per encoder (tp 1): ``num_units x seq_len`` with the
  sequence lengths the model's own token rules produce for typical images,
  videos and audio clips; Qwen's ViT twice, windowed (``window_tokens`` 64)
  and full attention (``window_tokens`` 0).
* **sm_limit** — (CUDA) a few encoder-layer shapes per family under SM
  fractions.

Identical grids from different models (e.g. two models on the same LLM) are
timed once; their rows name every source (``a+b``).

Thinning (:func:`thin_indices`): a grid of ``n`` points keeps
``max(2, ceil(f n))`` points evenly spread over its deterministic order,
always including the first and the last.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from lmmsim.catalog import WHISPER_MEL_BINS, ModelSpec
from lmmsim.profiler.ops import BYTES, EncoderLayerShape, pool_numel


DEFAULT_ENC_SEQS = (256, 576, 1024)  # encoder unit lengths for a model without media rules

CLASS_ORDER = ("gemm", "attention_prefill", "attention_decode", "elementwise", "encoder_layer")


@dataclass(frozen=True)
class GridConfig:
    tokens: tuple[int, ...]
    lm_head_tokens: tuple[int, ...]
    enc_tokens: tuple[int, ...]
    prefill_new: tuple[int, ...]
    prefill_context: tuple[int, ...]
    decode_batch: tuple[int, ...]
    decode_context: tuple[int, ...]
    decode_kv_bytes: int  # K + V bytes of one decode-attention call, at most
    enc_units: tuple[int, ...]
    enc_token_cap: int  # encoder tokens of one encoder_layer / attention row, at most
    enc_max_seqs: int  # distinct sequence lengths per encoder
    enc_seq_override: tuple[int, ...] | None = None  # quick mode: fixed lengths
    sm_fractions: tuple[float, ...] = ()
    sm_shapes: int = 2  # encoder-layer shapes per family under SM limits

    def as_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.__dict__.items()}


_TOKENS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096,
           6144, 8192)
_ENC_TOKENS = (16, 32, 64, 128, 256, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576,
               32768)


def grid_config(device_type: str, quick: bool = False) -> GridConfig:
    """The grids for a device: GPUs reach 16k-token contexts and 32k encoder
    tokens; the CPU stops at 8k (a 16k causal prefill is ~10 s a call there)."""
    if quick:
        return GridConfig(
            tokens=(1, 8, 64), lm_head_tokens=(1, 8), enc_tokens=(16, 64), prefill_new=(8, 32),
            prefill_context=(32, 64), decode_batch=(1, 4), decode_context=(32, 128), decode_kv_bytes=64 << 20,
            enc_units=(1, 2), enc_token_cap=256, enc_max_seqs=2, enc_seq_override=(32, 80),
        )
    if device_type == "cuda":
        return GridConfig(
            tokens=_TOKENS, lm_head_tokens=tuple(t for t in _TOKENS if t <= 1024), enc_tokens=_ENC_TOKENS,
            prefill_new=(16, 64, 256, 512, 1024, 2048, 4096, 8192),
            prefill_context=(256, 512, 1024, 2048, 4096, 8192, 16384),
            decode_batch=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
            decode_context=(128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768), decode_kv_bytes=4 << 30,
            enc_units=(1, 2, 4, 8, 16, 32, 64), enc_token_cap=32768, enc_max_seqs=5,
            sm_fractions=(0.125, 0.25, 0.5, 0.75, 1.0),
        )
    return GridConfig(
        tokens=_TOKENS, lm_head_tokens=tuple(t for t in _TOKENS if t <= 1024),
        enc_tokens=tuple(t for t in _ENC_TOKENS if t <= 8192),
        prefill_new=(16, 64, 256, 512, 1024, 2048, 4096), prefill_context=(256, 512, 1024, 2048, 4096, 8192),
        decode_batch=(1, 2, 4, 8, 16, 32, 64, 128), decode_context=(128, 256, 512, 1024, 2048, 4096, 8192),
        decode_kv_bytes=512 << 20, enc_units=(1, 2, 4, 8, 16, 32), enc_token_cap=8192, enc_max_seqs=4,
    )


@dataclass
class Case:
    """One shape to time.

    ``row``: the CSV columns (shape + descriptive); ``kind`` / ``params``: the
    benchmark (:data:`lmmsim.profiler.ops.BUILDERS`); ``grid``: the grid it
    belongs to (thinning unit); ``flops`` / ``bytes`` / ``launches``: work
    estimate; ``numel``: tensor-pool elements its inputs take.
    """

    op_class: str
    grid: str
    row: dict
    kind: str
    params: dict
    flops: float
    bytes: float
    launches: int = 1
    numel: int = 0
    key: tuple = field(init=False)

    def __post_init__(self):
        self.key = (self.kind, tuple(sorted(self.params.items())))


# ------------------------------------------------------------------ helpers
def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def valid_tps(model: ModelSpec, tp_sizes) -> list[int]:
    """TP sizes the composition accepts for ``model`` (heads divide evenly)."""
    return [tp for tp in sorted(set(tp_sizes)) if tp >= 1 and model.llm.num_heads % tp == 0]


def shrink(model: ModelSpec) -> ModelSpec:
    """Quick mode: the model's architecture at toy size (hidden 512, encoder 128)."""
    llm = model.llm
    kv = 8 if llm.num_kv_heads == llm.num_heads else 2
    new_llm = llm.model_copy(update=dict(hidden_size=512, num_layers=2, num_heads=8, num_kv_heads=kv, head_dim=64,
                                         intermediate_size=1376, vocab_size=4096))
    enc = model.encoder
    if enc is not None:
        proj = enc.projector.model_copy(update=dict(input_dim=128 * enc.projector.tokens_merged
                                                    if enc.projector.input_dim != enc.hidden_size else 128,
                                                    hidden_dim=512, output_dim=512))
        enc = enc.model_copy(update=dict(hidden_size=128, num_layers=2, num_heads=2,
                                         intermediate_size=256, projector=proj,
                                         window_tokens=16 if enc.window_tokens else None))
    return model.model_copy(update=dict(llm=new_llm, encoder=enc))


def encoder_seq_lens(model: ModelSpec, cfg: GridConfig) -> list[int]:
    """Attention-unit lengths the model's token rules give typical media, thinned
    log-uniformly to ``cfg.enc_max_seqs`` (shortest and longest kept);
    :data:`DEFAULT_ENC_SEQS` for a model without media rules."""
    if cfg.enc_seq_override:
        return list(cfg.enc_seq_override)
    seqs = set()
    probes = []
    if model.media.image:
        probes += [lambda s=s: model.image_item(s, s) for s in (224, 336, 448, 672, 896, 1024, 1344)]
    if model.media.video:
        probes += [lambda s=s: model.video_item(16, s, s) for s in (336, 448)]
    if model.media.audio:
        probes += [lambda t=t: model.audio_item(t) for t in (5.0, 10.0, 30.0)]
    for probe in probes:
        try:
            work = probe().encoder
        except Exception:  # noqa: BLE001 - a size the rule refuses
            continue
        if work is not None and 0 < work.seq_len <= cfg.enc_token_cap:
            seqs.add(int(work.seq_len))
    seqs = sorted(seqs) or [s for s in DEFAULT_ENC_SEQS if s <= cfg.enc_token_cap]  # no media rules
    if len(seqs) > cfg.enc_max_seqs:
        logs = [math.log(s) for s in seqs]
        picks = set()
        for i in range(cfg.enc_max_seqs):
            target = logs[0] + (logs[-1] - logs[0]) * i / (cfg.enc_max_seqs - 1)
            picks.add(min(range(len(seqs)), key=lambda j: abs(logs[j] - target)))
        seqs = [seqs[j] for j in sorted(picks)]
    return seqs


def thin_indices(n: int, factor: float) -> list[int]:
    """Indices of ``max(2, ceil(factor n))`` evenly spread points of ``n``, endpoints kept."""
    if n <= 2 or factor >= 1:
        return list(range(n))
    k = max(2, math.ceil(factor * n))
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})


def group_by_grid(cases: list[Case]) -> dict[str, list[int]]:
    """Grid id -> indices into ``cases`` (in order)."""
    grids: dict[str, list[int]] = {}
    for i, c in enumerate(cases):
        grids.setdefault(c.grid, []).append(i)
    return grids


def thin(cases: list[Case], factor: float, whole: frozenset = frozenset()) -> list[int]:
    """Indices of the cases kept when every grid is thinned by ``factor`` (sorted);
    grids named in ``whole`` are kept entire."""
    keep = []
    for grid, idx in group_by_grid(cases).items():
        keep += idx if grid in whole else [idx[j] for j in thin_indices(len(idx), factor)]
    return sorted(keep)


def cheap_grids(cases: list[Case], cost: list[float], budget_s: float, share: float = 0.005) -> frozenset:
    """Grids whose whole cost is under ``share`` of the budget: thinning them saves
    almost nothing and starves their class of points (elementwise kernels, small
    models), so they are measured entire."""
    return frozenset(g for g, idx in group_by_grid(cases).items() if sum(cost[i] for i in idx) <= share * budget_s)


# -------------------------------------------------------------- case makers
def _gemm(grid: str, source: str, op: str, tp: int, m: int, n: int, k: int) -> Case:
    return Case("gemm", grid, {"m": m, "n": n, "k": k, "op": op, "source": source, "tp": tp},
                "gemm", {"m": m, "n": n, "k": k}, 2.0 * m * n * k, BYTES * (m * k + n * k + m * n),
                1, pool_numel((m, k), (n, k)))


def _llm_gemms(model: ModelSpec, tps, cfg: GridConfig) -> list[Case]:
    llm, name = model.llm, model.name
    out = []
    for tp in tps:
        heads, kv = llm.num_heads // tp, max(1, llm.num_kv_heads // tp)
        hd, h = llm.dim_head, llm.hidden_size
        ffn = ceil_div(llm.intermediate_size, tp)
        shapes = {
            "qkv": ((heads + 2 * kv) * hd, h), "o": (h, heads * hd),
            "gate_up": ((2 if llm.gated_mlp else 1) * ffn, h), "down": (h, ffn),
        }
        for op, (n, k) in shapes.items():
            out += [_gemm(f"gemm/{name}/tp{tp}/{op}", name, op, tp, m, n, k) for m in cfg.tokens]
        vshard = ceil_div(llm.vocab_size, tp)
        out += [_gemm(f"gemm/{name}/tp{tp}/lm_head", name, "lm_head", tp, m, vshard, h) for m in cfg.lm_head_tokens]
    return out


def _encoder_gemms(model: ModelSpec, tps, cfg: GridConfig) -> list[Case]:
    enc, name = model.encoder, model.name
    out = []
    h, hd = enc.hidden_size, enc.hidden_size // enc.num_heads
    tokens = [t for t in cfg.enc_tokens if t <= cfg.enc_token_cap]
    for tp in tps:
        width = ceil_div(enc.num_heads, tp) * hd
        ffn = ceil_div(enc.intermediate_size, tp)
        shapes = {"enc_qkv": (3 * width, h), "enc_o": (h, width),
                  "enc_up": ((2 if enc.gated_mlp else 1) * ffn, h), "enc_down": (h, ffn)}
        for op, (n, k) in shapes.items():
            out += [_gemm(f"gemm/{name}/tp{tp}/{op}", name, op, tp, m, n, k) for m in tokens]
        # Projector, sharded as the composition shards it, over merged tokens.
        p = enc.projector
        dims = [p.input_dim] + [p.hidden_dim] * (p.num_layers - 1) + [p.output_dim]
        for i, (d_in, d_out) in enumerate(zip(dims, dims[1:])):
            n, k = (ceil_div(d_out, tp), d_in) if i % 2 == 0 else (d_out, ceil_div(d_in, tp))
            out += [_gemm(f"gemm/{name}/tp{tp}/projector{i}", name, "projector", tp, m, n, k) for m in cfg.tokens]
    # Stem (replicated, so tp-independent).
    if enc.family == "whisper":
        out += [_gemm(f"gemm/{name}/stem_conv1", name, "stem", 1, 2 * m, h, 3 * WHISPER_MEL_BINS) for m in tokens]
        out += [_gemm(f"gemm/{name}/stem_conv2", name, "stem", 1, m, h, 3 * h) for m in tokens]
    else:
        frames = 2 if enc.family == "qwen_vit" else 1
        out += [_gemm(f"gemm/{name}/stem", name, "stem", 1, m, h, 3 * frames * enc.patch_size ** 2) for m in tokens]
    return out


def _prefill(grid, source, tp, new, ctx, heads, kv, hd, causal, batch=1, reported_heads=None) -> Case:
    pairs = new * ctx - (new * (new - 1) // 2 if causal else 0)
    rh = reported_heads or heads
    row = {"new_tokens": new, "context": ctx, "num_heads": rh, "num_kv_heads": rh if not causal else kv,
           "head_dim": hd, "causal": int(causal), "batch": batch, "source": source, "tp": tp}
    params = {"batch": batch, "heads": heads, "kv_heads": kv, "new_tokens": new, "context": ctx, "head_dim": hd,
              "causal": int(causal)}
    numel = pool_numel((batch, heads, new, hd), (batch, kv, ctx, hd), (batch, kv, ctx, hd))
    return Case("attention_prefill", grid, row, "attention_prefill", params, 4.0 * batch * heads * pairs * hd,
                BYTES * batch * (2 * heads * new * hd + 2 * kv * ctx * hd), 1, numel)


def _llm_attention(model: ModelSpec, tps, cfg: GridConfig) -> list[Case]:
    llm, name = model.llm, model.name
    out = []
    for tp in tps:
        heads, kv, hd = llm.num_heads // tp, max(1, llm.num_kv_heads // tp), llm.dim_head
        g = f"attention_prefill/{name}/tp{tp}"
        for new in cfg.prefill_new:
            for ctx in sorted({new, *(c for c in cfg.prefill_context if c > new)}):
                out.append(_prefill(g, name, tp, new, ctx, heads, kv, hd, True))
    return out


def _decode_cases(model: ModelSpec, tps, cfg: GridConfig) -> list[Case]:
    llm, name = model.llm, model.name
    out = []
    for tp in tps:
        heads, kv, hd = llm.num_heads // tp, max(1, llm.num_kv_heads // tp), llm.dim_head
        g = f"attention_decode/{name}/tp{tp}"
        for b in cfg.decode_batch:
            for ctx in cfg.decode_context:
                kv_bytes = 2 * b * kv * ctx * hd * BYTES
                if kv_bytes > cfg.decode_kv_bytes:
                    continue
                row = {"batch": b, "context_sum": b * ctx, "num_heads": heads, "num_kv_heads": kv, "head_dim": hd,
                       "context": ctx, "source": name, "tp": tp}
                params = {"batch": b, "heads": heads, "kv_heads": kv, "context": ctx, "head_dim": hd}
                numel = pool_numel((b, heads, hd), (b, kv, ctx, hd), (b, kv, ctx, hd))
                out.append(Case("attention_decode", g, row, "attention_decode", params, 4.0 * b * heads * ctx * hd,
                                kv_bytes, 1, numel))
    return out


_EW_LAUNCHES = {"add_rmsnorm": 2, "rotary": 7, "silu_mul": 2}
_EW_BYTES_PER_ELEM = {"add_rmsnorm": 4, "rmsnorm": 2, "rotary": 2, "silu_mul": 3, "gelu": 2, "layernorm": 2, "add": 3,
                      "embedding": 2, "softmax": 4}  # x tokens x width x 2 bytes


def _elementwise(grid, source, op, tokens, width, **extra) -> Case:
    num_bytes = _EW_BYTES_PER_ELEM[op] * tokens * width * BYTES
    row = {"num_bytes": num_bytes, "op": op, "tokens": tokens, "width": width, "source": source, **extra}
    params = {"op": op, "tokens": tokens, "width": width}
    if op == "rotary":
        params["head_dim"] = extra["head_dim"]
        numel = pool_numel((tokens, width), (tokens, extra["head_dim"] // 2), (tokens, extra["head_dim"] // 2))
    elif op == "embedding":
        params["vocab"] = extra["vocab"]
        numel = pool_numel((extra["vocab"], width))
    elif op == "silu_mul":
        numel = pool_numel((tokens, 2 * width))
    elif op == "softmax":
        numel = pool_numel((tokens, 2 * width))
    else:
        numel = pool_numel((tokens, width), (tokens, width), (width,), (width,))
    return Case("elementwise", grid, row, "elementwise", params, float(num_bytes), float(num_bytes),
                _EW_LAUNCHES.get(op, 1), numel)


def _llm_elementwise(model: ModelSpec, tps, cfg: GridConfig) -> list[Case]:
    llm, name = model.llm, model.name
    h, hd = llm.hidden_size, llm.dim_head
    out = [_elementwise(f"elementwise/{name}/add_rmsnorm/{h}", name, "add_rmsnorm", t, h) for t in cfg.tokens]
    out += [_elementwise(f"elementwise/{name}/embedding/{h}", name, "embedding", t, h, vocab=llm.vocab_size)
            for t in cfg.tokens]
    for tp in tps:
        heads, kv = llm.num_heads // tp, max(1, llm.num_kv_heads // tp)
        width = (heads + kv) * hd
        out += [_elementwise(f"elementwise/{name}/rotary/{width}x{hd}", name, "rotary", t, width, head_dim=hd, tp=tp)
                for t in cfg.tokens]
        if llm.gated_mlp:
            f = ceil_div(llm.intermediate_size, tp)
            out += [_elementwise(f"elementwise/{name}/silu_mul/{f}", name, "silu_mul", t, f, tp=tp) for t in cfg.tokens]
    out += [_elementwise(f"elementwise/{name}/softmax/{llm.vocab_size}", name, "softmax", t, llm.vocab_size)
            for t in cfg.lm_head_tokens if t <= 512]
    return out


def _encoder_elementwise(model: ModelSpec, tps, cfg: GridConfig) -> list[Case]:
    enc, name = model.encoder, model.name
    h, hd = enc.hidden_size, enc.hidden_size // enc.num_heads
    tokens = [t for t in cfg.enc_tokens if t <= cfg.enc_token_cap]
    norm = "rmsnorm" if enc.family == "qwen_vit" else "layernorm"
    out = [_elementwise(f"elementwise/{name}/enc_{norm}/{h}", name, norm, t, h) for t in tokens]
    out += [_elementwise(f"elementwise/{name}/enc_add/{h}", name, "add", t, h) for t in tokens]
    for tp in tps:
        ffn = ceil_div(enc.intermediate_size, tp)
        act = "silu_mul" if enc.gated_mlp else "gelu"
        out += [_elementwise(f"elementwise/{name}/enc_{act}/{ffn}", name, act, t, ffn, tp=tp) for t in tokens]
        if enc.family == "qwen_vit":
            width = 2 * ceil_div(enc.num_heads, tp) * hd
            out += [_elementwise(f"elementwise/{name}/enc_rotary/{width}x{hd}", name, "rotary", t, width,
                                 head_dim=hd, tp=tp) for t in tokens]
    return out


def encoder_variants(model: ModelSpec) -> list[tuple[str, int]]:
    """(label, window_tokens) per attention variant of the model's encoder layers."""
    enc = model.encoder
    if enc.window_tokens:
        return [("window", enc.window_tokens), ("full", 0)]
    return [("full", 0)]


def encoder_shape(model: ModelSpec, window: int, units: int, seq: int) -> EncoderLayerShape:
    enc = model.encoder
    return EncoderLayerShape(family=enc.family, hidden=enc.hidden_size, heads=enc.num_heads,
                             ffn=enc.intermediate_size, gated=enc.gated_mlp, window_tokens=window,
                             num_units=units, seq_len=seq)


def _encoder_cases(model: ModelSpec, cfg: GridConfig) -> list[Case]:
    enc, name = model.encoder, model.name
    hd = enc.hidden_size // enc.num_heads
    seqs = encoder_seq_lens(model, cfg)
    out = []
    # Non-causal attention rows: the item lengths, plus Qwen's window length.
    lengths = sorted(set(seqs) | ({enc.window_tokens} if enc.window_tokens else set()))
    g = f"attention_prefill/{name}/encoder"
    for L in lengths:
        units = list(cfg.enc_units)
        if enc.window_tokens and L == enc.window_tokens:  # many windows per image
            units += [u * 8 for u in cfg.enc_units if u * 8 > cfg.enc_units[-1]]
        for u in units:
            if u * L <= cfg.enc_token_cap:
                out.append(_prefill(g, name, 1, L, L, enc.num_heads, enc.num_heads, hd, False, batch=u,
                                    reported_heads=enc.num_heads * u))
    # Whole layers.
    for label, window in encoder_variants(model):
        g = f"encoder_layer/{name}/{label}"
        for L in seqs:
            for u in cfg.enc_units:
                if u * L > cfg.enc_token_cap:
                    continue
                s = encoder_shape(model, window, u, L)
                row = {"family": enc.family, "num_units": u, "seq_len": L, "hidden_size": enc.hidden_size,
                       "num_heads": enc.num_heads, "intermediate_size": enc.intermediate_size,
                       "window_tokens": window, "tp": 1, "source": name}
                weights = sum(math.prod(v) for v in s.weight_shapes().values())
                out.append(Case("encoder_layer", g, row, "encoder_layer", dict(s.__dict__), s.flops(),
                                BYTES * (weights + 16 * s.tokens * s.hidden), 20, pool_numel(*s.input_shapes())))
    return out


def sm_limit_shapes(models: list[ModelSpec], cfg: GridConfig) -> list[dict]:
    """Encoder-layer shapes timed under SM limits: per encoder family (first model
    having it), the middle and the longest unit length, one unit each (Qwen: full attention)."""
    shapes, seen = [], set()
    for m in models:
        if m.encoder is None or m.encoder.family in seen:
            continue
        seen.add(m.encoder.family)
        seqs = encoder_seq_lens(m, cfg)
        if not seqs:
            continue
        picks = sorted({seqs[len(seqs) // 2], seqs[-1]})[-cfg.sm_shapes:]
        shapes += [dict(encoder_shape(m, 0, 1, L).__dict__) for L in picks]
    return shapes


# -------------------------------------------------------------------- build
def build_cases(models: list[ModelSpec], cfg: GridConfig, tp_sizes=(1, 2, 4, 8)) -> list[Case]:
    """Every shape of every class, in class order then model order (deterministic);
    grids identical to an earlier one are merged into it (sources joined)."""
    per_class: dict[str, list[Case]] = {c: [] for c in CLASS_ORDER}
    for m in models:
        tps = valid_tps(m, tp_sizes)
        if not tps:
            continue
        per_class["gemm"] += _llm_gemms(m, tps, cfg)
        per_class["attention_prefill"] += _llm_attention(m, tps, cfg)
        per_class["attention_decode"] += _decode_cases(m, tps, cfg)
        per_class["elementwise"] += _llm_elementwise(m, tps, cfg)
        if m.encoder is not None:
            per_class["gemm"] += _encoder_gemms(m, tps, cfg)
            per_class["elementwise"] += _encoder_elementwise(m, tps, cfg)
            enc_cases = _encoder_cases(m, cfg)
            per_class["attention_prefill"] += [c for c in enc_cases if c.op_class == "attention_prefill"]
            per_class["encoder_layer"] += [c for c in enc_cases if c.op_class == "encoder_layer"]
    out: list[Case] = []
    for cls in CLASS_ORDER:
        out += _merge_duplicate_grids(per_class[cls])
    return out


def _merge_duplicate_grids(cases: list[Case]) -> list[Case]:
    """Drop grids whose shapes repeat an earlier grid's exactly (same op too);
    the earlier grid's rows name both sources."""
    grids = group_by_grid(cases)
    first_by_sig: dict[tuple, str] = {}
    dropped: set[str] = set()
    for gid, idx in grids.items():
        sig = tuple((cases[i].key, cases[i].row.get("op"), cases[i].row.get("window_tokens")) for i in idx)
        if sig in first_by_sig:
            keep = grids[first_by_sig[sig]]
            for i, j in zip(keep, idx):
                src, extra = cases[i].row.get("source", ""), cases[j].row.get("source", "")
                if extra and extra not in src.split("+"):
                    cases[i].row["source"] = f"{src}+{extra}"
            dropped.add(gid)
        else:
            first_by_sig[sig] = gid
    return [c for c in cases if c.grid not in dropped]

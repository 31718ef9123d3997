"""Small real models (random weights) for checking the cost-model composition end to end.

:class:`TinyDecoder` and :class:`TinyViT` run whole forward passes built from
the very kernels the profiler times (:mod:`lmmsim.profiler.ops`), in the order
:class:`~lmmsim.costmodel.composed.ComposedStepCostModel` composes them, and
describe themselves as catalog models (``as_model_spec()``). So a cost model
fitted to a profile of this machine can predict ``prefill`` / ``decode`` /
``forward`` and be compared with :func:`time_forward` of the real thing — the
gap is what the composition leaves out (framework overhead between kernels,
cache effects), not a difference of structure.

Decoder layer (as composed, Llama / Qwen2 style, tp=1): fused add+RMSNorm ->
QKV -> rotary on Q and K -> causal attention over the KV so far -> O -> fused
add+RMSNorm -> gate_up -> SiLU x up -> down; embedding lookup first, a final
fused add+norm, and the LM head plus an fp32 softmax over the sampled rows
last. ViT layer: :func:`lmmsim.profiler.ops.encoder_layer` (SigLIP-like:
LayerNorm, GELU), with a linear patch stem plus position embeddings, a final
LayerNorm and a one-layer projector.

Attention uses the default SDPA dispatch (grouped-query KV passed with
``enable_gqa``); the profiler forces the flash backend on CUDA where it can,
so on a GPU compare with that in mind.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from lmmsim.catalog import ModelSpec
from lmmsim.profiler import ops
from lmmsim.profiler.ops import DTYPE, KERNELS, EncoderLayerShape, layer_norm
from lmmsim.profiler.timing import RepeatPolicy, make_timer

REFERENCE_SOURCE = "reference model"


def _rand(gen, *shape, device, scale=0.02):
    return (torch.randn(*shape, generator=gen, device=device, dtype=torch.float32) * scale).to(DTYPE)


def _sources(section: str, fields: dict) -> dict[str, str]:
    return {f"{section}.{k}": REFERENCE_SOURCE for k, v in fields.items() if isinstance(v, (int, float))
            and not isinstance(v, bool)}


def time_forward(fn, repeats: int = 5, device="cpu") -> float:
    """Median milliseconds of ``fn()`` over ``repeats`` calls after one warm-up,
    with the profiler's timer for ``device`` (CUDA events + L2 flush, or wall clock)."""
    timer = make_timer(device, RepeatPolicy(warmup=1, min_repeats=repeats, max_repeats=repeats, target_s=0.0))
    with torch.inference_mode():
        return timer.measure(fn).median_ms


class TinyDecoder:
    """A Llama-style decoder with random weights (bf16)."""

    def __init__(self, hidden: int = 512, layers: int = 4, heads: int = 8, kv_heads: int = 8, ffn: int = 1376,
                 vocab: int = 32000, device="cpu", seed: int = 0, max_context: int = 32768):
        if hidden % heads or heads % kv_heads:
            raise ValueError("hidden must divide by heads, heads by kv_heads")
        self.hidden, self.layers, self.heads, self.kv_heads = hidden, layers, heads, kv_heads
        self.ffn, self.vocab, self.max_context = ffn, vocab, max_context
        self.head_dim = hidden // heads
        self.device = torch.device(device)
        g = torch.Generator(device=self.device).manual_seed(seed)
        d, hd = self.device, self.head_dim
        qkv_out = (heads + 2 * kv_heads) * hd
        self.embed = _rand(g, vocab, hidden, device=d)
        self.blocks = [{
            "ln1": torch.ones(hidden, dtype=DTYPE, device=d), "qkv": _rand(g, qkv_out, hidden, device=d),
            "o": _rand(g, hidden, heads * hd, device=d), "ln2": torch.ones(hidden, dtype=DTYPE, device=d),
            "gate_up": _rand(g, 2 * ffn, hidden, device=d), "down": _rand(g, hidden, ffn, device=d),
        } for _ in range(layers)]
        self.final_norm = torch.ones(hidden, dtype=DTYPE, device=d)
        self.lm_head = _rand(g, vocab, hidden, device=d)
        self._gen = g
        self._cache: dict = {}

    # ---------------------------------------------------------------- inputs
    def _inputs(self, tokens: int):
        """Token ids, rotary tables and a zero residual for ``tokens`` rows (cached)."""
        key = ("in", tokens)
        if key not in self._cache:
            hd = self.head_dim
            pos = torch.arange(tokens, device=self.device, dtype=torch.float32)
            inv = 1.0 / (10000 ** (torch.arange(0, hd, 2, device=self.device, dtype=torch.float32) / hd))
            ang = pos[:, None] * inv[None, :]
            ids = torch.randint(0, self.vocab, (tokens,), generator=self._gen, device=self.device)
            self._cache[key] = (ids, ang.cos().to(DTYPE)[:, None, :], ang.sin().to(DTYPE)[:, None, :],
                                torch.zeros(tokens, self.hidden, dtype=DTYPE, device=self.device))
        return self._cache[key]

    def _kv(self, batch: int, context: int):
        """Per-layer K, V caches ``[batch, kv_heads, context, head_dim]`` (random, cached)."""
        key = ("kv", batch, context)
        if key not in self._cache:
            shape = (batch, self.kv_heads, context, self.head_dim)
            self._cache[key] = [(_rand(self._gen, *shape, device=self.device, scale=1.0),
                                 _rand(self._gen, *shape, device=self.device, scale=1.0)) for _ in self.blocks]
        return self._cache[key]

    def clear_cache(self) -> None:
        self._cache.clear()

    # --------------------------------------------------------------- forward
    def _forward(self, tokens: int, attend, sampled: int):
        ids, cos, sin, zeros = self._inputs(tokens)
        H, K, hd = self.heads, self.kv_heads, self.head_dim
        x = F.embedding(ids, self.embed)
        residual = zeros
        for layer, w in enumerate(self.blocks):
            h, residual = KERNELS.add_rms_norm(x, residual, w["ln1"])
            qkv = F.linear(h, w["qkv"])
            qk = KERNELS.rotary(qkv[:, : (H + K) * hd].view(tokens, H + K, hd), cos, sin)
            v = qkv[:, (H + K) * hd:].view(tokens, K, hd)
            o = attend(layer, qk[:, :H], qk[:, H:], v)
            x = F.linear(o, w["o"])
            h, residual = KERNELS.add_rms_norm(x, residual, w["ln2"])
            x = F.linear(KERNELS.silu_mul(F.linear(h, w["gate_up"])), w["down"])
        h, _ = KERNELS.add_rms_norm(x, residual, self.final_norm)
        logits = F.linear(h[tokens - sampled:], self.lm_head)
        return torch.softmax(logits, dim=-1, dtype=torch.float32)

    def prefill(self, num_tokens: int):
        """One fresh prefill of ``num_tokens`` (causal over themselves), one sampled row."""
        T, H, K = num_tokens, self.heads, self.kv_heads

        def attend(layer, q, k, v):
            q, k, v = (t.transpose(0, 1).unsqueeze(0) for t in (q, k, v))  # [1, heads, T, d]
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=H != K)
            return o[0].transpose(0, 1).reshape(T, H * self.head_dim)

        with torch.inference_mode():
            return self._forward(T, attend, 1)

    def decode(self, batch: int, context: int):
        """One decode step: ``batch`` sequences, one new token each, attending to
        ``context`` cached tokens each (context includes the new token); every row sampled."""
        H, K, hd = self.heads, self.kv_heads, self.head_dim
        cache = self._kv(batch, context)

        def attend(layer, q, k, v):
            kc, vc = cache[layer]
            o = F.scaled_dot_product_attention(q.reshape(batch, K, H // K, hd), kc, vc)  # GQA groups packed
            return o.reshape(batch, H * hd)

        with torch.inference_mode():
            return self._forward(batch, attend, batch)

    # ------------------------------------------------------------------ spec
    def llm_fields(self) -> dict:
        return {"hidden_size": self.hidden, "num_layers": self.layers, "num_heads": self.heads,
                "num_kv_heads": self.kv_heads, "intermediate_size": self.ffn, "vocab_size": self.vocab,
                "gated_mlp": True, "qkv_bias": False, "tie_word_embeddings": False,
                "max_context": self.max_context}

    def as_model_spec(self, name: str = "tiny-decoder") -> ModelSpec:
        llm = self.llm_fields()
        return ModelSpec.model_validate({
            "name": name, "display_name": f"TinyDecoder ({REFERENCE_SOURCE})", "hf_id": "lmmsim/reference",
            "llm": llm, "sources": _sources("llm", llm)})


class TinyViT:
    """A SigLIP-style ViT (pre-norm, GELU, learned positions) with random weights (bf16)."""

    def __init__(self, hidden: int = 384, layers: int = 4, heads: int = 6, ffn: int = 1536, patches: int = 196,
                 patch_size: int = 16, output_dim: int = 512, device="cpu", seed: int = 0):
        if hidden % heads:
            raise ValueError("hidden must divide by heads")
        self.hidden, self.layers, self.heads, self.ffn = hidden, layers, heads, ffn
        self.patches, self.patch_size, self.output_dim = patches, patch_size, output_dim
        self.device = torch.device(device)
        g = torch.Generator(device=self.device).manual_seed(seed)
        d = self.device
        self.patch_w = _rand(g, hidden, 3 * patch_size ** 2, device=d)
        self.patch_b = torch.zeros(hidden, dtype=DTYPE, device=d)
        self.pos = _rand(g, patches, hidden, device=d)
        shapes = self.layer_shape(1).weight_shapes()
        self.blocks = []
        for _ in range(layers):
            w = {}
            for k, s in shapes.items():
                if k.startswith("n"):  # norm weight / bias
                    w[k] = (torch.ones if k.endswith("_w") else torch.zeros)(s, dtype=DTYPE, device=d)
                elif k.endswith("_b"):
                    w[k] = torch.zeros(s, dtype=DTYPE, device=d)
                else:
                    w[k] = _rand(g, *s, device=d)
            self.blocks.append(w)
        self.post_w = torch.ones(hidden, dtype=DTYPE, device=d)
        self.post_b = torch.zeros(hidden, dtype=DTYPE, device=d)
        self.proj_w = _rand(g, output_dim, hidden, device=d)
        self.proj_b = torch.zeros(output_dim, dtype=DTYPE, device=d)
        self._gen = g
        self._pixels: dict[int, torch.Tensor] = {}

    def layer_shape(self, batch: int) -> EncoderLayerShape:
        return EncoderLayerShape(family="siglip", hidden=self.hidden, heads=self.heads, ffn=self.ffn, gated=False,
                                 window_tokens=0, num_units=batch, seq_len=self.patches)

    def forward(self, batch: int):
        """Encode ``batch`` images of ``patches`` patches each; returns projected tokens."""
        n = batch * self.patches
        if batch not in self._pixels:
            self._pixels[batch] = _rand(self._gen, n, 3 * self.patch_size ** 2, device=self.device, scale=1.0)
        s = self.layer_shape(batch)
        with torch.inference_mode():
            x = F.linear(self._pixels[batch], self.patch_w, self.patch_b)
            x = (x.view(batch, self.patches, self.hidden) + self.pos).view(n, self.hidden)
            for w in self.blocks:
                x = ops.encoder_layer(x, w, s)
            x = layer_norm(x, self.post_w, self.post_b)
            return F.linear(x, self.proj_w, self.proj_b)

    def encoder_fields(self) -> dict:
        return {"family": "siglip", "hidden_size": self.hidden, "num_layers": self.layers, "num_heads": self.heads,
                "intermediate_size": self.ffn, "gated_mlp": False, "patch_size": self.patch_size,
                "projector": {"input_dim": self.hidden, "hidden_dim": self.hidden, "output_dim": self.output_dim,
                              "num_layers": 1, "tokens_merged": 1}}

    def as_model_spec(self, name: str = "tiny-vit") -> ModelSpec:
        """A catalog model whose encoder is this ViT (its LLM: a default TinyDecoder
        with hidden = the projector's output), for ``ComposedStepCostModel.encode_s``
        with ``EncoderWork(num_units=batch, seq_len=patches)``."""
        enc = self.encoder_fields()
        llm = TinyDecoder.__new__(TinyDecoder)
        llm.hidden, llm.layers, llm.heads, llm.kv_heads = self.output_dim, 4, 8, 8
        llm.ffn, llm.vocab, llm.max_context = 1376, 32000, 32768
        llm_fields = llm.llm_fields()
        # Every image is one unit of `patches` patches (a fixed-size rule), so the
        # profiler's encoder grids use exactly this model's sequence length.
        image = {"kind": "gemma3", "encoder_seq_len": self.patches, "tokens_per_image": self.patches}
        sources = {**_sources("llm", llm_fields), **_sources("encoder", enc),
                   **_sources("encoder.projector", enc["projector"]), **_sources("media.image", image)}
        return ModelSpec.model_validate({
            "name": name, "display_name": f"TinyViT ({REFERENCE_SOURCE})", "hf_id": "lmmsim/reference",
            "llm": llm_fields, "encoder": enc, "media": {"image": image}, "sources": sources})


#: Reference models by name (the composition check's), for ``profile(models=[...])`` and
#: ``python -m lmmsim.profiler.run --models tiny-decoder-mha,...``.
REFERENCE_MODELS = {
    "tiny-decoder-mha": lambda device="cpu": TinyDecoder(kv_heads=8, device=device),
    "tiny-decoder-gqa": lambda device="cpu": TinyDecoder(kv_heads=2, device=device, seed=1),
    "tiny-vit": lambda device="cpu": TinyViT(device=device),
}


def reference_spec(name: str) -> ModelSpec:
    """The catalog entry of a reference model named in :data:`REFERENCE_MODELS`."""
    return REFERENCE_MODELS[name]().as_model_spec(name)

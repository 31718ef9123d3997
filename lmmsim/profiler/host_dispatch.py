"""Host cost of one eager encoder layer (``encoder_dispatch.csv``): Python module code plus ATen dispatch.

Without CUDA graphs, every vision/audio encoder layer a server runs costs the host its Python
``forward`` and one trip through the ATen dispatcher per operator, whatever the GPU does. To time that
alone, each catalog encoder family's real ``transformers`` layer class is built from a config with the
family's structure (norms, activation, gated or plain MLP, q/k norm, layer scale) but a tiny width
(:data:`HIDDEN`, :data:`HEADS`, :data:`TOKENS`), so that the CPU arithmetic is a small part of the time;
the float32 rows beside the bfloat16 ones show how small (same work, no bfloat16 emulation on CPU).

Per layer the run records

* ``ops_per_layer``: every ATen op that reaches the backend (counted by a ``TorchDispatchMode``, so after
  composite ops such as ``linear`` or ``matmul`` have been decomposed, as they are on CUDA too). It is
  counted under ``no_grad`` for both grad modes: under ``inference_mode`` the mode would see ``linear``,
  ``layer_norm`` and ``scaled_dot_product_attention`` before their decomposition, while the ops that reach
  the kernels are the same (inference mode only skips the autograd bookkeeping, which the time shows);
* ``kernel_ops_per_layer``: those that would launch a GPU kernel, i.e. without views and other
  aliasing or metadata-only ops (:func:`launches_kernel`);
* ``time_us`` (median, p10, p90): host time of one layer forward on CPU tensors, from calls that run a
  stack of :data:`LAYERS_PER_CALL` distinct layers back to back (an encoder's layers follow each other
  the same way) divided by the stack's depth. Every case has a stack of its own, last run a round of
  the other cases ago, as a server's encoder layers were last run an encoder call ago.

Not included: the CUDA launch itself (``cudaLaunchKernel``, a few microseconds per kernel op on a real
GPU host) since the tensors are on CPU, and the tower's once-per-call work (patch embedding, rotary
tables, merger).
"""

from __future__ import annotations

import importlib
from collections import Counter

from lmmsim.profiler.host_timing import Case

HIDDEN, HEADS, FFN, TOKENS = 8, 2, 32, 4
LAYERS_PER_CALL, QUICK_LAYERS_PER_CALL = 32, 2
DTYPES = ("bfloat16", "float32")  # bfloat16: the served dtype (its casts are real kernels on a GPU)
GRAD_MODES = ("no_grad", "inference_mode")  # inference_mode: what vLLM's model runner uses
# ops with no aliasing return that still launch nothing: a reinterpreting view and bare allocations
NO_KERNEL_OPS = {"_unsafe_view", "_reshape_alias", "lift_fresh", "empty", "empty_strided", "empty_like"}

# encoder key -> (catalog family, modeling module, layer class, config class, config kwargs, call, structure)
ENCODERS = {
    "clip": ("clip", "clip.modeling_clip", "CLIPEncoderLayer", "CLIPVisionConfig",
             {"hidden_size": HIDDEN, "intermediate_size": FFN, "num_attention_heads": HEADS,
              "hidden_act": "quick_gelu"}, "masks2", "pre-LayerNorm, quick_gelu MLP (CLIP ViT-L/14-336)"),
    "siglip": ("siglip", "siglip.modeling_siglip", "SiglipEncoderLayer", "SiglipVisionConfig",
               {"hidden_size": HIDDEN, "intermediate_size": FFN, "num_attention_heads": HEADS,
                "hidden_act": "gelu_pytorch_tanh"}, "mask1", "pre-LayerNorm, tanh-GELU MLP (SigLIP so400m)"),
    "qwen2_5_vl": ("qwen_vit", "qwen2_5_vl.modeling_qwen2_5_vl", "Qwen2_5_VLVisionBlock",
                   "qwen2_5_vl.configuration_qwen2_5_vl.Qwen2_5_VLVisionConfig",
                   {"hidden_size": HIDDEN, "intermediate_size": FFN, "num_heads": HEADS, "hidden_act": "silu"},
                   "packed", "RMSNorm, 2-D rotary, gated SiLU MLP, one packed sequence"),
    "qwen3_vl": ("qwen_vit", "qwen3_vl.modeling_qwen3_vl", "Qwen3VLVisionBlock",
                 "qwen3_vl.configuration_qwen3_vl.Qwen3VLVisionConfig",
                 {"hidden_size": HIDDEN, "intermediate_size": FFN, "num_heads": HEADS,
                  "hidden_act": "gelu_pytorch_tanh"}, "packed",
                 "LayerNorm, 2-D rotary, tanh-GELU MLP, one packed sequence"),
    "intern_vit": ("intern_vit", "internvl.modeling_internvl", "InternVLVisionLayer", "InternVLVisionConfig",
                   {"hidden_size": HIDDEN, "intermediate_size": FFN, "num_attention_heads": HEADS,
                    "norm_type": "rms_norm", "use_qk_norm": True, "layer_scale_init_value": 0.1},
                   "plain", "RMSNorm, q/k RMSNorm, layer scale, GELU MLP (InternViT-6B; HF's port)"),
    "whisper": ("whisper", "whisper.modeling_whisper", "WhisperEncoderLayer", "WhisperConfig",
                {"d_model": HIDDEN, "encoder_attention_heads": HEADS, "encoder_ffn_dim": FFN},
                "masks2", "pre-LayerNorm, GELU MLP (Whisper large encoder)"),
}


def catalog_encoders() -> dict[str, list[str]]:
    """Encoder key -> the catalog models whose encoder it stands for (``qwen_vit`` splits by MLP:
    Qwen2.5-VL's is gated, Qwen3-VL's is not)."""
    from lmmsim import catalog

    found: dict[str, list[str]] = {}
    for name, spec in sorted(catalog.models().items()):
        enc = spec.encoder
        if enc is None:
            continue
        key = ("qwen2_5_vl" if enc.gated_mlp else "qwen3_vl") if enc.family == "qwen_vit" else enc.family
        found.setdefault(key, []).append(name)
    return found


def launches_kernel(op) -> bool:
    """False for an op whose result aliases its input (view, reshape-as-view, transpose, permute, expand,
    t, split, slice, select, unbind, detach, alias, ...: the schema marks the return as an alias, not a
    write) and for :data:`NO_KERNEL_OPS`; those change metadata only, with no GPU kernel behind them."""
    schema = op._schema
    if schema.name.split("::")[-1] in NO_KERNEL_OPS:
        return False
    return not any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns)


def count_ops(fn) -> Counter:
    """ATen op -> how many times one call of ``fn`` (which must not enter ``inference_mode``: see the module
    docstring) dispatched it."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Counter(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.counts: Counter = Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.counts[func] += 1
            return func(*args, **(kwargs or {}))

    with _Counter() as mode:
        fn()
    return mode.counts


def build_layer(key: str, dtype):
    """A fresh layer of ``key`` in eval mode with SDPA attention, and the call that runs it on a hidden
    state (the extra inputs the class takes are made here, once)."""
    import torch
    import transformers

    _, module, cls_name, cfg_name, kwargs, call, _ = ENCODERS[key]
    layer_cls = getattr(importlib.import_module(f"transformers.models.{module}"), cls_name)
    if "." in cfg_name:
        cfg_module, _, cfg_cls = cfg_name.rpartition(".")
        cfg_type = getattr(importlib.import_module(f"transformers.models.{cfg_module}"), cfg_cls)
    else:
        cfg_type = getattr(transformers, cfg_name)
    config = cfg_type(**kwargs, attn_implementation="sdpa")
    layer = layer_cls(config).to(dtype).eval()
    if call == "packed":  # (tokens, hidden), one sequence in cu_seqlens, the tower's cos/sin passed in
        head_dim = HIDDEN // HEADS
        cu = torch.tensor([0, TOKENS], dtype=torch.int32)
        rope = (torch.ones(TOKENS, head_dim, dtype=dtype), torch.zeros(TOKENS, head_dim, dtype=dtype))
        return layer, lambda m, h: m(h, cu_seqlens=cu, position_embeddings=rope), (TOKENS, HIDDEN)
    if call == "masks2":  # CLIP (attention, causal masks), Whisper (attention mask, head mask): none
        return layer, lambda m, h: m(h, None, None), (1, TOKENS, HIDDEN)
    if call == "mask1":
        return layer, lambda m, h: m(h, None), (1, TOKENS, HIDDEN)
    return layer, lambda m, h: m(h), (1, TOKENS, HIDDEN)


def _stack_call(layers, call, x, grad_mode: str):
    """One encoder-like pass: each layer's output is the next one's input."""
    import torch

    ctx = torch.inference_mode if grad_mode == "inference_mode" else torch.no_grad

    def run():
        with ctx():
            h = x
            for layer in layers:
                out = call(layer, h)
                h = out[0] if isinstance(out, tuple) else out
        return h

    return run


def _op_columns(counts: Counter) -> dict:
    return {"ops_per_layer": sum(counts.values()),
            "kernel_ops_per_layer": sum(n for op, n in counts.items() if launches_kernel(op)),
            "op_counts": " ".join(f"{str(op).removeprefix('aten.')}:{n}"
                                  for op, n in sorted(counts.items(), key=lambda p: (-p[1], str(p[0]))))}


def dispatch_cases(quick: bool, skipped: list[str]) -> list[Case]:
    """One case per (encoder, dtype, grad mode), each with a stack of layers of its own: a case that
    reused the layers the case before it had just run would find their objects in the CPU caches and
    time 10-20 % faster (measured here), which would favour whichever grad mode came second. A class
    that will not build is noted in ``skipped``."""
    import torch

    depth = QUICK_LAYERS_PER_CALL if quick else LAYERS_PER_CALL
    models = catalog_encoders()
    cases = []
    for key, (family, module, cls_name, *_rest, structure) in ENCODERS.items():
        for dtype_name, grad_mode in ((d, g) for d in DTYPES for g in GRAD_MODES):
            dtype = getattr(torch, dtype_name)
            try:
                built = [build_layer(key, dtype) for _ in range(depth)]
            except Exception as exc:  # noqa: BLE001 -- a class missing from this transformers: say so, go on
                skipped.append(f"encoder_dispatch {key} {cls_name}: {type(exc).__name__}: {str(exc)[:160]}")
                break
            layers, call, shape = [b[0] for b in built], built[0][1], built[0][2]
            x = torch.randn(*shape, dtype=dtype)
            one = _stack_call(layers[:1], call, x, "no_grad")
            one()  # first call: lazy imports and caches, not a steady-state layer
            row = {"encoder": key, "family": family, "layer_class": f"transformers.models.{module}.{cls_name}",
                   "models": " ".join(models.get(key, [])), "structure": structure, "dtype": dtype_name,
                   "grad_mode": grad_mode, "hidden_size": HIDDEN, "num_heads": HEADS, "intermediate_size": FFN,
                   "tokens": TOKENS, **_op_columns(count_ops(one)), "layers_per_call": depth}
            cases.append(Case("encoder_dispatch", row, _stack_call(layers, call, x, grad_mode)))
    return cases


def per_layer(rows: list[dict]) -> list[dict]:
    """Per-call milliseconds (as :func:`~lmmsim.profiler.host_timing.measure_cases` gives them) to
    microseconds per layer."""
    out = []
    for row in rows:
        row = dict(row)
        depth = row["layers_per_call"]
        for ms, us in (("time_ms", "time_us"), ("time_ms_p10", "time_us_p10"), ("time_ms_p90", "time_us_p90")):
            row[us] = row.pop(ms) * 1e3 / depth
        row["repeats"] = row.pop("repeats")  # last, as in the other tables
        out.append(row)
    return out


def meta(quick: bool) -> dict:
    """What ``meta.json`` says about the encoder_dispatch rows."""
    return {"what": "host time and ATen ops of one eager encoder layer forward on CPU tensors (no CUDA graph); "
                    "the GPU's kernel launches (cudaLaunchKernel) are not in it",
            "layer_size": {"hidden_size": HIDDEN, "num_heads": HEADS, "intermediate_size": FFN, "tokens": TOKENS},
            "layers_per_call": QUICK_LAYERS_PER_CALL if quick else LAYERS_PER_CALL,
            "time_columns": "time_us, time_us_p10, time_us_p90: microseconds per layer (a timed call runs "
                            "layers_per_call distinct layers)",
            "ops_counted": "TorchDispatchMode under no_grad, after composite ops are decomposed",
            "kernel_ops": "ops_per_layer less views/aliases (schema alias return, not a write) and "
                          + ", ".join(sorted(NO_KERNEL_OPS))}

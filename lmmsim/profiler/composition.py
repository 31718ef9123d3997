"""Measure complete forward passes of the reference models, for the composition check.

Writes ``composition.csv`` (model, kind, shape, time_ms) and
``composition_models.json`` (the models as catalog entries) into a profile
folder; :mod:`lmmsim.costmodel.composition` predicts the same passes from the
fitted operators.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import torch

from lmmsim.costmodel.composition import COMPOSITION_CSV, COMPOSITION_MODELS
from lmmsim.profiler import ops
from lmmsim.profiler.reference import TinyDecoder, TinyViT, time_forward

# Shapes of the check: prompt lengths, (batch, context) decode steps, image batches.
PREFILL_TOKENS = (32, 128, 256, 512, 1024)
DECODE_SHAPES = ((1, 128), (8, 256), (16, 512), (32, 1024))
ENCODE_BATCHES = (1, 2, 4, 8)


def reference_models(device: str = "cpu") -> tuple[TinyDecoder, TinyDecoder, TinyViT]:
    """The decoders (MHA and GQA) and the ViT of the check."""
    return (TinyDecoder(kv_heads=8, device=device), TinyDecoder(kv_heads=2, device=device, seed=1),
            TinyViT(device=device))


def pass_fn(model: TinyDecoder | TinyViT, kind: str, shape: dict):
    """A no-argument callable running one forward pass of ``kind`` (prefill, decode, encode) at ``shape``."""
    if kind == "prefill":
        return lambda: model.prefill(shape["num_tokens"])
    if kind == "decode":
        return lambda: model.decode(shape["batch"], shape["context"])
    return lambda: model.forward(shape["batch"])


# The fitted predictor's kernels that :func:`kernel_for_call` can rebuild exactly from their arguments.
CALIBRATED = ("gemm_s", "attention_prefill_s", "attention_decode_s")


class RecordingPredictor:
    """A fitted predictor that remembers the GEMM and attention calls a composition makes.

    ``calls`` maps ``(method, args)`` to the fitted seconds, so a check can time the very
    kernels the cost model summed for a pass (:func:`kernel_for_call`).
    """

    def __init__(self, inner):
        self._inner = inner
        self.calls: dict[tuple, float] = {}

    def __getattr__(self, name):
        method = getattr(self._inner, name)
        if name not in CALIBRATED:
            return method

        def recorded(*args):
            self.calls[(name, args)] = seconds = method(*args)
            return seconds

        return recorded


def kernel_for_call(method: str, args: tuple, device: str = "cpu"):
    """The profiler's benchmark callable of one recorded predictor call (its own input pool)."""
    pool = ops.TensorPool(device)
    if method == "gemm_s":
        m, n, k = args
        return ops.build("gemm", {"m": m, "n": n, "k": k}, pool)[0]
    if method == "attention_prefill_s":
        new, context, heads, kv_heads, head_dim, causal = args
        return ops.build("attention_prefill", {"batch": 1, "new_tokens": new, "context": context, "heads": heads,
                                               "kv_heads": kv_heads, "head_dim": head_dim, "causal": int(causal)},
                         pool)[0]
    if method == "attention_decode_s":
        batch, context_sum, heads, kv_heads, head_dim = args
        return ops.build("attention_decode", {"batch": batch, "context": context_sum // batch, "heads": heads,
                                              "kv_heads": kv_heads, "head_dim": head_dim}, pool)[0]
    raise ValueError(f"no benchmark for predictor call {method!r}; valid: {', '.join(CALIBRATED)}")


def measure(decoder: TinyDecoder | TinyViT, name: str, kind: str, shape: dict, repeats: int, device: str) -> dict:
    fn = pass_fn(decoder, kind, shape)
    return {"model": name, "kind": kind, **shape, "time_ms": time_forward(fn, repeats, device)}


def measure_composition(out_dir: Path, device: str = "cpu", repeats: int = 7, quick: bool = False) -> pd.DataFrame:
    """Time the reference passes and write the composition files; returns the rows."""
    mha, gqa, vit = reference_models(device)
    rows = []
    prefill = PREFILL_TOKENS[:2] if quick else PREFILL_TOKENS
    decode = DECODE_SHAPES[:2] if quick else DECODE_SHAPES
    encode = ENCODE_BATCHES[:2] if quick else ENCODE_BATCHES
    models = {"tiny-decoder-mha": mha, "tiny-decoder-gqa": gqa}
    for name, dec in models.items():
        rows += [measure(dec, name, "prefill", {"num_tokens": n}, repeats, device) for n in prefill]
        rows += [measure(dec, name, "decode", {"batch": b, "context": c}, repeats, device) for b, c in decode]
    rows += [measure(vit, "tiny-vit", "encode", {"batch": b, "seq_len": vit.patches}, repeats, device)
             for b in encode]
    df = pd.DataFrame(rows)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    df.to_csv(out_dir / COMPOSITION_CSV, index=False)
    specs = {name: m.as_model_spec(name).model_dump(mode="json") for name, m in models.items()}
    specs["tiny-vit"] = vit.as_model_spec("tiny-vit").model_dump(mode="json")
    (out_dir / COMPOSITION_MODELS).write_text(json.dumps(specs, indent=1, sort_keys=True) + "\n")
    return df


if __name__ == "__main__":  # python -m lmmsim.profiler.composition OUT_DIR
    import sys

    torch.set_num_threads(int(sys.argv[2]) if len(sys.argv) > 2 else torch.get_num_threads())
    print(measure_composition(Path(sys.argv[1])))

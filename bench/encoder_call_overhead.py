"""What-if: RServe's Fig. 16 (low-quality items) with a host-side cost per encoder call.

An encoder call pays the host time lmmsim models from mechanisms (PCIe copy of
its inputs, eager kernel issue beyond what its kernels hide:
lmmsim.costmodel.encoder_call), which for a small batch is about its GPU pass,
so encoding twenty 32-token items one at a time costs little more than one batch
of twenty. This reruns the Fig. 16b sweep (two requests of ~2k text tokens and 20
items of 32 tokens, Qwen2.5-VL-72B, PP4 + E1) with ``deployment.encoder.call_overhead_s``
(extra host seconds per call, a what-if) set to each value given, and prints mean
TTFT per C.

    python bench/encoder_call_overhead.py [--overheads 0 0.005 0.02]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import yaml

from lmmsim.sweep.runner import run_sweep

SWEEP = Path(__file__).resolve().parent.parent / "scenarios" / "reproduce" / "rserve" / "fig16-low.yaml"
C_KEY = "deployment.encoder.dispatch.embedding_batch_tokens"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--overheads", type=float, nargs="+", default=[0.0, 0.005, 0.02])
    args = ap.parse_args()
    spec = yaml.safe_load(SWEEP.read_text())
    spec["base"] = str((SWEEP.parent / spec["base"]).resolve())
    with tempfile.TemporaryDirectory() as tmp:
        for overhead in args.overheads:
            spec["set"] = {**spec.get("set", {}), "deployment.encoder.call_overhead_s": overhead}
            path = Path(tmp) / f"sweep-{overhead}.yaml"
            path.write_text(yaml.safe_dump(spec))
            df = run_sweep(path, Path(tmp) / f"out-{overhead}", jobs=1, progress=False)
            cells = [f"C={int(c)}{'' if a == 'streaming' else ' (encode first)'}: {t:.3f} s"
                     for c, a, t in zip(df[C_KEY], df["deployment.admission"], df["ttft_s.mean"])]
            print(f"call overhead {overhead * 1000:g} ms -> " + ", ".join(cells))


if __name__ == "__main__":
    main()

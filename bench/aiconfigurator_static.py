"""Collect aiconfigurator's static (kernel-sum) estimates for bench/validate_costs.py.

aiconfigurator (NVIDIA, Apache-2.0) estimates a single batch's TTFT and TPOT by
summing its measured operator tables; ``estimate --estimate-mode static`` with
batch size 1 is the kernel-sum time of one request. lmmsim does not depend on
it: run this once where ``aiconfigurator==0.12.0`` is installed (its own
virtual environment is fine), and commit the CSV it writes, which
bench/validate_costs.py reads::

    python -m venv /tmp/aic && /tmp/aic/bin/pip install aiconfigurator==0.12.0
    AIC=/tmp/aic/bin/aiconfigurator python bench/aiconfigurator_static.py

Works offline: the models used here ship with the package's model configs.
"""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent / "data" / "aiconfigurator_static.csv"
ISL, OSL = 1000, 128  # text tokens in, tokens out
SYSTEMS = ("h100_sxm", "h200_sxm", "b200_sxm")
# (aiconfigurator model, tp, images of 1024x1024)
CASES = (
    ("meta-llama/Meta-Llama-3.1-8B", 1, 0),
    ("meta-llama/Meta-Llama-3.1-70B", 2, 0),
    ("meta-llama/Meta-Llama-3.1-70B", 4, 0),
    ("Qwen/Qwen3-VL-8B-Instruct", 1, 1),
)
FIELDS = {"ttft_ms": r"TTFT:\s+([\d.]+) ms", "tpot_ms": r"TPOT:\s+([\d.]+) ms",
          "encoder_ms": r"Encoder lat\.:\s+([\d.]+) ms", "backend": r"Backend:\s+(\S+ \([^)]*\))"}


def estimate(aic: str, model: str, system: str, tp: int, images: int) -> dict:
    cmd = [aic, "cli", "estimate", "--model-path", model, "--system", system, "--backend", "vllm",
           "--estimate-mode", "static", "--isl", str(ISL), "--osl", str(OSL), "--batch-size", "1",
           "--tp-size", str(tp)]
    if images:
        cmd += ["--image-height", "1024", "--image-width", "1024", "--num-images", str(images)]
    text = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    row = {"model": model, "system": system, "tp": tp, "isl": ISL, "osl": OSL, "images_1024": images}
    for key, pattern in FIELDS.items():
        m = re.search(pattern, text)
        row[key] = m.group(1) if m else ""
    row["command"] = " ".join(["aiconfigurator", *cmd[1:]])
    return row


def main() -> int:
    aic = os.environ.get("AIC", "aiconfigurator")
    version = subprocess.run([aic, "version"], capture_output=True, text=True).stdout.strip().splitlines()
    rows = [estimate(aic, m, s, tp, img) for m, tp, img in CASES for s in SYSTEMS]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with OUT.open("w", newline="") as f:
        f.write(f"# aiconfigurator static estimates, batch 1 ({version[-1] if version else 'version unknown'}); "
                f"written by bench/aiconfigurator_static.py\n")
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"{len(rows)} estimates -> {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

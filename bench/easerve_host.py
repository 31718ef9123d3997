"""EAServe's claims with measured host preprocessing instead of the fitted per-call constant.

Until issue 16 the EAServe reproduction charged every disaggregated encoder call a constant
``deployment.encoder.call_overhead_s`` (0.9 s image/video, 0.18 s audio) chosen so that Dynamo
saturates as in the paper. Now each request's media is decoded and processed at the cost measured by
``lmmsim profile-host`` (``profiles/host/cpu``), divided by ``host.cpu_speed``, and encoder calls pay
their PCIe copies and eager kernel issue. This script:

1. reruns the claims' figures at several CPU speed factors --
   ``lmmsim reproduce easerve --figures ... --set host.cpu_speed=X -o OUT/speed-X``;
2. reads the values the fitted constant gave from the report committed before the change
   (``git show REV:plots/easerve/REPORT.md``);
3. prices the paper's inputs on the measured profile and sets them against the host time per request
   that the paper's Dynamo saturation implies;
4. writes ``OUT/HOST.md``: per claim the paper, the old constant and the host stage at each factor,
   and Dynamo's host share of its encode worker's time at 2 req/s.

    python bench/easerve_host.py -o /tmp/easerve-host --jobs 2      # ~3 min on 2 cores
"""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ("fig9-image", "fig9-video", "fig9-audio", "fig10-image", "fig10-video", "fig10-audio")
SPEEDS = (0.03, 0.1, 0.3, 1.0, 3.0)
OLD_REV = "3b35b7a"  # the last commit whose plots/easerve/REPORT.md used the fitted constant
SCENARIOS = {"image": "image-llava34b.yaml", "video": "video-qwen32b.yaml", "audio": "audio-ultravox27b.yaml"}
# The paper's Dynamo goodput (moderate tier, easerve.txt 4.2) with its encoder GPU under 10% busy
# (Fig. 11): one request per call on one encoder, so ~1 / goodput seconds of encode-worker time per
# request, >= 90% of it off the GPU.
PAPER_DYNAMO_GOODPUT = {"image": 0.95, "video": 0.95, "audio": 0.98}


def report_column(text: str, column: int) -> dict[tuple[str, str], str]:
    """(figure, claim) -> one column of a REPORT.md table (2: the paper's value, 3: the simulator's)."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and cells[0] != "figure" and not set(cells[0]) <= {"-"}:
            rows[(cells[0], cells[1])] = cells[column]
    return rows


def run_speed(out: Path, speed: float, jobs: int) -> Path:
    from lmmsim.reproduce import reproduce

    folder = out / f"speed-{speed:g}"
    return reproduce("easerve", folder, jobs=jobs, figures=list(FIGURES), force=True,
                     sets=(f"host.cpu_speed={speed:g}",), seeds=1)  # one seed per factor: a sensitivity scan


def dynamo_host_share(folder: Path, modality: str, rate: float = 2.0) -> tuple[float, float]:
    """Dynamo's host share of encode-worker time and its encoder GPU's busy share at ``rate``."""
    df = pd.read_parquet(folder / f"fig10-{modality}" / "results.parquet")
    col = "workload.arrival.rate"
    rates = sorted(df[col].unique())
    at = min(rates, key=lambda r: abs(r - rate))
    row = df[(df["name"] == "dynamo") & (df[col] == at)].iloc[0]
    return float(row["host.encode_worker.share_of_encode_worker_time"]), float(row["gpu_utilization.per_gpu.0"])


def measured_inputs() -> dict[str, float]:
    """Host seconds per request of each paper input on the shipped profile (cpu_speed 1)."""
    from lmmsim.build import build
    from lmmsim.scenario import load_scenario

    out = {}
    for modality, name in SCENARIOS.items():
        scn, base = load_scenario(ROOT / "scenarios" / "reproduce" / "easerve" / name,
                                  ["system=dynamo", "workload.num_requests=200"])
        built = build(scn, base)
        costs = built.host.costs
        per = [sum(costs.item_s(s.item) for s in r.media_segments) for r in built.requests]
        out[modality] = sum(per) / len(per)
    return out


def write_report(out: Path, reports: dict[float, Path]) -> Path:
    old_text = subprocess.run(["git", "show", f"{OLD_REV}:plots/easerve/REPORT.md"], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout
    old = report_column(old_text, 3)
    new = {s: report_column(p.read_text(), 3) for s, p in reports.items()}
    paper = report_column(next(iter(reports.values())).read_text(), 2)  # the claims as defined today
    keys = [k for k in next(iter(new.values())) if k[0] in FIGURES]
    head = " | ".join(f"host, cpu_speed {s:g}" for s in reports)
    lines = ["# EAServe claims: fitted constant vs measured host preprocessing", "",
             "Command: `python bench/easerve_host.py -o DIR --jobs 2` (seed 0 only; REPORT.md has the "
             "5-seed CIs at cpu_speed 1). Old constant: "
             f"`deployment.encoder.call_overhead_s` 0.9 s (image, video) / 0.18 s (audio) per disaggregated "
             f"encoder call, from `plots/easerve/REPORT.md` at {OLD_REV}. Host stage: `profiles/host/cpu` "
             f"(a 2-core cloud VM, not a datacenter CPU) divided by `host.cpu_speed`; media preprocessed in each "
             f"encode worker's process (Dynamo, EAServe) or vLLM's one API-server process.", "",
             f"| figure | claim | paper | old constant | {head} |",
             "|---|---|---:|---:|" + "---:|" * len(reports)]
    for key in keys:
        vals = " | ".join(new[s].get(key, "-") for s in reports)
        lines.append(f"| {key[0]} | {key[1]} | {paper.get(key, '-')} | {old.get(key, '-')} | {vals} |")
    lines += ["", "Dynamo at 2 req/s: host share of its encode worker's time (host / (host + GPU)) and its "
                  "encoder GPU's busy share:", "", f"| modality | {head} |", "|---|" + "---:|" * len(reports)]
    for modality in ("image", "video", "audio"):
        cells = []
        for s, p in reports.items():
            share, busy = dynamo_host_share(p.parent, modality)
            cells.append(f"{share:.0%} host, GPU {busy:.0%} busy")
        lines.append(f"| {modality} | " + " | ".join(cells) + " |")
    lines += ["", "What the paper's Dynamo saturation implies vs what the paper's inputs cost on the measured CPU:",
              "", "| modality | implied host s per request (>= 0.9 / goodput) | measured, cpu_speed 1 (s) | "
                  "cpu_speed that would reach it |", "|---|---:|---:|---:|"]
    for modality, t in measured_inputs().items():
        implied = 0.9 / PAPER_DYNAMO_GOODPUT[modality]
        lines.append(f"| {modality} | {implied:.2f} | {t:.4f} | {t / implied:.3f} |")
    lines += ["", "`cpu_speed` < 1 is a CPU slower than the profiled VM. The paper's Dynamo (encode-bound near "
                  "1 req/s on all three modalities) needs the last column's factor; at the measured cost (1) our "
                  "Dynamo is LLM-bound (its TP2 prefill or TP4 decode saturates first) and its encode worker "
                  "is a few percent busy."]
    path = out / "HOST.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output", type=Path, required=True)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--speeds", type=float, nargs="+", default=list(SPEEDS))
    ap.add_argument("--report-only", action="store_true", help="reuse OUT/speed-*/REPORT.md")
    args = ap.parse_args()
    reports = {}
    for speed in args.speeds:
        path = args.output / f"speed-{speed:g}" / "REPORT.md"
        reports[speed] = path if args.report_only and path.is_file() else run_speed(args.output, speed, args.jobs)
    print(write_report(args.output, reports).read_text())


if __name__ == "__main__":
    main()

"""RPS-Serve's claims under other scheduler settings: budget-exhaustion preemption and token budget.

The reproduction runs RPS-Serve as its artifact does (``policy.queue.budget_preemption: all``)
at vLLM's default chunked prefill on an H100 (8192 tokens / 1024 sequences). This reruns the
chosen figures' sweeps with each combination of

* ``--modes``: budget_preemption of every RPS-based system (rps-serve, its ablations, modserve+rps);
  the FCFS baselines have no such setting and run unchanged;
* ``--budgets``: ``TOKENS:SEQS`` for every system (policy.batching.token_budget / max_running),
* ``--resume-cache``: ``on`` / ``off``, policy.queue.resume_cache of the RPS-based systems (resume a
  preempted request from the prefix cache, or recompute it all; ``lmmsim.engine.resume_cache``),

and prints each claim's mean over ``--seeds`` seeds with its direction verdict (yes / tie / no,
as REPORT.md), one column per combination. A claim whose verdict follows a column shows which
setting decides it. Example (about 6 minutes on 2 cores)::

    python bench/rps_sensitivity.py --figures fig11 fig14 --seeds 3 --jobs 2

Not a test: numbers, for the causes in lmmsim/reproduce/rps_why.py.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
SWEEPS = ROOT / "scenarios" / "reproduce" / "rps"


def is_rps(system: str) -> bool:
    return system.startswith("rps-serve") or system == "modserve+rps"


def variant(sweep: Path, target: Path, mode: str, tokens: int, seqs: int, seeds: int,
            resume: bool = True) -> Path:
    """A copy of ``sweep`` with the budget for every system and ``mode`` (and ``resume``,
    the resume cache) for the RPS-based ones."""
    raw = yaml.safe_load(sweep.read_text())
    raw["base"] = str((sweep.parent / raw["base"]).resolve())
    fixed = raw.setdefault("set", {})
    fixed["policy.batching.token_budget"] = tokens
    fixed["policy.batching.max_running"] = seqs
    systems = [fixed.get("system")] if "system" in fixed else None
    axes = []
    for axis in raw.get("axes", []):
        params = axis["params"]
        if "system" not in params:
            axes.append(axis)
            continue
        systems = params["system"]
        if all(is_rps(s) for s in systems):
            axes.append(axis)
            continue
        # mixed: pair each system with its queue (null = the preset's FCFS queue, kept)
        rest = {k: v for k, v in params.items() if k != "system"}
        if rest:
            axes.append({**axis, "params": rest})
        queues = [{"kind": "rps", "budget_preemption": mode, "resume_cache": resume} if is_rps(s) else None
                  for s in systems]
        axes.append({"kind": "zip", "params": {"system": systems, "policy.queue": queues}})
        systems = None
    if systems is not None:  # every system RPS-based: one fixed key does it
        fixed["policy.queue.budget_preemption"] = mode
        fixed["policy.queue.resume_cache"] = resume
    raw["axes"] = axes
    raw["repeats"] = seeds
    target.write_text(yaml.safe_dump(raw, sort_keys=False))
    return target


def main() -> int:
    from lmmsim.reproduce import rps
    from lmmsim.reproduce.core import seed_stats
    from lmmsim.reproduce.stats import direction
    from lmmsim.sweep.runner import run_sweep

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--figures", nargs="+", default=["fig11", "fig14"])
    ap.add_argument("--modes", nargs="+", default=["none", "prefills", "all"])
    ap.add_argument("--budgets", nargs="+", default=["2048:256", "8192:1024"])
    ap.add_argument("--resume-cache", nargs="+", choices=["on", "off"], default=["on"])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--claims", default="", help="only claims whose text contains this")
    ap.add_argument("-o", "--out", type=Path, default=None, help="keep the runs here (default: a temp dir)")
    args = ap.parse_args()

    figures = {f.name: f for f in rps.FIGURES}
    out = args.out or Path(tempfile.mkdtemp(prefix="rps-sensitivity-"))
    combos = [(mode, *map(int, b.split(":")), rc) for b in args.budgets for mode in args.modes
              for rc in args.resume_cache]
    table: dict[tuple[str, str], list[str]] = {}
    for mode, tokens, seqs, rc in combos:
        for name in args.figures:
            fig = figures[name]
            folder = out / (f"{mode}-{tokens}" + ("" if rc == "on" else "-nocache")) / name
            folder.mkdir(parents=True, exist_ok=True)
            sweep = variant(SWEEPS / fig.sweep, folder / "sweep.yaml", mode, tokens, seqs, args.seeds, rc == "on")
            frame = run_sweep(sweep, folder, jobs=args.jobs, progress=False)
            ok = frame[frame["status"] == "ok"]
            for claim in fig.claims:
                if args.claims not in claim.text:
                    continue
                s = seed_stats(claim, ok)
                cell = (f"{sum(v == 1 for v in s.values)}/{s.n}" if claim.kind == "holds"
                        else f"{s.mean:.3g} {direction(claim.kind, claim.paper, s)}")
                table.setdefault((name, f"{claim.text} [paper {claim.paper:g}]"), []).append(cell)
    heads = [f"{mode} {tokens}" + ("" if rc == "on" else " no resume cache") for mode, tokens, _, rc in combos]
    print(f"runs under {out}; {args.seeds} seeds; cells: mean and direction, or seeds where it holds")
    print("| figure | claim | " + " | ".join(heads) + " |")
    print("|---|---|" + "---:|" * len(heads))
    for (name, text), cells in table.items():
        print(f"| {name} | {text} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Count a reproduction REPORT.md's verdicts: claims, directions (yes / no / tie / k-of-n /
none), magnitude misses (bold magnitudes), rows without a cause and claims not modelled.

    python bench/report_tally.py plots/rserve/REPORT.md plots/rps/REPORT.md
    python bench/report_tally.py --rev 68f4f77 plots/*/REPORT.md   # as committed at a revision

The closing notes' before/after counts come from this script.
"""

from __future__ import annotations

import argparse
import re
import subprocess
from collections import Counter
from pathlib import Path


def table_rows(text: str) -> list[list[str]]:
    """The cells of the claims table (the one whose header starts with ``figure``)."""
    rows, inside = [], False
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| figure |"):
            inside = True
        elif inside and line.startswith("|") and not set(cells[0]) <= {"-", ":"}:
            rows.append(cells)
        elif inside and not line.startswith("|"):
            inside = False
    return rows


def tally(text: str) -> dict[str, int]:
    rows = table_rows(text)
    counts = Counter()
    for cells in rows:
        verdict = cells[4] if len(cells) > 4 else ""
        key = {"yes": "yes", "**no**": "no", "no": "no", "tie": "tie", "-": "no direction"}.get(
            verdict, "k of n" if re.fullmatch(r"\d+/\d+", verdict) else "other")
        counts[key] += 1
        if len(cells) > 5 and cells[5].startswith("**"):
            counts["magnitude misses"] += 1
    counts["claims"] = len(rows)
    counts["no cause"] = text.count("cause not established yet")
    section = text.split("## Claims not modelled", 1)
    unmodelled = [line for line in section[1].splitlines() if line.startswith("|")] if len(section) > 1 else []
    counts["not modelled"] = max(0, len(unmodelled) - 2)  # less the header and its rule
    return dict(counts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="+", type=Path)
    parser.add_argument("--rev", help="read each report as committed at this git revision")
    args = parser.parse_args()
    order = ("claims", "yes", "no", "tie", "k of n", "no direction", "magnitude misses", "no cause", "not modelled")
    for path in args.reports:
        text = (subprocess.run(["git", "show", f"{args.rev}:{path}"], capture_output=True, text=True,
                               check=True).stdout if args.rev else path.read_text())
        counts = tally(text)
        print(f"{path}: " + ", ".join(f"{k} {counts.get(k, 0)}" for k in order))


if __name__ == "__main__":
    main()

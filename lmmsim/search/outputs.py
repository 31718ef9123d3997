"""What a search writes: ``best.yaml``, ``trials.csv`` / ``trials.parquet``, ``summary.json``.

The folder follows :mod:`lmmsim.outputs`' rule: without ``force`` it must be
absent or empty; with it, only files lmmsim wrote there are replaced, and a
user's own file where an output goes stops the search before it starts
(:func:`check_output_dir`, called by ``lmmsim search`` before searching).
Each file is written to a temporary sibling and renamed into place.
``best.yaml`` is the scenario with the best configuration, runnable as is;
``summary.json`` holds non-finite numbers as null.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from lmmsim.outputs import OutputDir, atomic_path, write_text_atomic
from lmmsim.search.trials import HISTORY_COLUMNS

if TYPE_CHECKING:
    from lmmsim.search.runner import SearchResult


#: What a search writes into its folder.
OUTPUT_FILES = ("trials.csv", "trials.parquet", "best.yaml", "summary.json")


def check_output_dir(out: Path, force: bool) -> OutputDir:
    """The search folder, checked before searching (:mod:`lmmsim.outputs`: without
    ``force`` absent or empty; with it, no user file where an output goes)."""
    folder = OutputDir(out, force=force)
    folder.check(*OUTPUT_FILES)
    return folder


def write_outputs(result: SearchResult, out: Path, force: bool = True) -> dict[str, Path]:
    """``best.yaml`` (runnable scenario), ``trials.csv`` / ``trials.parquet`` (history),
    ``summary.json``, each written to a temporary sibling and renamed into place; a stale
    ``best.yaml`` of an earlier search is removed when this one found none. Returns the
    paths written."""
    import pandas as pd

    folder = check_output_dir(out, force)
    paths = {}
    frame = pd.DataFrame(result.history, columns=HISTORY_COLUMNS)
    frame["local_tp"] = frame["local_tp"].astype("Int64")
    paths["trials_csv"] = folder.file("trials.csv")
    with atomic_path(paths["trials_csv"]) as tmp:
        frame.to_csv(tmp, index=False)
    paths["trials_parquet"] = folder.file("trials.parquet")
    with atomic_path(paths["trials_parquet"]) as tmp:
        frame.to_parquet(tmp, index=False)
    if result.best_scenario is not None:
        b = result.best
        head = (f"# Chosen by `lmmsim search` ({result.method}, rate {result.rate:g} req/s): {b['alloc']}, "
                f"B={b['batch_bound']}, s={b['offload_s']:g}\n# trial {b['trial']}: "
                f"{b['throughput_rps']:.3f} req/s, mean TTFT {_fmt(b['ttft_mean_s'])} s, "
                f"mean TPOT {_fmt(b['tpot_mean_s'], 1e3)} ms\n")
        paths["best_yaml"] = folder.file("best.yaml")
        write_text_atomic(paths["best_yaml"], head + yaml.safe_dump(result.best_scenario, sort_keys=False))
    paths["summary_json"] = folder.file("summary.json")
    summary = {**result.summary, "files": {k: p.name for k, p in paths.items()}}
    write_text_atomic(paths["summary_json"], json.dumps(_clean(summary), indent=2, default=_json_default) + "\n")
    folder.remove_unclaimed()
    return paths


def _fmt(x, scale: float = 1.0) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x * scale:.3f}"


def _clean(x):
    """JSON-safe: non-finite floats become null."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def _json_default(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if hasattr(x, "item"):
        return x.item()
    return str(x)

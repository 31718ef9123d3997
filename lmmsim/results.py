"""Run a scenario and write the results contract.

``DIR/requests.parquet`` (one row per request), ``DIR/summary.json`` and
``DIR/scenario.resolved.yaml``; ``DIR/requests.csv`` too with ``--format csv``.
An existing non-empty ``DIR`` is never overwritten unless ``force``.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from lmmsim.build import build
from lmmsim.errors import UserError
from lmmsim.metrics.records import requests_frame
from lmmsim.metrics.summary import clean_json, summarize
from lmmsim.scenario import dump_scenario


@dataclass
class RunOutput:
    requests: pd.DataFrame
    summary: dict
    built: object


def run_scenario(scn, base_dir: Path = Path("."), *, progress=None, requests=None) -> RunOutput:
    """Simulate ``scn`` and compute its per-request frame and summary."""
    built = build(scn, base_dir, progress=progress, requests=requests)
    result = built.simulation.run()
    df = requests_frame(result.seqs)
    busy = [0.0] * built.num_gpus
    for rep in result.replicas:
        for gpu_id in rep.gpu_ids:
            busy[gpu_id] += rep.busy_s
    summary = summarize(
        df,
        gpu_busy_s=busy,
        end_at=result.end_at,
        ttft_slo=scn.slo.ttft_by_modality(),
        tpot_slo=scn.slo.tpot_s,
        num_preemptions=sum(r.scheduler.num_preemptions for r in result.replicas),
    )
    summary["sim_wall_time_s"] = result.wall_s
    summary["sim_events"] = result.num_events
    summary["sim_steps"] = sum(r.num_steps for r in result.replicas)
    summary["sim_end_at_s"] = result.end_at
    summary["deployment"] = {
        "kv_capacity_tokens_per_replica": built.memory.kv_capacity_tokens,
        "weights_gib_per_gpu": built.memory.weight_bytes / 2**30,
        "activation_reserve_gib_per_gpu": built.memory.activation_bytes / 2**30,
        "kv_cache_gib_per_gpu": built.memory.kv_bytes / 2**30,
        "max_model_len": built.memory.max_model_len,
        "encoder_budget_tokens": built.encoder_budget,
        "peak_kv_blocks_used": [r.scheduler.pool.peak_used for r in result.replicas],
        "kv_blocks_per_replica": built.memory.num_blocks,
    }
    summary["cost_model"] = {"kind": "roofline-v0", "gpu": built.gpu.name}
    return RunOutput(df, clean_json(summary), built)


def prepare_output_dir(out: Path, force: bool) -> None:
    if out.exists():
        if not out.is_dir():
            raise UserError("-o", f"{out} exists and is not a directory")
        if any(out.iterdir()) and not force:
            raise UserError("-o", f"{out} already holds results; pass --force to overwrite it")


def write_results(run: RunOutput, scn, out: Path, *, force: bool = False, csv: bool = False) -> None:
    """Write the results contract into ``out`` atomically (temp dir, then rename)."""
    prepare_output_dir(out, force)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        run.requests.to_parquet(tmp / "requests.parquet", index=False)
        if csv:
            run.requests.to_csv(tmp / "requests.csv", index=False)
        (tmp / "summary.json").write_text(json.dumps(run.summary, indent=2) + "\n")
        (tmp / "scenario.resolved.yaml").write_text(dump_scenario(scn))
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise

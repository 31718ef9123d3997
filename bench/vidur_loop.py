"""Run Vidur once and time its event loop apart from its set-up (not a test; runs in Vidur's venv).

Part of the Vidur speed comparison, ``bench/vidur_compare.py``, which starts this script in
Vidur's own virtual environment (``vidur==0.0.26``, outside the repository) with the working
directory ``/work/vidur-run``, so Vidur's predictor cache (``.vidur_cache``) and its outputs
(``simulator_output/``) stay outside the repository. By hand:

    cd /work/vidur-run && HF_HUB_OFFLINE=1 taskset -c 1 /work/vidur-venv/bin/python \\
        /work/main/bench/vidur_loop.py --num-requests 1000 --json /tmp/vidur.json

The setting (``VIDUR_FLAGS``): Llama-2-70B, TP2, one replica on A100 (pairwise NVLink),
``gpu_memory_utilization`` 0.9, Sarathi-Serve with a 512-token chunk and at most 128 requests
in a batch, fixed 2,048 prefill / 128 decode tokens per request (Vidur's ``decode_tokens`` count
every output token: the first comes out of the last prefill chunk), Poisson arrivals at 0.5
req/s, Vidur's default random-forest execution-time predictor. Extra Vidur flags after ``--``
are appended (later flags win).

Vidur 0.0.26 fetches its operator profiles from Hugging Face datasets; without network access
this script lays out Vidur's public A100 profiles (``../shared/data/vidur-profiling`` in the
workspace, or ``--profiles``) as an offline Hugging Face cache under ``.vidur_cache`` the first
time, under the dataset names ``local/llama-2-70b-a100`` and ``local/a100-pairwise-nvlink``.
Run with ``HF_HUB_OFFLINE=1`` (the comparison script sets it): Vidur then fails fast to fetch
published predictions, and trains its predictor from those profiles (about 20 minutes on one
core the first time) or loads it from ``.vidur_cache`` (next runs).

Phases timed, in seconds of wall time (``time.perf_counter``), written as JSON to ``--json``:

* ``import_s``: importing Vidur (from this script's first line);
* ``build_s``: parsing the flags and building ``Simulator`` (cluster, predictor load or
  training, request generation, event queue);
* ``loop_s``: ``Simulator.run`` up to the end of its event loop (the ``while`` loop over the
  event heap and the final check), without writing outputs;
* ``write_s``: Vidur's own output step (``_write_output``: metrics CSVs; plots are off, as
  ``--no-metrics_config_store_plots`` is in the flags: Vidur's plots need Chrome);
* ``ready_epoch``: ``time.time()`` when the loop starts, so the caller can time the start-up
  from the moment it launched the process.

It also reports the mean TTFT (``prefill_e2e_time``) and TPOT
(``decode_time_execution_plus_preemption_normalized``) from Vidur's ``request_metrics.csv``.
No Vidur file is changed: the loop is timed by swapping the simulator object's own
``_write_output`` for a marker during ``run`` and calling the original afterwards.
"""

from __future__ import annotations

import time

T0 = time.perf_counter()

import argparse
import json
import lzma
import resource
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_PROFILES = HERE.parent.parent / "shared" / "data" / "vidur-profiling"
COMPUTE_DATASET = "local/llama-2-70b-a100"
NETWORK_DATASET = "local/a100-pairwise-nvlink"

VIDUR_FLAGS = [
    "--replica_config_model_name", "meta-llama/Llama-2-70b-hf",
    "--replica_config_device", "a100",
    "--replica_config_network_device", "a100_pairwise_nvlink",
    "--replica_config_tensor_parallel_size", "2",
    "--replica_config_num_pipeline_stages", "1",
    "--replica_config_gpu_memory_utilization", "0.9",
    "--cluster_config_num_replicas", "1",
    "--global_scheduler_config_type", "round_robin",
    "--replica_scheduler_config_type", "sarathi",
    "--sarathi_scheduler_config_chunk_size", "512",
    "--sarathi_scheduler_config_batch_size_cap", "128",
    "--request_generator_config_type", "synthetic",
    "--length_generator_config_type", "fixed",
    "--fixed_request_length_generator_config_prefill_tokens", "2048",
    "--fixed_request_length_generator_config_decode_tokens", "128",
    "--interval_generator_config_type", "poisson",
    "--poisson_request_interval_generator_config_qps", "0.5",
    "--random_forrest_execution_time_predictor_config_model_profiling_dataset", COMPUTE_DATASET,
    "--random_forrest_execution_time_predictor_config_network_profiling_dataset", NETWORK_DATASET,
    "--no-metrics_config_store_plots",
    "--no-metrics_config_write_json_trace",
    "--no-metrics_config_enable_chrome_trace",
]


def prepare_profiles(profiles: Path, cache: Path) -> None:
    """Lay Vidur's public A100 profiles out as an offline Hugging Face dataset cache (once)."""
    layout = {
        ("compute", COMPUTE_DATASET): (
            {"mlp.csv.xz": "compute/a100/meta-llama/Llama-2-70b-hf/mlp.csv",
             "attention.csv.xz": "compute/a100/meta-llama/Llama-2-70b-hf-tp2-attention/attention.csv"},
            {"model": "meta-llama/Llama-2-70b-hf", "device_sku": "a100"}),
        ("network", NETWORK_DATASET): (
            {"all_reduce.csv.xz": "network/a100_pairwise_nvlink/all_reduce.csv",
             "send_recv.csv.xz": "network/a100_pairwise_nvlink/send_recv.csv"},
            {"sku": "a100_pairwise_nvlink"}),
    }
    for (kind, dataset), (files, meta) in layout.items():
        repo = cache / "profiling_data" / kind / ("datasets--" + dataset.replace("/", "--"))
        snapshot = repo / "snapshots" / "local"
        if (snapshot / "config.json").exists():
            continue
        snapshot.mkdir(parents=True, exist_ok=True)
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / "main").write_text("local")
        for name, rel in files.items():
            src = profiles / rel
            if not src.exists():
                sys.exit(f"vidur_loop: missing profile {src} (give --profiles DIR)")
            with open(src, "rb") as fin, lzma.open(snapshot / name, "wb") as fout:
                shutil.copyfileobj(fin, fout)
        (snapshot / "config.json").write_text(json.dumps(meta))


def mean_of(csv_path: Path, column: str) -> float | None:
    import pandas as pd

    if not csv_path.exists():
        return None
    df = pd.read_csv(csv_path)
    return float(df[column].mean()) if column in df.columns else None


def count_rows(csv_path: Path) -> int | None:
    if not csv_path.exists():
        return None
    with open(csv_path) as f:
        return sum(1 for _ in f) - 1  # less the header


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--num-requests", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--json", help="write the timings here (default: print them)")
    ap.add_argument("--profiles", default=str(DEFAULT_PROFILES), help="Vidur's public profiling folder")
    ap.add_argument("--output-dir", default="simulator_output", help="Vidur's output folder (relative to the cwd)")
    ap.add_argument("extra", nargs="*", help="more Vidur flags, after --")
    args = ap.parse_args()

    prepare_profiles(Path(args.profiles), Path(".vidur_cache"))

    from vidur.config import SimulationConfig
    from vidur.simulator import Simulator
    from vidur.utils.random import set_seeds

    import_s = time.perf_counter() - T0

    sys.argv = [sys.argv[0], *VIDUR_FLAGS, "--seed", str(args.seed),
                "--synthetic_request_generator_config_num_requests", str(args.num_requests),
                "--metrics_config_output_dir", args.output_dir, *args.extra]
    t = time.perf_counter()
    config = SimulationConfig.create_from_cli_args()
    set_seeds(config.seed)
    sim = Simulator(config)
    build_s = time.perf_counter() - t

    write_output = sim._write_output
    marks: dict[str, float] = {}
    sim._write_output = lambda: marks.setdefault("loop_end", time.perf_counter())
    ready_epoch = time.time()
    t = time.perf_counter()
    sim.run()
    loop_s = marks["loop_end"] - t
    t = time.perf_counter()
    write_output()
    write_s = time.perf_counter() - t

    out_dir = Path(config.metrics_config.output_dir)
    metrics = out_dir / "request_metrics.csv"
    result = {
        "simulator": "vidur",
        "num_requests": args.num_requests,
        "import_s": import_s,
        "build_s": build_s,
        "loop_s": loop_s,
        "write_s": write_s,
        "ready_epoch": ready_epoch,
        "self_maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "ttft_mean_s": mean_of(metrics, "prefill_e2e_time"),
        "tpot_mean_s": mean_of(metrics, "decode_time_execution_plus_preemption_normalized"),
        "num_completed": count_rows(metrics),
        "output_dir": str(out_dir.resolve()),
    }
    text = json.dumps(result, indent=1)
    if args.json:
        Path(args.json).write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

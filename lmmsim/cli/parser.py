"""The argparse tree of ``lmmsim``: one small function per command group, in ``lmmsim --help`` order.

Only light modules are imported here: every command function imports what it needs when it runs, so
``lmmsim --help`` stays fast.
"""

from __future__ import annotations

import argparse

from lmmsim import __version__
from lmmsim.cli.calibrate import (
    cmd_admission_profile, cmd_fit, cmd_import_aiconfigurator, cmd_import_vidur, cmd_profile, cmd_profile_host,
    cmd_validate_costmodel,
)
from lmmsim.cli.experiments import cmd_reproduce, cmd_search, cmd_sweep
from lmmsim.cli.export import cmd_export_vllm
from lmmsim.cli.run import cmd_completion, cmd_list, cmd_plot, cmd_run, cmd_schema, cmd_validate, cmd_workload


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lmmsim", description="Discrete-event simulator of multimodal-LLM inference serving."
    )
    parser.add_argument("--version", action="version", version=f"lmmsim {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_scenario_commands(sub)
    _add_plot(sub)
    _add_export(sub)
    _add_experiment_commands(sub)
    _add_calibrate_commands(sub)
    _add_list(sub)
    sub.choices["completion"].set_defaults(root_parser=parser)  # the script is printed from this tree
    return parser


def _scenario_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("scenario", help="scenario YAML file, or a shipped example by name, e.g. quickstart "
                                    "(`lmmsim list scenarios`)")
    p.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="override a scenario key, e.g. --set workload.arrival.rate=4 (repeatable; value parsed as YAML)",
    )


def _add_scenario_commands(sub) -> None:
    """run, validate, admission-profile, workload: commands that take a scenario YAML."""
    p = sub.add_parser("run", help="simulate a scenario and write results", description=(
        "Simulate a scenario. Writes DIR/requests.parquet, DIR/summary.json and DIR/scenario.resolved.yaml."))
    _scenario_args(p)
    p.add_argument("-o", "--output", help="results directory (default: results/<scenario name>[-N])")
    p.add_argument("--force", action="store_true", help="write into a folder that holds files, replacing only those lmmsim wrote there")
    p.add_argument("--format", choices=("parquet", "csv"), default="parquet",
                   help="csv also writes requests.csv beside the parquet file")
    p.add_argument("-q", "--quiet", action="store_true", help="no table, no progress bar")
    p.add_argument("--trace", action="store_true",
                   help="also write DIR/trace.json: every step of every worker (Chrome/Perfetto trace)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("validate", help="check a scenario (keys, catalog names, memory fit) without running it")
    _scenario_args(p)
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("admission-profile",
                       help="RPS-Serve's Workload Profiler: run requests of the scenario's mix one at a time",
                       description="Run requests drawn from the scenario's mix alone on its deployment and "
                                   "report per modality the isolated TTFT (mean, p50, p99: the papers' SLO "
                                   "recipe), encode time and prompt tokens; -o writes the runs as a CSV that "
                                   "policy.queue.profile accepts.")
    _scenario_args(p)
    p.add_argument("-o", "--output", help="CSV of the isolated runs")
    p.add_argument("--requests", type=int, default=240, help="how many requests to profile (default 240)")
    p.add_argument("--force", action="store_true", help="overwrite an existing CSV")
    p.set_defaults(func=cmd_admission_profile)

    p = sub.add_parser("workload", help="export the scenario's generated requests as a replayable trace",
                       description="Write the scenario's requests: as an lmmsim trace (--format trace, the "
                                   "default), or as a dataset that vllm bench serve (--format vllm-dataset: "
                                   "--dataset-name custom --custom-output-len -1) or GuideLLM (--format "
                                   "guidellm) replays; those get synthetic text prompts of each request's "
                                   "text token count and no media.")
    _scenario_args(p)
    p.add_argument("-o", "--output", required=True, help="trace file (.jsonl or .csv) or dataset (.jsonl)")
    p.add_argument("--format", dest="export_format", choices=("trace", "vllm-dataset", "guidellm"),
                   default="trace", help="what to write (default trace)")
    p.add_argument("--force", action="store_true", help="overwrite an existing trace file")
    p.set_defaults(func=cmd_workload)


def _add_plot(sub) -> None:
    """plot: figures from saved results."""
    p = sub.add_parser("plot", help="draw a figure from saved results",
                       description="Paper-style figures from saved results: KIND timeline (a run made with "
                                   "--trace) or ttft-vs-rate, throughput-vs-rate, slo-attainment-vs-rate, "
                                   "goodput-vs-slo-scale, line, pareto, cdf, bars, utilization (a sweep folder).")
    p.add_argument("kind", metavar="KIND")
    p.add_argument("results", metavar="RESULTS", help="results directory (a run's, or a sweep's), or its file")
    p.add_argument("-o", "--output", required=True, help="figure file (.png, .pdf or .svg)")
    p.add_argument("--first", type=int, default=4, help="timeline: colour the first N requests (default 4)")
    p.add_argument("--x", help="column on the x axis (default: workload.arrival.rate)")
    p.add_argument("--series", help="column that makes one line per value (default: system)")
    p.add_argument("--where", action="append", metavar="KEY=VALUE", help="keep only runs matching (repeatable)")
    p.add_argument("--stat", help="latency statistic: mean, p50, p90, p95, p99, max")
    p.add_argument("--metric", help="column to plot (bars, line, throughput-vs-rate, cdf)")
    p.add_argument("--modality", help="per-modality latency / SLO (text, image, video, audio)")
    p.add_argument("--normalize", help="pareto: x, overall or none")
    p.add_argument("--baseline", help="pareto: series to normalise by")
    p.add_argument("--group", help="bars: column for grouped bars")
    p.add_argument("--run-id", dest="run_id", help="utilization: which run")
    p.add_argument("--bins", type=int, help="utilization: time bins")
    p.add_argument("--log-x", dest="log_x", action="store_true", help="cdf: log x axis")
    scale = p.add_mutually_exclusive_group()
    scale.add_argument("--log-y", dest="log_y", action="store_true", default=None,
                       help="log y axis (the default of ttft-vs-rate; line: opt in)")
    scale.add_argument("--linear", dest="log_y", action="store_false", help="ttft-vs-rate, line: linear y axis")
    p.add_argument("--force", action="store_true", help="overwrite an existing figure")
    p.set_defaults(func=cmd_plot)


def _add_export(sub) -> None:
    """export: a run folder in another tool's result format."""
    p = sub.add_parser("export", help="write a run's results in another tool's format (vllm)")
    fmt = p.add_subparsers(dest="format", required=True, metavar="FORMAT")
    v = fmt.add_parser("vllm", help="the JSON of `vllm bench serve --save-result` (keys, order, ms units)",
                       description="Write a run folder as `vllm bench serve --save-result` writes its result, "
                                   "so vLLM's own tooling can compare a simulated run with a measured one.")
    v.add_argument("run_dir", metavar="RUN_DIR", help="a folder `lmmsim run` wrote (requests.parquet, summary.json)")
    v.add_argument("-o", "--output", required=True, help="result JSON file to write")
    v.add_argument("--percentile-metrics", default="ttft,tpot,itl",
                   help="comma-separated metrics of ttft, tpot, itl, e2el (vLLM's default: ttft,tpot,itl)")
    v.add_argument("--metric-percentiles", default="99", help="comma-separated percentiles (default 99)")
    v.add_argument("--save-detailed", action="store_true",
                   help="also the per-request lists (input_lens, output_lens, ttfts, itls, ...)")
    v.add_argument("--force", action="store_true", help="overwrite an existing file")
    v.set_defaults(func=cmd_export_vllm)


def _add_experiment_commands(sub) -> None:
    """sweep, reproduce, search: many simulated runs."""
    p = sub.add_parser("sweep", help="run a scenario over a grid / zip / random set of key values",
                       description="Run every point of a sweep YAML (base scenario + axes + repeats); each run "
                                   "lands in OUT/runs/<hash>/, one row per run in OUT/results.parquet. "
                                   "Rerunning skips finished runs and redoes damaged ones. Exit status 1 "
                                   "when any run failed (the others still run).")
    p.add_argument("sweep", metavar="SWEEP", help="sweep YAML")
    p.add_argument("-o", "--output", required=True, help="sweep folder")
    p.add_argument("--jobs", type=int, help="local worker processes (default: CPU count)")
    p.add_argument("--executor", choices=("local", "dask"), default="local")
    p.add_argument("--address", help="dask scheduler address, e.g. tcp://host:8786")
    p.add_argument("--retry-failed", action="store_true", help="run again the points that failed before")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("reproduce", help="rerun a seed paper's figures and compare its headline claims")
    p.add_argument("paper", metavar="PAPER", help="rserve, rps or easerve")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="a fixed scenario key for every run of every figure (e.g. host.cpu_speed=2); repeatable")
    p.add_argument("--figures", nargs="+", metavar="NAME", help="only these figures (e.g. fig17 fig20)")
    p.add_argument("-o", "--output", required=True, help="folder for sweeps, figures and REPORT.md")
    p.add_argument("--quick", action="store_true", help="fewer requests per run, one seed: a smoke test, no verdicts")
    p.add_argument("--seeds", type=int, help="seeds per run point; every claim gets a 95%% CI over them "
                                             "(default 5; 1 with --quick)")
    p.add_argument("--jobs", type=int, help="local worker processes")
    p.add_argument("--force", action="store_true", help="write into a folder that holds files, replacing only those lmmsim wrote there")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr (figure names, sweep bars)")
    p.set_defaults(func=cmd_reproduce)

    p = sub.add_parser("search", help="EAServe's HAS: search the e_p_d allocation, encode batch bound and offload",
                       description="Hybrid Auto Selection (easerve.txt 3.1) on an e_p_d scenario: Stage 1 profiles "
                                   "per-worker stage capacities and prunes GPU allocations by bottleneck balance; "
                                   "Stage 2 refines (allocation, B, s) with an Optuna TPE study of simulated "
                                   "trials. Writes DIR/best.yaml (runnable scenario), DIR/trials.csv|parquet and "
                                   "DIR/summary.json. --method random|coordinate: the baselines.")
    _scenario_args(p)
    p.add_argument("-o", "--output", required=True, help="search folder")
    p.add_argument("--budget", type=int, default=30, help="trials at most (default 30)")
    p.add_argument("--rate", type=float, help="target arrival rate in req/s (default: the scenario's)")
    p.add_argument("--method", choices=("has", "random", "coordinate"), default="has")
    p.add_argument("--jobs", type=int, default=1, help="trials simulated at once (default 1)")
    p.add_argument("--executor", choices=("local", "dask"), default="local",
                   help="where trials run: local processes or a Dask cluster")
    p.add_argument("--address", help="dask scheduler address (default: a local cluster of --jobs workers)")
    p.add_argument("--seed", type=int, default=0, help="sampler seed (default 0)")
    p.add_argument("--start", choices=("scenario", "center"), default="scenario",
                   help="coordinate descent's start: the scenario's configuration (default) or an uninformed "
                        "one (the middle allocation, B = 1, s = 1)")
    p.add_argument("--trial-requests", dest="trial_requests", type=int, default=200,
                   help="requests per simulated trial (default 200)")
    p.add_argument("--deploy-cost", dest="deploy_cost", type=float, default=None,
                   help="seconds added to the search cost per deployment started (a trial, or a Stage 1 "
                        "stage setting): weight loading and warm-up (default 120)")
    p.add_argument("--force", action="store_true", help="write into a folder that holds files, replacing only those lmmsim wrote there")
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing")
    p.set_defaults(func=cmd_search)


def _add_calibrate_commands(sub) -> None:
    """profile, profile-host, fit, import-vidur, import-aiconfigurator, validate-costmodel: the cost model's data."""
    p = sub.add_parser("profile", help="time a model's operators on this machine's CPU or GPU (needs torch)",
                       description="Build the models' real layer shapes with random weights and time every "
                                   "operator class the cost model uses; writes one CSV per class and meta.json.")
    p.add_argument("--device", choices=("cpu", "cuda"), required=True)
    p.add_argument("--hardware", required=True, help="catalog GPU name the profile describes (e.g. h200, cpu)")
    p.add_argument("--models", required=True, help="comma-separated catalog model names")
    p.add_argument("-o", "--output", help="profile folder (default: profiles/ops/<hardware>/)")
    p.add_argument("--quick", action="store_true", help="tiny shapes only (seconds; for tests)")
    p.add_argument("--max-minutes", type=float, help="thin the shape grids so the sweep fits in N minutes")
    p.add_argument("--threads", type=int, help="torch threads (CPU; default torch's choice)")
    p.add_argument("--composition", action="store_true",
                   help="also time whole forward passes of the reference models (composition check)")
    p.add_argument("--force", action="store_true", help="write into a folder that holds files, replacing only those lmmsim wrote there")
    p.set_defaults(func=cmd_profile)

    p = sub.add_parser("profile-host", help="time multimodal host preprocessing (decode, HF processors, "
                                            "tokenisation, encoder dispatch) on this CPU",
                       description="Decode images, videos and audio, run each catalog family's transformers "
                                   "processor, tokenise prompts with byte-level BPE vocabularies trained in the run, "
                                   "and count and time the host side of one eager encoder layer per family, on CPU "
                                   "(one thread); writes one CSV per operation, fit.json and meta.json (see "
                                   "lmmsim/profiler/host.py).")
    p.add_argument("-o", "--output", help="profile folder (default: profiles/host/cpu/)")
    p.add_argument("--quick", action="store_true", help="tiny inputs, 1-2 repeats (seconds; for tests)")
    p.add_argument("--max-minutes", type=float, help="time budget shared by all measurements (default 6)")
    p.add_argument("--only", metavar="SECTIONS",
                   help="measure only these comma-separated sections (image, video, audio, tokenize, "
                        "encoder_dispatch) and merge them into the profile already in the folder, keeping the "
                        "other CSVs as they are (needs --force)")
    p.add_argument("--force", action="store_true", help="write into a folder that holds files, replacing only those lmmsim wrote there")
    p.set_defaults(func=cmd_profile_host)

    p = sub.add_parser("fit", help="fit operator cost models to a profile (scikit-learn)",
                       description="Per operator class: fit a roofline, a polynomial and a random-forest model, "
                                   "pick by cross-validated MAPE, write PROFILE/fit/ (JSON/npz, report, plot).")
    p.add_argument("profile", metavar="PROFILE", help="profile folder, or a name under profiles/ops/")
    p.add_argument("--hardware", help="catalog GPU name (default: the profile's meta.json)")
    p.add_argument("--out", help="fit folder (default: PROFILE/fit)")
    p.add_argument("--derive-from", metavar="FIT",
                   help="for classes this profile lacks, use another GPU's fitted rooflines at this GPU's peaks")
    p.add_argument("--force", action="store_true", help="write into a folder that holds files, replacing only those lmmsim wrote there")
    p.set_defaults(func=cmd_fit)

    p = sub.add_parser("import-vidur", help="convert Vidur-format profiles into an lmmsim profile folder")
    p.add_argument("source", metavar="DIR", help="Vidur profiling root (holds compute/ and network/)")
    p.add_argument("-o", "--output", required=True, help="profile folder to write")
    p.add_argument("--gpu", required=True, help="compute/<gpu> folder to read (e.g. a100, h100)")
    p.add_argument("--network", help="network/<topology> folder (default: <gpu>_dgx)")
    p.add_argument("--force", action="store_true", help="write into a folder that holds files, replacing only those lmmsim wrote there")
    p.set_defaults(func=cmd_import_vidur)

    p = sub.add_parser("import-aiconfigurator",
                       help="convert NVIDIA aiconfigurator's measured kernel tables into an lmmsim profile folder",
                       description="Read the bf16 GEMM, attention and all-reduce tables that the aiconfigurator-core "
                                   "package ships for one GPU (pip install 'lmmsim[calibrate]') and write them as "
                                   "an lmmsim profile folder (see lmmsim/profiler/aiconfigurator_import.py).")
    p.add_argument("--gpu", required=True, help="catalog GPU (h100-sxm-80gb, h200, b200, gb200, l40s, rtx-pro-6000, "
                                                "a100-sxm-80gb) or aiconfigurator folder name")
    p.add_argument("--backend", default="vllm", help="vllm (default), sglang or trtllm")
    p.add_argument("--version", help="backend version of the tables (default: the newest the GPU has)")
    p.add_argument("--kernel", help="LLM attention kernel (default: the one vLLM picks on that GPU)")
    p.add_argument("--classes", help="comma-separated subset of gemm,attention_prefill,attention_decode,allreduce "
                   "(default) and gemm_fp8,attention_decode_fp8,moe_experts,moe_alltoall")
    p.add_argument("--base", help="profile folder whose other classes are copied in (e.g. a Vidur import)")
    p.add_argument("--append", action="store_true",
                   help="with --base: also keep the base's rows of the classes imported here")
    p.add_argument("-o", "--output", required=True, help="profile folder to write")
    p.add_argument("--force", action="store_true", help="write into a folder that holds files, replacing only those lmmsim wrote there")
    p.set_defaults(func=cmd_import_aiconfigurator)

    p = sub.add_parser("validate-costmodel", help="held-out error of a fitted cost model, per class and per model")
    p.add_argument("profile", metavar="PROFILE", help="profile folder, or a name under profiles/ops/")
    p.set_defaults(func=cmd_validate_costmodel)


def _add_list(sub) -> None:
    """list: catalog entries and registered names."""
    p = sub.add_parser("list", help="list catalog entries and registered names")
    p.add_argument("what", choices=("models", "gpus", "systems", "policies", "scenarios"),
                   help="scenarios: the shipped examples; `lmmsim run NAME` runs one from any folder")
    p.add_argument("-v", "--verbose", action="store_true", help="systems: also list each preset's simplifications")
    p.set_defaults(func=cmd_list)
    p = sub.add_parser("schema", help="print the scenario's JSON schema (for editors)", description=(
        "Print the scenario file's JSON schema: lmmsim schema > scenario.schema.json, then start a scenario "
        "YAML with '# yaml-language-server: $schema=scenario.schema.json' for completion and checks in "
        "editors that use the YAML language server."))
    p.set_defaults(func=cmd_schema)
    p = sub.add_parser("completion", help="print a shell completion script (bash, zsh)", description=(
        "Print a completion script for lmmsim's subcommands and options: "
        "lmmsim completion bash > ~/.local/share/bash-completion/completions/lmmsim"))
    p.add_argument("shell", choices=("bash", "zsh"))
    p.set_defaults(func=cmd_completion)

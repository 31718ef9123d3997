"""Published MoE serving results beside lmmsim's simulation of the same setup (not a test).

Each result below is a ``vllm bench serve`` / ``benchmark_serving.py`` output a primary
source posted together with its setup (model, GPUs, parallelism, load, lengths, engine).
Its scenario under ``scenarios/`` restates that setup in lmmsim's keys, keys the source does
not set at the engine's defaults of the time (each default is cited in the scenario file);
nothing is fitted to the published numbers. For each result this prints the published
number, lmmsim's, and their ratio (lmmsim / published), computed the way ``vllm bench
serve`` computes it (duration = first request sent to last token received; TPOT per
request, ``(e2e - TTFT) / (output tokens - 1)``, then mean / median / P99 over requests;
ITL pooled over all gaps). It then reruns the scenario with the inputs nobody measured for
that setup moved over their documented range (MoE routing skew, the engine's per-step CPU
time, the roofline instead of the fitted operator models), and writes
``plots/moe/REPORT.md``.

    python bench/moe_public_result.py                 # both results, writes the report
    python bench/moe_public_result.py --only glm45v   # one result
    python bench/moe_public_result.py --no-report     # print only
"""

from __future__ import annotations

import argparse
import datetime as _dt
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lmmsim.results import run_scenario  # noqa: E402
from lmmsim.scenario import load_scenario  # noqa: E402

REPORT = ROOT / "plots" / "moe" / "REPORT.md"

#: (key, label, unit) of every number compared, in ``vllm bench serve``'s order.
METRICS = (
    ("duration_s", "Benchmark duration", "s"),
    ("request_throughput", "Request throughput", "req/s"),
    ("output_throughput", "Output token throughput", "tok/s"),
    ("total_throughput", "Total token throughput", "tok/s"),
    ("mean_ttft_ms", "Mean TTFT", "ms"),
    ("median_ttft_ms", "Median TTFT", "ms"),
    ("p99_ttft_ms", "P99 TTFT", "ms"),
    ("mean_tpot_ms", "Mean TPOT", "ms"),
    ("median_tpot_ms", "Median TPOT", "ms"),
    ("p99_tpot_ms", "P99 TPOT", "ms"),
    ("mean_itl_ms", "Mean ITL", "ms"),
    ("median_itl_ms", "Median ITL", "ms"),
    ("p99_itl_ms", "P99 ITL", "ms"),
)
#: The numbers the sensitivity table shows (one column each).
HEADLINE = ("output_throughput", "mean_ttft_ms", "mean_tpot_ms")


@dataclass(frozen=True)
class PublicResult:
    """One published benchmark: where it is, what it states, what it measured."""

    key: str
    title: str
    url: str
    date: str
    scenario: str  # path under the repository root
    setup: tuple[str, ...]  # the setup as the source states it, one line each
    published: dict[str, float]  # METRICS key -> the source's number
    # What the source states that the scenario must match (tests/test_moe_public_result.py)
    stated: dict[str, object] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


RESULTS = (
    PublicResult(
        key="glm45v",
        title="vLLM recipes: GLM-4.5V Usage Guide (GLM/GLM-4.5V.md), 'FP8 Benchmark' expected output",
        url="https://github.com/vllm-project/recipes/blob/39672fb/GLM/GLM-4.5V.md",
        date="2025-08-12 (commit 8b80dfd 'init bench', merged in #23 on 2025-08-13)",
        scenario="scenarios/moe-public-vllm-recipes-glm45v.yaml",
        setup=(
            "model zai-org/GLM-4.5V-FP8 (GLM-4.5-Air LLM: 46 layers, 128 routed experts + 1 shared, top-8)",
            "4x H100 ('Running GLM-4.5V with FP8 or BF16 on 4xH100'), vllm serve --tensor-parallel-size 4, "
            "no --enable-expert-parallel, prefix caching disabled for benchmarking",
            "vllm bench serve --dataset-name random --random-input-len 8000 --random-output-len 1000 "
            "--request-rate 10000 --num-prompts 16 --ignore-eos",
            "engine: vLLM (uv pip install -U vllm, August 2025: the V1 engine; exact version not stated)",
        ),
        published={
            "duration_s": 24.76, "request_throughput": 0.65, "output_throughput": 646.09,
            "total_throughput": 5814.83, "mean_ttft_ms": 2906.26, "median_ttft_ms": 2931.35,
            "p99_ttft_ms": 5357.41, "mean_tpot_ms": 21.76, "median_tpot_ms": 21.74, "p99_tpot_ms": 24.35,
            "mean_itl_ms": 21.82, "median_itl_ms": 19.22, "p99_itl_ms": 48.70,
        },
        stated={"model": "glm-4.5v", "gpu": "h100-sxm-80gb", "count": 4, "tp": 4, "ep": 1, "dtype": "fp8",
                "num_requests": 16, "prompt_tokens": 8000, "output_tokens": 1000,
                "total_input_tokens": 128000, "total_output_tokens": 16000},
        notes=(
            "The hardware is the section heading's ('on 4xH100'); the benchmark section that "
            "follows does not restate it.",
            "The load is text only (the random dataset); the vision encoder takes no part.",
            "Reading the published numbers: the last first token comes at the P99 TTFT (5.36 s), after which "
            "all 16 requests only decode; median ITL (19.22 ms) is then one pure decode step of 16 sequences at "
            "~8-9k context, and P99 TTFT measures the prefill of all 128k prompt tokens. The median ITL and "
            "P99 TTFT rows compare lmmsim's decode step and prefill throughput with vLLM's directly.",
        ),
    ),
    PublicResult(
        key="qwen3-30b-a3b",
        title="vllm-project/vllm pull request #23151 'Add tuned fused_moe configs for Qwen3-30B-A3B', "
        "result 'WO tuned configs (TP=1, EP=1, on H100)'",
        url="https://github.com/vllm-project/vllm/pull/23151",
        date="2025-08-19",
        scenario="scenarios/moe-public-vllm-pr23151-qwen3-30b-a3b.yaml",
        setup=(
            "model Qwen/Qwen3-30B-A3B (bf16; 48 layers, 128 experts, top-8)",
            "1x H100, TP=1, EP=1: VLLM_USE_DEEP_GEMM=1 vllm serve Qwen/Qwen3-30B-A3B",
            "python benchmarks/benchmark_serving.py --backend vllm --endpoint /v1/completions "
            "--dataset-name random --random-input 2048 --random-output 1024 --max-concurrency 10 --num-prompt 100",
            "engine: vLLM main of 2025-08-19 (the PR's base; V1 engine), untuned fused-MoE Triton config",
        ),
        published={
            "duration_s": 137.30, "request_throughput": 0.73, "output_throughput": 739.79,
            "total_throughput": 2226.78, "mean_ttft_ms": 267.22, "median_ttft_ms": 300.05,
            "p99_ttft_ms": 454.62, "mean_tpot_ms": 13.18, "median_tpot_ms": 13.17, "p99_tpot_ms": 13.80,
        },
        stated={"model": "qwen3-30b-a3b", "gpu": "h100-sxm-80gb", "count": 1, "tp": 1, "ep": 1, "dtype": "bf16",
                "num_requests": 100, "concurrency": 10, "total_input_tokens": 204169,
                "total_output_tokens": 101576},
        notes=(
            "Without --ignore-eos some answers ended early (101,576 of 102,400 tokens); the scenario "
            "fixes every request at the means (2042 prompt, 1016 output tokens).",
            "The ITL block of the posted output is cut off in the PR text, so ITL is not compared.",
            "The PR was closed unmerged; its 'without tuned configs' run is vLLM as shipped at the time.",
        ),
    ),
)


#: Other public MoE results looked at, and why they are not compared here.
CONSIDERED = (
    "vLLM recipes GLM-V.md (2025-12, GLM-4.5V-FP8, 4x H100, TP 4 + --enable-expert-parallel, encoder DP): "
    "VisionArena-Chat images at 20 req/s and at concurrency 1; the dataset's image sizes and prompt / answer "
    "lengths are not published per request, so the load cannot be restated in lmmsim's keys.",
    "vllm-project/vllm#16488 (Llama 4 Scout, TP 8 on H100, random 5000 / 1000): the numbers are in a screenshot, "
    "not in the text.",
    "vLLM recipes Qwen3-VL.md and Llama4-Scout.md: benchmark commands only, no numbers (placeholders).",
    "GPUStack performance lab (Qwen3-235B-A22B on H100): ShareGPT and prompt classes without fixed lengths.",
    "Tenstorrent tt-inference-server #340 (Qwen3-30B-A3B GPU reference): A100 only, engine version 'n/a'.",
    "Third-party aggregators (evokernel, engineering-playbook pages): projected or second-hand figures.",
)

#: Sensitivity rows: (label, overrides, why).
VARIANTS = (
    ("lmmsim defaults", [], "the scenario as written (MoE routing power_law_1.2, step CPU 0)"),
    ("routing balanced", ["deployment.moe_routing=balanced"],
     "every expert equally loaded (aiconfigurator's balanced routing)"),
    ("routing power_law_1.01", ["deployment.moe_routing=power_law_1.01"],
     "aiconfigurator's power law 1.01 (matched to DeepSeek traffic) instead of 1.2 (Qwen3-235B); "
     "where the numbers equal the defaults, the fitted moe_experts forest did not split the two "
     "exponents at these shapes (its data differ by up to ~10%)"),
    ("step CPU 300 us", ["engine.step_cpu_us=300"],
     "vLLM's per-step CPU time when overlapped, 0.2-0.3 ms (vllm-project/vllm#10634)"),
    ("step CPU 5500 us", ["engine.step_cpu_us=5500"],
     "its measured gap without overlap, 5-6 ms at batch 256 on Llama-2-7B (same issue): an upper bound"),
    ("roofline cost model", ["hardware.cost_model=roofline"],
     "datasheet roofline instead of the fitted operator models"),
)


def measure(run) -> dict[str, float]:
    """The METRICS of a finished run, as ``vllm bench serve`` defines them."""
    df = run.requests
    done = df[df["status"].eq("finished")]
    duration = float(done["finished_at"].max() - df["arrived_at"].min())
    ttft = done["ttft_s"].to_numpy(float) * 1e3
    tpot = done["tpot_s"].to_numpy(float) * 1e3
    tokens_in, tokens_out = float(done["num_prompt_tokens"].sum()), float(done["num_output_tokens"].sum())
    itl = run.summary.get("itl_s") or {}
    out = {
        "duration_s": duration,
        "request_throughput": len(done) / duration,
        "output_throughput": tokens_out / duration,
        "total_throughput": (tokens_in + tokens_out) / duration,
        "total_input_tokens": tokens_in,
        "total_output_tokens": tokens_out,
    }
    for name, arr in (("ttft", ttft), ("tpot", tpot)):
        out[f"mean_{name}_ms"] = float(arr.mean())
        out[f"median_{name}_ms"] = float(np.median(arr))
        out[f"p99_{name}_ms"] = float(np.percentile(arr, 99))
    if itl.get("mean") is not None:
        out.update(mean_itl_ms=itl["mean"] * 1e3, median_itl_ms=itl["p50"] * 1e3, p99_itl_ms=itl["p99"] * 1e3)
    return out


def simulate(result: PublicResult, overrides: list[str]) -> tuple[dict[str, float], dict]:
    """lmmsim's METRICS for ``result``'s scenario with ``overrides``, and the run's summary."""
    scn, base = load_scenario(str(ROOT / result.scenario), overrides)
    run = run_scenario(scn, base)
    return measure(run), run.summary


def ratio(sim: float | None, pub: float | None) -> float | None:
    return None if sim is None or pub is None or pub == 0 else sim / pub


def fmt(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def comparison_rows(result: PublicResult, sim: dict[str, float]) -> list[tuple[str, str, str, str]]:
    """(metric, published, lmmsim, ratio) for every metric the source published."""
    rows = []
    for key, label, unit in METRICS:
        if key not in result.published:
            continue
        pub = result.published[key]
        rows.append((f"{label} ({unit})", fmt(pub), fmt(sim.get(key)), fmt(ratio(sim.get(key), pub))))
    return rows


def sensitivity(result: PublicResult) -> tuple[dict[str, float], dict, list[tuple[str, str, dict]]]:
    """The default run (metrics, summary) and every applicable variant's metrics."""
    base, summary = simulate(result, [])
    rows = [(VARIANTS[0][0], VARIANTS[0][2], base)]
    for label, overrides, why in VARIANTS[1:]:
        rows.append((label, why, simulate(result, overrides)[0]))
    return base, summary, rows


def step_breakdown(result: PublicResult) -> list[tuple[str, str, str]]:
    """Where lmmsim's time goes in this setup: the terms of one decode step at the source's
    batch (concurrency, or every request for a burst) and mean context, and of one full
    prefill chunk, from ``llm_step_breakdown`` (ms)."""
    from lmmsim.build import build

    scn, base = load_scenario(str(ROOT / result.scenario), [])
    cost = build(scn, base).costs["llm"]
    wl = scn.workload
    batch = getattr(wl.arrival, "concurrency", None) or wl.num_requests
    prompt, output = int(wl.mix[0].text_tokens.value), int(wl.output_tokens.value)
    context = prompt + output // 2
    chunk = min(scn.policy.batching.token_budget, prompt)
    decode = cost.llm_step_breakdown((), batch, batch * context, batch)
    prefill = cost.llm_step_breakdown(((chunk, chunk),), 0, 0, 1)
    rows = [(k, fmt(decode[k] * 1e3, 3), fmt(prefill[k] * 1e3, 2)) for k in decode if decode[k] or prefill.get(k)]
    rows.append(("total", fmt(sum(decode.values()) * 1e3, 3), fmt(sum(prefill.values()) * 1e3, 2)))
    return [(f"decode step: {batch} x {context} context; prefill step: one {chunk}-token chunk", "", "")] + rows


def print_result(result: PublicResult, base: dict, rows: list) -> None:
    print(f"\n== {result.key}: {result.title}\n   {result.url}")
    print(f"{'metric':<34} {'published':>11} {'lmmsim':>11} {'ratio':>7}")
    for metric, pub, sim, r in comparison_rows(result, base):
        print(f"{metric:<34} {pub:>11} {sim:>11} {r:>7}")
    print(f"\n{'sensitivity':<26}" + "".join(f"{k:>22}" for k in HEADLINE))
    for label, _, m in rows:
        cells = "".join(f"{fmt(m.get(k)):>12} ({fmt(ratio(m.get(k), result.published.get(k))):>5}x)" for k in HEADLINE)
        print(f"{label:<26}{cells}")


def markdown_table(header: tuple[str, ...], rows: list[tuple]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return out


def result_section(result: PublicResult, base: dict, summary: dict, rows: list, verdict: str) -> list[str]:
    """The REPORT.md section of one result."""
    pools = summary.get("deployment", {}).get("pools", {}).get("llm", {})
    cm = summary.get("cost_model", {})
    extrapolated = ", ".join(f"{k} {v:.0%}" for k, v in (cm.get("extrapolated_share") or {}).items())
    lines = [f"## {result.key}", "", f"**Source**: {result.title}  ", f"<{result.url}> ({result.date})", "",
             "**Setup as stated**:", ""]
    lines += [f"- {s}" for s in result.setup]
    lines += ["", f"**lmmsim scenario**: `{result.scenario}` (keys the source leaves unset at vLLM's defaults, "
              f"cited in the file). Cost model: {cm.get('kind', '?')} ({cm.get('fit', 'datasheet roofline')}); "
              f"share of each operator class's predicted time outside its fitted data: {extrapolated or '-'}; "
              f"KV capacity {pools.get('kv_capacity_tokens_per_worker', '?'):,} tokens per replica; "
              f"{summary.get('sim_steps', '?')} engine steps.", ""]
    lines += markdown_table(("metric", "published", "lmmsim", "lmmsim / published"), comparison_rows(result, base))
    head = ("run", "why") + tuple(f"{k} (ratio)" for k in HEADLINE)
    body = [(label, why + (" -- the same numbers as the defaults" if i and same(m, base) else ""),
             *(f"{fmt(m.get(k))} ({fmt(ratio(m.get(k), result.published.get(k)))}x)" for k in HEADLINE))
            for i, (label, why, m) in enumerate(rows)]
    lines += ["", "**Sensitivity to inputs nobody measured for this setup** (lmmsim / published in brackets):", ""]
    lines += markdown_table(head, body)
    breakdown = step_breakdown(result)
    lines += ["", f"**lmmsim's step costs** ({breakdown[0][0]}; ms):", ""]
    lines += markdown_table(("term", "decode step", "prefill step"), breakdown[1:])
    if result.notes:
        lines += ["", "Notes:", ""] + [f"- {n}" for n in result.notes]
    lines += ["", f"**Verdict**: {verdict}", ""]
    return lines


def same(a: dict, b: dict) -> bool:
    """Whether two runs agree on every headline number as the report prints it (a variant that
    changed nothing visible; exact float equality missed last-digit differences)."""
    return all(fmt(a.get(k)) == fmt(b.get(k)) for k in HEADLINE)


def summary_table(done: list[tuple[PublicResult, dict]]) -> list[str]:
    """One row per result: its setup in a few words and the headline ratios."""
    rows = [(r.key, r.stated.get("model"), f"{r.stated.get('count')}x {r.stated.get('gpu')}, tp {r.stated.get('tp')}, "
             f"{r.stated.get('dtype')}", *(fmt(ratio(base.get(k), r.published.get(k))) for k in HEADLINE))
            for r, base in done]
    return markdown_table(("result", "model", "setup") + tuple(f"{k} lmmsim / published" for k in HEADLINE), rows)


def verdict_for(result: PublicResult, base: dict, rows: list) -> str:
    """A one-paragraph verdict from the numbers alone: how far off, and whether any
    documented variant brings each headline number within 25%. It states no cause."""
    parts = []
    for key in HEADLINE:
        r = ratio(base.get(key), result.published.get(key))
        if r is None:
            continue
        spread = [ratio(m.get(key), result.published[key]) for _, _, m in rows]
        lo, hi = min(s for s in spread if s is not None), max(s for s in spread if s is not None)
        within = "within 25%" if 0.8 <= r <= 1.25 else ("off by %.1fx" % (r if r > 1 else 1 / r))
        closing = [label for label, _, m in rows[1:]
                   if (q := ratio(m.get(key), result.published[key])) is not None and 0.8 <= q <= 1.25]
        # a variant inside the band, not a span that straddles it (0.7x and 1.3x reach nothing)
        reach = "" if 0.8 <= r <= 1.25 else (" (a documented variant reaches 0.8-1.25x)"
                                             if closing else " (no documented variant reaches 0.8-1.25x)")
        if not 0.8 <= r <= 1.25 and closing:
            reach += f" -- {', '.join(closing)}; a possible cause, not a measured one"
        parts.append(f"{key} {r:.2f}x, {within}{reach}; variants span {lo:.2f}-{hi:.2f}x")
    return "; ".join(parts) + "."


def write_report(sections: list[list[str]], path: Path, summary: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    head = ["# Published MoE serving results beside lmmsim", "",
            f"Written by `python bench/moe_public_result.py` ({_dt.date.today().isoformat()}). "
            "Each published number is set beside lmmsim's simulation of the setup its source states; "
            "nothing in the scenarios is fitted to the published numbers. Ratios are lmmsim / published "
            "(above 1: lmmsim slower for times, faster for throughputs). A verdict names a cause only where "
            "an experiment below shows it; a sensitivity row that closes a gap shows a possible cause, "
            "not a measured one.", ""] + summary + [""]
    tail = ["## Sources considered and not compared", ""] + [f"- {c}" for c in CONSIDERED]
    path.write_text("\n".join(head + [line for s in sections for line in s] + tail) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=[r.key for r in RESULTS])
    ap.add_argument("--no-report", action="store_true")
    ap.add_argument("--report", type=Path, default=REPORT)
    args = ap.parse_args(argv)
    sections, done = [], []
    for result in RESULTS:
        if args.only and result.key != args.only:
            continue
        base, summary, rows = sensitivity(result)
        print_result(result, base, rows)
        verdict = verdict_for(result, base, rows)
        print(f"verdict: {verdict}")
        sections.append(result_section(result, base, summary, rows, verdict))
        done.append((result, base))
    if not args.no_report:
        write_report(sections, args.report, summary_table(done))
        print(f"\nwrote {args.report.relative_to(ROOT) if args.report.is_relative_to(ROOT) else args.report}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Terminal output shared by the commands: the progress bar and the run summary table (rich, imported lazily)."""

from __future__ import annotations

import time
from pathlib import Path


class ProgressBar:
    """A progress bar on stderr that appears only once a run passes one second."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.t0 = time.perf_counter()
        self.bar = None
        self.task = None

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        if self.bar is None:
            if time.perf_counter() - self.t0 < 1.0:
                return
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

            self.bar = Progress(
                "[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                TimeRemainingColumn(), console=Console(stderr=True), transient=True,
            )
            self.bar.start()
            self.task = self.bar.add_task("simulating", total=total)
        self.bar.update(self.task, completed=done)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def fmt(x, scale: float = 1.0, digits: int = 3) -> str:
    return "-" if x is None else f"{x * scale:.{digits}f}"


def print_summary(summary: dict, scn, out: Path | None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(
        title=f"{scn.name}: {scn.system} / {scn.model} / {scn.hardware.count}x {scn.hardware.gpu}",
        caption="TTFT, E2E in s; TPOT in ms", min_width=60,
    )
    for col in ("", "n", "done", "TTFT", "TTFT p99", "TPOT", "TPOT p99", "E2E", "SLO"):
        table.add_column(col, justify="left" if not col else "right", no_wrap=True)

    def row(name: str, block: dict, n: int, done: int) -> None:
        slo = block.get("slo_attainment")
        table.add_row(
            name, str(n), str(done), fmt(block["ttft_s"]["mean"]), fmt(block["ttft_s"]["p99"]),
            fmt(block["tpot_s"]["mean"], 1e3, 1), fmt(block["tpot_s"]["p99"], 1e3, 1),
            fmt(block["e2e_s"]["mean"]), "-" if slo is None else f"{slo:.1%}",
        )

    for modality, block in summary["by_modality"].items():
        row(modality, block, block["num_requests"], block["num_finished"])
    row("all", summary, summary["num_requests"], summary["num_finished"])
    console.print(table)
    tp = summary["throughput"]
    util = summary["gpu_utilization"]
    console.print(
        f"throughput {fmt(tp['requests_per_s'], digits=2)} req/s, "
        f"{fmt(tp['input_tokens_per_s'], digits=0)} in tok/s, {fmt(tp['output_tokens_per_s'], digits=0)} out tok/s; "
        f"goodput {fmt(summary['goodput_requests_per_s'], digits=2)} req/s; "
        f"GPU busy {util['mean']:.1%}; preemptions {summary['num_preemptions']}"
    )
    extra = ""
    if summary["num_rejected"] or summary["num_unfinished"] or summary.get("num_not_arrived"):
        extra = (f"; rejected {summary['num_rejected']} (see reject_reason), unfinished at the horizon "
                 f"{summary['num_unfinished']}, arriving after it {summary.get('num_not_arrived', 0)}")
    console.print(
        f"simulated {summary['sim_end_at_s']:.1f} s in {summary['sim_wall_time_s']:.2f} s wall "
        f"({summary['sim_events']} events){extra}"
    )
    kv = [f"{pool} {entry['kv_capacity_tokens_per_worker']:,}" for pool, entry in
          summary.get("deployment", {}).get("pools", {}).items() if "kv_capacity_tokens_per_worker" in entry]
    if kv:
        console.print(f"KV cache per worker (tokens): {', '.join(kv)}")
    pc = summary.get("prefix_cache")
    if pc:  # rates are None with no finished request, evictions when the caller gave none
        rate, share, evicted = (pc[k] for k in ("hit_rate", "hit_requests_share", "evictions"))
        console.print(f"prefix cache: hit rate {'-' if rate is None else f'{rate:.1%}'} of prompt tokens "
                      f"({pc['cached_tokens']:,} cached), {'-' if share is None else f'{share:.1%}'} of requests "
                      f"hit, {'-' if evicted is None else f'{evicted:,}'} cached blocks evicted")
    cm = summary.get("cost_model", {})
    if cm.get("fallback_classes"):
        console.print(f"cost model: fitted ({cm['fit']}); roofline v0 for {', '.join(cm['fallback_classes'])} "
                      f"(no profile data)")
    if out is not None:
        console.print(f"results in {out}/")

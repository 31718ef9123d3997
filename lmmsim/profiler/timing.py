"""Timing one operator call: warm-up, repeats, median / p10 / p90 in milliseconds.

Two timers with one interface, ``measure(fn) -> Timing``:

* :class:`CpuTimer` — wall clock (``time.perf_counter_ns``) around each call;
  CPU kernels are synchronous, so that is the kernel time (plus the few
  microseconds of Python dispatch a real CPU engine also pays). The garbage
  collector is paused while measuring. :meth:`CpuTimer.sample` times a single
  call and also says how much of it this process actually ran (a busy machine
  shows as a CPU share under 1).
* :class:`CudaTimer` — a pair of CUDA events around each call, so the time is
  what the GPU spent, not what the host spent launching. Before each call it
  (1) overwrites an L2-sized buffer, so weights and KV caches come from HBM as
  they do in a real forward pass where every layer reads its own weights, and
  (2) queues a spin kernel as long as the host takes to launch the call, so
  the GPU does not idle between the start event and the operator's first
  kernel (launch gaps are the engine's business: CUDA graphs remove them in
  vLLM's decode, and the cost model has its own per-kernel launch term).

How many repeats: a :class:`RepeatPolicy` turns the warm-up time into a repeat
count that aims at ``target_s`` of measured time per shape, within
``[min_repeats, max_repeats]``; the median and the 10th / 90th percentiles of
the per-call times are reported.
"""

from __future__ import annotations

import gc
import math
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class Timing:
    """One shape's timing: median and spread of ``repeats`` calls, milliseconds."""

    median_ms: float
    p10_ms: float
    p90_ms: float
    repeats: int


@dataclass(frozen=True)
class Sample:
    """One timed call: wall-clock milliseconds and the share of them this process ran.

    ``cpu_share`` (process CPU time / wall time) well under 1 means the scheduler
    gave the core to someone else mid-call, so ``wall_ms`` holds their work too:
    a busy machine, not a slow kernel.
    """

    wall_ms: float
    cpu_share: float


@dataclass(frozen=True)
class RepeatPolicy:
    """How long to measure one shape.

    ``warmup`` untimed calls first (the first call also pays allocator, cuBLAS
    heuristics and autotuning); then ``repeats_for(estimate)`` timed calls.
    """

    warmup: int = 1
    min_repeats: int = 3
    max_repeats: int = 15
    target_s: float = 0.1  # measured time to aim at per shape

    def repeats_for(self, estimate_s: float) -> int:
        if self.target_s <= 0 or estimate_s <= 0:
            return self.min_repeats if self.target_s <= 0 else self.max_repeats
        return int(min(self.max_repeats, max(self.min_repeats, math.ceil(self.target_s / estimate_s))))

    def calls_for(self, estimate_s: float) -> int:
        """Total calls (warm-up + timed) for a kernel of ``estimate_s`` seconds."""
        return self.warmup + self.repeats_for(estimate_s)

    def as_dict(self) -> dict:
        return {"warmup": self.warmup, "min_repeats": self.min_repeats, "max_repeats": self.max_repeats,
                "target_s": self.target_s}


def policy_for(device_type: str, quick: bool = False) -> RepeatPolicy:
    """Defaults: GPUs get many short repeats (kernels of microseconds to tens of
    milliseconds), the CPU a few long ones; ``quick`` (tests) the minimum."""
    if quick:
        return RepeatPolicy(warmup=1, min_repeats=3, max_repeats=3, target_s=0.0)
    if device_type == "cuda":
        return RepeatPolicy(warmup=2, min_repeats=5, max_repeats=30, target_s=0.01)
    return RepeatPolicy(warmup=1, min_repeats=3, max_repeats=15, target_s=0.1)


def summarize(samples_ms) -> Timing:
    """Median, p10 and p90 (linear interpolation) of per-call times."""
    a = np.asarray(samples_ms, dtype=float)
    p10, med, p90 = np.percentile(a, [10, 50, 90])
    return Timing(float(med), float(p10), float(p90), int(a.size))


class CpuTimer:
    """Wall-clock timer for CPU tensors (synchronous kernels).

    Like the CUDA timer's L2 flush, every call starts with cold caches: a
    buffer twice the size of a large last-level cache is rewritten first (not
    timed). In a real forward pass each layer's weights come from DRAM; timing
    a kernel over and over with its weights cache-resident would predict
    passes 15-35% too fast on this project's machine.
    """

    device_type = "cpu"

    def __init__(self, policy: RepeatPolicy | None = None, flush_bytes: int = 64 << 20):
        import torch

        self.policy = policy or policy_for("cpu")
        self._flush = torch.empty(flush_bytes, dtype=torch.int8) if flush_bytes else None

    def _cold(self) -> None:
        if self._flush is not None:
            self._flush.fill_(1)

    def synchronize(self) -> None:
        pass

    def measure(self, fn: Callable[[], object], policy: RepeatPolicy | None = None) -> Timing:
        p = policy or self.policy
        clock = time.perf_counter_ns
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            estimate = 0.0
            for _ in range(max(1, p.warmup)):
                self._cold()
                t0 = clock()
                fn()
                estimate = (clock() - t0) * 1e-9
            samples = []
            for _ in range(p.repeats_for(estimate)):
                self._cold()
                t0 = clock()
                fn()
                samples.append((clock() - t0) * 1e-6)
        finally:
            if gc_was_enabled:
                gc.enable()
        return summarize(samples)

    def sample(self, fn: Callable[[], object]) -> Sample:
        """Time one call of ``fn`` with cold caches, as :meth:`measure` times each
        repeat, by the wall clock and by this process's CPU clock."""
        self._cold()
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            c0, t0 = time.process_time_ns(), time.perf_counter_ns()
            fn()
            t1, c1 = time.perf_counter_ns(), time.process_time_ns()
        finally:
            if gc_was_enabled:
                gc.enable()
        wall = max(1, t1 - t0)
        return Sample(wall * 1e-6, (c1 - c0) / wall)


class CudaTimer:
    """CUDA-event timer with an L2 flush and a launch-covering spin before each call."""

    device_type = "cuda"

    def __init__(self, device, policy: RepeatPolicy | None = None, flush_bytes: int | None = None):
        import torch

        self.torch = torch
        self.device = torch.device(device)
        self.policy = policy or policy_for("cuda")
        props = torch.cuda.get_device_properties(self.device)
        l2 = int(getattr(props, "L2_cache_size", 0) or 0)
        # Twice the L2 evicts it whatever its replacement policy; 256 MiB when unknown.
        self.flush_bytes = int(flush_bytes or (2 * l2 if l2 else 256 << 20))
        self._flush = torch.empty(self.flush_bytes, dtype=torch.int8, device=self.device)
        clock_khz = getattr(props, "clock_rate", 0) or 0
        self._cycles_per_s = clock_khz * 1e3 if clock_khz else 1.5e9

    def synchronize(self) -> None:
        self.torch.cuda.synchronize(self.device)

    def _spin(self, seconds: float) -> None:
        if seconds > 0:
            self.torch.cuda._sleep(int(seconds * self._cycles_per_s))

    def measure(self, fn: Callable[[], object], policy: RepeatPolicy | None = None) -> Timing:
        torch = self.torch
        p = policy or self.policy
        clock = time.perf_counter
        self.synchronize()
        estimate = host = 0.0
        for _ in range(max(1, p.warmup)):
            self._flush.zero_()
            self.synchronize()
            t0 = clock()
            fn()
            t1 = clock()
            self.synchronize()
            host, estimate = t1 - t0, clock() - t0  # launch time; launch + run time
        repeats = p.repeats_for(estimate)
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
        spin = min(0.05, 1.5 * host + 20e-6)
        for i in range(repeats):
            self._flush.zero_()
            self._spin(spin)
            starts[i].record()
            fn()
            ends[i].record()
        self.synchronize()
        return summarize([s.elapsed_time(e) for s, e in zip(starts, ends)])


def make_timer(device, policy: RepeatPolicy | None = None):
    """The timer for a torch device (``"cpu"``, ``"cuda"``, ``"cuda:1"``)."""
    import torch

    dev = torch.device(device)
    if dev.type == "cuda":
        return CudaTimer(dev, policy)
    if dev.type == "cpu":
        return CpuTimer(policy)
    raise ValueError(f"unsupported device {device!r}: use cpu or cuda")

"""The measurements that run in child processes: SM limits and collectives.

Why children: a green context or an NCCL group that misbehaves (or crashes the
CUDA context) cannot take the main profile down with it, and NCCL needs one
process per GPU anyway.

* parent side, called by :func:`lmmsim.profiler.run.profile` after the shape
  grids: :func:`sm_limit` (encoder layers under CUDA green contexts, one
  spawned child), :func:`collectives` (all-reduce / p2p over NCCL, one rank
  per GPU), and what ``meta.json`` says when they cannot run
  (:func:`green_supported`, :func:`sm_limit_reason`);
* child side, the spawned entry points: :func:`sm_limit_worker` and
  :func:`collective_worker`. Each writes its rows to a JSON file the parent
  reads back.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import torch

from lmmsim.profiler import timing
from lmmsim.profiler.ops import (
    BYTES,
    DTYPE,
    EncoderLayerShape,
    TensorPool,
    build_encoder_layer,
)

SM_LIMIT_EST_S = 45.0  # child start + CUDA init + rows (estimate used for planning)
COLLECTIVE_EST_S = 30.0  # per world size
COLLECTIVE_SIZES = [1 << p for p in range(10, 29, 2)]  # 1 KiB .. 256 MiB, x4 steps


# ----------------------------------------------------------------- parent side
def _run_child(target, args, timeout_s: float) -> str | None:
    """Run ``target(*args)`` in a spawned process; an error message or None."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    p = ctx.Process(target=target, args=args, daemon=True)
    p.start()
    p.join(max(1.0, timeout_s))
    if p.is_alive():
        p.terminate()
        p.join(5)
        if p.is_alive():
            p.kill()
        return f"timed out after {timeout_s:.0f} s"
    return None if p.exitcode == 0 else f"child exited with code {p.exitcode}"


def sm_limit(dev: torch.device, shapes: list[dict], fractions, policy: timing.RepeatPolicy,
              timeout_s: float) -> tuple[list[dict], str]:
    """SM-limited encoder layers via green contexts in a child; (rows, note)."""
    errors = []
    for alloc_inside in (False, True):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "sm.json")
            start = time.monotonic()
            err = _run_child(sm_limit_worker, (shapes, list(fractions), dev.index or 0, policy.as_dict(),
                                                   out, alloc_inside), timeout_s)
            timeout_s -= time.monotonic() - start
            data = json.loads(Path(out).read_text()) if os.path.exists(out) else {"rows": []}
        rows = data["rows"]
        if data.get("error"):
            err = f"{err or 'failed'}: {data['error']}"
        if rows and any(r["sm_fraction"] < 1 for r in rows):
            how = "inputs allocated inside each green context" if alloc_inside else "inputs shared"
            note = f"measured with CUDA green contexts (torch.cuda.green_contexts, {how}) in a child process"
            if err is not None:
                note += f"; partial ({err})"
            low = [r for r in rows if r["sm_fraction"] < 0.3]
            full = {(r["family"], r["seq_len"]): r["time_ms"] for r in rows if r["sm_fraction"] >= 1}
            if low and all(r["time_ms"] < 1.2 * full.get((r["family"], r["seq_len"]), 0) for r in low):
                note += "; WARNING: latency did not grow as SMs shrank, the limit may not have applied"
            return rows, note
        errors.append(f"{'inside' if alloc_inside else 'shared'}: {err or 'no rows'}")
        if timeout_s < 10:
            break
    return [], "not measurable: green-context run failed (" + "; ".join(errors) + ")"


def collectives(device_count: int, policy: timing.RepeatPolicy, stop_at: float | None, backend: str = "nccl",
                 sizes: list[int] | None = None):
    """All-reduce over 2, 4, 8 GPUs (up to the count) and p2p between two; (ar rows, p2p rows, note).

    ``stop_at``: the ``time.monotonic()`` by which the sweep must be done (None:
    5 minutes per world). ``backend="gloo"`` runs the same sweep over CPU
    processes (tests)."""
    import random

    import torch.multiprocessing as tmp_mp

    ar_rows, p2p_rows, notes = [], [], []
    for world in (2, 4, 8):
        if world > device_count:
            break
        left = (stop_at - time.monotonic()) if stop_at else 300.0
        if left < COLLECTIVE_EST_S * 0.5:
            notes.append(f"world {world}: not measured: out of time")
            continue
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "coll.json")
            port = 29500 + random.Random(world + os.getpid()).randrange(1000)
            try:
                ctx = tmp_mp.start_processes(collective_worker,
                                             args=(world, sizes or COLLECTIVE_SIZES, max(5, policy.min_repeats),
                                                   backend, port, out),
                                             nprocs=world, join=False, start_method="spawn")
                t_end = time.monotonic() + min(left, 120.0)
                while not ctx.join(timeout=1.0):
                    if time.monotonic() > t_end:
                        for p in ctx.processes:
                            if p.is_alive():
                                p.kill()
                        raise TimeoutError("timed out")
                data = json.loads(Path(out).read_text())
            except Exception as exc:  # noqa: BLE001 - record, go on
                notes.append(f"world {world}: failed ({type(exc).__name__}: {str(exc)[:100]})")
                continue
        for nbytes, med, p10, p90 in data["allreduce"]:
            ar_rows.append({"num_bytes": nbytes, "world": world, "time_ms": med, "time_ms_p10": p10,
                            "time_ms_p90": p90, "backend": backend, "dtype": "bfloat16"})
        for nbytes, med, p10, p90 in data["p2p"]:
            p2p_rows.append({"num_bytes": nbytes, "time_ms": med, "time_ms_p10": p10, "time_ms_p90": p90,
                             "backend": backend, "dtype": "bfloat16"})
        notes.append(f"world {world}: measured ({backend})")
    return ar_rows, p2p_rows, "; ".join(notes)


def green_supported() -> bool:
    try:
        from torch.cuda import green_contexts

        return bool(green_contexts.SUPPORTED)
    except Exception:  # noqa: BLE001
        return False


def sm_limit_reason(dev: torch.device, quick: bool) -> str:
    if dev.type != "cuda":
        return "not measurable: CPU (SM limits need CUDA MPS or green contexts)"
    if quick:
        return "not measured: --quick"
    return ("not measurable: this torch build has no CUDA green contexts (torch.cuda.green_contexts.SUPPORTED is "
            "False), and CUDA MPS (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE) needs an MPS control daemon started "
            "before the process")


# ------------------------------------------------------------------ child side
def _write_json(path, data) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def sm_limit_worker(shapes: list[dict], fractions: list[float], device_index: int, policy: dict,
                    out_path: str, alloc_inside: bool) -> None:
    """Child process: time encoder layers under CUDA green contexts of a fraction of the SMs.

    Each fraction's green context is made current (``set_context``) and its
    stream used, the encoder layer timed, the context popped; fraction 1.0 runs
    on the whole GPU. ``alloc_inside``: allocate the inputs (and the timer's
    flush buffer) inside each green context, a fallback for drivers where the
    primary context's memory is not usable there. Writes ``{"rows": [...],
    "num_sms": N, "error": ...}`` to ``out_path`` after every shape.
    Elementwise kernels run eagerly here (no compile in the child): the rows
    are for the latency ratio to the row at fraction 1.0.
    """
    rows: list[dict] = []
    state = {"rows": rows, "num_sms": None, "error": None}
    try:
        _sm_limit_rows(shapes, fractions, device_index, policy, alloc_inside, rows, state, out_path)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, then re-raised
        state["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        _write_json(out_path, state)
        raise
    _write_json(out_path, state)


def _sm_limit_rows(shapes, fractions, device_index, policy, alloc_inside, rows, state, out_path) -> None:
    from torch.cuda.green_contexts import GreenContext

    from lmmsim.profiler.timing import CudaTimer, RepeatPolicy

    dev = torch.device("cuda", device_index)
    torch.cuda.set_device(dev)
    props = torch.cuda.get_device_properties(dev)
    total = state["num_sms"] = props.multi_processor_count
    gran = 8 if props.major >= 9 else 2  # green-context SM partition granularity

    def sms_for(frac):
        return total if frac >= 1 else min(total, max(gran, int(round(frac * total / gran)) * gran))

    timer = CudaTimer(dev, RepeatPolicy(**policy))
    pool = TensorPool(dev)
    contexts = {}
    for frac in fractions:
        sms = sms_for(frac)
        if sms < total and sms not in contexts:
            contexts[sms] = GreenContext.create(num_sms=sms, device_id=device_index)
    for sd in shapes:
        s = EncoderLayerShape(**sd)
        pool.reset()
        shared = None if alloc_inside else build_encoder_layer(s, pool)
        for frac in fractions:
            sms = sms_for(frac)
            ctx = contexts.get(sms)
            if ctx is not None:
                ctx.set_context()
            try:
                stream = None
                if ctx is not None and hasattr(ctx, "Stream"):
                    try:
                        stream = ctx.Stream()
                    except Exception:  # noqa: BLE001 - set_context alone then
                        stream = None
                with torch.cuda.stream(stream) if stream is not None else _nullcontext():
                    if shared is None:  # everything the call touches allocated in this context
                        fn, tm = build_encoder_layer(s, TensorPool(dev)), CudaTimer(dev, RepeatPolicy(**policy))
                    else:
                        fn, tm = shared, timer
                    t = tm.measure(fn)
            finally:
                if ctx is not None:
                    ctx.pop_context()
            rows.append({"family": s.family, "sm_fraction": sms / total, "num_units": s.num_units,
                         "seq_len": s.seq_len, "num_sms": sms, "hidden_size": s.hidden, "num_heads": s.heads,
                         "intermediate_size": s.ffn, "window_tokens": s.window_tokens,
                         "time_ms": t.median_ms, "time_ms_p10": t.p10_ms, "time_ms_p90": t.p90_ms,
                         "repeats": t.repeats})
        _write_json(out_path, state)


@contextmanager
def _nullcontext():
    yield


def collective_worker(rank: int, world: int, sizes: list[int], repeats: int, backend: str, port: int,
                      out_path: str) -> None:
    """One rank of an all-reduce / p2p sweep (``torch.multiprocessing`` entry point).

    Every size: warm-up, then ``repeats`` timed calls after a barrier; a call's
    time is the slowest rank's (all-reduced with MAX). Rank 0 writes
    ``{"allreduce": [[bytes, med, p10, p90], ...], "p2p": [...]}`` (p2p only
    for world 2: rank 0 sends, rank 1 receives).
    """
    import torch.distributed as dist

    from lmmsim.profiler.timing import summarize

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    cuda = backend == "nccl"
    dev = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(dev)
    dist.init_process_group(backend, rank=rank, world_size=world)

    def timed(fn):
        samples = []
        for i in range(repeats + 2):
            dist.barrier()
            if cuda:
                torch.cuda.synchronize(dev)
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                fn()
                e.record()
                torch.cuda.synchronize(dev)
                t = s.elapsed_time(e)
            else:
                t0 = time.perf_counter()
                fn()
                t = (time.perf_counter() - t0) * 1e3
            if i >= 2:
                samples.append(t)
        ts = torch.tensor(samples, dtype=torch.float64, device=dev)
        dist.all_reduce(ts, op=dist.ReduceOp.MAX)
        s = summarize(ts.cpu().tolist())
        return [s.median_ms, s.p10_ms, s.p90_ms]

    out = {"allreduce": [], "p2p": []}
    for nbytes in sizes:
        buf = torch.ones(max(1, nbytes // BYTES), dtype=DTYPE, device=dev)
        out["allreduce"].append([nbytes, *timed(lambda b=buf: dist.all_reduce(b))])
        if world == 2:
            peer = 1 - rank
            if rank == 0:
                out["p2p"].append([nbytes, *timed(lambda b=buf: dist.send(b, peer))])
            else:
                out["p2p"].append([nbytes, *timed(lambda b=buf: dist.recv(b, peer))])
    if rank == 0:
        _write_json(out_path, out)
    dist.barrier()
    dist.destroy_process_group()

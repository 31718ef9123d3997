"""A fit's evaluations on disk, across processes (opt-in).

Set ``LMMSIM_PREDICTION_CACHE`` to a folder and the process-wide memos of a
fit's evaluations (:class:`~lmmsim.costmodel.fitcache.SharedFit`: a call
shape's seconds and whether it lies outside the fit's data) start from what
earlier processes wrote there, and what a run adds is written back when it
ends. A short run's loop spends most of its time evaluating forests for call
shapes it meets the first time (the Vidur setting's 1,000 requests: about half;
Vidur itself keeps its predictions in a cache the same way); with the variable
set, only the first process pays. Nothing is written without it.

Results do not depend on it: an entry holds exact floats of pure evaluations,
and each run keeps counting its own evaluations (its ``extrapolated_share``)
on misses of its own memos, so a run's files are byte for byte those of a run
with the cache off (tested).

An entry is named by the SHA-256 of the fit folder's files (name, size,
modification time of ``model.json`` and every forest file), the GPU and the
interconnect as validated, the package's sources (:mod:`lmmsim.disk_cache`) and
the versions of Python and numpy (an evaluation is numpy and Python floats). It
is one ``marshal`` file -- tuples, numbers and strings, no pickle; seconds that
were a numpy float come back as one, and an argument of another type than a
Python number, string or None (a numpy scalar) is not written. An entry that cannot
be read is ignored and rewritten. A changed input names another entry and the
old one stays: delete the folder to reclaim it (an entry is about 1 MB per
20,000 call shapes).
"""

from __future__ import annotations

import hashlib
import marshal
import os
import sys
from pathlib import Path

import numpy as np

from lmmsim.disk_cache import code_hash, write_atomically

ENV = "LMMSIM_PREDICTION_CACHE"
FORMAT = "lmmsim-predictions/2"
_TYPES = {int: "i", float: "f", bool: "b", str: "s", type(None): "n"}
_BY_CODE = {code: t for t, code in _TYPES.items()}
_SECONDS = {float: "f", np.float64: "F"}  # a value's seconds, restored as the type they had


def cache_dir() -> Path | None:
    """The folder ``$LMMSIM_PREDICTION_CACHE`` names, or None (no disk cache)."""
    value = os.environ.get(ENV, "")
    return Path(value) if value else None


def entry_path(files_key: tuple, gpu_json: str, interconnect_json: str | None) -> Path | None:
    """Where the entry of a fit (``files_key``: its files' names, sizes, times) lives, or None."""
    folder = cache_dir()
    if folder is None:
        return None
    stats = [entry[:3] for entry in files_key]  # not the inode: a copied fit keeps its entry
    h = hashlib.sha256("\0".join([FORMAT, repr(stats), gpu_json, str(interconnect_json), code_hash(),
                                  _versions()]).encode())
    return folder / f"{h.hexdigest()}.marshal"


def _versions() -> str:
    """Python's and numpy's versions: an evaluation is numpy and Python floats (numpy's own
    attribute: the package metadata look-up costs ~20 ms)."""
    return f"{sys.version.split()[0]} numpy={np.__version__}"


def _codes(types: tuple) -> str | None:
    codes = [_TYPES.get(t) for t in types]
    return None if None in codes else "".join(codes)


def load(path: Path | None) -> tuple[dict, dict]:
    """``(scalar memos by (class, op), GEMM blocks)`` of the entry at ``path``, as
    :class:`~lmmsim.costmodel.fitcache.SharedFit` keys them; empty when there is none."""
    if path is None or not path.is_file():
        return {}, {}
    try:
        doc = marshal.loads(path.read_bytes())
        if doc["format"] != FORMAT:
            return {}, {}
        scalars = {}
        for name, groups in doc["scalars"].items():
            memo = scalars[name] = {}
            for signature, (args, values) in groups.items():  # one type signature at a time
                codes, seconds_type = signature.split("|")
                types = tuple(_BY_CODE[c] for c in codes)
                if seconds_type == "F":  # a numpy float when evaluated (a fitted roofline's): kept one
                    values = [(np.float64(t), flag) for t, flag in values]
                memo.update(zip([(a, types) for a in args], values))
        blocks = {(lo, n, k, block, _BY_CODE[tn], _BY_CODE[tk]): hit
                  for (lo, n, k, block, tn, tk), hit in doc["gemm"]}
    except Exception:  # unreadable, truncated or another layout: as if absent (rewritten at the end)
        return {}, {}
    return scalars, blocks


def save(path: Path, scalars: dict, blocks: dict) -> None:
    """Write the memos (``{(class, op): {(args, types): (seconds, flag)}}`` and the GEMM
    blocks) to ``path``, leaving out what ``marshal`` could not restore exactly."""
    rows = {}
    for name, memo in scalars.items():
        groups = rows[name] = {}  # "argument codes|seconds' type" -> (argument tuples, values)
        for (args, types), value in memo.items():
            codes = _codes(types)
            seconds_type = _SECONDS.get(type(value[0]))
            if codes is None or seconds_type is None or type(value[1]) is not int:
                continue
            signature = f"{codes}|{seconds_type}"
            group = groups.get(signature)
            if group is None:
                group = groups[signature] = ([], [])
            group[0].append(args)
            group[1].append(value if seconds_type == "f" else (float(value[0]), value[1]))
    gemm = []
    for (lo, n, k, block, tn, tk), hit in blocks.items():
        codes = _codes((tn, tk))
        if codes is not None and type(lo) is int and type(block) is int:
            gemm.append(((lo, n, k, block, codes[0], codes[1]), hit))
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, marshal.dumps({"format": FORMAT, "scalars": rows, "gemm": gemm}))

"""RPS-Serve's prepared admission model on disk, across processes (opt-in).

Set ``LMMSIM_PREP_CACHE`` to a folder and a run whose ``rps`` queue needs
profiling, fitting and clustering (:mod:`lmmsim.rps.admission`) first looks
there; what it prepares is written there for the next process. Nothing is
written without the variable: lmmsim never fills a user's folders unasked.
Within one process the admission model is cached in memory anyway.

An entry is named by the SHA-256 of everything the model depends on: the
admission cache key (the scenario minus what cannot change it -- name, SLOs,
arrival, request count, simulation settings, router -- with its seed, base
folder and a measured profile's bytes), the bytes of every ``.py`` file of
the lmmsim package (the simulator that profiles), the size and modification
time of every catalog file (models, GPUs, fits, host profiles: every root of
:func:`lmmsim.catalog.search_path`), of every file in the scenario's folder
(traces, local entries) and of every file the scenario names elsewhere (a
subfolder, an absolute path), and the versions of Python and of the libraries
that compute the model (:data:`lmmsim.disk_cache.LIBRARIES`). The cache's own entries never
count, so a cache folder inside the scenario's folder works. A changed input
names another entry; delete the folder to reclaim it.

An entry holds plain data -- ``<digest>.json`` (the estimator's and the
classifier's parameters, the report, the profile's attrs) and
``<digest>.parquet`` (the profile table, exact dtypes and floats) -- no
pickle; it is rebuilt into the same classifier (the same floats, so the same
classes) and the same ``admission_profile.csv``.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pandas as pd

from lmmsim.disk_cache import code_hash, library_versions

ENV = "LMMSIM_PREP_CACHE"
FORMAT = "lmmsim-rps-admission/1"


def cache_dir() -> Path | None:
    """The folder ``$LMMSIM_PREP_CACHE`` names, or None (no disk cache)."""
    value = os.environ.get(ENV, "")
    return Path(value) if value else None


def _stats(root: Path) -> list[str]:
    if not root.is_dir():
        return []
    return sorted(f"{p.relative_to(root)}:{st.st_size}:{st.st_mtime_ns}" for p in root.rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts for st in (p.stat(),))


def _referenced_files(key: str, base: Path) -> list[Path]:
    """Files the scenario names anywhere (a trace, a profile; in a subfolder or by an
    absolute path): every string in the key that is an existing file, from ``base``."""
    found, todo = set(), [json.loads(key)]
    while todo:
        item = todo.pop()
        if isinstance(item, dict):
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)
        elif isinstance(item, str) and 0 < len(item) < 4096 and "\n" not in item:
            path = base / item
            if path.is_file():
                found.add(path.resolve())
    return sorted(found)


def digest(key: str, base_dir: Path) -> str:
    """The entry name of admission cache key ``key`` (see the module docstring)."""
    from lmmsim import catalog

    h = hashlib.sha256()
    h.update(FORMAT.encode() + b"\0" + key.encode() + b"\0" + code_hash().encode() + b"\0" + library_versions().encode())
    for root in catalog.search_path():
        h.update(("\n".join([str(root), *_stats(Path(root))]) + "\0").encode())
    base = Path(base_dir)
    own = cache_dir()
    own = own.resolve() if own is not None else None
    if base.is_dir():  # its files, and those the scenario names elsewhere; never the cache's own entries
        files = {p.resolve() for p in base.iterdir() if p.is_file()} | set(_referenced_files(key, base))
        stats = [f"{p}:{st.st_size}:{st.st_mtime_ns}" for p in sorted(files)
                 if own is None or own not in p.parents for st in (p.stat(),)]
        h.update("\n".join(stats).encode())
    return h.hexdigest()


def load(name: str) -> tuple[dict, pd.DataFrame | None] | None:
    """``(data, profile)`` of entry ``name``, or None when there is none (or no cache folder)."""
    folder = cache_dir()
    if folder is None or not (folder / f"{name}.json").is_file():
        return None
    data = json.loads((folder / f"{name}.json").read_text())
    if data.get("format") != FORMAT:
        return None
    profile = None
    if data.get("has_profile"):
        profile = pd.read_parquet(folder / f"{name}.parquet")
        profile.attrs.update(data.get("attrs", {}))
    return data, profile


def save(name: str, data: dict, profile: pd.DataFrame | None) -> None:
    """Write entry ``name`` (a no-op without a cache folder); the JSON last, so a reader
    never finds a JSON without its table."""
    folder = cache_dir()
    if folder is None:
        return
    folder.mkdir(parents=True, exist_ok=True)
    doc = {"format": FORMAT, **data, "has_profile": profile is not None}
    if profile is not None:
        doc["attrs"] = dict(profile.attrs)
        tmp = folder / f".{name}.{os.getpid()}.parquet.tmp"  # one per writer: sweep workers share the folder
        frame = profile.copy()
        frame.attrs = {}
        frame.to_parquet(tmp, index=False)
        tmp.replace(folder / f"{name}.parquet")
    tmp = folder / f".{name}.{os.getpid()}.json.tmp"
    tmp.write_text(json.dumps(doc) + "\n")  # key order kept: the report goes into summary.json as it is
    tmp.replace(folder / f"{name}.json")

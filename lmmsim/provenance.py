"""What made a result: lmmsim's version, the git revision, and hashes of the inputs read.

``summary.json`` carries :func:`describe`'s block under ``provenance``::

    {"lmmsim_version": "0.1.0",
     "git_revision": "ad2fd3f...",    # lmmsim's own checkout; None when installed from a wheel
     "git_dirty": false,             # uncommitted changes to tracked files; None when unknown
     "compiled_modules": "42 of 42",  # hot modules run compiled (lmmsim.native); same results either way
     "inputs": {"catalog": {"gpus/h100-sxm-80gb": "<sha256[:16]>", "models/qwen2.5-vl-7b": ...},
                "fits": {"ops/h100-sxm-80gb/fit": ...},        # the fitted cost model's files
                "host_profiles": {"cpu": ...}}}                # the host profile's measurements

A catalog entry is hashed as its validated content (canonical JSON), so a comment or a
moved file changes nothing while any figure does; a fit or host profile folder as the
bytes of the files the cost model reads (``*.json``, ``*.npz``, ``*.csv``), under the name
the scenario or catalog gives it (never a machine-specific path). :func:`cache_key` --
version and input hashes, not the git revision -- is what a sweep's run id hashes beside
the resolved scenario (:mod:`lmmsim.sweep.runner`), and :func:`changes` says in words
why two keys differ.
"""

from __future__ import annotations

import functools
import hashlib
import json
import subprocess
import sys
from pathlib import Path

from lmmsim import native
from lmmsim.errors import UserError

HASH_CHARS = 16
READ_SUFFIXES = (".json", ".npz", ".csv")
_WHAT = {"catalog": "catalog entry", "fits": "fit", "host_profiles": "host profile", "traces": "trace"}


def short_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:HASH_CHARS]


@functools.lru_cache(maxsize=1)
def version() -> str:
    """The installed distribution's version, else the package's ``__version__``."""
    from importlib import metadata

    try:
        return metadata.version("lmmsim")
    except metadata.PackageNotFoundError:
        return sys.modules["lmmsim"].__version__


def _source_root() -> Path:
    return Path(__file__).resolve().parent.parent


def _git_dir(root: Path) -> Path | None:
    dot = root / ".git"
    if dot.is_dir():
        return dot
    if dot.is_file():  # a worktree or submodule: "gitdir: <path>"
        text = dot.read_text().strip()
        if text.startswith("gitdir:"):
            path = Path(text.removeprefix("gitdir:").strip())
            return path if path.is_absolute() else root / path
    return None


def _read_ref(git_dir: Path, ref: str) -> str | None:
    common = git_dir
    if (git_dir / "commondir").is_file():
        common = git_dir / (git_dir / "commondir").read_text().strip()
    for folder in (git_dir, common):
        if (folder / ref).is_file():
            return (folder / ref).read_text().strip()
    packed = common / "packed-refs"
    if packed.is_file():
        for line in packed.read_text().splitlines():
            sha, _, name = line.partition(" ")
            if name == ref:
                return sha
    return None


@functools.lru_cache(maxsize=1)
def git_revision() -> str | None:
    """The commit lmmsim's own checkout is at (read from ``.git``, no subprocess), or None
    when lmmsim is not run from a checkout (a wheel install)."""
    try:
        git_dir = _git_dir(_source_root())
        if git_dir is None:
            return None
        head = (git_dir / "HEAD").read_text().strip()
        return _read_ref(git_dir, head.removeprefix("ref:").strip()) if head.startswith("ref:") else head
    except OSError:
        return None


@functools.lru_cache(maxsize=1)
def git_dirty() -> bool | None:
    """Does the checkout have uncommitted changes to tracked files? None when unknown."""
    if git_revision() is None:
        return None
    try:
        done = subprocess.run(["git", "-C", str(_source_root()), "status", "--porcelain", "--untracked-files=no"],
                              capture_output=True, text=True, timeout=2)
    except (OSError, subprocess.SubprocessError):
        return None
    return bool(done.stdout.strip()) if done.returncode == 0 else None


_folder_hashes: dict[tuple, str] = {}


def folder_hash(folder: Path) -> str | None:
    """The hash of the files in ``folder`` the cost models read (names and bytes), kept per
    process while no file's size or time changes; None when there is no such folder."""
    if not folder.is_dir():
        return None
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in READ_SUFFIXES)
    stamp = (str(folder.resolve()), tuple((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files))
    if stamp not in _folder_hashes:
        digest = hashlib.sha256()
        for path in files:
            digest.update(f"{path.name}\0{hashlib.sha256(path.read_bytes()).hexdigest()}\n".encode())
        _folder_hashes[stamp] = digest.hexdigest()[:HASH_CHARS]
    return _folder_hashes[stamp]


_file_hashes: dict[tuple, str] = {}


def file_hash(path: Path) -> str | None:
    """The hash of one file's bytes (kept per process while its size and time stay); None
    when there is no such file."""
    if not path.is_file():
        return None
    st = path.stat()
    stamp = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if stamp not in _file_hashes:
        digest = hashlib.sha256()
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        _file_hashes[stamp] = digest.hexdigest()[:HASH_CHARS]
    return _file_hashes[stamp]


def _spec_hash(spec) -> str:
    return short_hash(json.dumps(spec.model_dump(mode="json"), sort_keys=True).encode())


def inputs(scn, base_dir: Path) -> dict:
    """Hashes of the catalog entries, fit and host profile ``scn`` reads; an input that does
    not resolve is left out (the build reports it)."""
    from lmmsim import catalog
    from lmmsim.assembly.host_stage import host_profile_folder
    from lmmsim.build import fit_folder

    out: dict = {"catalog": {}, "fits": {}, "host_profiles": {}, "traces": {}}
    gpu = None
    for kind, get, name in (("gpus", catalog.get_gpu, scn.hardware.gpu), ("models", catalog.get_model, scn.model)):
        try:
            spec = get(name)
        except UserError:
            continue
        out["catalog"][f"{kind}/{name}"] = _spec_hash(spec)
        gpu = spec if kind == "gpus" else gpu
    if gpu is not None:
        choice = scn.hardware.cost_model
        found = fit_folder(choice, gpu, base_dir)
        if found is not None and (digest := folder_hash(found[0])) is not None:
            out["fits"][gpu.fitted_profile if choice == "auto" else choice] = digest
    try:
        digest = folder_hash(host_profile_folder(scn.host.profile, base_dir))
    except UserError:
        digest = None
    if digest is not None:
        out["host_profiles"][scn.host.profile] = digest
    arrival = scn.workload.arrival
    if getattr(arrival, "kind", None) == "trace":  # a replayed file: its bytes decide the requests
        path = Path(arrival.path)
        if (digest := file_hash(path if path.is_absolute() else base_dir / path)) is not None:
            out["traces"][arrival.path] = digest
    return out


def cache_key(scn, base_dir: Path) -> dict:
    """What besides the resolved scenario decides a run's results: version and input hashes."""
    return {"lmmsim_version": version(), "inputs": inputs(scn, base_dir)}


def describe(scn, base_dir: Path) -> dict:
    """The ``provenance`` block of summary.json (see the module docstring)."""
    return {"lmmsim_version": version(), "git_revision": git_revision(), "git_dirty": git_dirty(),
            "compiled_modules": compiled_modules(), "inputs": inputs(scn, base_dir)}


def compiled_modules() -> str:
    """How many hot modules ran compiled (:mod:`lmmsim.native`; the results are the same either way)."""
    st = native.status()
    return "off (LMMSIM_NATIVE=0)" if st["off"] else f"{st['compiled']} of {st['of']}"


def changes(old: dict | None, new: dict) -> list[str]:
    """Why cache key ``old`` (None: a run recorded without one) differs from ``new``, in words."""
    if not old:
        return ["it was made before runs recorded their inputs"]
    out = []
    if old.get("lmmsim_version") != new.get("lmmsim_version"):
        out.append(f"lmmsim version {old.get('lmmsim_version')} -> {new.get('lmmsim_version')}")
    before, after = old.get("inputs") or {}, new.get("inputs") or {}
    for group, what in _WHAT.items():
        a, b = before.get(group) or {}, after.get(group) or {}
        for name in sorted(set(a) | set(b)):
            if a.get(name) != b.get(name):
                state = "added" if name not in a else "removed" if name not in b else "changed"
                out.append(f"{what} {name} {state}")
    return out

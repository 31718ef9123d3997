"""Compiled copies of the simulator's hot modules, used only while they match their source.

The modules in :data:`MODULES` are what a run's steps and events go through: the engines and
their fast-forwards, the schedulers, the step cost models, the event loop, the front ends. The
install compiles each, unchanged, with Cython (``setup.py``; skipped without Cython or a C
compiler) into ``lmmsim/_native/``: C that makes the same calls on the same Python objects. A
``.pxd`` beside a module may give some of its locals C types (the steady pipeline loop's times
as doubles: the same IEEE operations in the same order, built with ``-ffp-contract=off``, so no
fused multiply-add even where the target has one). Every float is the one the source computes;
the ``.py`` files stay the definition and the reference (tests/test_native.py runs both).

A compiled copy is imported in place of its module only when the SHA-256 of the ``.py`` (and
``.pxd``) it was built from, kept in ``_native/manifest.json``, equals the source's now: an
edited module is never shadowed by a stale build, it runs as Python until the next install
(``pip install -e .`` rebuilds). ``LMMSIM_NATIVE=0`` turns them all off (for profilers, which
see only Python frames, and to check that both agree). :func:`status` says how many were taken;
a run's provenance records it.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys
from pathlib import Path

#: The modules compiled, by import name: those a run's steps and events go through. Not modules
#: that define pydantic models (the policies' configurations): pydantic inspects their classes'
#: attributes, which compiled functions do not pass.
MODULES = (
    "lmmsim.engine.pipeline", "lmmsim.engine.pipeline_ff", "lmmsim.engine.pipeline_steady",
    "lmmsim.engine.pipeline_batch", "lmmsim.engine.pipeline_shared", "lmmsim.engine.scheduler",
    "lmmsim.engine.schedulable_tokens", "lmmsim.engine.priority_scheduler", "lmmsim.engine.decode_cohort",
    "lmmsim.engine.kv_cache", "lmmsim.engine.prefix_cache", "lmmsim.engine.token_throttle",
    "lmmsim.engine.chunk_media", "lmmsim.engine.blocked_order",
    "lmmsim.engine.clock", "lmmsim.engine.simulation", "lmmsim.engine.frontends", "lmmsim.engine.replica",
    "lmmsim.engine.closed_loop", "lmmsim.engine.encoder", "lmmsim.engine.links", "lmmsim.engine.disaggregation",
    "lmmsim.engine.embedding_tracker", "lmmsim.engine.host", "lmmsim.engine.gpu_share",
    "lmmsim.costmodel.composed", "lmmsim.costmodel.decode_step", "lmmsim.costmodel.prefill_shape",
    "lmmsim.costmodel.fitcache", "lmmsim.costmodel.fitted", "lmmsim.costmodel.roofline",
    "lmmsim.costmodel.npmodels", "lmmsim.costmodel.encoder_call",
    "lmmsim.costmodel.features", "lmmsim.costmodel.transfer",
    "lmmsim.assembly.disaggregated", "lmmsim.assembly.host_stage", "lmmsim.assembly.parts",
    "lmmsim.workload.request", "lmmsim.workload.generator", "lmmsim.metrics.itl", "lmmsim.metrics.records",
)

PACKAGE = Path(__file__).resolve().parent
NATIVE_DIR = PACKAGE / "_native"
MANIFEST = "manifest.json"
ENV = "LMMSIM_NATIVE"


def source_path(module: str) -> Path:
    """The ``.py`` file of ``module`` (a name in :data:`MODULES`) in this package."""
    return PACKAGE.joinpath(*module.split(".")[1:]).with_suffix(".py")


def source_digest(path: Path) -> str:
    """SHA-256 of a module's source and, where it has one, its ``.pxd`` (C types for the copy)."""
    pxd = path.with_suffix(".pxd")
    return hashlib.sha256(path.read_bytes() + (pxd.read_bytes() if pxd.is_file() else b"")).hexdigest()


def binary_name(module: str) -> str:
    """The compiled copy's file name in :data:`NATIVE_DIR` (the package path is dropped)."""
    return module.split(".", 1)[1] + importlib.machinery.EXTENSION_SUFFIXES[0]


class _Finder:
    """A meta path finder that answers for the fresh compiled modules only (``found``: name ->
    the compiled file); any other import goes on to Python's own finders."""

    def __init__(self, found: dict[str, Path]):
        self.found = found

    def find_spec(self, fullname, path=None, target=None):
        binary = self.found.get(fullname)
        if binary is None:
            return None
        loader = importlib.machinery.ExtensionFileLoader(fullname, str(binary))
        spec = importlib.util.spec_from_file_location(fullname, binary, loader=loader)
        spec.has_location = True
        return spec


_state: dict = {"taken": (), "stale": (), "missing": MODULES, "off": False}


def install(native_dir: Path = NATIVE_DIR) -> None:
    """Put the fresh compiled modules in front of their sources (once, before they are imported)."""
    if os.environ.get(ENV, "1") == "0":
        _state.update(taken=(), stale=(), missing=MODULES, off=True)
        return
    found, stale, missing = scan(native_dir)
    _state.update(taken=tuple(found), stale=tuple(stale), missing=tuple(missing), off=False)
    if found and not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder(found))


def scan(native_dir: Path) -> tuple[dict[str, Path], list[str], list[str]]:
    """The compiled copies in ``native_dir``: (fresh ones, name -> file; stale names; names with
    no copy). Fresh: the manifest's digest of the source it was built from is the source's now."""
    try:
        manifest = json.loads((native_dir / MANIFEST).read_text())
    except (OSError, ValueError):
        manifest = {}
    found, stale, missing = {}, [], []
    for module in MODULES:
        binary = native_dir / binary_name(module)
        if module not in manifest or not binary.is_file():
            missing.append(module)
        elif manifest[module] != source_digest(source_path(module)):
            stale.append(module)
        else:
            found[module] = binary
    return found, stale, missing


def status() -> dict:
    """Which hot modules run compiled: ``{"compiled": n, "of": len(MODULES), "stale": [...]}``
    (``compiled``: fresh copies in front of their sources; ``"off"``: true when ``LMMSIM_NATIVE=0``);
    for a run's provenance and the benches."""
    return {"compiled": len(_state["taken"]), "of": len(MODULES), "stale": list(_state["stale"]),
            "off": _state["off"]}


def is_compiled(module) -> bool:
    """Was ``module`` (an imported module object) loaded from a compiled copy?"""
    return str(getattr(module, "__file__", "")).endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))

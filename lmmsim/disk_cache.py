"""What an opt-in disk cache's entry name must cover, shared by every such cache.

An entry written by one process is read by another, maybe after lmmsim or a
library changed: :func:`code_hash` (the bytes of every ``.py`` file of the
package) and :func:`library_versions` (Python and the numeric libraries) go
into every entry's name, so a changed simulator never reads an old entry.
:func:`write_atomically` puts an entry in place whole (sweep workers share
a cache folder).
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
LIBRARIES = ("numpy", "pandas", "scikit-learn", "scipy", "simpy", "pyarrow")  # they compute cached values

_code_hash: str | None = None


def code_hash() -> str:
    """SHA-256 of the package's Python sources (once per process: they do not change under a run)."""
    global _code_hash
    if _code_hash is None:
        h = hashlib.sha256()
        for path in sorted(PACKAGE.rglob("*.py")):
            h.update(str(path.relative_to(PACKAGE)).encode() + b"\0" + path.read_bytes())
        _code_hash = h.hexdigest()
    return _code_hash


def library_versions() -> str:
    """Python's version and those of :data:`LIBRARIES` ("-" for one not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    def one(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "-"

    return " ".join([sys.version.split()[0], *(f"{n}={one(n)}" for n in LIBRARIES)])


def write_atomically(path: Path, data: bytes) -> None:
    """``path`` replaced by ``data`` in one rename (a temporary file per writer process)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)

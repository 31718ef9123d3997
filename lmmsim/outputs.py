"""Folders lmmsim writes into, and the one rule behind ``--force``.

Every command that writes a folder (run, sweep, reproduce, search, profile,
fit, import-vidur) opens it as an :class:`OutputDir`:

* without ``force`` the folder must be absent or empty (a sweep, which
  resumes, is the exception: ``resume=True``);
* lmmsim replaces only what it wrote there itself. The folder's manifest,
  ``.lmmsim-files.json``, lists those paths (relative; a trailing ``/`` marks
  a whole sub-folder as lmmsim's). A path about to be written that exists and
  is not listed is a user's file: the command stops with one line naming it,
  before it replaces anything. Nothing else in the folder is touched, ever;
* each file goes to a temporary sibling first and is renamed into place
  (:func:`atomic_path`), so a killed command leaves the old file or the new
  one, never half of one.

A path is recorded in the manifest before it is written, so a command killed
half-way leaves a folder the next ``--force`` still recognises as its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path, PurePosixPath
from typing import Iterator

from lmmsim.errors import UserError

MANIFEST = ".lmmsim-files.json"


@contextlib.contextmanager
def atomic_path(target: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``target``; on success it is renamed over
    ``target``, on failure removed."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    # the target's suffix kept last: writers that pick a format by it (matplotlib) still can
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.tmp-", suffix=target.suffix, dir=target.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(target: Path, text: str) -> None:
    with atomic_path(target) as tmp:
        tmp.write_text(text)


def _normalise(rel: str) -> str:
    """A manifest entry: a relative POSIX path inside the folder (``x/`` for a folder)."""
    folder = rel.endswith("/")
    parts = PurePosixPath(rel.replace(os.sep, "/")).parts
    if not parts or rel.startswith("/") or any(p in ("..", "") for p in parts) or parts[0] == MANIFEST:
        raise ValueError(f"not a path inside an output folder: {rel!r}")
    return "/".join(parts) + ("/" if folder else "")


class OutputDir:
    """An output folder under the ``--force`` rule (module docstring).

    ``key`` names the option in errors (``-o``, ``--out``). Construction checks
    the folder; :meth:`check` looks for user files in the way without writing;
    :meth:`file` / :meth:`folder` claim a path (checked, recorded) and return it.
    """

    def __init__(self, path: str | Path, *, force: bool = False, key: str = "-o", resume: bool = False):
        self.path = Path(path)
        self.key = key
        self.force = force
        if self.path.exists() and not self.path.is_dir():
            raise UserError(key, f"{self.path} exists and is not a folder")
        if self.path.is_dir() and not (force or resume) and any(self.path.iterdir()):
            raise UserError(key, f"{self.path} already holds files; pass --force to replace lmmsim's own "
                                 "files there (nothing else in it is touched)")
        self._earlier = self._read_manifest()
        self._claimed: set[str] = set()

    # ---------------------------------------------------------------- manifest
    def _read_manifest(self) -> set[str]:
        try:
            entries = json.loads((self.path / MANIFEST).read_text())["files"]
            return {_normalise(e) for e in entries if isinstance(e, str)}
        except (OSError, ValueError, KeyError, TypeError):  # none, or unreadable: nothing is ours
            return set()

    def _write_manifest(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        entries = sorted(self._earlier | self._claimed)
        write_text_atomic(self.path / MANIFEST, json.dumps({"written_by": "lmmsim", "files": entries}, indent=1)
                          + "\n")

    def owns(self, rel: str) -> bool:
        """Did lmmsim write ``rel`` here (itself, or inside a folder it owns)?"""
        entry = _normalise(rel)
        known = self._earlier | self._claimed
        if entry in known or entry.rstrip("/") in known or entry + "/" in known:
            return True
        parts = entry.rstrip("/").split("/")
        return any("/".join(parts[:i]) + "/" in known for i in range(1, len(parts)))

    # ------------------------------------------------------------------ claims
    def check(self, *rels: str) -> None:
        """Raise if any of ``rels`` (or a folder on its way) is a user's file in the way."""
        for rel in rels:
            entry = _normalise(rel)
            parts = entry.rstrip("/").split("/")
            for i in range(1, len(parts) + 1):
                sub = "/".join(parts[:i]) + ("/" if i < len(parts) or entry.endswith("/") else "")
                target = self.path / sub.rstrip("/")
                if not (target.exists() or target.is_symlink()):
                    break
                if sub.endswith("/") and target.is_dir() and not target.is_symlink():
                    if i < len(parts):
                        continue  # an existing parent folder is fine to write into
                    if not any(target.iterdir()):
                        break  # an empty folder holds nothing to lose
                if not self.owns(sub):
                    raise UserError(self.key, f"{target} was not written by lmmsim; it replaces only its own "
                                              "files: move that one or choose another folder")

    def file(self, rel: str) -> Path:
        """Claim the file ``rel`` (checked, recorded) and return its path; write it with :func:`atomic_path`."""
        self.check(rel)
        self._claimed.add(_normalise(rel))
        self._write_manifest()
        target = self.path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        return target

    def folder(self, rel: str) -> Path:
        """Claim the sub-folder ``rel`` and everything in it as lmmsim's; return its path."""
        entry = rel.rstrip("/") + "/"
        self.check(entry)
        self._claimed.add(_normalise(entry))
        self._write_manifest()
        target = self.path / rel
        target.mkdir(parents=True, exist_ok=True)
        return target

    def remove_unclaimed(self) -> list[Path]:
        """Remove the files an earlier lmmsim output left here that this one did not
        write again (a stale ``trace.json`` beside new results would mislead); folders stay.
        Returns what was removed."""
        removed = []
        for entry in sorted(self._earlier - self._claimed):
            target = self.path / entry
            if entry.endswith("/") or not target.is_file() or target.is_symlink():
                continue
            target.unlink()
            removed.append(target)
        self._earlier = {e for e in self._earlier if e in self._claimed or e.endswith("/")}
        self._write_manifest()
        return removed

"""Reading user YAML strictly: a duplicated key is an error, not a silent overwrite.

PyYAML's ``safe_load`` keeps the last of two equal keys in a mapping, so a
scenario that sets ``rate`` twice runs with whichever came last and never says
so. Every file lmmsim reads from a user (scenarios, sweeps, catalog entries)
goes through :func:`load_yaml`, which refuses that with the line of the second
occurrence.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from lmmsim.errors import UserError


class _DuplicateKey(Exception):
    def __init__(self, key, line: int):
        super().__init__(key, line)
        self.key = key
        self.line = line


class _StrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """``SafeLoader`` whose mappings refuse a key they already hold. On libyaml's parser
    where PyYAML has it (the same documents, the same marks): a run reads a dozen catalog
    files, and the pure-Python parser took ~85 ms of a run's start-up."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor` merges, it is not a key
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                hashable = key in seen
            except TypeError:  # an unhashable key: let PyYAML report it as usual
                continue
            if hashable:
                raise _DuplicateKey(key, key_node.start_mark.line + 1)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str, where: str | Path):
    """Parse ``text`` (read from ``where``, named in errors); duplicate keys and
    syntax errors become one :class:`UserError` line with the file and line."""
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except _DuplicateKey as dup:
        raise UserError(f"{where}:{dup.line}", f"key {dup.key!r} appears twice in one mapping") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        loc = f"{where}:{mark.line + 1}" if mark else str(where)
        raise UserError(loc, f"not valid YAML ({getattr(exc, 'problem', None) or exc})") from None


def read_yaml(path: str | Path, what: str = "file"):
    """Read and :func:`load_yaml` the file at ``path``; a missing or unreadable file is a
    :class:`UserError` (``what`` names it: 'scenario file', 'sweep file', ...)."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise UserError(str(path), f"{what} not found") from None
    except UnicodeDecodeError:
        raise UserError(str(path), f"{what} is not UTF-8 text") from None
    except OSError as exc:
        raise UserError(str(path), f"cannot read {what}: {exc.strerror or exc}") from None
    return load_yaml(text, path)

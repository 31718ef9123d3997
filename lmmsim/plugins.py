"""Third-party extensions: entry-point groups, each imported once per process.

``lmmsim.policies`` (queue, router, batching, encode dispatch, offload policies;
each module registers with :func:`lmmsim.policies.register`) and
``lmmsim.systems`` (presets; :func:`lmmsim.systems.register_system`).
"""

from __future__ import annotations

from importlib.metadata import entry_points

_loaded: set[str] = set()


def load_group(group: str) -> None:
    """Import every entry point of ``group`` the first time it is asked for (each
    registers what it provides as a side effect)."""
    if group in _loaded:
        return
    _loaded.add(group)
    for ep in entry_points(group=group):
        ep.load()

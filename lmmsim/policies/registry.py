"""Registry of policies by role (``queue``, ``router``, ...) and name.

Each policy is a pair: a pydantic config class whose ``kind`` literal is the
policy's name (so scenarios validate through a discriminated union), and an
implementation constructed from that config.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Callable, Union

from pydantic import Field

from lmmsim.errors import choices
from lmmsim.plugins import load_group


@dataclass(frozen=True)
class _Entry:
    config_cls: type
    factory: Callable[[Any], Any]
    summary: str


_REGISTRY: dict[str, dict[str, _Entry]] = {}
_version = 0  # bumped by every registration: config unions built before it are rebuilt


def registry_version() -> int:
    _load_plugins()
    return _version


def register(role: str, config_cls: type, summary: str = ""):
    """Class decorator: register ``impl`` for ``role`` under ``config_cls``'s kind.

    The implementation is built as ``impl(config)``.
    """
    kind = config_cls.model_fields["kind"].default

    def deco(impl):
        table = _REGISTRY.setdefault(role, {})
        if kind in table:
            raise ValueError(f"{role} policy {kind!r} registered twice")
        global _version
        doc = (impl.__doc__ or config_cls.__doc__ or "").strip()
        table[kind] = _Entry(config_cls, impl, summary or (doc.splitlines()[0] if doc else kind))
        _version += 1
        return impl

    return deco


def _load_plugins() -> None:
    load_group("lmmsim.policies")


def _table(role: str) -> dict[str, _Entry]:
    _load_plugins()
    if role not in _REGISTRY:
        raise ValueError(f"unknown policy role {role!r}; valid: {choices(_REGISTRY)}")
    return _REGISTRY[role]


def config_union(role: str):
    """A discriminated union (on ``kind``) of every config registered for ``role``."""
    classes = tuple(e.config_cls for e in _table(role).values())
    return Annotated[Union[classes], Field(discriminator="kind")]


def create(role: str, config, **context) -> Any:
    """Build the implementation for a validated config; ``context`` carries what
    the build computed for it (e.g. a fitted classifier)."""
    return _table(role)[config.kind].factory(config, **context)


def names(role: str) -> list[str]:
    return sorted(_table(role))


def describe() -> dict[str, dict[str, str]]:
    """role -> name -> one-line summary, for ``lmmsim list policies``."""
    _load_plugins()
    return {role: {k: e.summary for k, e in sorted(t.items())} for role, t in sorted(_REGISTRY.items())}

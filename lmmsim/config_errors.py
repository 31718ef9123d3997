"""Pydantic validation errors as one line that names the dotted key.

Scenarios and catalog files are validated by pydantic models; a user sees the
first problem as ``key.path: message`` with the valid choices where there are
some (unknown keys, unknown ``kind``). :func:`describe` does it for any root
model class, so every YAML lmmsim reads is reported alike.
"""

from __future__ import annotations

import types
import typing
from typing import Annotated, Union

from pydantic import BaseModel, ValidationError

from lmmsim.errors import choices

# Names pydantic gives the members of a plain (not discriminated) union in a location.
_TYPE_TAGS = {"float", "int", "str", "bool", "none", "list", "dict", "constrained", "literal", "json"}


def error_path(loc: tuple, data) -> str:
    """Dotted key of a pydantic error location in ``data``, without union member tags."""
    parts: list[str] = []
    for elem in loc:
        if isinstance(data, dict) and elem in data:
            data = data[elem]
            parts.append(str(elem))
        elif isinstance(data, list) and isinstance(elem, int) and elem < len(data):
            data = data[elem]
            parts.append(str(elem))
        elif isinstance(data, dict) and data.get("kind") == elem:
            continue  # discriminated-union tag
        elif isinstance(elem, str) and ("[" in elem or elem.split("-")[0] in _TYPE_TAGS or elem.startswith("function")):
            continue  # member name of a plain union
        else:
            parts.append(str(elem))
            data = None
    return ".".join(parts)


def fields_at(cls, path: list[str], data) -> list[str] | None:
    """Field names of the model class at ``path`` below ``cls`` (for 'valid keys' hints)."""
    ann = cls
    for key in path:
        if isinstance(data, list) and key.isdigit():  # list element
            args = typing.get_args(ann)
            ann = args[0] if args else None
            data = data[int(key)] if int(key) < len(data) else None
            continue
        if typing.get_origin(ann) is dict:  # a mapping of models, e.g. a GPU's links: {nvlink: ...}
            ann = typing.get_args(ann)[1]
            data = data.get(key) if isinstance(data, dict) else None
            continue
        model = resolve_model(ann, data)
        if model is None or key not in model.model_fields:
            return None
        data = data.get(key) if isinstance(data, dict) else None
        ann = model.model_fields[key].annotation
        if typing.get_origin(ann) in (Union, types.UnionType):  # drop None from Optional[...]
            members = tuple(a for a in typing.get_args(ann) if a is not type(None))
            ann = members[0] if len(members) == 1 else Union[members]
    model = resolve_model(ann, data)
    return list(model.model_fields) if model is not None else None


def resolve_model(ann, data):
    """The BaseModel class an annotation stands for, given the data it validates."""
    origin = typing.get_origin(ann)
    if origin is Annotated:
        return resolve_model(typing.get_args(ann)[0], data)
    if origin in (Union, types.UnionType):
        members = [a for a in typing.get_args(ann) if isinstance(a, type) and issubclass(a, BaseModel)]
        for m in members:
            kind = m.model_fields.get("kind")
            if kind is not None and isinstance(data, dict) and data.get("kind") == kind.default:
                return m
        return members[0] if len(members) == 1 else None
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    return None


def most_specific(exc: ValidationError, data) -> dict:
    """Among a union's alternatives the deepest location is the most specific complaint."""
    return max(exc.errors(), key=lambda e: len(error_path(e["loc"], data).split(".")))


def describe(err: dict, data, root_cls) -> tuple[str, str]:
    """``(dotted key, message)`` for one pydantic error on ``data`` validated as ``root_cls``."""
    path = error_path(err["loc"], data)
    etype = err["type"]
    if etype == "extra_forbidden":
        parent, _, key = path.rpartition(".")
        valid = fields_at(root_cls, parent.split(".") if parent else [], data)
        hint = f"; valid keys: {choices(valid)}" if valid else ""
        return path, f"unknown key {key!r}{hint}"
    if etype == "missing":
        return path, "required key is missing"
    msg = err["msg"].removeprefix("Value error, ")
    if etype == "union_tag_invalid":
        ctx = err.get("ctx", {})
        return path + ".kind", f"unknown kind {ctx.get('tag')!r}; valid: {ctx.get('expected_tags')}"
    if etype == "union_tag_not_found":
        return path, f"needs a 'kind' key ({msg})"
    got = err.get("input")
    shown = "" if isinstance(got, (dict, list)) or etype.startswith("value_error") else f" (got {got!r})"
    return path, f"{msg[0].lower()}{msg[1:]}{shown}"

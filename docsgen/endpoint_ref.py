"""The endpoint file's keys, their types, defaults and bounds, from the pydantic models that parse it
(src/llmhost/endpoint/spec.py); each key's meaning is the comment the model's source gives it, or the
settings spec's help for `engine:` keys."""

from __future__ import annotations

import inspect
import io
import re
import tokenize
import types
import typing
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from docsgen.md import table
from llmhost.endpoint.spec import EndpointSpec, EngineSpec
from llmhost.settings.serve import SERVE_SPEC


def _comments(cls: type) -> dict[str, str]:
    """Each field's comment in the class source: the comment lines right above it and a trailing one."""
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    out: dict[str, str] = {}
    pending: list[str] = []
    lines = source.splitlines()
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith("#"):
            pending.append(stripped.lstrip("# ").strip())
            continue
        m = re.match(r"^\s{4}(\w+)\s*:", line)
        if m and not stripped.startswith(("def ", "@")):
            trailing = _trailing_comment(line)
            out[m.group(1)] = " ".join([*pending, *([trailing] if trailing else [])])
        del i
        pending = []
    return out


def _trailing_comment(line: str) -> str:
    try:
        for tok in tokenize.generate_tokens(io.StringIO(line.strip() + "\n").readline):
            if tok.type == tokenize.COMMENT:
                return tok.string.lstrip("# ").strip()
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return ""
    return ""


def _type_name(t: Any) -> str:
    origin = typing.get_origin(t)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in typing.get_args(t))
    if origin is typing.Literal:
        return " | ".join(repr(a).replace("'", "") for a in typing.get_args(t))
    if origin is list:
        return f"list of {_type_name(typing.get_args(t)[0])}"
    if t is type(None):
        return "null"
    if isinstance(t, type) and issubclass(t, BaseModel):
        return "mapping"
    return getattr(t, "__name__", str(t))


def _bounds(f: FieldInfo) -> str:
    out = []
    for m in f.metadata:
        for attr, sign in (
            ("ge", "≥"),
            ("gt", ">"),
            ("le", "≤"),
            ("lt", "<"),
            ("min_length", "items ≥"),
            ("pattern", "matches"),
        ):
            v = getattr(m, attr, None)
            if v is not None:
                out.append(f"{sign} `{v}`" if attr == "pattern" else f"{sign} {v}")
    return ", ".join(out)


def _default(f: FieldInfo) -> str:
    if f.is_required():
        return "required"
    d = f.default
    if d is PydanticUndefined or isinstance(d, BaseModel):
        return "" if d is PydanticUndefined else "(its defaults)"
    return "null" if d is None else str(d).lower() if isinstance(d, bool) else str(d)


def _model_of(t: Any) -> type[BaseModel] | None:
    for a in (t, *typing.get_args(t)):
        if isinstance(a, type) and issubclass(a, BaseModel):
            return a
        for b in typing.get_args(a):
            if isinstance(b, type) and issubclass(b, BaseModel):
                return b
    return None


Row = tuple[str, str, str, str, str]


def fields(model: type[BaseModel] = EndpointSpec, prefix: str = "") -> Iterator[Row]:
    """(key path, type, default, bounds, meaning) of every key, depth first."""
    notes = _comments(model)
    spec = {s.name: s for s in SERVE_SPEC}
    for name, f in model.model_fields.items():
        path = f"{prefix}{name}"
        if model is EngineSpec and name in spec:
            # unset keys are left to `llmhost serve`'s defaults and variables
            default = f"unset: serve's ({spec[name].shown_default or 'none'})"
            yield path, _type_name(f.annotation), default, _bounds(f), spec[name].help
        else:
            yield path, _type_name(f.annotation), _default(f), _bounds(f), notes.get(name, "")
        sub = _model_of(f.annotation)
        if sub is not None:
            list_of = typing.get_origin(f.annotation) is list
            yield from fields(sub, f"{path}[]." if list_of else f"{path}.")


def paths() -> set[str]:
    return {p for p, *_ in fields()}


def render() -> str:
    rows = [[f"`{p}`", t, d, b, m] for p, t, d, b, m in fields()]
    return table(["key", "type", "default", "bounds", "meaning"], rows)

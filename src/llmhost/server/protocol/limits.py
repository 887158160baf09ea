"""Bounds on request bodies, checked before anything reaches the engine: each is named in the 4xx."""

from __future__ import annotations

import json
import math
from typing import Any

from llmhost.web.errors import APIError, invalid_json

# JSON nesting; a chat request with tool schemas stays far below this
MAX_JSON_DEPTH = 64
MAX_STOP_SEQUENCES = 16
MAX_STOP_CHARS = 512
MAX_LOGIT_BIAS = 1024


class _NotFinite(ValueError):
    pass


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotFinite(text)
    return value


def _constant(name: str) -> float:
    raise _NotFinite(name)


def parse_json(raw: bytes) -> Any:
    """The body as JSON: standard JSON only (no NaN/Infinity, no numbers that overflow a float),
    nested at most MAX_JSON_DEPTH levels; anything else is a 400 naming the body and the limit."""
    try:
        data = json.loads(raw, parse_float=_finite_float, parse_constant=_constant)
    except RecursionError as exc:
        raise _too_deep() from exc
    except _NotFinite as exc:
        raise APIError(
            400, f"request body has the number {exc}, which is not a finite JSON number", field="body"
        ) from exc
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError, or an integer too long to read
        raise invalid_json(str(exc)) from exc
    if depth(data) > MAX_JSON_DEPTH:
        raise _too_deep()
    return data


def _too_deep() -> APIError:
    return APIError(
        400,
        f"request body nests deeper than {MAX_JSON_DEPTH} levels",
        field="body",
        extra={"limit": MAX_JSON_DEPTH},
    )


def depth(data: Any) -> int:
    """Nesting depth of parsed JSON (a scalar is 0), without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            node = list(node.values())
        if isinstance(node, list):
            deepest = max(deepest, level + 1)
            stack.extend((child, level + 1) for child in node if isinstance(child, (dict, list)))
    return deepest

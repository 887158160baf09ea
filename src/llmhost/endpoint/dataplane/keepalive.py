"""A request's `keep_alive`, as Ollama takes it: seconds (a number) or a duration ("30s", "5m", "1h30m");
negative: never unload, 0: unload right after the request. Honoured for on-demand models where the
endpoint's `on_demand.client_keep_alive` lets clients set it; refused (400 naming the field) elsewhere,
never silently ignored. The router takes the field out of the body: the copy never sees it.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from llmhost.endpoint.spec import ClientKeepAlive
from llmhost.errors import BadRequestError

FIELD = "keep_alive"
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


class KeepAliveError(BadRequestError, ValueError):
    """The request's keep_alive is malformed or not allowed; the message names the field and why."""

    status = 400


def parse(value: Any) -> float:
    """Seconds; -1 for never."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise KeyError
    if isinstance(value, str):
        text = value.strip()
        sign = -1.0 if text.startswith("-") else 1.0
        body = text.lstrip("+-")
        if re.fullmatch(r"\d+(?:\.\d+)?", body):
            seconds = float(body)
        elif body and re.fullmatch(f"(?:{_PART.pattern})+", body):
            seconds = sum(float(n) * _UNIT_S[u] for n, u in _PART.findall(body))
        else:
            raise KeyError
        value = sign * seconds
    if not math.isfinite(value):
        raise KeyError
    return -1.0 if value < 0 else float(value)


def requested(body: bytes) -> tuple[bytes, float | None]:
    """The body without its keep_alive, and the seconds it asked for (None: it set none)."""
    if b'"keep_alive"' not in body:
        return body, None
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return body, None
    if not isinstance(data, dict) or FIELD not in data:
        return body, None
    raw = data.pop(FIELD)
    stripped = json.dumps(data).encode()
    if raw is None:
        return stripped, None
    try:
        return stripped, parse(raw)
    except KeyError:
        raise KeyError(raw) from None


def allowed(policy: ClientKeepAlive, own: float, asked: float, model: str) -> float:
    """The keep_alive in effect for this request, or KeepAliveError naming the field and the limit."""
    if policy == "none":
        raise KeepAliveError(
            "keep_alive: this endpoint does not let clients set keep_alive "
            "(on_demand.client_keep_alive: none)"
        )
    if policy == "shorten" and (own >= 0 and (asked < 0 or asked > own)):
        shown = "never unload" if asked < 0 else f"{asked:g} s"
        raise KeepAliveError(
            f"keep_alive: {shown} is longer than model {model!r}'s keep_alive of {own:g} s; "
            "this endpoint lets clients shorten it only "
            "(on_demand.client_keep_alive: shorten)"
        )
    return asked


def check(body: bytes, policy: ClientKeepAlive, own: float, model: str) -> tuple[bytes, float | None]:
    """The body for the copy and the keep_alive the request sets, or KeepAliveError."""
    try:
        stripped, asked = requested(body)
    except KeyError as exc:
        raise KeepAliveError(
            f"keep_alive: expected seconds (a number, negative: never unload) or a "
            f'duration such as "30s", "5m" or "1h", got {exc.args[0]!r}'
        ) from None
    if asked is None:
        return stripped, None
    return stripped, allowed(policy, own, asked, model)

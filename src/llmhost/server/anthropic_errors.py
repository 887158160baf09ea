"""Errors on Anthropic's routes (`/v1/messages...`) in Anthropic's shape, whoever refused the request:
the route, the API-key check (401), the body limit (413), the request-id layer (500, draining), or
the endpoint router (unknown model, no ready copy).

Every llmhost error body is written once, in OpenAI's shape; this outermost layer rewrites the JSON
error answers of Anthropic routes as `{"type": "error", "error": {"type": ..., "message": ...}}` with
Anthropic's statuses: a validation error is a 400, and a refusal for load (429, 503) is a 529
`overloaded_error`, its Retry-After kept. Streams are left alone (their errors are `error` events).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

PREFIX = "/v1/messages"
# llmhost's status -> Anthropic's status and error type
STATUS = {422: 400, 429: 529, 503: 529}
TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    504: "timeout_error",
    529: "overloaded_error",
}
_DROPPED = ("message", "type", "param", "code")


def is_anthropic(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/")


def anthropic_error(status: int, body: Any) -> tuple[int, dict[str, Any]]:
    """Anthropic's status and body for one of llmhost's JSON error answers."""
    if isinstance(body, dict) and body.get("type") == "error":
        return status, body  # already Anthropic's (a copy's answer relayed by the router)
    err = body.get("error") if isinstance(body, dict) else None
    if not isinstance(err, dict):
        err = {"message": str(err if err is not None else body)}
    new_status = STATUS.get(status, status)
    kind = TYPES.get(new_status, "api_error" if new_status >= 500 else "invalid_request_error")
    out: dict[str, Any] = {"type": kind, "message": str(err.get("message", ""))}
    out.update({k: v for k, v in err.items() if k not in _DROPPED})
    return new_status, {"type": "error", "error": out}


Convert = Callable[[int, Any], tuple[int, dict[str, Any]]]


class AnthropicErrorsMiddleware:
    """Rewrites the JSON error answers of the paths `matches` takes with `convert` (Anthropic's by
    default; Ollama's routes use it too: server/ollama_errors.py)."""

    def __init__(
        self, app: ASGIApp, matches: Callable[[str], bool] = is_anthropic, convert: Convert = anthropic_error
    ) -> None:
        self.app = app
        self.matches = matches
        self.convert = convert

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.matches(scope["path"]):
            await self.app(scope, receive, send)
            return
        start: Message | None = None
        chunks: list[bytes] = []

        async def rewriting_send(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                headers = dict(message.get("headers", []))
                is_json = headers.get(b"content-type", b"").startswith(b"application/json")
                if message["status"] >= 400 and is_json:
                    start = message  # held until the whole body is here
                    return
            elif start is not None and message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
                if message.get("more_body", False):
                    return
                await _send_rewritten(send, start, b"".join(chunks), self.convert)
                return
            await send(message)

        await self.app(scope, receive, rewriting_send)


async def _send_rewritten(send: Send, start: Message, raw: bytes, convert: Convert) -> None:
    try:
        body = json.loads(raw)
    except ValueError:
        body = {"error": {"message": raw.decode("utf-8", "replace")}}
    status, new = convert(start["status"], body)
    data = json.dumps(new).encode()
    headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
    headers.append((b"content-length", str(len(data)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})

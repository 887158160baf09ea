"""What the server sent in a refusal, read from the response an SDK's exception carries: tests assert on
the error body (its `message`, `param`, `field`, `limit`), never on how an SDK release formats it into
the exception's text (anthropic 2.17 put the message alone where 2.10 put the whole body)."""

from __future__ import annotations

from typing import Any, Protocol

import httpx


class HasResponse(Protocol):
    response: httpx.Response


def sent_error(exc: HasResponse) -> dict[str, Any]:
    """The error object of the body the server sent: OpenAI's and Anthropic's `error` object, or
    Ollama's and TGI's body itself."""
    body = exc.response.json()
    inner = body.get("error") if isinstance(body, dict) else None
    return inner if isinstance(inner, dict) else body

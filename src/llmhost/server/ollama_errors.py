"""Errors on Ollama's routes (`/api/...`, `HEAD /`) in Ollama's shape, whoever refused the request: the
route, the API-key check, the body limit, the request-id layer or the endpoint router.

Every llmhost error body is written once, in OpenAI's shape; the outermost layer rewrites the JSON error
answers of Ollama's routes as `{"error": "..."}`, which its clients raise as ResponseError with the
status. A validation error is a 400 (Ollama has no 422); the other statuses are kept (404 for an unknown
model, 429 and 503 with their Retry-After). Streams are left alone (their errors are `error` lines)."""

from __future__ import annotations

from typing import Any

# the routes of Ollama's API, and only those (the console's API lives under /console/api/)
PREFIX = "/api/"
STATUS = {422: 400}
_KEPT = ("field", "limit", "request_id")


def is_ollama(path: str) -> bool:
    return path.startswith(PREFIX)


def ollama_error(status: int, body: Any) -> tuple[int, dict[str, Any]]:
    """Ollama's status and body for one of llmhost's JSON error answers; `field`, `limit` and the request
    id are kept beside `error` (Ollama's clients read `error` only)."""
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        return status, body  # already Ollama's (a copy's answer relayed by the router)
    err = body.get("error") if isinstance(body, dict) else None
    if not isinstance(err, dict):
        err = {"message": str(err if err is not None else body)}
    out: dict[str, Any] = {"error": str(err.get("message", ""))}
    out.update({k: err[k] for k in _KEPT if err.get(k) is not None})
    return STATUS.get(status, status), out

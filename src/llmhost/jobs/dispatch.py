"""How a batch's lines are sent: through the app's own routes, in process (httpx's ASGI transport), so
each line gets what a client's request gets (validation, limits, adapters, an endpoint's routing)."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass

import httpx
from starlette.types import ASGIApp

from llmhost.shared.jsontypes import JSONObject
from llmhost.web.asgi import REQUEST_ID
from llmhost.web.errors import RETRY_AFTER_S


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    request_id: str
    body: JSONObject
    retry_after_s: float

    @property
    def busy(self) -> bool:
        """Refused for now (a full queue, a copy starting): the line runs again later."""
        return self.status in (429, 503)


@dataclass(frozen=True, slots=True)
class RawAnswer:
    status: int
    body: bytes
    content_type: str
    retry_after_s: float

    @property
    def busy(self) -> bool:
        return self.status in (429, 503)


class Dispatcher:
    """Posts to `app` with a key made for this process only (never sent over a network): a server with
    API keys accepts it (`token`), and nothing else does."""

    def __init__(self, app: ASGIApp) -> None:
        self.token = secrets.token_urlsafe(32)
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        self.client = httpx.AsyncClient(
            transport=transport,
            base_url="http://llmhost.jobs",
            timeout=None,
            headers={"authorization": f"Bearer {self.token}"},
        )

    async def post(self, url: str, body: JSONObject, request_id: str) -> Answer:
        response = await self.client.post(url, json=body, headers={REQUEST_ID.decode(): request_id})
        return _answer(response, request_id)

    async def send(self, url: str, content: bytes, headers: dict[str, str], request_id: str) -> RawAnswer:
        """Posts `content` as it is (its media type in `headers`): the answer's bytes as they came."""
        response = await self.client.post(
            url, content=content, headers={**headers, REQUEST_ID.decode(): request_id}
        )
        return RawAnswer(
            response.status_code,
            response.content,
            response.headers.get("content-type", "application/octet-stream"),
            _retry_after(response),
        )

    async def close(self) -> None:
        await self.client.aclose()


def _retry_after(response: httpx.Response) -> float:
    retry = response.headers.get("retry-after", "")
    return float(retry) if retry.replace(".", "", 1).isdigit() else float(RETRY_AFTER_S)


def _answer(response: httpx.Response, request_id: str) -> Answer:
    try:
        answer = response.json()
    except json.JSONDecodeError:
        answer = {"error": {"message": response.text, "type": "server_error", "code": response.status_code}}
    if not isinstance(answer, dict):
        answer = {"data": answer}
    return Answer(
        response.status_code,
        response.headers.get(REQUEST_ID.decode(), request_id),
        answer,
        _retry_after(response),
    )

"""Per-key quotas over HTTP (web/quota.py) on a real ASGI app with an injected clock, and the key ring
that SIGHUP reloads."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from llmhost.web.auth import ApiKeyMiddleware, load_keys
from llmhost.web.errors import APIError
from llmhost.web.keyring import KeyRing
from llmhost.web.quota import Quotas, UsageCollector, duration, reserve_tokens

KEYS = """\
- {key: sk-alice, name: alice, requests_per_minute: 2, tokens_per_minute: 100}
- {key: sk-bob, name: bob}
"""


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def generate(request: Request) -> Response:
    """A generation of `estimate` tokens that used `used` of them (as ServingContext.submit reserves)."""
    body = await request.json()
    try:
        reservation = reserve_tokens(body["estimate"])
    except APIError as exc:
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)
    reservation.measure(lambda: int(body["used"]))
    return PlainTextResponse("ok")


def app(tmp_path: Path, clock: Clock) -> tuple[ApiKeyMiddleware, Quotas, KeyRing]:
    file = tmp_path / "keys.yaml"
    file.write_text(KEYS)
    quotas = Quotas(clock)
    ring = KeyRing(load_keys(["plain"], file, env={}), internal="jobs")
    inner = Starlette(routes=[Route("/v1/x", generate, methods=["POST"])])
    return ApiKeyMiddleware(inner, ring, quotas=quotas), quotas, ring


def test_durations_as_openai_writes_them() -> None:
    assert [duration(s) for s in (0.0121, 1.0, 12.2, 90.0, 3600.0)] == ["13ms", "1s", "13s", "1m30s", "60m0s"]


async def test_requests_over_the_minute_get_429_and_others_not(tmp_path: Path) -> None:
    clock = Clock()
    asgi, quotas, _ = app(tmp_path, clock)
    alice = {"Authorization": "Bearer sk-alice"}
    small = {"estimate": 10, "used": 10}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi), base_url="http://t") as client:
        first = await client.post("/v1/x", json=small, headers=alice)
        assert first.text == "ok" and first.headers["x-ratelimit-limit-requests"] == "2"
        assert first.headers["x-ratelimit-remaining-requests"] == "1"
        assert first.headers["x-ratelimit-reset-requests"] == "30s"
        assert first.headers["x-ratelimit-limit-tokens"] == "100"
        assert first.headers["x-ratelimit-remaining-tokens"] == "90"
        assert (await client.post("/v1/x", json=small, headers=alice)).is_success
        refused = await client.post("/v1/x", json=small, headers=alice)
        assert refused.status_code == 429 and refused.headers["retry-after"] == "30"
        error = refused.json()["error"]
        assert error["type"] == "rate_limit_error" and error["limit"] == 2
        assert "requests_per_minute (2)" in error["message"]
        assert "sk-alice" not in refused.text and refused.headers["x-ratelimit-remaining-requests"] == "0"
        for key in ("sk-bob", "plain", "jobs"):  # unlimited: no headers either
            other = await client.post("/v1/x", json=small, headers={"x-api-key": key})
            assert other.is_success and "x-ratelimit-limit-requests" not in other.headers
        clock.now += 30
        assert (await client.post("/v1/x", json=small, headers=alice)).is_success
    registry = CollectorRegistry()
    registry.register(UsageCollector(quotas.usage))
    text = generate_latest(registry).decode()
    assert 'llmhost_api_key_requests_total{key_name="alice"} 3.0' in text
    assert 'llmhost_api_key_requests_total{key_name="bob"} 1.0' in text
    assert 'llmhost_api_key_rate_limited_total{key_name="alice",limit="requests"} 1.0' in text
    assert 'llmhost_api_key_tokens_total{key_name="alice"} 30.0' in text
    assert "sk-" not in text and "plain" not in text


async def test_tokens_are_taken_on_the_estimate_and_settled_on_use(tmp_path: Path) -> None:
    clock = Clock()
    asgi, quotas, _ = app(tmp_path, clock)
    alice = {"Authorization": "Bearer sk-alice"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi), base_url="http://t") as client:
        # 80 taken at admission (the header says so), 20 used: 80 left once settled
        first = await client.post("/v1/x", json={"estimate": 80, "used": 20}, headers=alice)
        assert first.headers["x-ratelimit-remaining-tokens"] == "20"
        assert quotas.limiter.level("alice", "tokens", 100).remaining == 80
        over = await client.post("/v1/x", json={"estimate": 90, "used": 90}, headers=alice)
        assert over.status_code == 429 and over.headers["retry-after"] == "6"  # 10 short, at 100/60 a s
        assert "tokens_per_minute (100)" in over.json()["error"]["message"]
        clock.now += 60
        never = await client.post("/v1/x", json={"estimate": 101, "used": 0}, headers=alice)
        assert never.status_code == 429 and never.json()["error"]["field"] == "max_tokens"
        assert "allows at all" in never.json()["error"]["message"]
    assert quotas.usage.limited["alice", "tokens"] == 2 and quotas.usage.tokens["alice"] == 20


async def test_a_reload_changes_the_keys_and_a_bad_file_keeps_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    asgi, _, ring = app(tmp_path, Clock())
    file = tmp_path / "keys.yaml"
    file.write_text("- {key: sk-dave, name: dave, requests_per_minute: 1}\n")
    assert ring.reload()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi), base_url="http://t") as client:
        body = {"estimate": 1, "used": 1}
        assert (await client.post("/v1/x", json=body, headers={"x-api-key": "sk-alice"})).status_code == 401
        assert (await client.post("/v1/x", json=body, headers={"x-api-key": "sk-dave"})).is_success
        assert (await client.post("/v1/x", json=body, headers={"x-api-key": "sk-dave"})).status_code == 429
        assert (await client.post("/v1/x", json=body, headers={"x-api-key": "jobs"})).is_success
    file.write_text("- {key: sk-dave, name: dave, requests_per_minute: -1}\n")
    with caplog.at_level(logging.ERROR, logger="llmhost"):
        assert not ring.reload()
    assert "kept" in caplog.text and "requests_per_minute" in caplog.text
    assert ring.keys.accepts("sk-dave")

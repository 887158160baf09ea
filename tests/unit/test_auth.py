"""API keys: parsing, sources, and the middleware over a real ASGI app (httpx.ASGITransport)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from llmhost.endpoint.cli import client_key
from llmhost.web.auth import ApiKeyMiddleware, ApiKeys, load_keys, presented_key


def test_keys_are_kept_as_digests_and_every_one_is_accepted() -> None:
    keys = ApiKeys.of(["alpha", "beta"])
    assert keys.enabled and all(len(d) == 32 for d in keys.digests)
    assert keys.accepts("alpha") and keys.accepts("beta")
    assert not keys.accepts("alph") and not keys.accepts("alpha ") and not keys.accepts("")
    assert not ApiKeys().enabled


@pytest.mark.parametrize("bad", ["", "   ", "has space", "tab\tkey"])
def test_empty_or_spaced_keys_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        ApiKeys.of([bad])


def test_sources_add_up(tmp_path: Path) -> None:
    file = tmp_path / "keys"
    file.write_text("# operators\nfrom-file\n\n  second  \n")
    keys = load_keys(["flag"], file, env={"LLMHOST_API_KEYS": "env1, env2"})
    assert all(keys.accepts(k) for k in ("flag", "from-file", "second", "env1", "env2"))
    assert not load_keys([], None, env={}).enabled


def test_the_admin_clients_variable_is_a_servers_key_too() -> None:
    """One variable in a shell serves both sides: the server reads $LLMHOST_API_KEY as well as
    $LLMHOST_API_KEYS, and the admin commands send $LLMHOST_API_KEY, else the first of $LLMHOST_API_KEYS."""
    keys = load_keys([], None, env={"LLMHOST_API_KEY": "single", "LLMHOST_API_KEYS": "a,b"})
    assert all(keys.accepts(k) for k in ("single", "a", "b"))
    assert client_key({"LLMHOST_API_KEY": "single", "LLMHOST_API_KEYS": "a,b"}) == "single"
    assert client_key({"LLMHOST_API_KEYS": " a , b"}) == "a"
    assert client_key({"LLMHOST_API_KEY": ""}) == ""


def test_presented_key_forms() -> None:
    assert presented_key({b"authorization": b"Bearer abc"}) == "abc"
    assert presented_key({b"authorization": b"bearer   abc "}) == "abc"
    assert presented_key({b"x-api-key": b"xyz"}) == "xyz"
    # a SigV4 signature is not a key: x-api-key is then what counts
    assert presented_key({b"authorization": b"AWS4-HMAC-SHA256 Credential=x", b"x-api-key": b"k"}) == "k"
    assert presented_key({}) == ""


def app() -> ApiKeyMiddleware:
    async def ok(_: object) -> PlainTextResponse:
        return PlainTextResponse("ok")

    inner = Starlette(routes=[Route(p, ok, methods=["GET", "POST"]) for p in ("/ping", "/health", "/v1/x")])
    return ApiKeyMiddleware(inner, ApiKeys.of(["secret"]))


async def test_middleware_refuses_without_a_key_and_keeps_probes_open() -> None:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app()), base_url="http://t") as client:
        r = await client.post("/v1/x")
        assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
        error = r.json()["error"]
        assert error["type"] == "authentication_error" and "required" in error["message"]
        wrong = await client.post("/v1/x", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401 and "secret" not in wrong.text and "nope" not in wrong.text
        assert (await client.post("/v1/x", headers={"Authorization": "Bearer secret"})).text == "ok"
        assert (await client.post("/v1/x", headers={"x-api-key": "secret"})).text == "ok"
        assert (await client.get("/ping")).text == "ok" and (await client.get("/health")).text == "ok"

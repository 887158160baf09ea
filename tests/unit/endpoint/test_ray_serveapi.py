"""Ray Serve's REST API over httpx, against an in-process fake of it (no Ray needed): deploy bodies keep
the cluster's other applications, failures say whether they may pass, Ray's token is sent."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from llmhost.endpoint.rayserve.serveapi import (
    ServeApi,
    ServeApiError,
    auth_headers,
    declared,
    deploy_body,
    retrying,
)
from tests.unit.endpoint.ray_fakes import URL, FakeServe


def test_deploy_bodies_keep_the_clusters_other_applications() -> None:
    d = {
        "proxy_location": "HeadOnly",
        "http_options": {"port": 9000},
        "applications": {
            "mine": {"name": "mine", "deployed_app_config": {"name": "mine", "v": 1}},
            "theirs": {"name": "theirs", "deployed_app_config": {"name": "theirs"}},
            "imperative": {"name": "imperative", "deployed_app_config": None},
        },
    }
    kept = declared(d, "mine")
    assert kept == [{"name": "theirs"}]
    body = deploy_body(d, [*kept, {"name": "mine", "v": 2}])
    assert body == {
        "applications": [{"name": "theirs"}, {"name": "mine", "v": 2}],
        "proxy_location": "HeadOnly",
        "http_options": {"port": 9000},
    }


async def test_deploy_and_delete_replace_only_this_application() -> None:
    serve = FakeServe()
    serve.app("theirs")
    api = serve.api()
    await api.deploy({"name": "mine", "import_path": "a:b"}, http_options={"host": "127.0.0.1", "port": 1})
    body = serve.puts[-1]
    assert [a["name"] for a in body["applications"]] == ["theirs", "mine"]
    assert body["http_options"] == {"host": "127.0.0.1", "port": 8000}  # Serve runs: its own options kept
    assert (await api.application("mine")) is not None
    await api.delete("mine")
    assert [a["name"] for a in serve.puts[-1]["applications"]] == ["theirs"]
    assert await api.application("mine") is None
    puts = len(serve.puts)
    await api.delete("mine")  # already gone: nothing sent
    assert len(serve.puts) == puts


async def test_serve_not_running_starts_with_the_endpoints_http_options() -> None:
    serve = FakeServe(running=False)
    await serve.api().deploy({"name": "mine"}, http_options={"host": "0.0.0.0", "port": 8080})
    assert serve.puts[-1]["http_options"] == {"host": "0.0.0.0", "port": 8080}
    assert serve.puts[-1]["proxy_location"] == "HeadOnly"


async def test_only_failures_on_the_servers_side_may_pass() -> None:
    serve = FakeServe()
    api = serve.api()
    serve.refuse = [(500, "ProxyActor died"), (400, "2 validation errors")]
    with pytest.raises(ServeApiError, match="reading the applications failed: 500 ProxyActor died") as e500:
        await api.details()
    with pytest.raises(ServeApiError, match="400 2 validation errors") as e400:
        await api.details()
    assert e500.value.transient and not e400.value.transient
    serve.refuse = [(200, "not json")]
    with pytest.raises(ServeApiError, match="answered no JSON") as bad:
        await api.details()
    assert bad.value.transient

    def unreachable(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    down = ServeApi(URL, transport=httpx.MockTransport(unreachable), env={})
    with pytest.raises(ServeApiError, match="reading the applications failed: ConnectError") as refused:
        await down.details()
    assert URL in str(refused.value) and refused.value.transient


async def test_rays_token_is_sent_where_ray_reads_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert auth_headers({}, home) == {}
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text("from-home\n")
    assert auth_headers({}, home) == {"Authorization": "Bearer from-home"}
    named = tmp_path / "token"
    named.write_text("from-path")
    assert auth_headers({"RAY_AUTH_TOKEN_PATH": str(named)}, home) == {"Authorization": "Bearer from-path"}
    env = {"RAY_AUTH_TOKEN": "from-env", "RAY_AUTH_TOKEN_PATH": str(named)}
    assert auth_headers(env, home) == {"Authorization": "Bearer from-env"}
    assert auth_headers({**env, "RAY_AUTH_MODE": "disabled"}, home) == {}
    with pytest.raises(ValueError, match=r"RAY_AUTH_TOKEN_PATH=.*absent: cannot read Ray's token"):
        auth_headers({"RAY_AUTH_TOKEN_PATH": str(tmp_path / "absent")}, home)
    serve = FakeServe()
    await serve.api(env={"RAY_AUTH_TOKEN": "t0k"}).details()
    assert serve.requests[-1].headers["authorization"] == "Bearer t0k"


async def test_retrying_stops_at_a_lasting_refusal() -> None:
    calls: list[int] = []

    async def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ServeApiError("500", transient=True)
        return "ok"

    assert await retrying(flaky, within_s=10, pause_s=0.01) == "ok" and len(calls) == 3

    async def refused() -> str:
        calls.append(1)
        raise ServeApiError("400", transient=False)

    calls.clear()
    with pytest.raises(ServeApiError, match="400"):
        await retrying(refused, within_s=10, pause_s=0.01)
    assert len(calls) == 1

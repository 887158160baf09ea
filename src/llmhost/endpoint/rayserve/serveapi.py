"""Ray Serve's REST API, served by the Ray dashboard on the head node (the documented
`GET`/`PUT /api/serve/applications/` that `serve status` and `serve deploy` use), over httpx: the
deployed applications with their replicas, and declarative deploys.

A cluster with Ray's token authentication wants its token on every request; it is found where Ray's
documentation says Ray looks for it ($RAY_AUTH_TOKEN, the file $RAY_AUTH_TOKEN_PATH names, else
~/.ray/auth_token) and sent unless $RAY_AUTH_MODE=disabled.

A deploy config lists every declarative application of the cluster (those left out are deleted), so
each change here reads the current ones and replaces only this endpoint's.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import httpx

from llmhost.endpoint.rayserve import status
from llmhost.errors import LlmhostError

T = TypeVar("T")
APPLICATIONS = "/api/serve/applications/"
TIMEOUT_S = 30.0  # a deploy is answered once Serve's controller took the config, not when it runs


class ServeApiError(LlmhostError, RuntimeError):
    """The REST API refused a call or could not be reached; the message says which and why.
    `transient`: it did not answer, or failed on its side (5xx): the same call may succeed later."""

    def __init__(self, message: str, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient


def auth_headers(env: Mapping[str, str], home: Path) -> dict[str, str]:
    """The `Authorization` header Ray's token authentication wants, from where Ray reads its token."""
    if env.get("RAY_AUTH_MODE", "").lower() == "disabled":
        return {}
    token = env.get("RAY_AUTH_TOKEN", "")
    if not token and env.get("RAY_AUTH_TOKEN_PATH"):
        path = Path(env["RAY_AUTH_TOKEN_PATH"]).expanduser()
        try:
            token = path.read_text().strip()
        except OSError as exc:  # as Ray does: a token file named but unreadable is an error, not none
            raise ValueError(f"RAY_AUTH_TOKEN_PATH={path}: cannot read Ray's token: {exc.strerror}") from None
    if not token and (default := home / ".ray" / "auth_token").is_file():
        token = default.read_text().strip()
    return {"Authorization": f"Bearer {token}"} if token else {}


async def retrying(call: Callable[[], Awaitable[T]], within_s: float, pause_s: float = 2.0) -> T:
    """`call` again while it fails transiently (Serve starting its HTTP proxy on a loaded head node
    fails the first deploys), for up to `within_s`."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            return await call()
        except ServeApiError as exc:
            if not exc.transient or time.monotonic() + pause_s > deadline:
                raise
        await asyncio.sleep(pause_s)


def declared(details: dict[str, Any], leave_out: str) -> list[dict[str, Any]]:
    """The cluster's declaratively deployed applications' configs, but `leave_out`'s."""
    apps = details.get("applications", {}).values()
    return [
        a["deployed_app_config"] for a in apps if a.get("deployed_app_config") and a.get("name") != leave_out
    ]


def deploy_body(details: dict[str, Any], apps: list[dict[str, Any]]) -> dict[str, Any]:
    body: dict[str, Any] = {"applications": apps}
    # Serve keeps the options it started with; sending them again keeps the config consistent
    for key in ("proxy_location", "http_options"):
        if details.get(key):
            body[key] = details[key]
    return body


class ServeApi:
    def __init__(
        self,
        dashboard_url: str,
        transport: httpx.AsyncBaseTransport | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.url = (dashboard_url if "://" in dashboard_url else f"http://{dashboard_url}").rstrip("/")
        self.headers = auth_headers(os.environ if env is None else env, Path.home())
        self.transport = transport  # tests answer in-process

    async def _request(self, what: str, method: str, body: dict[str, Any] | None = None) -> httpx.Response:
        where = f"Ray Serve's REST API at {self.url}: {what} failed"
        try:
            async with httpx.AsyncClient(
                base_url=self.url, headers=self.headers, timeout=TIMEOUT_S, transport=self.transport
            ) as client:
                resp = await client.request(method, APPLICATIONS, json=body)
        except httpx.HTTPError as exc:
            raise ServeApiError(f"{where}: {type(exc).__name__}: {exc}", transient=True) from None
        if resp.status_code != 200:
            raise ServeApiError(
                f"{where}: {resp.status_code} {resp.text[:2000]}", transient=resp.status_code >= 500
            )
        return resp

    async def details(self) -> dict[str, Any]:
        """`ServeInstanceDetails`: applications, their deployments and replicas (node, pid, state)."""
        resp = await self._request("reading the applications", "GET")
        try:
            data = resp.json()
        except ValueError:
            raise ServeApiError(
                f"Ray Serve's REST API at {self.url} answered no JSON: {resp.text[:300]}", transient=True
            ) from None
        return data if isinstance(data, dict) else {}

    async def application(self, name: str) -> dict[str, Any] | None:
        app = (await self.details()).get("applications", {}).get(name)
        return app if isinstance(app, dict) else None

    async def deploy(self, app: dict[str, Any], http_options: dict[str, Any] | None = None) -> None:
        """Deploy (or update in place) `app`, keeping the cluster's other declarative applications."""
        details = await self.details()
        body = deploy_body(details, [*declared(details, app["name"]), app])
        if http_options is not None and not details.get("controller_info", {}).get("node_id"):
            body["http_options"] = http_options  # Serve is not running yet: it starts with these
            body["proxy_location"] = "HeadOnly"
        await self._request("deploying", "PUT", body)

    async def override(self, name: str, override: dict[str, Any]) -> None:
        """Application `name` deployed again with `override` over one deployment's options (a config change
        Ray applies in place); LookupError when it is not deployed."""
        details = await self.details()
        app = status.application(details, name)
        if app is None or not app.get("deployed_app_config"):
            raise LookupError(f"application {name!r} is not deployed on this Ray cluster")
        config = dict(app["deployed_app_config"])
        config["deployments"] = status.with_override(status.deployment_overrides(details, name), override)
        await self.deploy(config)

    async def delete(self, name: str) -> None:
        """Delete application `name`, keeping the others."""
        details = await self.details()
        if name not in details.get("applications", {}):
            return
        body = deploy_body(details, declared(details, name))
        await self._request(f"deleting application {name!r}", "PUT", body)

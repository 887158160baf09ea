"""Ray Serve's REST API (served by the Ray dashboard on the head node) through Ray's own client for
it, the one `serve deploy` and `serve status` use (it carries Ray's authentication token): the deployed
applications with their replicas, and declarative deploys.

A deploy config lists every declarative application of the cluster (those left out are deleted), so
each change here reads the current ones and replaces only this endpoint's.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")
# how Ray's client words a refusal (`Request failed with status code 500: ...`)
_STATUS = re.compile(r"status code (\d{3})")


def _details(client: Any) -> Any:
    return client.get_serve_details()


class ServeApiError(RuntimeError):
    """The REST API refused a call or could not be reached; the message says which and why.
    `transient`: it did not answer, or failed on its side (5xx): the same call may succeed later."""

    def __init__(self, message: str, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient


def transient(exc: Exception) -> bool:
    found = _STATUS.search(str(exc))
    return int(found.group(1)) >= 500 if found else not isinstance(exc, (RuntimeError, ValueError))


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


class ServeApi:
    def __init__(self, dashboard_url: str) -> None:
        self.url = (dashboard_url if "://" in dashboard_url else f"http://{dashboard_url}").rstrip("/")
        self._client: Any = None
        self._lock = threading.Lock()  # calls run in worker threads; one client, made once

    def _call(self, what: str, fn: Callable[[Any], T]) -> T:
        from ray.dashboard.modules.serve.sdk import ServeSubmissionClient

        try:
            with self._lock:
                if self._client is None:
                    self._client = ServeSubmissionClient(self.url)
                client = self._client
            return fn(client)
        except Exception as exc:  # requests' errors and the client's RuntimeErrors alike
            raise ServeApiError(f"Ray Serve's REST API at {self.url}: {what} failed: {exc}",
                                transient(exc)) from None  # fmt: skip

    async def details(self) -> dict[str, Any]:
        """`ServeInstanceDetails`: applications, their deployments and replicas (node, pid, state)."""
        data = await asyncio.to_thread(self._call, "reading the applications", _details)
        return data if isinstance(data, dict) else {}

    async def application(self, name: str) -> dict[str, Any] | None:
        app = (await self.details()).get("applications", {}).get(name)
        return app if isinstance(app, dict) else None

    async def _put(self, body: dict[str, Any]) -> None:
        await asyncio.to_thread(self._call, "deploying", lambda c: c.deploy_applications(body))

    @staticmethod
    def _declared(details: dict[str, Any], leave_out: str) -> list[dict[str, Any]]:
        apps = details.get("applications", {}).values()
        return [a["deployed_app_config"] for a in apps
                if a.get("deployed_app_config") and a.get("name") != leave_out]  # fmt: skip

    @staticmethod
    def _deploy_body(details: dict[str, Any], apps: list[dict[str, Any]]) -> dict[str, Any]:
        body: dict[str, Any] = {"applications": apps}
        # Serve keeps the options it started with; sending them again keeps the config consistent
        for key in ("proxy_location", "http_options"):
            if details.get(key):
                body[key] = details[key]
        return body

    async def deploy(self, app: dict[str, Any], http_options: dict[str, Any] | None = None) -> None:
        """Deploy (or update in place) `app`, keeping the cluster's other declarative applications."""
        details = await self.details()
        body = self._deploy_body(details, [*self._declared(details, app["name"]), app])
        if http_options is not None and not details.get("controller_info", {}).get("node_id"):
            body["http_options"] = http_options  # Serve is not running yet: it starts with these
            body["proxy_location"] = "HeadOnly"
        await self._put(body)

    async def delete(self, name: str) -> None:
        """Delete application `name`, keeping the others."""
        details = await self.details()
        if name not in details.get("applications", {}):
            return
        await self._put(self._deploy_body(details, self._declared(details, name)))

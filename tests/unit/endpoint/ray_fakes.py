"""Ray Serve's REST API answered in-process (httpx.MockTransport): what the Ray endpoint's code reads and
deploys, without a Ray cluster."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx

from llmhost.endpoint.rayserve.admin import RayAdmin
from llmhost.endpoint.rayserve.backend import RayBackend
from llmhost.endpoint.rayserve.console import ClusterFigures
from llmhost.endpoint.rayserve.metrics import CopyMetrics
from llmhost.endpoint.rayserve.options import RayTiming
from llmhost.endpoint.rayserve.relay import RayComponent
from llmhost.endpoint.rayserve.serveapi import APPLICATIONS, ServeApi
from llmhost.endpoint.spec import EndpointSpec

URL = "http://dashboard:8265"


def replica(rid: str, state: str = "RUNNING", node: str = "n1") -> dict[str, Any]:
    return {
        "replica_id": rid,
        "state": state,
        "node_id": node,
        "node_ip": "10.0.0.1",
        "pid": 100,
        "actor_id": f"actor-{rid}",
    }


def deployment(
    *replicas: dict[str, Any],
    target: int | None = None,
    message: str = "",
    status: str = "HEALTHY",
    required: dict[str, float] | None = None,
) -> dict[str, Any]:
    return {
        "status": status,
        "message": message,
        "replicas": list(replicas),
        "target_num_replicas": len(replicas) if target is None else target,
        "required_resources": required or {"CPU": 1.0},
    }


class FakeServe:
    """Serve's state as its REST API shows it. A PUT replaces the declared applications (those left out
    are gone); `on_put` may then change what the next GET shows. `refuse` answers the next calls."""

    def __init__(self, running: bool = True) -> None:
        self.details: dict[str, Any] = {
            "applications": {},
            "http_options": {"host": "127.0.0.1", "port": 8000},
            "proxy_location": "HeadOnly",
            "controller_info": {"node_id": "head" if running else None},
        }
        self.puts: list[dict[str, Any]] = []
        self.requests: list[httpx.Request] = []
        self.refuse: list[tuple[int, str]] = []  # (status, text) answered to the next calls, in order
        self.refuse_puts: list[tuple[int, str]] = []  # the same, to the next deploys only
        self.on_put: Callable[[dict[str, Any]], None] | None = None

    def app(
        self,
        name: str,
        status: str = "RUNNING",
        deployments: dict[str, Any] | None = None,
        config: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        config = config or {"name": name, "import_path": "x:y", "deployments": []}
        found = {
            "name": name,
            "status": status,
            "message": "",
            "deployments": deployments or {},
            "deployed_app_config": config,
        }
        self.details["applications"][name] = found
        return found

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        assert request.url.path == APPLICATIONS
        if self.refuse:
            code, text = self.refuse.pop(0)
            return httpx.Response(code, text=text)
        if request.method == "GET":
            return httpx.Response(200, json=self.details)
        assert request.method == "PUT"
        if self.refuse_puts:
            code, text = self.refuse_puts.pop(0)
            return httpx.Response(code, text=text)
        body = json.loads(request.content)
        self.puts.append(body)
        old = self.details["applications"]
        self.details["applications"] = {
            a["name"]: {
                **old.get(
                    a["name"], {"name": a["name"], "status": "DEPLOYING", "message": "", "deployments": {}}
                ),
                "deployed_app_config": a,
            }
            for a in body["applications"]
        }
        if self.on_put is not None:
            self.on_put(body)
        return httpx.Response(200)

    def api(self, env: dict[str, str] | None = None) -> ServeApi:
        return ServeApi(URL, transport=httpx.MockTransport(self.handle), env=env or {})


def ray_backend(
    components: list[RayComponent],
    pushes: CopyMetrics | None = None,
    urls: tuple[str, ...] = (),
    transport: httpx.AsyncBaseTransport | None = None,
) -> RayBackend:
    """The Ray back end over `components` (their views set by the test), their copies' `pushes`, and the
    nodes' metrics agents at `urls` answered by `transport`; Ray Serve's API is never reached."""
    spec = EndpointSpec.model_validate({"name": "e", "components": [c.spec for c in components]})

    async def refresh() -> dict[str, Any]:
        return {}

    admin = RayAdmin(spec, {c.name: c for c in components}, ServeApi(URL), refresh, RayTiming())
    return RayBackend(admin, pushes or CopyMetrics(), dict, ClusterFigures, lambda: list(urls), transport)

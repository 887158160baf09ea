"""`llmhost endpoint up FILE --ray`: deploy the endpoint file as a Ray Serve application and stay until
SIGTERM/SIGINT or `endpoint down` (which deletes the application through the ingress), then remove the
application and stop the Ray instance this process started (none when joining a cluster)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from llmhost.auth import ApiKeys
from llmhost.endpoint.rayserve import nodes, options, status
from llmhost.endpoint.rayserve.serveapi import ServeApi, retrying
from llmhost.endpoint.spec import EndpointSpec
from llmhost.serve_settings import LIMIT_ENV, LOG_LEVELS

log = logging.getLogger("llmhost.endpoint")
POLL_S = 1.0
DEPLOY_RETRY_S = 120.0  # how long a deploy failing transiently is tried again


class RayEndpointError(RuntimeError):
    """The endpoint could not be deployed; the message says why (Ray's own words included)."""


@dataclass(frozen=True)
class RayUp:
    address: str | None  # None: start a Ray instance in this process; else `auto`, HOST:PORT or ray://
    host: str = "0.0.0.0"
    port: int = 8080
    timing: options.RayTiming = field(default_factory=options.RayTiming)
    keys: ApiKeys = field(default_factory=ApiKeys)
    log_level: str = "info"

    def __post_init__(self) -> None:
        if not 0 < self.port < 65536:
            raise ValueError(f"port must be in 1..65535, got {self.port}")
        if self.log_level.lower() not in LOG_LEVELS:
            raise ValueError(f"log level must be one of {', '.join(LOG_LEVELS)}, got {self.log_level!r}")


def connect(address: str | None) -> str:
    """Start or join Ray; the dashboard's address (Ray Serve's REST API)."""
    import ray

    if address is None:
        ctx = ray.init(address="local", include_dashboard=True, namespace="llmhost")
    else:
        ctx = ray.init(address=address, namespace="llmhost")
    url = str(getattr(ctx, "dashboard_url", "") or "")
    if not url:
        raise RayEndpointError("the Ray dashboard is not running, and Ray Serve's REST API with it: "
                               "start Ray with its dashboard (`pip install 'llmhost[ray]'` installs it)")
    return url


def app_args(spec: EndpointSpec, up: RayUp, dashboard_url: str) -> options.AppArgs:
    env = {k: os.environ[k] for k in LIMIT_ENV if k in os.environ}
    return options.AppArgs(endpoint=spec.model_dump(), chat_templates=nodes.chat_templates(spec),
                           timing=asdict(up.timing), dashboard_url=dashboard_url,
                           keys=[d.hex() for d in up.keys.digests], env=env,
                           log_level=up.log_level)  # fmt: skip


async def placement_failure(views: dict[str, status.DeploymentView], spec: EndpointSpec,
                            placements: dict[str, status.Placement]) -> str | None:  # fmt: skip
    if not any(v.unschedulable for v in views.values()):
        return None
    totals, free = await asyncio.to_thread(nodes.resources)
    for c in spec.components:
        why = placements[c.name].verdict(views[c.name], totals, free, time.monotonic())
        if why is not None:
            r = c.resources
            return (f"component {c.name!r} ({r.num_cpus:g} CPUs, {r.memory_mb} MB per copy) does not fit "
                    f"on the Ray cluster: {why}")
    return None


def start_failure(details: dict[str, Any], spec: EndpointSpec) -> str | None:
    """Why the application cannot start, as Ray says it, or None while it may still."""
    app = status.application(details, spec.name) or {}
    if app.get("status") == "DEPLOY_FAILED":
        return f"Ray Serve could not deploy it: {app.get('message', '')}"
    for c in spec.components:
        view = status.deployment_view(details, spec.name, c.name)
        if view.status in ("DEPLOY_FAILED", "UNHEALTHY"):
            return f"component {c.name!r}: Ray Serve says {view.status}: {view.message}"
    return None


async def wait_running(api: ServeApi, spec: EndpointSpec, timeout_s: float, patience_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    placements = {c.name: status.Placement(patience_s) for c in spec.components}
    while True:
        details = await retrying(api.details, DEPLOY_RETRY_S)
        if (status.application(details, spec.name) or {}).get("status") == "RUNNING":
            return
        views = {c.name: status.deployment_view(details, spec.name, c.name) for c in spec.components}
        why = start_failure(details, spec) or await placement_failure(views, spec, placements)
        if why is not None:
            raise RayEndpointError(why)
        if time.monotonic() > deadline:
            app = status.application(details, spec.name) or {}
            raise RayEndpointError(f"not running within {timeout_s:g} s; Ray Serve says "
                                   f"{app.get('status')}: {app.get('message', '')}")  # fmt: skip
        await asyncio.sleep(POLL_S)


async def check_http(api: ServeApi, up: RayUp) -> None:
    """Ray Serve has one HTTP proxy port per cluster: an endpoint asking for another one would not answer."""
    details = await api.details()
    running = details.get("controller_info", {}).get("node_id")
    port = (details.get("http_options") or {}).get("port")
    if running and port not in (None, up.port):
        raise RayEndpointError(f"Ray Serve already runs on this cluster with its HTTP proxy on port {port}: "
                               f"use --port {port}")  # fmt: skip


async def serve_until_stopped(api: ServeApi, spec: EndpointSpec) -> str:
    """Until a signal (then the application is deleted here) or the application is gone (`down`)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), POLL_S)
        if not stop.is_set() and await retrying(lambda: api.application(spec.name), DEPLOY_RETRY_S) is None:
            return "the application was deleted (endpoint down)"
    await retrying(lambda: api.delete(spec.name), DEPLOY_RETRY_S)
    while await retrying(lambda: api.application(spec.name), DEPLOY_RETRY_S) is not None:
        await asyncio.sleep(POLL_S)  # Ray drains the copies first
    return "signalled"


async def deploy_and_serve(spec: EndpointSpec, up: RayUp, dashboard_url: str) -> str:
    api = ServeApi(dashboard_url)
    await check_http(api, up)
    config = options.app_config(spec, app_args(spec, up, dashboard_url), [])
    http = {"host": up.host, "port": up.port}
    await retrying(lambda: api.deploy(config, http_options=http), DEPLOY_RETRY_S)
    timeout = max(c.startup_health_check_timeout_s for c in spec.components) + up.timing.placement_timeout_s
    try:
        await wait_running(api, spec, timeout, up.timing.placement_timeout_s)
    except BaseException:
        await api.delete(spec.name)  # nothing half-deployed stays behind
        raise
    print(f"llmhost endpoint {spec.name}: running on Ray Serve, http://{up.host}:{up.port}", flush=True)
    return await serve_until_stopped(api, spec)


def run(spec: EndpointSpec, up: RayUp) -> str:
    """Deploy, serve, clean up; why it stopped. Raises RayEndpointError when it could not start."""
    import ray

    options.check_names(spec)
    spec = nodes.absolute_models(spec)
    dashboard_url = connect(up.address)
    try:
        missing = nodes.missing_models(spec.components)
        if missing:
            raise RayEndpointError("a local model must exist on every node:\n  " + "\n  ".join(missing))
        return asyncio.run(deploy_and_serve(spec, up, dashboard_url))
    finally:
        ray.shutdown()  # stops the Ray instance this process started; only disconnects from a cluster

"""`llmhost endpoint up FILE --ray`: deploy the endpoint file as a Ray Serve application and stay until
SIGTERM/SIGINT or `endpoint down` (which deletes the application through the ingress), then remove the
application and stop the Ray instance this process started (none when joining a cluster). A signal
while the application starts removes it as well."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlsplit

from llmhost.console.api import ConsoleSettings
from llmhost.endpoint.rayserve import nodes, options, status
from llmhost.endpoint.rayserve.serveapi import ServeApi, retrying
from llmhost.endpoint.spec import EndpointSpec
from llmhost.errors import LlmhostError
from llmhost.settings.serve import LIMIT_ENV, LOG_LEVELS
from llmhost.web.auth import ApiKeys
from llmhost.web.traces import otel_env

log = logging.getLogger("llmhost.endpoint")
POLL_S = 1.0
DEPLOY_RETRY_S = 120.0  # how long a deploy failing transiently is tried again
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "0.0.0.0", "")


class RayEndpointError(LlmhostError, RuntimeError):
    """The endpoint could not be deployed; the message says why (Ray's own words included)."""


@dataclass(frozen=True)
class RayUp:
    address: str | None  # None: start a Ray instance in this process; else `auto`, HOST:PORT or ray://
    host: str = "0.0.0.0"
    port: int = 8080
    timing: options.RayTiming = field(default_factory=options.RayTiming)
    keys: ApiKeys = field(default_factory=ApiKeys)
    log_level: str = "info"
    dashboard: str | None = None  # Ray Serve's REST API as `up` reaches it; None: the cluster's word
    # the console's period and reports folder (`--reports`: a path on the head node, where the ingress runs)
    console: ConsoleSettings = field(default_factory=ConsoleSettings)

    def __post_init__(self) -> None:
        if not 0 < self.port < 65536:
            raise ValueError(f"port must be in 1..65535, got {self.port}")
        if self.log_level.lower() not in LOG_LEVELS:
            raise ValueError(f"log level must be one of {', '.join(LOG_LEVELS)}, got {self.log_level!r}")


@dataclass(frozen=True)
class Dashboards:
    """Ray Serve's REST API as `up` reaches it, and as the ingress (on the head node) does."""

    here: str
    head: str


def dashboard_for(address: str | None, head_view: str, given: str | None) -> str:
    """Where `up` reaches the dashboard: `--ray-dashboard`, else the cluster's own word, whose loopback
    host (the head's view of itself) means the ray:// address's host when `up` runs elsewhere."""
    if given:
        return given
    if not address or not address.startswith("ray://"):
        return head_view
    url = urlsplit(head_view if "://" in head_view else f"http://{head_view}")
    if url.hostname not in LOOPBACK_HOSTS:
        return head_view
    host = urlsplit(address).hostname or ""
    return f"{url.scheme}://{host}:{url.port or 8265}"


def connect(address: str | None, given: str | None) -> Dashboards:
    """Start or join Ray; the dashboard's address (Ray Serve's REST API)."""
    import ray

    if address is None:
        ctx = ray.init(address="local", include_dashboard=True, namespace="llmhost")
    else:
        ctx = ray.init(address=address, namespace="llmhost")
    head = str(getattr(ctx, "dashboard_url", "") or "")
    if not head:
        raise RayEndpointError(
            "the Ray dashboard is not running, and Ray Serve's REST API with it: "
            "start Ray with its dashboard (`pip install 'llmhost[ray]'` installs it)"
        )
    return Dashboards(dashboard_for(address, head, given), head)


def app_args(
    spec: EndpointSpec, up: RayUp, dashboards: Dashboards, templates: dict[str, str]
) -> options.AppArgs:
    # the OTLP exporter's too: the ingress and the copies trace as a single-host endpoint's do
    env = {k: os.environ[k] for k in LIMIT_ENV if k in os.environ} | otel_env()
    reports = up.console.reports_dir
    return options.AppArgs(
        endpoint=spec.model_dump(),
        chat_templates=templates,
        timing=asdict(up.timing),
        dashboard_url=dashboards.head,
        keys=[d.hex() for d in up.keys.digests],
        env=env,
        log_level=up.log_level,
        console_period_s=up.console.period_s,
        reports_dir=str(reports.resolve()) if reports is not None else None,
    )


async def placement_failure(
    views: dict[str, status.DeploymentView], spec: EndpointSpec, placements: dict[str, status.Placement]
) -> str | None:
    if not any(v.unschedulable for v in views.values()):
        return None
    totals, free = await asyncio.to_thread(nodes.resources)
    for c in spec.components:
        why = placements[c.name].verdict(views[c.name], totals, free, time.monotonic())
        if why is not None:
            r = c.resources
            return (
                f"component {c.name!r} ({r.num_cpus:g} CPUs, {r.memory_mb} MB per copy) does not fit "
                f"on the Ray cluster: {why}"
            )
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
            raise RayEndpointError(
                f"not running within {timeout_s:g} s; Ray Serve says "
                f"{app.get('status')}: {app.get('message', '')}"
            )
        await asyncio.sleep(POLL_S)


async def check_http(api: ServeApi, up: RayUp) -> None:
    """Ray Serve has one HTTP proxy per cluster, started with the first application's host and port: an
    endpoint asking for others would not be answered there."""
    details = await api.details()
    if not details.get("controller_info", {}).get("node_id"):
        return  # Serve is not running: it starts with ours
    http = details.get("http_options") or {}
    port, host = http.get("port"), http.get("host")
    if port not in (None, up.port):
        raise RayEndpointError(
            f"Ray Serve already runs on this cluster with its HTTP proxy on port {port}: use --port {port}"
        )
    if host not in (None, up.host):
        raise RayEndpointError(
            f"Ray Serve already runs on this cluster with its HTTP proxy on host {host}: use --host {host}"
        )


def stop_on_signals() -> asyncio.Event:
    """Set on SIGTERM or SIGINT, from now on (the default handlers would leave the application behind)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def remove(api: ServeApi, spec: EndpointSpec, within_s: float) -> None:
    """Delete the application and wait (up to `within_s`) for Ray to have drained and removed it."""
    await retrying(lambda: api.delete(spec.name), DEPLOY_RETRY_S)
    deadline = time.monotonic() + within_s
    while await retrying(lambda: api.application(spec.name), DEPLOY_RETRY_S) is not None:
        if time.monotonic() > deadline:
            log.warning("application %s still listed %g s after its deletion", spec.name, within_s)
            return
        await asyncio.sleep(POLL_S)


async def serve_until_stopped(api: ServeApi, spec: EndpointSpec, stop: asyncio.Event, remove_s: float) -> str:
    """Until a signal (then the application is deleted here) or the application is gone (`down`)."""
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), POLL_S)
        if not stop.is_set() and await retrying(lambda: api.application(spec.name), DEPLOY_RETRY_S) is None:
            return "the application was deleted (endpoint down)"
    await remove(api, spec, remove_s)
    return "signalled"


async def start(
    api: ServeApi, spec: EndpointSpec, up: RayUp, args: options.AppArgs, deployed: asyncio.Event
) -> None:
    config = options.app_config(spec, args, [])
    http = {"host": up.host, "port": up.port}
    await retrying(lambda: api.deploy(config, http_options=http), DEPLOY_RETRY_S)
    deployed.set()
    timeout = max(c.startup_health_check_timeout_s for c in spec.components) + up.timing.placement_timeout_s
    await wait_running(api, spec, timeout, up.timing.placement_timeout_s)


async def deploy_and_serve(
    api: ServeApi, spec: EndpointSpec, up: RayUp, args: options.AppArgs, stop: asyncio.Event
) -> str:
    """Deploy, wait until it runs, serve until `stop` or `down`; why it stopped. However it ends, and
    whenever `stop` comes, no application this call deployed stays behind."""
    await check_http(api, up)
    if stop.is_set():
        return "signalled while starting"
    deployed = asyncio.Event()
    starting = asyncio.create_task(start(api, spec, up, args, deployed))
    signalled = asyncio.create_task(stop.wait())
    await asyncio.wait({starting, signalled}, return_when=asyncio.FIRST_COMPLETED)
    signalled.cancel()
    # Ray drains the copies before the application is gone
    remove_s = up.timing.drain_timeout_s + DEPLOY_RETRY_S
    if not starting.done():
        starting.cancel()
        await asyncio.gather(starting, return_exceptions=True)
        await remove(api, spec, remove_s)  # a deploy in flight may have landed: nothing stays behind
        return "signalled while starting"
    if (failure := starting.exception()) is not None:
        if deployed.is_set():
            await remove(api, spec, remove_s)  # nothing half-deployed stays behind
        raise failure
    print(f"llmhost endpoint {spec.name}: running on Ray Serve, http://{up.host}:{up.port}", flush=True)
    return await serve_until_stopped(api, spec, stop, remove_s)


async def serve(spec: EndpointSpec, up: RayUp, dashboards: Dashboards, templates: dict[str, str]) -> str:
    stop = stop_on_signals()  # first: a signal from here on removes what was deployed
    api = ServeApi(dashboards.here)
    return await deploy_and_serve(api, spec, up, app_args(spec, up, dashboards, templates), stop)


def run(spec: EndpointSpec, up: RayUp) -> str:
    """Deploy, serve, clean up; why it stopped. Raises RayEndpointError when it could not start."""
    options.check_names(spec)
    templates = nodes.chat_templates(spec)  # read here, before any Ray starts: their text travels
    spec = nodes.absolute_models(spec)
    import ray

    try:
        dashboards = connect(up.address, up.dashboard)
        missing = nodes.missing_models(spec.components)
        if missing:
            raise RayEndpointError("a local model must exist on every node:\n  " + "\n  ".join(missing))
        return asyncio.run(serve(spec, up, dashboards, templates))
    finally:
        ray.shutdown()  # stops the Ray instance this process started; only disconnects from a cluster

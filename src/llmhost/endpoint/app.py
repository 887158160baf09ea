"""The endpoint's ASGI app: router and admin API on one port; copies start in the background."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI
from prometheus_client.core import Metric
from starlette.responses import JSONResponse, Response
from starlette.types import Lifespan

from llmhost.console.api import PUBLIC_PATHS, ConsoleSettings, create_console
from llmhost.console.front import console_families
from llmhost.console.sampler import Sampler
from llmhost.endpoint import apidoc
from llmhost.endpoint.admin import LocalAdmin, create_admin, terminate_self
from llmhost.endpoint.console import EndpointConsole
from llmhost.endpoint.control.backend import LocalBackend
from llmhost.endpoint.control.manager import EndpointManager
from llmhost.endpoint.dataplane.ollama_folder import ModelsFolder
from llmhost.endpoint.dataplane.router import Proxy, create_router
from llmhost.endpoint.dataplane.runtime import create_runtime_router
from llmhost.endpoint.metrics import metrics_routes
from llmhost.jobs.metrics import jobs_families
from llmhost.jobs.mount import mount
from llmhost.jobs.service import Jobs
from llmhost.process.lifecycle import Lifecycle, watch
from llmhost.web import responses
from llmhost.web.apidoc import install as install_doc
from llmhost.web.asgi import RequestContextMiddleware
from llmhost.web.auth import OPEN_PATHS, ApiKeyMiddleware, ApiKeys
from llmhost.web.keyring import KeyRing, reload_on_hangup
from llmhost.web.quota import Quotas
from llmhost.web.traces import TraceMiddleware, Tracer

# while draining, operators still see what happens (status, the console) and probes get their 503
OPEN_WHILE_DRAINING = {
    "/ping",
    "/health",
    "/metrics",
    "/admin/status",
    *PUBLIC_PATHS,
    "/console/api/overview",
    "/console/api/series",
    "/console/api/metrics",
}

log = logging.getLogger("llmhost.endpoint")


def health(manager: EndpointManager, lifecycle: Lifecycle) -> Response:
    """As a copy's /health (the probe load balancers and TGI clients use): 200 while the endpoint takes
    requests and every component can serve, else 503; the body says each component's ready copies."""
    live = [c for c in manager.components.values() if not c.removing]
    ok = lifecycle.accepting and bool(live) and all(c.serving for c in live)
    body = {
        "status": "ready" if ok else "not ready",
        "phase": lifecycle.phase.value,
        "components": {c.name: {"copies": len(c.capacity()), "ready": len(c.ready())} for c in live},
    }
    return JSONResponse(body, status_code=200 if ok else 503)


def create_app(
    manager: EndpointManager,
    shutdown: Callable[[], None] = terminate_self,
    lifecycle: Lifecycle | None = None,
    keys: ApiKeys | None = None,
    console: ConsoleSettings | None = None,
    port: int | None = None,
    tracer: Tracer | None = None,
) -> FastAPI:
    """`lifecycle` is shared with the process runner: SIGTERM drains the router's requests, then the
    copies are drained and stopped. `console`: the console's sampling and reports folder; `port`: the
    router's, which names its default jobs folder; `tracer`: where the routed requests' spans go."""
    proxy = Proxy(manager)
    manager.internal_key.attach(proxy.client)  # copies refuse requests that did not come through here
    lifecycle = lifecycle or Lifecycle()
    console = console or ConsoleSettings()
    store = console.store()
    secured = keys is not None and keys.enabled
    backend = LocalBackend(manager, proxy.client)
    source = EndpointConsole(backend, auth=secured)
    app = FastAPI(title=f"llmhost endpoint {manager.spec.name}", docs_url=None, redoc_url=None)
    # a batch's lines go through the router's own routes: they fan out over the copies
    jobs = mount(app, manager.spec.jobs(port))
    # the router's own requests (a batch's lines) come with the jobs' key, kept on a reload
    ring = KeyRing(keys, internal=jobs.token) if keys is not None and keys.enabled else None
    quotas = Quotas()
    sampler = Sampler(store, source.read)
    app.router.lifespan_context = _lifespan(manager, proxy, lifecycle, sampler, jobs, ring, tracer)
    folder = ModelsFolder(manager) if manager.spec.models_dir is not None else None

    def families() -> list[Metric]:
        return [*console_families(store), *jobs_families(jobs), *quotas.usage.families()]

    app.include_router(metrics_routes(backend, families))
    app.include_router(create_router(manager, proxy, lifecycle, folder))
    app.add_api_route(
        "/health", lambda: health(manager, lifecycle), methods=["GET"], openapi_extra=apidoc.HEALTH
    )
    app.include_router(create_runtime_router(manager, proxy))
    app.include_router(create_admin(LocalAdmin(manager, shutdown)))
    app.include_router(create_console(store, console, source.overview, secured))
    responses.install(app)  # an unknown path or method answers in the API's error format, as a copy does
    install_doc(app, apidoc.DESCRIPTION, secured=secured, open_paths=OPEN_PATHS | PUBLIC_PATHS)
    if ring is not None:  # the router, its admin API and the console's API alike
        open_paths, routes = OPEN_PATHS | PUBLIC_PATHS, app.routes
        app.add_middleware(ApiKeyMiddleware, keys=ring, open_paths=open_paths, routes=routes, quotas=quotas)
    if tracer is not None:  # inside the request id, which the span carries
        app.add_middleware(TraceMiddleware, tracer=tracer)
    app.add_middleware(
        RequestContextMiddleware, lifecycle=lifecycle, open_paths=OPEN_WHILE_DRAINING, routes=app.routes
    )
    return app


def _lifespan(
    manager: EndpointManager,
    proxy: Proxy,
    lifecycle: Lifecycle,
    sampler: Sampler,
    jobs: Jobs,
    ring: KeyRing | None,
    tracer: Tracer | None,
) -> Lifespan[FastAPI]:
    """Start the components in the background (the router answers meanwhile), the drain watcher, the
    console's sampler, the batch runner and the keys' reload on SIGHUP; at the end stop the runner,
    drain and stop every copy, send the spans still queued."""

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        starting = asyncio.create_task(_start(manager), name="endpoint start")
        watcher = asyncio.create_task(watch(lifecycle, lambda: manager.in_flight), name="endpoint watch")
        sampling = asyncio.create_task(sampler.run(), name="console sampler")
        jobs.start()
        stop_reloading = reload_on_hangup(ring) if ring is not None else (lambda: None)
        try:
            yield
        finally:
            stop_reloading()
            await jobs.stop()
            log.info("endpoint %s: draining and stopping copies", manager.spec.name)
            sampling.cancel()
            watcher.cancel()
            starting.cancel()
            await manager.shutdown()
            await proxy.aclose()
            log.info("endpoint %s: every copy stopped", manager.spec.name)
            if tracer is not None:
                await asyncio.to_thread(tracer.shutdown)

    return lifespan


async def _start(manager: EndpointManager) -> None:
    try:
        await manager.start()
        log.info("endpoint %s: every component started", manager.spec.name)
    except Exception:
        log.exception("endpoint %s: starting failed", manager.spec.name)

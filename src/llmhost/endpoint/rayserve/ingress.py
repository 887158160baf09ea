"""The Ray endpoint's ingress: one Ray Serve replica on the head node, behind Ray Serve's HTTP proxy on
the endpoint's port, with the single-host router's contract (the same routing decisions and error
bodies, from `llmhost.endpoint.dataplane.routing`), its admin API and its console. It relays; it never loads a
model."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI
from prometheus_client.core import Metric
from starlette.responses import JSONResponse, Response

from llmhost.console.api import PUBLIC_PATHS, ConsoleSettings, create_console
from llmhost.console.front import console_families
from llmhost.console.sampler import Sampler
from llmhost.endpoint import apidoc
from llmhost.endpoint.admin import create_admin
from llmhost.endpoint.bodies import Modalities, ModelList
from llmhost.endpoint.console import EndpointConsole
from llmhost.endpoint.dataplane import routing
from llmhost.endpoint.dataplane.ollama import Listed, context_length, ollama_routes
from llmhost.endpoint.dataplane.runtime import create_runtime_router
from llmhost.endpoint.metrics import metrics_routes
from llmhost.endpoint.rayserve import status
from llmhost.endpoint.rayserve.adapters import AdapterReports
from llmhost.endpoint.rayserve.admin import RayAdmin
from llmhost.endpoint.rayserve.backend import RayBackend
from llmhost.endpoint.rayserve.console import ClusterFigures, cluster_figures
from llmhost.endpoint.rayserve.copy_adapters import AdapterReport, entries_of
from llmhost.endpoint.rayserve.metrics import CopyMetrics
from llmhost.endpoint.rayserve.options import AppArgs, RayTiming
from llmhost.endpoint.rayserve.relay import RayComponent, RayRelay
from llmhost.endpoint.rayserve.serveapi import ServeApi, ServeApiError
from llmhost.endpoint.spec import EndpointSpec
from llmhost.jobs.metrics import jobs_families
from llmhost.jobs.mount import mount
from llmhost.jobs.service import Jobs
from llmhost.process.lifecycle import Lifecycle
from llmhost.settings.serve import SERVE_SPEC
from llmhost.web import responses
from llmhost.web.apidoc import install as install_doc
from llmhost.web.asgi import RequestContextMiddleware
from llmhost.web.auth import OPEN_PATHS, ApiKeyMiddleware, ApiKeys
from llmhost.web.traces import TraceMiddleware, adopt_env, open_tracer

log = logging.getLogger("llmhost.endpoint")
TRACES_ENV = SERVE_SPEC["otlp_traces_endpoint"].env
POLL_S = 1.0  # how often Ray Serve's view of the copies is read (for /ping, /v1/models, waits)


class Ingress:
    """The ingress deployment's class (`serve.ingress()` turns it into an ASGI deployment)."""

    def __init__(self, handles: dict[str, Any], args: dict[str, Any]) -> None:
        self.args = AppArgs(**args)
        logging.getLogger("llmhost").setLevel(self.args.log_level.upper())
        adopt_env(self.args.env)  # the OpenTelemetry SDK's settings, where it reads them
        self.spec = EndpointSpec.model_validate(self.args.endpoint)
        self.components = {c.name: RayComponent(c, handles[c.name]) for c in self.spec.components}
        self.api = ServeApi(self.args.dashboard_url)
        self.relay = RayRelay()
        self.copy_metrics = CopyMetrics()
        self.adapter_reports = AdapterReports()
        self.details: dict[str, Any] = {}  # Ray Serve's, as last read
        self.jobs: Jobs | None = None  # the batch jobs, once the app is made
        reports = Path(self.args.reports_dir) if self.args.reports_dir else None
        self.console = ConsoleSettings(period_s=self.args.console_period_s, reports_dir=reports)
        self.store = self.console.store()
        self.cluster: Callable[[], ClusterFigures] = cluster_figures  # tests give a cluster of their own

    def report_metrics(
        self,
        component: str,
        copy: str,
        text: str,
        cpu_s: float | None = None,
        rss_mb: float | None = None,
        modalities: Modalities = None,
    ) -> None:
        """A copy's /metrics, its process's CPU seconds and RSS, and what its model reads (copies push
        them: a handle cannot address one)."""
        self.copy_metrics.report(component, copy, text, cpu_s, rss_mb)
        comp = self.components.get(component)
        if comp is not None and modalities is not None:
            comp.modalities = modalities

    def report_adapters(self, component: str, copy: str, report: AdapterReport) -> None:
        """A copy's adapters: after each change Ray Serve handed it, and with its metrics' pushes."""
        self.adapter_reports.latest[copy] = report

    async def refresh(self) -> dict[str, Any]:
        details = await self.api.details()
        overrides = {o.get("name"): o for o in status.deployment_overrides(details, self.spec.name)}
        for comp in self.components.values():
            comp.view = status.deployment_view(details, self.spec.name, comp.name)
            comp.configured = entries_of(overrides.get(comp.name, {}).get("user_config"))
        self.details = details
        return details

    async def _poll(self) -> None:
        while True:
            try:
                await self.refresh()
            except ServeApiError as exc:
                log.warning("reading Ray Serve's status failed: %s", exc)
            await asyncio.sleep(POLL_S)

    def _routes(self) -> APIRouter:
        router = APIRouter()

        @router.get("/ping", openapi_extra=apidoc.PING)
        async def ping() -> Response:
            return routing.ping(True, {c.name: c.serving for c in self.components.values()})

        @router.get("/v1/models", openapi_extra=apidoc.MODELS)
        async def models() -> Response:
            comps = self.components.values()
            data = [
                entry
                for c in comps
                for entry in (
                    routing.model_entry(c.name, c.view.target, c.view.running),
                    *routing.adapter_entries(c, c.view.target, c.view.running),
                )
            ]
            listed: ModelList = {"object": "list", "data": data}
            return JSONResponse(listed)

        router.include_router(routing.data_routes(self, self.relay))
        router.include_router(ollama_routes(self._listed))
        return router

    def _listed(self) -> list[Listed]:
        """The components and their adapters for Ollama's /api/tags and /api/ps (their files live on the
        copies' nodes: a copy's /api/show reads them; an adapter's file is read here where it is)."""
        out = []
        for c in self.components.values():
            n_ctx, loaded = context_length(c.spec.engine.serve_options()), c.view.running > 0
            out.append(Listed(c.name, None, loaded, None, n_ctx))
            out += [
                Listed(a.name, Path(a.path), loaded, None, n_ctx, parent=c.name)
                for a in c.adapter_entries.values()
            ]
        return out

    def __serve_build_asgi_app__(self) -> FastAPI:
        return self.asgi_app()  # the hook `serve.ingress()` calls on a class given no app

    def asgi_app(self) -> FastAPI:
        """The ingress's routes, admin API, console, API keys and request ids, as Serve's proxy calls
        them."""
        keys = ApiKeys(tuple(bytes.fromhex(k) for k in self.args.keys))
        admin = RayAdmin(
            self.spec,
            self.components,
            self.api,
            self.refresh,
            RayTiming(**self.args.timing),
            self.adapter_reports,
        )
        backend = RayBackend(admin, self.copy_metrics, lambda: self.details, self.cluster)
        console = EndpointConsole(backend, keys.enabled)

        app = FastAPI(title=f"llmhost endpoint {self.spec.name} (Ray)", docs_url=None, redoc_url=None)
        # a batch's lines go through the ingress's own routes: they fan out over the copies on every node
        self.jobs = jobs = mount(app, self.spec.jobs())
        tracer = open_tracer(self.args.env.get(TRACES_ENV, ""), "llmhost-endpoint")

        @asynccontextmanager
        async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
            with contextlib.suppress(ServeApiError):
                await self.refresh()  # /ping is right from the first request on
            poller = asyncio.create_task(self._poll(), name="ray serve status")
            sampling = asyncio.create_task(Sampler(self.store, console.read).run(), name="console sampler")
            jobs.start()
            try:
                yield
            finally:
                await jobs.stop()
                sampling.cancel()
                poller.cancel()
                if tracer is not None:
                    await asyncio.to_thread(tracer.shutdown)

        def families() -> list[Metric]:
            return [*console_families(self.store), *jobs_families(jobs)]

        app.router.lifespan_context = lifespan
        app.include_router(metrics_routes(backend, families))
        app.include_router(self._routes())
        app.include_router(create_runtime_router(self, self.relay))
        app.include_router(create_admin(admin))
        app.include_router(create_console(self.store, self.console, console.overview, keys.enabled))
        responses.install(app)  # an unknown path or method answers in the API's error format
        # the console's page and assets hold no data and open without a key (the page asks for one)
        install_doc(app, apidoc.DESCRIPTION, secured=keys.enabled, open_paths=OPEN_PATHS | PUBLIC_PATHS)
        if keys.enabled:  # the routes, the admin API and the console's API alike
            app.add_middleware(
                ApiKeyMiddleware,
                keys=keys.with_key(jobs.token),
                open_paths=OPEN_PATHS | PUBLIC_PATHS,
                routes=app.routes,
            )
        if tracer is not None:  # inside the request id, which the span carries
            app.add_middleware(TraceMiddleware, tracer=tracer)
        # Ray Serve drains the ingress itself (graceful shutdown): this lifecycle never drains
        app.add_middleware(RequestContextMiddleware, lifecycle=Lifecycle(), routes=app.routes)
        return app

"""The ASGI app of one replica."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.types import Lifespan

from llmhost import __version__
from llmhost.console.api import PUBLIC_PATHS, ConsoleSettings, create_console
from llmhost.console.front import ConsoleCollector, FrontCounter, FrontTally
from llmhost.console.sampler import Sampler
from llmhost.console.timeseries import SeriesStore
from llmhost.engine import AsyncEngine, ModelInfo
from llmhost.engine.embedder_loop import AsyncEmbedder
from llmhost.jobs.files import UPLOAD_PATH, upload_limit
from llmhost.jobs.metrics import JobsCollector
from llmhost.jobs.mount import mount
from llmhost.jobs.service import Jobs
from llmhost.process.lifecycle import Lifecycle
from llmhost.server import capture, errors
from llmhost.server.console import ServerConsole
from llmhost.server.lifecycle import watch_embedder, watch_engine
from llmhost.server.metrics import ServerMetrics
from llmhost.server.routes import adapters
from llmhost.server.routes.apis import CLIENT_APIS
from llmhost.server.serving.adapter_admin import AdapterAdmin
from llmhost.server.serving.apis.anthropic import AnthropicServing
from llmhost.server.serving.apis.custom import CustomInference
from llmhost.server.serving.apis.embeddings import EmbeddingsServing
from llmhost.server.serving.apis.ollama import OllamaServing
from llmhost.server.serving.apis.ollama_models import OllamaModels
from llmhost.server.serving.apis.openai import OpenAIServing
from llmhost.server.serving.apis.rerank import RerankServing
from llmhost.server.serving.apis.rerank_apis import RerankAPIs
from llmhost.server.serving.apis.responses import ResponsesServing
from llmhost.server.serving.apis.tgi import TGIServing
from llmhost.server.serving.apis.transcriptions import AudioTextServing
from llmhost.server.serving.batch_transform import BatchTransform
from llmhost.server.serving.chat_template import template_fault
from llmhost.server.serving.context import ServingContext
from llmhost.server.serving.side_embedder import SideEmbedder
from llmhost.server.settings import ServerSettings
from llmhost.server.tracing import InferenceTracing
from llmhost.web import apidoc
from llmhost.web.asgi import RequestContextMiddleware
from llmhost.web.auth import OPEN_PATHS, ApiKeyMiddleware
from llmhost.web.capture.writer import CaptureWriter
from llmhost.web.keyring import KeyRing, reload_on_hangup
from llmhost.web.middleware import BodyLimitMiddleware, CustomAttributesMiddleware
from llmhost.web.quota import Quotas, UsageCollector
from llmhost.web.traces import TraceMiddleware, Tracer, open_tracer

DESCRIPTION = (
    "One model behind SageMaker's container contract, the OpenAI, Anthropic Messages, TGI and Ollama APIs. "
    "Request bodies are validated by the schemas below: an unknown field is a 400 naming it, a value out "
    "of range a 422 naming the field and the limit."
)


def _template_vet(settings: ServerSettings) -> Callable[[ModelInfo], str | None]:
    """What the engine checks once the model is loaded, before it is ready: the chat template in use,
    tried on a plain conversation (a template that loops, writes without end or leaves its sandbox is
    refused with the file, rather than failing every chat request)."""

    def vet(info: ModelInfo) -> str | None:
        source = settings.chat_template or info.chat_template
        return template_fault(source, info.bos_token, info.eos_token) if source else None

    return vet


def create_app(
    settings: ServerSettings, engine: AsyncEngine | None = None, lifecycle: Lifecycle | None = None
) -> FastAPI:
    """Build the app; the model loads in the background at startup so /ping answers 503 meanwhile.

    `lifecycle` is shared with the process runner (draining on SIGTERM, exit on a dead engine)."""
    metrics = ServerMetrics()
    tracer = open_tracer(settings.otlp_traces_endpoint, "llmhost")
    # the engine tells the spans its requests' ends beside the metrics (an engine passed in tells its
    # owner's observer: its spans say what was asked, not what it took)
    tracing = InferenceTracing(metrics, settings.model_name) if tracer is not None else None
    owned = engine is None  # an engine passed in is started and stopped by its owner
    if engine is None:
        vet = _template_vet(settings)
        observer = tracing if tracing is not None else metrics
        engine = AsyncEngine(settings.model_path, settings.engine, observer=observer, vet=vet)
    metrics.attach(engine.stats)
    lifecycle = lifecycle or Lifecycle()
    # --embeddings: the embedder loads the model and the generation engine is never started
    embedder = AsyncEmbedder(settings.model_path, settings.embeddings) if settings.embeddings else None
    # a generation server embeds too (as Ollama does), through a second context loaded on first use
    chat_embeddings = embedder is None and settings.chat_embeddings
    side = SideEmbedder(settings.model_path, settings.engine) if chat_embeddings else None
    ctx = ServingContext(engine, settings, metrics, embedder, side, tracing)
    # imported now, before serving: a broken inference.py stops the server from starting
    custom = CustomInference.load(settings.inference_script, ctx) if settings.inference_script else None
    tally = FrontTally()
    console_source = ServerConsole(ctx, tally)
    console = settings.console()
    store = console.store()
    metrics.registry.register(ConsoleCollector(store))
    sampler = Sampler(store, console_source.read)
    app = FastAPI(title="llmhost", version=__version__, docs_url=None, redoc_url=None)
    # a batch's lines go through this app's own routes, behind its middleware
    jobs = mount(app, settings.jobs(), scripted=custom is not None)
    metrics.registry.register(JobsCollector(jobs))
    # the server's own requests (a batch's lines) come with the jobs' key, kept on a reload
    ring = KeyRing(settings.api_keys, internal=jobs.token) if settings.api_keys.enabled else None
    quotas = Quotas()
    metrics.registry.register(UsageCollector(quotas.usage))
    app.state.lifecycle = lifecycle
    _serve(app, ctx, custom)
    _route(app, settings, console, store, console_source)
    writer = capture.install(app, settings, metrics)  # innermost: it sees what the routes read and send
    _middleware(app, settings, lifecycle, tally, jobs, (ring, quotas), tracer)
    app.router.lifespan_context = _lifespan(
        ctx, owned, lifecycle, sampler, custom, jobs, writer, tracer, ring
    )
    return app


def _lifespan(
    ctx: ServingContext,
    owned: bool,
    lifecycle: Lifecycle,
    sampler: Sampler,
    custom: CustomInference | None,
    jobs: Jobs,
    capture_writer: CaptureWriter | None,
    tracer: Tracer | None,
    ring: KeyRing | None,
) -> Lifespan[FastAPI]:
    """Start the engine (or the embedder), its watcher, the console's sampler, inference.py's
    model_fn, the batch runner, the capture writer and the keys' reload on SIGHUP; stop them in turn
    (the writer last of the requests' parts: what it holds is written before exit), and send the
    spans still queued."""
    engine, embedder = ctx.engine, ctx.embedder
    runner = embedder if embedder is not None else (engine if owned else None)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if runner is not None:
            runner.start()
        watching = watch_embedder(embedder, lifecycle) if embedder else watch_engine(engine, lifecycle)
        watcher = asyncio.create_task(watching, name="llmhost watch")
        sampling = asyncio.create_task(sampler.run(), name="console sampler")
        if custom is not None:
            try:
                await custom.start()
            except Exception as exc:  # model_fn failed: exit non-zero, as SageMaker's toolkit does
                lifecycle.exit(1, f"inference.py: {exc}")
                watcher.cancel()
                raise
        jobs.start()
        if capture_writer is not None:
            capture_writer.start()
        stop_reloading = reload_on_hangup(ring) if ring is not None else (lambda: None)
        try:
            yield
        finally:
            stop_reloading()
            await jobs.stop()
            if capture_writer is not None:
                await asyncio.to_thread(capture_writer.close)
            sampling.cancel()
            watcher.cancel()
            if custom is not None:
                custom.close()
            if runner is not None:
                await asyncio.to_thread(runner.shutdown)
            if ctx.side_embedder is not None:
                await asyncio.to_thread(ctx.side_embedder.shutdown)
            if tracer is not None:
                await asyncio.to_thread(tracer.shutdown)

    return lifespan


def _serve(app: FastAPI, ctx: ServingContext, custom: CustomInference | None) -> None:
    """Each API's serving logic, where the routes find it (server/routes/deps.py)."""
    parser = ctx.settings.tool_parser
    app.state.serving = ctx
    app.state.openai = OpenAIServing(ctx, parser)
    app.state.audio_text = AudioTextServing(ctx, parser)
    app.state.tgi = TGIServing(ctx)
    app.state.anthropic = AnthropicServing(ctx, parser)
    app.state.responses = ResponsesServing(ctx, parser)
    app.state.embeddings = EmbeddingsServing(ctx)
    app.state.rerank = RerankAPIs(RerankServing(ctx))
    app.state.adapter_admin = AdapterAdmin(ctx)
    app.state.ollama = OllamaServing(ctx, parser)
    app.state.ollama_models = OllamaModels(ctx, app.state.embeddings)
    app.state.custom = custom
    app.state.batch = BatchTransform(ctx.settings)


def _route(
    app: FastAPI,
    settings: ServerSettings,
    console: ConsoleSettings,
    store: SeriesStore,
    source: ServerConsole,
) -> None:
    """Every API's routes (each declares its error format), the console, the OpenAPI document."""
    errors.install(app)
    for module in (*CLIENT_APIS, adapters):
        app.include_router(module.router)
    secured = settings.api_keys.enabled
    app.include_router(create_console(store, console, source.overview, secured))
    apidoc.install(app, DESCRIPTION, secured=secured, open_paths=OPEN_PATHS | PUBLIC_PATHS)


def _middleware(
    app: FastAPI,
    settings: ServerSettings,
    lifecycle: Lifecycle,
    tally: FrontTally,
    jobs: Jobs,
    keys: tuple[KeyRing | None, Quotas],
    tracer: Tracer | None,
) -> None:
    """Innermost first; a refusal made here is written in the format of the route it was for."""
    routes = app.routes
    app.add_middleware(CustomAttributesMiddleware)
    uploads = {UPLOAD_PATH: upload_limit(jobs.settings.max_file_bytes)}
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes, routes=routes, paths=uploads)
    ring, quotas = keys
    if ring is not None:  # before the body is read; inside the request id
        open_paths = OPEN_PATHS | PUBLIC_PATHS
        app.add_middleware(ApiKeyMiddleware, keys=ring, open_paths=open_paths, routes=routes, quotas=quotas)
    app.add_middleware(FrontCounter, tally=tally)  # outside the key check: refusals count as 4xx
    if tracer is not None:  # inside the request id, which the span carries
        app.add_middleware(TraceMiddleware, tracer=tracer)
    app.add_middleware(RequestContextMiddleware, lifecycle=lifecycle, routes=routes)

"""Which of a copy's routes data capture sees: those that run the model (OpenAI, Anthropic, Responses,
TGI, TEI, reranking and scores, Ollama, SageMaker's /invocations and runtime paths), not those that only
read it (tokenize, count_tokens, models, show) nor the admin's."""

from __future__ import annotations

import re

from fastapi import FastAPI

from llmhost.server.metrics import ServerMetrics
from llmhost.server.settings import ServerSettings
from llmhost.web.capture.metrics import CaptureCollector
from llmhost.web.capture.middleware import CaptureMiddleware
from llmhost.web.capture.sinks import make_sink
from llmhost.web.capture.writer import CaptureWriter

INFERENCE_PATHS = frozenset(
    {
        "/invocations",
        "/v1/chat/completions",
        "/v1/audio/transcriptions",
        "/v1/audio/translations",
        "/v1/completions",
        "/v1/embeddings",
        "/v1/messages",
        "/v1/responses",
        "/",
        "/generate",
        "/generate_stream",
        "/embed",
        "/rerank",
        "/v1/rerank",
        "/v2/rerank",
        "/v1/reranking",
        "/score",
        "/v1/score",
        "/reranking",
        "/api/chat",
        "/api/generate",
        "/api/embed",
        "/api/embeddings",
    }
)
# SageMaker Runtime's InvokeEndpoint and InvokeEndpointWithResponseStream (web/sagemaker_runtime.py)
_RUNTIME = re.compile(r"^/endpoints/[^/]+/(invocations|invocations-response-stream)$")


def is_inference(path: str) -> bool:
    return path in INFERENCE_PATHS or _RUNTIME.match(path) is not None


def install(app: FastAPI, settings: ServerSettings, metrics: ServerMetrics) -> CaptureWriter | None:
    """With --capture-dir: the middleware around the routes and its writer (started and closed by the
    app's lifespan), its counters in /metrics. None without."""
    config = settings.capture()
    if config is None:
        return None
    sink = make_sink(config.destination, config.s3_prefix, config.endpoint, config.variant, config.interval_s)
    writer = CaptureWriter(sink, config.queue_bytes)
    metrics.registry.register(CaptureCollector(writer))
    app.add_middleware(CaptureMiddleware, config=config, writer=writer, captured=is_inference)
    return writer

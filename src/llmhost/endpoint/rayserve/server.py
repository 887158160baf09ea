"""One copy of a component on Ray: a Ray Serve replica holding one llmhost engine and the llmhost
server's ASGI app (`llmhost.server.create_app`, as `llmhost serve` runs it), called in-process.

The model is resolved on the node the copy landed on: `default` assembles there, an s3:// reference is
downloaded into that node's cache, and a local path must exist there (the error names the node).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from llmhost.endpoint.rayserve.inprocess import Accepted, Call, Head, Lifespan, call_app
from llmhost.endpoint.rayserve.options import DEFAULT_MAX_CONCURRENT, DEFAULT_MAX_QUEUE, INGRESS
from llmhost.endpoint.spec import ComponentSpec

if TYPE_CHECKING:
    from fastapi import FastAPI

    from llmhost.server import ServerSettings
    from llmhost.store import ResolvedModel

# `llmhost serve`'s defaults for what the endpoint file leaves out (a unit test keeps them in step)
DEFAULT_MAX_INPUT, DEFAULT_MAX_INPUT_EMBEDDINGS = 2048, 512
DEFAULT_MAX_TOTAL, DEFAULT_MAX_BATCH = 4096, 512
READY_POLL_S = 0.2
# a copy cannot be addressed through a deployment handle (Ray picks one), so each copy sends its
# /metrics to the ingress this often, which serves them labelled by component and copy
METRICS_PUSH_S = 5.0

log = logging.getLogger("llmhost.endpoint")


def node_name() -> str:
    import ray

    return f"{ray.get_runtime_context().get_node_id()} ({ray.util.get_node_ip_address()})"


def model_here(spec: ComponentSpec) -> ResolvedModel:
    """The component's model on this node; a missing one names the node."""
    from llmhost.store import resolve

    try:
        return resolve(spec.model)
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"component {spec.name!r} on node {node_name()}: {exc}") from None


def server_settings(spec: ComponentSpec, model: ResolvedModel, chat_template: str | None) -> ServerSettings:
    """What `llmhost serve MODEL --threads N ...` builds from the flags the single-host endpoint passes."""
    from llmhost.engine import EngineConfig
    from llmhost.engine.embedder import EmbedderConfig
    from llmhost.server import ServerSettings
    from llmhost.server.custom_code import find_script
    from llmhost.server.settings import env_int

    e = spec.engine
    max_input = DEFAULT_MAX_INPUT_EMBEDDINGS if spec.embeddings else DEFAULT_MAX_INPUT
    # what the file leaves out, `llmhost serve` takes from these variables (here: the node's)
    engine = EngineConfig(
        max_concurrent=e.max_concurrent or env_int("MAX_CONCURRENT_REQUESTS", DEFAULT_MAX_CONCURRENT),
        max_queue=DEFAULT_MAX_QUEUE if e.max_queue is None else e.max_queue,
        max_input_tokens=e.max_input_tokens or env_int("MAX_INPUT_LENGTH", max_input),
        max_total_tokens=e.max_total_tokens or env_int("MAX_TOTAL_TOKENS", DEFAULT_MAX_TOTAL),
        max_batch_tokens=e.max_batch_tokens or env_int("MAX_BATCH_TOTAL_TOKENS", DEFAULT_MAX_BATCH),
        n_threads=spec.resources.threads,  # engine threads = the CPUs Ray reserved for the copy
        flash_attn=True,
        queue_timeout_s=e.queue_timeout_s or 0.0,
        request_timeout_s=e.request_timeout_s or 0.0,
    )
    embeddings = EmbedderConfig.from_engine(engine, e.pooling or "auto") if spec.embeddings else None
    return ServerSettings(
        model_path=model.gguf, engine=engine, host="127.0.0.1", served_model_name=spec.name,
        chat_template=chat_template, tool_parser=e.tool_parser or "auto", embeddings=embeddings,
        inference_script=find_script(model.model_dir),
    )  # fmt: skip


class ComponentServer:
    """The Ray Serve deployment class of every component (one deployment per component)."""

    # Ray Serve awaits an async constructor: the copy gets requests once it returns
    async def __init__(self, component: dict[str, Any], chat_template: str | None) -> None:  # type: ignore[misc]
        from ray import serve

        from llmhost.server import create_app

        spec = ComponentSpec.model_validate(component)
        context = serve.get_replica_context()
        self.component = spec.name
        self.copy = f"{spec.name}-{context.replica_tag}"
        # an s3:// model may download for minutes: off the replica's event loop
        model = await asyncio.to_thread(model_here, spec)
        self.app: FastAPI = create_app(server_settings(spec, model, chat_template))
        self.lifespan = Lifespan(self.app)
        await self.lifespan.startup()  # the model loads in the background; /ping says when it is ready
        await self._ready(spec.startup_health_check_timeout_s)
        self._pusher = asyncio.create_task(self._push_metrics(context.app_name), name="metrics push")

    async def _get(self, path: str) -> tuple[int, str]:
        status, body = 0, b""
        async for item in call_app(self.app, Call("GET", path), self.lifespan.state):
            if isinstance(item, Head):
                status = item.status
            else:
                body += item
        return status, body.decode(errors="replace")

    async def _ping(self) -> tuple[int, str]:
        return await self._get("/ping")

    async def _push_metrics(self, app_name: str) -> None:
        from ray import serve

        ingress = serve.get_deployment_handle(INGRESS, app_name=app_name)
        while True:
            await asyncio.sleep(METRICS_PUSH_S)
            try:
                status, text = await self._get("/metrics")
                if status == 200:
                    await ingress.report_metrics.remote(self.component, self.copy, text)
            except Exception as exc:  # the ingress restarting: the next push gets through
                log.debug("copy %s: metrics not pushed: %s", self.copy, exc)

    async def _ready(self, timeout_s: float) -> None:
        """Until /ping answers 200; Ray gets no copy (and sends it no request) before."""
        deadline = time.monotonic() + timeout_s
        while (await self._ping())[0] != 200:
            lifecycle = self.app.state.lifecycle
            if not lifecycle.accepting:  # the model failed to load: the server says why
                raise RuntimeError(f"copy {self.copy} failed to start: {lifecycle.reason}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"copy {self.copy} did not pass /ping within "
                                   f"startup_health_check_timeout_s={timeout_s:g}")  # fmt: skip
            await asyncio.sleep(READY_POLL_S)

    async def handle(self, call: Call) -> AsyncIterator[Accepted | Head | bytes]:
        """The answer to one request: Accepted (nothing was done before it), the head, the body."""
        yield Accepted(self.copy)
        async for item in call_app(self.app, call, self.lifespan.state):
            yield item

    async def check_health(self) -> None:
        """Ray Serve's health check: the server's /ping. A dead engine answers 503 and the copy is
        replaced."""
        status, body = await self._ping()
        if status != 200:
            raise RuntimeError(f"copy {self.copy}: /ping answered {status} {body[:200]}; "
                               f"{self.app.state.lifecycle.reason}")  # fmt: skip

    async def __del__(self) -> None:
        # Ray Serve calls this after draining the copy's requests: stop the engine
        self._pusher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._pusher
        await self.lifespan.shutdown()

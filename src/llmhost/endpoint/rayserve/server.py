"""One copy of a component on Ray: a Ray Serve replica holding one llmhost engine and the llmhost
server's ASGI app (`llmhost.server.create_app`, as `llmhost serve` runs it), called in-process.

The model is resolved on the node the copy landed on: `default` assembles there, an s3:// reference is
downloaded into that node's cache, and a local path must exist there (the error names the node).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import psutil

from llmhost.endpoint.bodies import modalities
from llmhost.endpoint.rayserve.copy_adapters import CopyAdapters
from llmhost.endpoint.rayserve.inprocess import Accepted, Call, Head, Lifespan, call_app
from llmhost.endpoint.rayserve.options import INGRESS, METRICS_PUSH_S
from llmhost.endpoint.spec import ComponentSpec
from llmhost.process.lifecycle import Lifecycle
from llmhost.settings.build import Built, ServeOptions, build
from llmhost.web.traces import adopt_env

if TYPE_CHECKING:
    from starlette.types import ASGIApp

READY_POLL_S = 0.2
REPORT_TIMEOUT_S = 10.0  # a copy's report of its adapters to the ingress, after a change

log = logging.getLogger("llmhost.endpoint")


def node_name() -> str:
    import ray

    return f"{ray.get_runtime_context().get_node_id()} ({ray.util.get_node_ip_address()})"


def copy_options(spec: ComponentSpec, chat_template: str | None) -> ServeOptions:
    """The options the single-host endpoint gives `llmhost serve` for a copy (`Replica._command`): the
    file's engine settings, the component's name and threads; the chat template as its text."""
    given = spec.serve_options()
    return ServeOptions(
        spec.model,
        explicit=frozenset(given),
        **{
            **given,
            "chat_template": chat_template,
            "host": "127.0.0.1",
            "threads": spec.resources.threads,
            "served_model_name": spec.name,
            "embeddings": spec.embeddings,
            "memory_mb": spec.resources.memory_mb,
        },
    )


def settings_here(spec: ComponentSpec, chat_template: str | None, env: dict[str, str]) -> Built:
    """The copy's server settings, its model and draft model resolved on this node (`default`
    assembles here, an s3:// reference downloads into this node's cache); a missing one names the node.
    `env`: the `MAX_*` variables where `up` ran, as a single-host endpoint's copies inherit them."""
    try:
        return build(copy_options(spec, chat_template), env)
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"component {spec.name!r} on node {node_name()}: {exc}") from None


def process_figures(process: psutil.Process) -> tuple[float, float]:
    """CPU seconds `process` used so far, and its RSS (MB)."""
    with process.oneshot():
        cpu = process.cpu_times()
        return cpu.user + cpu.system, float(process.memory_info().rss) / 2**20


class InProcessServer:
    """One copy's server app, driven in-process: started, checked through its /ping, stopped."""

    def __init__(self, app: ASGIApp, lifecycle: Lifecycle, copy: str) -> None:
        self.app = app
        self.lifecycle = lifecycle  # the app's: says why it stopped accepting (its engine died)
        self.copy = copy
        self.lifespan = Lifespan(app)

    async def get(self, path: str) -> tuple[int, str]:
        status, _, text = await self.call(Call("GET", path))
        return status, text

    async def call(self, call: Call) -> tuple[int, list[tuple[str, str]], str]:
        """The app's whole answer: status, headers, body."""
        head, body = Head(0), b""
        async for item in call_app(self.app, call, self.lifespan.state):
            if isinstance(item, Head):
                head = item
            else:
                body += item
        return head.status, head.headers, body.decode(errors="replace")

    async def post_adapters(self, action: str, body: dict[str, Any]) -> tuple[int, str, str | None]:
        """The copy's own `POST /admin/adapters/{action}`: status, answer, Retry-After."""
        call = Call(
            "POST",
            f"/admin/adapters/{action}",
            headers=[("content-type", "application/json")],
            body=json.dumps(body).encode(),
        )
        status, headers, text = await self.call(call)
        return status, text, next((v for k, v in headers if k.lower() == "retry-after"), None)

    async def start(self, timeout_s: float) -> None:
        """Startup, then until /ping answers 200; an engine that failed is stopped before raising."""
        await self.lifespan.startup()  # the model loads in the background; /ping says when it is ready
        try:
            await self._ready(timeout_s)
        except BaseException:
            try:
                await self.lifespan.shutdown()
            except Exception:  # the start's own failure is the one to report
                log.exception("copy %s: stopping the server after a failed start failed", self.copy)
            raise

    async def _ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while (await self.get("/ping"))[0] != 200:
            if not self.lifecycle.accepting:  # the model failed to load: the server says why
                raise RuntimeError(f"copy {self.copy} failed to start: {self.lifecycle.reason}")
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"copy {self.copy} did not pass /ping within startup_health_check_timeout_s={timeout_s:g}"
                )
            await asyncio.sleep(READY_POLL_S)

    async def check(self) -> None:
        """Raises unless /ping answers 200 (503 once the engine died)."""
        status, body = await self.get("/ping")
        if status != 200:
            raise RuntimeError(
                f"copy {self.copy}: /ping answered {status} {body[:200]}; {self.lifecycle.reason}"
            )

    async def stop(self) -> None:
        await self.lifespan.shutdown()


class ComponentServer:
    """The Ray Serve deployment class of every component (one deployment per component)."""

    # Ray Serve awaits an async constructor: the copy gets requests once it returns
    async def __init__(  # type: ignore[misc]
        self,
        component: dict[str, Any],
        chat_template: str | None,
        env: dict[str, str],
        log_level: str,
        push_s: float = METRICS_PUSH_S,
    ) -> None:
        from ray import serve

        from llmhost.server import create_app

        logging.getLogger("llmhost").setLevel(log_level.upper())
        spec = ComponentSpec.model_validate(component)
        context = serve.get_replica_context()
        self.component = spec.name
        self.copy = f"{spec.name}-{context.replica_tag}"
        adopt_env(env)  # the OpenTelemetry SDK's settings, where it reads them
        # an s3:// model may download for minutes: off the replica's event loop
        built = await asyncio.to_thread(settings_here, spec, chat_template, env)
        for note in built.notes:
            log.info("copy %s: %s", self.copy, note)
        lifecycle = Lifecycle()
        self.server = InProcessServer(create_app(built.settings, lifecycle=lifecycle), lifecycle, self.copy)
        await self.server.start(spec.startup_health_check_timeout_s)
        self.modalities = modalities((await self.server.get("/v1/models"))[1])  # pushed with the metrics
        # the file's adapters loaded at start (`--lora`); those of the user_config in `reconfigure`
        self.adapters = CopyAdapters(self.server.post_adapters, {a.name: a for a in spec.adapters})
        self.ingress = serve.get_deployment_handle(INGRESS, app_name=context.app_name)
        self._pusher = asyncio.create_task(self._push_metrics(push_s), name="metrics push")

    async def reconfigure(self, config: dict[str, Any]) -> None:
        """Ray Serve's call with the deployment's user_config: at start and on each change (in place). The
        copy's adapters brought to it; what it refused is reported, never raised (Ray would replace
        the copy)."""
        await self.adapters.apply(config)
        for refused in self.adapters.refusals:
            log.warning(
                "copy %s: adapter %s refused: %s %s",
                self.copy,
                refused.name,
                refused.status,
                refused.text[:300],
            )
        with contextlib.suppress(Exception):  # an ingress restarting: the next push tells it
            await asyncio.wait_for(self._report_adapters(), REPORT_TIMEOUT_S)

    async def _report_adapters(self) -> None:
        status, text = await self.server.get("/admin/adapters")
        rows = json.loads(text).get("data", []) if status == 200 else []
        report = self.adapters.report([r for r in rows if isinstance(r, dict)])
        await self.ingress.report_adapters.remote(self.component, self.copy, report)

    async def _push_metrics(self, every_s: float) -> None:
        """A copy cannot be addressed through a deployment handle (Ray picks one), so each copy sends the
        ingress its /metrics (served labelled by component and copy), its process's CPU time and RSS
        (the console's figures), what its model reads (the status's `modalities`) and its adapters
        (`/admin/adapters`), every `every_s`."""
        ingress = self.ingress
        process = psutil.Process()
        while True:
            await asyncio.sleep(every_s)
            try:
                status, text = await self.server.get("/metrics")
                if status == 200:
                    cpu_s, rss_mb = process_figures(process)
                    await ingress.report_metrics.remote(
                        self.component, self.copy, text, cpu_s, rss_mb, self.modalities
                    )
                await self._report_adapters()
            except Exception as exc:  # the ingress restarting: the next push gets through
                log.debug("copy %s: metrics not pushed: %s", self.copy, exc)

    async def handle(self, call: Call) -> AsyncIterator[Accepted | Head | bytes]:
        """The answer to one request: Accepted (nothing was done before it), the head, the body."""
        yield Accepted(self.copy)
        async for item in call_app(self.server.app, call, self.server.lifespan.state):
            yield item

    async def check_health(self) -> None:
        """Ray Serve's health check: the server's /ping. A dead engine fails it and the copy is
        replaced."""
        await self.server.check()

    async def __del__(self) -> None:
        # Ray Serve calls this after draining the copy's requests: stop the engine
        self._pusher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._pusher
        await self.server.stop()

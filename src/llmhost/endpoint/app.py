"""The endpoint's ASGI app: router and admin API on one port; copies start in the background."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI

from llmhost.endpoint.admin import _terminate_self, create_admin
from llmhost.endpoint.manager import EndpointManager
from llmhost.endpoint.router import Proxy, create_router

log = logging.getLogger("llmhost.endpoint")


def create_app(manager: EndpointManager, shutdown: Callable[[], None] = _terminate_self) -> FastAPI:
    proxy = Proxy(manager)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        async def start() -> None:
            try:
                await manager.start()
                log.info("endpoint %s: every component started", manager.spec.name)
            except Exception:
                log.exception("endpoint %s: starting failed", manager.spec.name)

        starting = asyncio.create_task(start(), name="endpoint start")
        try:
            yield
        finally:
            log.info("endpoint %s: draining and stopping copies", manager.spec.name)
            starting.cancel()
            await manager.shutdown()
            await proxy.aclose()
            log.info("endpoint %s: every copy stopped", manager.spec.name)

    app = FastAPI(title=f"llmhost endpoint {manager.spec.name}", lifespan=lifespan, docs_url=None,
                  redoc_url=None)  # fmt: skip
    app.include_router(create_router(manager, proxy))
    app.include_router(create_admin(manager, shutdown))
    return app

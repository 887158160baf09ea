"""Loading and unloading LoRA adapters while the server runs (`POST /admin/adapters/load|unload`).

The engine checks an adapter against the model as it loads it (llama.cpp refuses one made for another
model); requests running with an adapter keep it: unloading it then is a 409.
"""

from __future__ import annotations

import asyncio

from llmhost.engine.llamacpp.adapters import AdapterConflictError, AdapterInUseError
from llmhost.engine.llamacpp.model import ModelLoadError
from llmhost.engine.lora import AdapterSpec
from llmhost.errors import BadRequestError, ModelError, NotFoundError
from llmhost.server.protocol.adapters import (
    AdapterInfo,
    AdapterList,
    LoadAdapterRequest,
    UnloadAdapterRequest,
)
from llmhost.server.serving.context import ServingContext
from llmhost.store import ModelNotFoundError, resolve
from llmhost.web.errors import APIError


class AdapterAdmin:
    def __init__(self, ctx: ServingContext) -> None:
        self.ctx = ctx

    async def listing(self) -> AdapterList:
        self.ctx.require_ready()
        status = await self.ctx.engine.adapter_status()
        data = [
            AdapterInfo(name=s.name, path=s.path, scale=s.scale, loaded=s.loaded, requests=s.requests)
            for s in status
        ]
        return AdapterList(data=data, max_loras=self.ctx.settings.engine.max_loras)

    async def load(self, body: LoadAdapterRequest) -> AdapterList:
        """Resolve the reference (an s3:// or hf:// one downloaded), then load it into the engine."""
        self.ctx.require_ready()
        try:
            path = await asyncio.to_thread(lambda: str(resolve(body.path).gguf))
        except (ModelNotFoundError, ValueError) as exc:
            status = exc.status if isinstance(exc, ModelNotFoundError) else BadRequestError.status
            raise APIError(status, str(exc), field="path") from exc
        spec = AdapterSpec(body.name, path, body.scale)
        try:
            await self.ctx.engine.load_adapter(spec)
        except AdapterConflictError as exc:
            raise APIError(exc.status, str(exc), type_="conflict", field="name") from exc
        except (ModelLoadError, OSError) as exc:
            raise APIError(ModelError.status, f"LoRA adapter {body.name!r}: {exc}", field="path") from exc
        self.ctx.adapters.add(spec)
        return await self.listing()

    async def unload(self, body: UnloadAdapterRequest) -> AdapterList:
        self.ctx.require_ready()
        try:
            await self.ctx.engine.unload_adapter(body.name)
        except KeyError as exc:
            raise APIError(
                NotFoundError.status,
                f"no LoRA adapter named {body.name!r}; loaded: {self.ctx.adapters.names()}",
                type_="not_found",
                field="name",
            ) from exc
        except AdapterInUseError as exc:
            raise APIError(
                exc.status, str(exc), type_="conflict", field="name", headers={"Retry-After": "1"}
            ) from exc
        self.ctx.adapters.remove(body.name)
        return await self.listing()

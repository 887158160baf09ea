"""Engine liveness and draining through a real uvicorn server on 127.0.0.1, over a fake engine."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from llmhost.engine import AsyncEngine, FinishReason, GenerationRequest, SamplingParams
from llmhost.process.lifecycle import GracefulServer, Lifecycle, Phase
from llmhost.server import ServerSettings, create_app
from tests.unit.engine_fakes import FakeModel, config, engine_factory


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def served(model: FakeModel, lifecycle: Lifecycle, **kw: Any) -> tuple[AsyncEngine, GracefulServer, str]:
    cfg = config(**kw)
    engine = AsyncEngine("fake.gguf", cfg, load=lambda: engine_factory(model, cfg))
    engine.start()
    assert engine.wait_ready(10)
    port = free_port()
    app = create_app(ServerSettings(model_path=Path("fake.gguf"), engine=cfg, port=port), engine, lifecycle)
    server = GracefulServer(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"), lifecycle)
    return engine, server, f"http://127.0.0.1:{port}"


async def wait_up(url: str) -> None:
    async with httpx.AsyncClient() as c:
        for _ in range(100):
            try:
                await c.get(f"{url}/health")
                return
            except httpx.TransportError:
                await asyncio.sleep(0.05)
    raise AssertionError("server did not start")


async def test_a_dead_engine_turns_ping_503_fails_requests_fast_and_exits_1() -> None:
    model = FakeModel()
    lifecycle = Lifecycle()
    # without prefix caching a finished request's KV is trimmed: a KV operation every request makes
    engine, server, url = served(model, lifecycle, max_step_failures=2, prefix_caching=False)
    task = asyncio.create_task(server.serve())
    try:
        await wait_up(url)
        async with httpx.AsyncClient(base_url=url, timeout=10) as c:
            assert (await c.get("/ping")).status_code == 200

            def broken(op: Any) -> None:
                raise RuntimeError("KV store broken")

            model.apply = broken  # type: ignore[method-assign]
            greedy_one = SamplingParams(max_tokens=1, temperature=0)
            short = engine.submit(GenerationRequest("short", [1], greedy_one))
            assert (await short.collect())[-1].finish_reason is FinishReason.LENGTH
            for _ in range(50):
                if engine.dead:
                    break
                await asyncio.sleep(0.05)
            assert engine.dead
            assert (await c.get("/ping")).status_code == 503
            r = await c.post("/detokenize", json={"tokens": [1]})
            assert r.status_code == 503 and r.headers["retry-after"] == "1"
        await asyncio.wait_for(task, 10)
        assert lifecycle.exit_code == 1 and "engine dead" in lifecycle.reason
    finally:
        engine.shutdown()
        task.cancel()


async def test_drain_refuses_new_requests_then_exits_0() -> None:
    lifecycle = Lifecycle(grace_s=5)
    engine, server, url = served(FakeModel(), lifecycle)
    task = asyncio.create_task(server.serve())
    try:
        await wait_up(url)
        server.handle_exit(15, None)  # what SIGTERM does
        assert lifecycle.phase in (Phase.DRAINING, Phase.EXITING)
        await asyncio.wait_for(task, 10)
        assert lifecycle.exit_code == 0 and lifecycle.phase is Phase.EXITING
    finally:
        engine.shutdown()
        task.cancel()

"""Every refusal path: a clear 4xx/5xx JSON body naming the field and the limit."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from llmhost.engine import AsyncEngine, Engine, EngineConfig, EngineState
from llmhost.engine.loop import load_engine
from llmhost.server import ServerSettings, create_app
from llmhost.store import resolve_model
from tests.integration.conftest import Server


def error(r: httpx.Response) -> dict[str, object]:
    """The error object of either shape: OpenAI's `{"error": {...}}` or TGI's flat
    `{"error": message, "error_type", ...}` (TGI routes)."""
    body = r.json()
    if isinstance(body["error"], str):
        return {**body, "message": body["error"]}
    inner: dict[str, object] = body["error"]
    return inner


def test_invalid_json_is_400(server: Server) -> None:
    r = httpx.post(
        f"{server.url}/v1/completions", content=b'{"prompt": ', headers={"content-type": "application/json"}
    )
    assert r.status_code == 400
    assert error(r)["field"] == "body"


def test_wrong_type_is_422_naming_the_field(server: Server) -> None:
    r = httpx.post(f"{server.url}/v1/completions", json={"prompt": "x", "max_tokens": "many"})
    assert r.status_code == 422
    assert error(r)["field"] == "max_tokens"


def test_unknown_field_value_is_422(server: Server) -> None:
    r = httpx.post(
        f"{server.url}/v1/chat/completions", json={"messages": [{"role": "wizard", "content": "x"}]}
    )
    assert r.status_code == 422
    assert error(r)["field"] == "messages.0.role"
    r = httpx.post(f"{server.url}/invocations", json={"inputs": "x", "parameters": {"top_p": 1.5}})
    assert r.status_code == 422
    assert error(r)["field"] == "parameters.top_p"


def test_body_without_a_known_schema_is_422(server: Server) -> None:
    r = httpx.post(f"{server.url}/invocations", json={"text": "x"})
    assert r.status_code == 422 and error(r)["field"] == "inputs"


def test_prompt_beyond_max_input_is_422_with_both_numbers(small_server: Server) -> None:
    r = httpx.post(f"{small_server.url}/v1/completions", json={"prompt": "word " * 100, "max_tokens": 1})
    assert r.status_code == 422
    e = error(r)
    assert e["field"] == "prompt" and e["limit"] == 32 and int(str(e["value"])) > 32
    assert "32" in str(e["message"])


def test_prompt_plus_max_tokens_beyond_total_is_422(small_server: Server) -> None:
    r = httpx.post(
        f"{small_server.url}/generate", json={"inputs": "Hello", "parameters": {"max_new_tokens": 100}}
    )
    assert r.status_code == 422
    e = error(r)
    # in TGI's words, the limit by its flag
    assert e["field"] == "parameters.max_new_tokens" and e["limit"] == 64
    assert "parameters.max_new_tokens 100" in str(e["message"]) and "64" in str(e["message"])
    assert "(--max-total-tokens)" in str(e["message"])


def test_body_over_6mb_is_413(server: Server) -> None:
    big = b'{"inputs": "' + b"a" * (6 * 1024 * 1024 + 10) + b'"}'
    r = httpx.post(f"{server.url}/invocations", content=big, headers={"content-type": "application/json"})
    assert r.status_code == 413
    assert error(r)["limit"] == 6 * 1024 * 1024

    def chunks():  # no Content-Length: the limit is enforced while reading
        yield b'{"inputs": "'
        for _ in range(7):
            yield b"a" * 1024 * 1024
        yield b'"}'

    r = httpx.post(
        f"{server.url}/invocations", content=chunks(), headers={"content-type": "application/json"}
    )
    assert r.status_code == 413


def test_chat_without_template_is_400(small_server: Server) -> None:
    r = httpx.post(
        f"{small_server.url}/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]}
    )
    assert r.status_code == 400
    assert "chat template" in str(error(r)["message"])


def test_queue_full_is_429_with_retry_after_and_nothing_is_dropped(small_server: Server) -> None:
    def call(i: int) -> httpx.Response:
        body = {"prompt": f"Request {i}:", "max_tokens": 24, "ignore_eos": True}
        return httpx.post(f"{small_server.url}/v1/completions", json=body, timeout=120)

    with ThreadPoolExecutor(6) as pool:
        responses = list(pool.map(call, range(6)))
    codes = sorted(r.status_code for r in responses)
    assert set(codes) <= {200, 429}
    assert codes.count(429) >= 1 and codes.count(200) >= 2
    for r in responses:
        if r.status_code == 429:
            assert r.headers["retry-after"] == "1"
            assert error(r)["limit"] == 2
        else:
            assert r.json()["usage"]["completion_tokens"] == 24


def test_client_disconnect_mid_stream_frees_the_sequence(server: Server) -> None:
    body = {"prompt": "Tell me a long story.", "max_tokens": 1000, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", f"{server.url}/v1/completions", json=body, timeout=60) as r:
        lines = r.iter_lines()  # keep the iterator: abandoning it closes the connection
        seen = 0
        while seen < 3:
            seen += next(lines).startswith("data: ")
        assert server.metric("llmhost_num_requests_running") == 1
        generated_before = server.metric("llmhost_generation_tokens_total")
    deadline = time.monotonic() + 5  # 1000 tokens would take far longer than this
    while server.metric("llmhost_num_requests_running") > 0:
        assert time.monotonic() < deadline, "the aborted sequence still runs"
        time.sleep(0.05)
    aborted_after = server.metric("llmhost_generation_tokens_total") - generated_before
    assert 3 <= aborted_after < 1000


def test_ping_is_503_while_loading_then_200() -> None:
    settings = ServerSettings(
        model_path=resolve_model(),
        engine=EngineConfig(
            max_concurrent=1, max_total_tokens=256, max_input_tokens=128, max_batch_tokens=64
        ),
    )
    gate = threading.Event()

    def slow_load() -> Engine:  # the engine thread is running and loading, held at the gate
        gate.wait(60)
        return load_engine(str(settings.model_path), settings.engine)

    engine = AsyncEngine(settings.model_path, settings.engine, load=slow_load)
    app = create_app(settings, engine=engine)

    async def scenario() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
            engine.start()
            assert engine.state is EngineState.LOADING
            assert (await c.get("/ping")).status_code == 503
            r = await c.post("/generate", json={"inputs": "Hi"})
            assert r.status_code == 503 and r.headers["retry-after"] == "1"
            assert "loading" in r.json()["error"] and r.json()["error_type"] == "overloaded"
            gate.set()
            assert await asyncio.to_thread(engine.wait_ready, 120)
            assert (await c.get("/ping")).status_code == 200
            r = await c.post("/generate", json={"inputs": "Hi", "parameters": {"max_new_tokens": 2}})
            assert r.status_code == 200

    try:
        asyncio.run(scenario())
    finally:
        engine.shutdown()


def test_unloadable_model_reports_why(tmp_path: object) -> None:
    from pathlib import Path

    bad = Path(str(tmp_path)) / "bad.gguf"
    bad.write_bytes(b"not a gguf")
    engine = AsyncEngine(
        bad, EngineConfig(max_concurrent=1, max_total_tokens=64, max_input_tokens=32, max_batch_tokens=16)
    )
    engine.start()
    assert not engine.wait_ready(60)
    assert engine.error is not None and "bad.gguf" in engine.error

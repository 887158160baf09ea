"""A fake LLM server for the bench tests: Starlette + uvicorn, streaming tokens on a known schedule.

Token ``i`` (0-based) of a response is sent at ``start + ttft + i * itl`` (absolute deadlines, so sleep
jitter does not accumulate). Speaks OpenAI completions/chat SSE, TGI ``/generate_stream`` and SageMaker
``/invocations`` (TGI body), plus ``/tokenize``/``/detokenize`` (one token per whitespace-separated
word) and ``/ping``. ``/v1/embeddings`` and ``/v1/rerank`` answer one JSON body after the TTFT: a
vector per input, a score per document, usage counting one token per word (mode ``malformed``: one
vector or score fewer than asked).

Behaviour per request can be changed with headers: ``X-Fake-Mode`` (ok | 429 | 500 | 400 | malformed |
error_event | truncated | hang), ``X-Fake-TTFT`` and ``X-Fake-ITL`` (seconds), and for the OpenAI APIs
``X-Fake-Tokens-Per-Event`` (k tokens in each event, as a server flushing a speculative draft does:
event ``j`` is sent at ``start + ttft + j * itl``; ``usage`` reports the real token count).

With ``--max-concurrent N`` at most N streams run at once and the others wait their turn (a server
that saturates: throughput stops growing with concurrency while latency does).

With ``--metrics`` it serves ``/metrics`` through llmhost's own ``ServerMetrics`` (the names a real
``llmhost serve`` exposes), fed by the fake's state: per request one prefix-cache lookup (every second
lookup a hit), 4 speculative tokens proposed and 3 accepted, its tokens as generated tokens; requests
in flight beyond 2 count as waiting, KV use is 10 cells per request in flight out of 100.

Run standalone: ``python fake_server.py --port 8123 --ttft 0.05 --itl 0.02``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route


class Vocab:
    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.words: list[str] = []

    def tokenize(self, text: str) -> list[int]:
        out = []
        for w in text.split():
            if w not in self.ids:
                self.ids[w] = len(self.words)
                self.words.append(w)
            out.append(self.ids[w])
        return out

    def detokenize(self, tokens: list[int]) -> str:
        return " ".join(self.words[t] for t in tokens)


class FakeEngine:
    """The counters and gauges the fake's /metrics reports (module docstring)."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.lookups = 0
        self.drafts = 0

    def stats(self) -> Any:
        from llmhost.engine.stats import EngineStats

        return EngineStats(
            running=min(self.in_flight, 2),
            waiting=max(self.in_flight - 2, 0),
            kv_tokens_used=10 * self.in_flight,
            kv_tokens_capacity=100,
            steps=0,
            prefix_cache_lookups=self.lookups,
            prefix_cache_hits=self.lookups // 2,
            prefix_cache_reused_tokens=0,
            prompt_tokens_prefilled=0,
            draft_tokens=4 * self.drafts,
            draft_tokens_accepted=3 * self.drafts,
        )


def make_app(
    ttft_s: float = 0.05,
    itl_s: float = 0.02,
    tokenizer: bool = True,
    default_mode: str = "ok",
    metrics: bool = False,
    max_concurrent: int | None = None,
) -> Starlette:
    vocab = Vocab()
    stats = {"requests": 0}
    engine = FakeEngine()
    slots = asyncio.Semaphore(max_concurrent) if max_concurrent else None
    server_metrics: Any = None
    if metrics:
        from llmhost.server.metrics import ServerMetrics

        server_metrics = ServerMetrics()
        server_metrics.attach(engine.stats)

    def params(request: Request) -> tuple[str, float, float]:
        mode = request.headers.get("x-fake-mode", default_mode)
        ttft = float(request.headers.get("x-fake-ttft", ttft_s))
        itl = float(request.headers.get("x-fake-itl", itl_s))
        return mode, ttft, itl

    async def schedule(start: float | None, n: int, ttft: float, itl: float) -> AsyncIterator[int]:
        # None: the clock starts now (a request that waited for a slot starts when it got one)
        start = time.perf_counter() if start is None else start
        for i in range(n):
            delay = start + ttft + i * itl - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            yield i

    async def openai_stream(
        start: float | None, body: dict[str, Any], chat: bool, mode: str, ttft: float, itl: float, k: int
    ) -> AsyncIterator[bytes]:
        n = int(body.get("max_tokens") or 16)
        prompt = body.get("prompt") or " ".join(m["content"] for m in body.get("messages", []))
        events = -(-n // k)
        if chat:
            yield b'data: {"choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n'
        async for i in schedule(start, events, ttft, itl):
            if mode == "malformed" and i == 1:
                yield b"data: {this is not json\n\n"
                return
            if mode == "error_event" and i == 1:
                yield b'data: {"error":{"message":"boom","type":"server_error"}}\n\n'
                return
            if mode == "truncated" and i == events - 1:
                return
            finish = "length" if i == events - 1 else None
            text = "".join(f" w{t}" for t in range(i * k, min((i + 1) * k, n)))
            choice: dict[str, Any] = {"index": 0, "finish_reason": finish}
            if chat:
                choice["delta"] = {"content": text}
            else:
                choice["text"] = text
            yield b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n"
        if server_metrics is not None:
            server_metrics.generation_tokens.inc(n)
        if (body.get("stream_options") or {}).get("include_usage"):
            usage = {"prompt_tokens": len(str(prompt).split()), "completion_tokens": n, "total_tokens": n}
            yield b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n"
        yield b"data: [DONE]\n\n"

    async def tgi_stream(
        start: float | None, body: dict[str, Any], mode: str, ttft: float, itl: float
    ) -> AsyncIterator[bytes]:
        n = int((body.get("parameters") or {}).get("max_new_tokens") or 16)
        text = ""
        async for i in schedule(start, n, ttft, itl):
            if mode == "malformed" and i == 1:
                yield b"data:{nope\n\n"
                return
            if mode == "error_event" and i == 1:
                yield b'data:{"error":"boom","error_type":"generation"}\n\n'
                return
            if mode == "truncated" and i == n - 1:
                return
            piece = f" w{i}"
            text += piece
            event: dict[str, Any] = {
                "index": i,
                "token": {"id": i, "text": piece, "logprob": -0.1, "special": False},
                "generated_text": None,
                "details": None,
            }
            if i == n - 1:
                event["generated_text"] = text
                event["details"] = {"finish_reason": "length", "generated_tokens": n, "seed": None}
            yield b"data:" + json.dumps(event).encode() + b"\n\n"

    async def generate(request: Request, kind: str) -> Response:
        start = time.perf_counter()
        stats["requests"] += 1
        mode, ttft, itl = params(request)
        if mode == "429":
            return JSONResponse({"error": "too many requests"}, status_code=429)
        if mode == "500":
            return JSONResponse({"error": "internal"}, status_code=500)
        if mode == "400":
            return JSONResponse({"error": "bad request"}, status_code=400)
        if mode == "hang":
            await asyncio.sleep(3600)
        body = await request.json()
        k = int(request.headers.get("x-fake-tokens-per-event", "1"))
        begin = None if slots is not None else start
        if kind in ("openai", "chat"):
            gen = openai_stream(begin, body, kind == "chat", mode, ttft, itl, k)
        else:
            gen = tgi_stream(begin, body, mode, ttft, itl)
        return StreamingResponse(tracked(gen), media_type="text/event-stream")

    async def tracked(gen: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        engine.in_flight += 1
        engine.lookups += 1
        engine.drafts += 1
        try:
            if slots is None:
                async for part in gen:
                    yield part
                return
            async with slots:
                async for part in gen:
                    yield part
        finally:
            engine.in_flight -= 1

    async def metrics_route(request: Request) -> Response:
        if server_metrics is None:
            return JSONResponse({"error": "not found"}, status_code=404)
        return Response(server_metrics.render(), media_type="text/plain; version=0.0.4")

    async def completions(request: Request) -> Response:
        return await generate(request, "openai")

    async def chat(request: Request) -> Response:
        return await generate(request, "chat")

    async def generate_stream(request: Request) -> Response:
        return await generate(request, "tgi")

    async def invocations(request: Request) -> Response:
        # record the inference component header so tests can check it arrived
        stats["component"] = request.headers.get("x-amzn-sagemaker-inference-component", "")  # type: ignore[assignment]
        return await generate(request, "tgi")

    async def retrieval(request: Request, key: str) -> Response:
        stats["requests"] += 1
        mode, ttft, _ = params(request)
        if mode == "500":
            return JSONResponse({"error": "internal"}, status_code=500)
        body = await request.json()
        texts = body["input"] if key == "data" else body["documents"]
        await asyncio.sleep(ttft)
        n = len(texts) - (mode == "malformed")
        if key == "data":
            items: list[dict[str, Any]] = [{"index": i, "embedding": [0.5, 0.5]} for i in range(n)]
        else:
            items = [{"index": i, "relevance_score": 1.0 / (i + 1)} for i in range(n)]
        tokens = sum(len(t.split()) for t in texts) + len(str(body.get("query", "")).split()) * len(texts)
        return JSONResponse({key: items, "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    async def embeddings(request: Request) -> Response:
        return await retrieval(request, "data")

    async def rerank(request: Request) -> Response:
        return await retrieval(request, "results")

    async def tokenize(request: Request) -> Response:
        if not tokenizer:
            return JSONResponse({"error": "not found"}, status_code=404)
        body = await request.json()
        return JSONResponse({"tokens": vocab.tokenize(body["content"])})

    async def detokenize(request: Request) -> Response:
        if not tokenizer:
            return JSONResponse({"error": "not found"}, status_code=404)
        body = await request.json()
        return JSONResponse({"content": vocab.detokenize(body["tokens"])})

    async def ping(request: Request) -> Response:
        return Response(b"", status_code=200)

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "fake-model", "object": "model"}]})

    async def stats_route(request: Request) -> Response:
        return JSONResponse(stats)

    return Starlette(
        routes=[
            Route("/v1/completions", completions, methods=["POST"]),
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/generate_stream", generate_stream, methods=["POST"]),
            Route("/invocations", invocations, methods=["POST"]),
            Route("/v1/embeddings", embeddings, methods=["POST"]),
            Route("/v1/rerank", rerank, methods=["POST"]),
            Route("/tokenize", tokenize, methods=["POST"]),
            Route("/detokenize", detokenize, methods=["POST"]),
            Route("/ping", ping),
            Route("/v1/models", models),
            Route("/stats", stats_route),
            Route("/metrics", metrics_route),
        ]
    )


def main() -> None:
    import uvicorn

    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--ttft", type=float, default=0.05)
    ap.add_argument("--itl", type=float, default=0.02)
    ap.add_argument("--no-tokenizer", action="store_true")
    ap.add_argument("--startup-delay", type=float, default=0.0)
    ap.add_argument("--metrics", action="store_true", help="serve /metrics (llmhost's names)")
    ap.add_argument("--max-concurrent", type=int, default=None, help="streams at once; others wait")
    args = ap.parse_args()
    if args.startup_delay:
        time.sleep(args.startup_delay)
    app = make_app(
        args.ttft,
        args.itl,
        tokenizer=not args.no_tokenizer,
        metrics=args.metrics,
        max_concurrent=args.max_concurrent,
    )
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=1,
    )


if __name__ == "__main__":
    main()

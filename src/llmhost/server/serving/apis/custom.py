"""/invocations through inference.py's functions (SageMaker inference toolkit's order):
input_fn(body, content_type) -> predict_fn(data, model) -> output_fn(prediction, accept).

The defaults are today's /invocations: input_fn parses the JSON body (same 4xx), predict_fn answers it
as /invocations does and returns the JSON it would send, output_fn writes that as JSON. With both
predict_fn and output_fn default the route's own response is sent, streams included. A streaming body
(`"stream": true`) with the default predict_fn and a custom output_fn is a 400 naming output_fn (a
stream cannot be reshaped as one object). A custom predict_fn may return an iterator (sync or async)
of JSON-able items: the default output_fn sends them as SSE `data:` events.

A user function's exception is a JSON error naming it: 400 for ValueError/TypeError/KeyError in
input_fn (the body was bad), else 500; the traceback is logged with the request id. APIErrors from
the model object (full queue 429, prompt too long 422, ...) keep their own status.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from llmhost.inference import bind_engine_model
from llmhost.server.custom_code import Handlers, load_handlers
from llmhost.server.errors import refused_in
from llmhost.server.protocol.limits import parse_json
from llmhost.server.serving.apis.custom_model import CustomModel, current_request_id
from llmhost.server.serving.apis.runtime import STREAMING_KEYS, streaming_body, streams
from llmhost.server.serving.context import ServingContext
from llmhost.shared.jsontext import compact
from llmhost.shared.jsontypes import JSONObject
from llmhost.web.asgi import request_id
from llmhost.web.errors import APIError
from llmhost.web.formats import TGI

log = logging.getLogger("llmhost.server")

JSON = "application/json"
Dispatch = Callable[[Request, JSONObject], Awaitable[Response]]
_BAD_INPUT = (ValueError, TypeError, KeyError)
_DONE = object()


class CustomInference:
    def __init__(self, handlers: Handlers, ctx: ServingContext) -> None:
        self.handlers = handlers
        self.ctx = ctx
        self.model: Any = None  # set by start(): model_fn's value, else the CustomModel

    @classmethod
    def load(cls, script: Path, ctx: ServingContext) -> CustomInference:
        return cls(load_handlers(script), ctx)

    async def start(self) -> None:
        """At startup, on the event loop: the model object (also llmhost.inference.engine_model(), so
        that a model_fn returning its own object keeps the engine), then model_fn (which may take long:
        a worker thread). Raises what model_fn raised, wrapped with its name."""
        engine_model = CustomModel(self.ctx, asyncio.get_running_loop())
        bind_engine_model(engine_model)
        self.model = engine_model
        fn = self.handlers.model_fn
        if fn is not None:
            try:
                self.model = await _call(fn, str(self.handlers.model_dir))
            except (Exception, SystemExit) as exc:  # sys.exit() too: the server says why it stops
                raise RuntimeError(f"model_fn raised {type(exc).__name__}: {exc}") from exc
        log.info("inference.py %s: %s", self.handlers.path, ", ".join(self.handlers.defined()))

    async def invoke(
        self, request: Request, dispatch: Dispatch, *, accept: str | None = None, stream: bool = False
    ) -> Response:
        """/invocations through the hooks. The SageMaker Runtime paths pass the Accept they carry and,
        for InvokeEndpointWithResponseStream (`stream`), ask the default prediction to stream."""
        rid = request_id(request.scope)
        current_request_id.set(rid)  # copied into worker threads and into the model's tasks
        h = self.handlers
        body = await request.body()
        content_type = request.headers.get("content-type", JSON)
        if accept is None and not stream:
            accept = request.headers.get("accept")
        accept = accept or JSON
        data = await self._run("input_fn", h.input_fn, _default_input, body, content_type)
        if h.predict_fn is None and h.output_fn is None:
            return await dispatch(request, streaming_body(_body(data), stream))
        if h.predict_fn is None:
            prediction = await _default_predict(request, dispatch, data)
        else:
            prediction = await self._run("predict_fn", h.predict_fn, None, data, self.model)
        # a TGI body the default prediction answered: output_fn's failures too in TGI's shapes
        tgi = h.predict_fn is None and isinstance(data, dict) and "inputs" in data
        shape: contextlib.AbstractContextManager[None] = refused_in(TGI) if tgi else contextlib.nullcontext()
        with shape:
            result = await self._run("output_fn", h.output_fn, _default_output, prediction, accept)
            return self._respond(result, accept)

    def close(self) -> None:
        """At shutdown: engine_model() no longer hands out an engine that is gone."""
        bind_engine_model(None)

    async def _run(
        self, name: str, fn: Callable[..., Any] | None, default: Callable[..., Any] | None, *args: Any
    ) -> Any:
        if fn is None:
            assert default is not None
            return default(*args)
        try:
            return await _call(fn, *args)
        except APIError:
            raise
        except (Exception, SystemExit) as exc:  # sys.exit() in user code must not stop the server
            raise self._failure(name, exc) from exc

    def _failure(self, name: str, exc: BaseException) -> APIError:
        rid = current_request_id.get()
        log.error("request %s: inference.py %s raised", rid, name, exc_info=exc)
        bad_input = name == "input_fn" and isinstance(exc, _BAD_INPUT)
        status, kind = (400, "invalid_request_error") if bad_input else (500, "server_error")
        return APIError(status, f"{name} raised {type(exc).__name__}: {exc}", kind, field=name)

    def _respond(self, result: Any, accept: str) -> Response:
        if isinstance(result, Response):
            return result
        body, media = result if isinstance(result, tuple) and len(result) == 2 else (result, None)
        media = media or _concrete(accept)
        if isinstance(body, (bytes, str)):
            return Response(body, media_type=media)
        if isinstance(body, (Iterator, AsyncIterator)):
            return StreamingResponse(_pieces(body), media_type=media)
        raise self._failure(
            "output_fn",
            TypeError(
                f"returned {type(body).__name__}; return bytes, str, an iterator of them, "
                "(body, content_type) or a Response"
            ),
        )


async def _call(fn: Callable[..., Any], *args: Any) -> Any:
    """A coroutine function is awaited; a plain one runs on a worker thread (the event loop must keep
    serving while user code blocks), with this request's context."""
    if inspect.iscoroutinefunction(fn):
        return await fn(*args)
    return await asyncio.to_thread(fn, *args)


def _default_input(body: bytes, content_type: str) -> JSONObject:
    data = parse_json(body)  # /invocations reads any content type as JSON, as it always has
    if not isinstance(data, dict):
        raise APIError(422, "request body must be a JSON object", field="body")
    return data


def _body(data: object) -> JSONObject:
    """What input_fn returned, as the default predict_fn reads it: /invocations' JSON object."""
    if not isinstance(data, dict):
        raise APIError(
            500,
            f"input_fn returned {type(data).__name__}; the default predict_fn takes the "
            "JSON object /invocations takes",
            "server_error",
            field="input_fn",
        )
    return data


async def _default_predict(request: Request, dispatch: Dispatch, data: Any) -> Any:
    data = _body(data)
    if streams(data) and any(key in data for key in STREAMING_KEYS):
        message = (
            "streaming is not available with a custom output_fn: it reshapes one complete "
            'prediction; send the request without "stream"'
        )
        raise APIError(400, message, field="output_fn")
    response = await dispatch(request, data)
    return json.loads(bytes(response.body))


def _default_output(prediction: Any, accept: str) -> tuple[Any, str]:
    if isinstance(prediction, (Iterator, AsyncIterator)):
        return _sse(prediction), "text/event-stream"
    try:
        return json.dumps(prediction, ensure_ascii=False), JSON
    except (TypeError, ValueError) as exc:  # the prediction is the user's, the JSON is the default's
        log.error(
            "request %s: the default output_fn cannot write predict_fn's value", current_request_id.get()
        )
        raise APIError(
            500,
            f"predict_fn returned {type(prediction).__name__}, which the default output_fn "
            f"cannot write as JSON ({exc}); return JSON-able data or define output_fn",
            "server_error",
            field="output_fn",
        ) from exc


async def _sse(items: Iterator[Any] | AsyncIterator[Any]) -> AsyncIterator[str]:
    # the status line is sent already: a failure mid-way ends the stream with an error event
    try:
        async for item in _pieces(items):
            yield f"data: {compact(item)}\n\n"
    except Exception as exc:  # _pieces turns sys.exit() into a RuntimeError
        log.error("request %s: predict_fn's stream failed", current_request_id.get(), exc_info=exc)
        message = f"predict_fn's stream raised {type(exc).__name__}: {exc}"
        yield f"data: {json.dumps({'error': {'message': message, 'type': 'server_error', 'code': 500}})}\n\n"


async def _pieces(items: Iterator[Any] | AsyncIterator[Any]) -> AsyncIterator[Any]:
    """The items of a user's iterator. sys.exit() in it becomes a RuntimeError: a SystemExit reaching
    the event loop would stop the server."""
    source = items if isinstance(items, AsyncIterator) else _pulled(items)
    try:
        async with contextlib.aclosing(_aiter(source)) as pieces:
            async for item in pieces:
                yield item
    except SystemExit as exc:
        raise RuntimeError(f"SystemExit({exc.code}) raised by the iterator inference.py returned") from exc


async def _aiter(items: AsyncIterator[Any]) -> AsyncGenerator[Any, None]:
    async for item in items:
        yield item


async def _pulled(items: Iterator[Any]) -> AsyncIterator[Any]:
    """A sync iterator's items, pulled on a worker thread: user generators block."""
    try:
        while (item := await asyncio.to_thread(next, items, _DONE)) is not _DONE:
            yield item
    finally:
        # a client that left: the generator's own cleanup (aborting its generation) runs off the loop
        asyncio.get_running_loop().run_in_executor(None, _close, items)


def _close(items: Iterator[Any]) -> None:
    close = getattr(items, "close", None)
    if close is not None:
        with contextlib.suppress(ValueError):  # still running on a worker thread: it ends by itself
            close()


def _concrete(accept: str) -> str:
    """The Accept header as a response type: one concrete media type, else JSON."""
    first = accept.split(",")[0].split(";")[0].strip()
    return first if first and "*" not in first else JSON

"""The ASGI middleware that captures: for a sampled inference request it keeps the body's pieces as the
route reads them and the answer's as they are sent (each passed on at once: a stream is never held
back), then hands them to the writer once the answer is complete. Only the two Content-Types and
SageMaker's InferenceId are read from the headers: no header (API keys, Authorization) is captured."""

from __future__ import annotations

import time
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from llmhost.web.capture.config import CaptureConfig
from llmhost.web.capture.record import Event, Payload
from llmhost.web.capture.writer import CaptureWriter

CONTENT_TYPE = b"content-type"
# SageMaker's InvokeEndpoint InferenceId, which its data capture writes in eventMetadata
INFERENCE_ID = b"x-amzn-sagemaker-inference-id"
MAX_INFERENCE_ID = 64  # SageMaker's bound on InferenceId


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> str:
    for key, value in headers:
        if key.lower() == name:
            return value.decode("latin-1")
    return ""


class CaptureMiddleware:
    """Captures the POST requests `captured(path)` names, sampled by `config`, answered 2xx (a refusal is
    no inference), into `writer`."""

    def __init__(
        self,
        app: ASGIApp,
        config: CaptureConfig,
        writer: CaptureWriter,
        captured: Callable[[str], bool],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.app = app
        self.config = config
        self.writer = writer
        self.captured = captured
        self.clock = clock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope.get("method") != "POST"
            or not self.captured(scope["path"])
            or not self.config.sampled()
        ):
            await self.app(scope, receive, send)
            return
        arrived = self.clock()
        body: list[bytes] = []
        answer: list[bytes] = []
        status = 0
        answer_type = ""
        want_input, want_output = self.config.captures_input, self.config.captures_output

        async def capturing_receive() -> Message:
            message = await receive()
            if want_input and message["type"] == "http.request":
                body.append(bytes(message.get("body", b"")))
            return message

        async def capturing_send(message: Message) -> None:
            nonlocal status, answer_type
            if message["type"] == "http.response.start":
                status = int(message["status"])
                answer_type = _header(list(message.get("headers", [])), CONTENT_TYPE)
            elif want_output and message["type"] == "http.response.body":
                answer.append(bytes(message.get("body", b"")))
            await send(message)

        await self.app(scope, capturing_receive, capturing_send)
        if not 200 <= status < 300:
            return
        headers = list(scope.get("headers", []))
        inference_id = _header(headers, INFERENCE_ID)[:MAX_INFERENCE_ID]
        self.writer.offer(
            Event(
                time=arrived,
                input=Payload(_header(headers, CONTENT_TYPE), tuple(body)) if want_input else None,
                output=Payload(answer_type, tuple(answer)) if want_output else None,
                inference_id=inference_id,
            )
        )

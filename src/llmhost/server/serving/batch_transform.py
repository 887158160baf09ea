"""SageMaker Batch Transform: GET /execution-parameters, and /invocations' JSON Lines bodies answered
line by line.

Each record of a body is answered as /invocations answers it alone (the route's `invoke`), the records
running at once (the engine batches them) up to MaxConcurrentTransforms. SageMaker fails a whole
mini-batch on any non-2xx answer, so one refused record refuses the body: its status and refusal, with
its line, and no answer for the other records (those still running are cancelled).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

from pydantic import ValidationError
from starlette.responses import Response

from llmhost.engine import EngineError
from llmhost.server.errors import from_engine
from llmhost.server.protocol.batch_transform import (
    JSONLINES,
    ExecutionParameters,
    Record,
    on_line,
    one_record,
    read_records,
)
from llmhost.server.settings import ServerSettings
from llmhost.shared.jsontypes import JSONObject
from llmhost.web.errors import APIError, from_pydantic
from llmhost.web.responses import ErrorResponse

# how one record is answered: /invocations' answer to that body alone
Invoke = Callable[[JSONObject], Awaitable[Response]]


class BatchTransform:
    def __init__(self, settings: ServerSettings) -> None:
        self.settings = settings

    def parameters(self) -> ExecutionParameters:
        """What the server really enforces: the body limit in force, the strategy, the records of one
        body run at once."""
        s = self.settings
        return ExecutionParameters(
            MaxConcurrentTransforms=s.concurrent_transforms,
            BatchStrategy=s.batch_strategy,  # type: ignore[arg-type]  # ServerSettings checks its choices
            MaxPayloadInMB=s.max_payload_mb,
        )

    async def answer(self, raw: bytes, invoke: Invoke) -> Response:
        """The JSON Lines answer to a JSON Lines body: one line a record, in the body's order."""
        records = read_records(raw)
        if self.settings.batch_strategy == "SINGLE_RECORD":
            one_record(records)
        for record in records:
            _not_streamed(record)
        gate = asyncio.Semaphore(self.settings.concurrent_transforms)
        try:
            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(_answer(record, invoke, gate)) for record in records]
        except ExceptionGroup as failed:
            raise _first(failed) from None
        return Response(b"".join(t.result() + b"\n" for t in tasks), media_type=JSONLINES)


def _not_streamed(record: Record) -> None:
    """A record's answer is one line: a record asking to stream is refused before any runs."""
    if record.body.get("stream") is True:
        message = "a JSON Lines body is answered line by line; a record cannot stream"
        raise on_line(APIError(400, message, field="stream"), record.line)


async def _answer(record: Record, invoke: Invoke, gate: asyncio.Semaphore) -> bytes:
    """The record's answer as one line; a refusal names the record's line."""
    async with gate:
        try:
            response = await invoke(record.body)
        except APIError as exc:
            raise on_line(exc, record.line) from exc
        except ValidationError as exc:
            raise on_line(from_pydantic(exc), record.line) from exc
        except EngineError as exc:
            raise on_line(from_engine(exc), record.line) from exc
    if isinstance(response, ErrorResponse):
        raise on_line(response.error, record.line)
    body = bytes(response.body)
    # JSONResponse writes one line; a renderer that does not is rewritten compact
    return body if b"\n" not in body else json.dumps(json.loads(body), ensure_ascii=False).encode()


def _first(failed: ExceptionGroup[Exception]) -> Exception:
    """The refusal of the earliest line, else the first unexpected exception (a 500)."""
    refusals = [e for e in failed.exceptions if isinstance(e, APIError)]
    return min(refusals, key=_line) if refusals else failed.exceptions[0]


def _line(refusal: APIError) -> int:
    line = refusal.extra.get("line")
    return line if isinstance(line, int) else 0

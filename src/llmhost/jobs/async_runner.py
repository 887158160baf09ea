"""The async invocation runner: one task per server that takes the queued invocations in turn (oldest
first, at most `concurrency` at once), reads each input from S3, sends it through the server's own
/invocations behind interactive requests, commits the outcome, then writes it to S3: the answer at the
OutputLocation, or the error at the FailureLocation. A server killed mid-way runs again, on the same
directory, what has no outcome and writes again what has one."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Callable

from llmhost.engine.request import BATCH_PRIORITY
from llmhost.jobs import async_wire as wire
from llmhost.jobs.async_status import AsyncStatus
from llmhost.jobs.async_store import AsyncInvocation, AsyncQueue, Outcome
from llmhost.jobs.dispatch import Dispatcher, RawAnswer
from llmhost.jobs.s3objects import S3ObjectError, S3Objects
from llmhost.jobs.store import JobStore
from llmhost.web.errors import error_body
from llmhost.web.sagemaker_runtime import JSON, media_type

log = logging.getLogger("llmhost")
INVOCATIONS = "/invocations"
# seconds between looks at the queue when nothing woke the runner
IDLE_S = 5.0
# seconds before an outcome that could not be written to S3 is tried again
WRITE_RETRY_S = 30.0


class AsyncRunner:
    def __init__(
        self,
        store: Callable[[], JobStore | None],
        dispatcher: Dispatcher,
        concurrency: int,
        prioritize: bool = True,
    ) -> None:
        """`store`: the jobs directory once opened (None before: nothing to run); `prioritize`: put
        chat and completion bodies behind interactive requests (False where inference.py reads them)."""
        self._store = store
        self.dispatcher = dispatcher
        self.prioritize = prioritize
        self.slots = asyncio.Semaphore(concurrency)
        self.woken = asyncio.Event()
        self.s3 = S3Objects()
        self.running: set[int] = set()  # the invocations being taken now (the metrics read them)
        self._retry_at: dict[int, float] = {}  # outcomes S3 refused, by when to try again

    def wake(self) -> None:
        self.woken.set()

    async def run(self) -> None:
        """Until cancelled (the server stopping: invocations under way are dropped and run again next
        start)."""
        async with asyncio.TaskGroup() as group:
            while True:
                self.woken.clear()
                store = self._store()
                queue = store.invocations if store else None
                for seq in self._due(queue):
                    await self.slots.acquire()
                    self.running.add(seq)
                    group.create_task(self._take(queue, seq))  # type: ignore[arg-type]  # due: a queue
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.woken.wait(), IDLE_S)

    def _due(self, queue: AsyncQueue | None) -> list[int]:
        """The open invocations not taken now, oldest first (an outcome S3 refused waits its turn)."""
        now = time.monotonic()
        open_ = queue.open() if queue else []
        return [i.seq for i in open_ if i.seq not in self.running and self._retry_at.get(i.seq, 0) <= now]

    async def _take(self, queue: AsyncQueue, seq: int) -> None:
        """Run the invocation if it has no outcome yet, then write its outcome."""
        try:
            invocation = queue.get(seq)
            if invocation.expired(time.time()):
                queue.answer(seq, _expired(invocation))
            elif invocation.status in (AsyncStatus.QUEUED, AsyncStatus.RUNNING):
                queue.start(seq)
                queue.answer(seq, await self._outcome(invocation))
            await self._write(queue, queue.get(seq))
        except Exception:  # the next invocations go on; this one is tried again later
            log.exception("async invocation %d stopped: tried again in %.0f s", seq, WRITE_RETRY_S)
            self._retry_at[seq] = time.monotonic() + WRITE_RETRY_S
        finally:
            self.running.discard(seq)
            self.slots.release()

    async def _outcome(self, invocation: AsyncInvocation) -> Outcome:
        ask = invocation.ask
        try:
            answer = await asyncio.wait_for(self._answer(invocation), ask.timeout_s)
        except TimeoutError:
            message = (
                f"the invocation did not finish within InvocationTimeoutSeconds ({ask.timeout_s} s) "
                "and was abandoned"
            )
            return _error(408, message, "invocation_timeout", wire.INVOCATION_TIMEOUT, ask.timeout_s)
        except S3ObjectError as exc:
            message = f"the input at {ask.input_location} could not be read: {exc}"
            return _error(400, message, "invalid_request_error", wire.INPUT_LOCATION)
        return Outcome(200 <= answer.status < 300, answer.body, answer.content_type)

    async def _answer(self, invocation: AsyncInvocation) -> RawAnswer:
        """What /invocations answers for its input; a busy server's refusal (429, 503) is retried after
        its Retry-After, within the invocation's timeout."""
        ask = invocation.ask
        body = ask.body if ask.body is not None else await self.s3.read(ask.input_location)
        if self.prioritize:
            body = with_priority(body, ask.content_type)
        headers = {
            name: value
            for name, value in (
                ("content-type", ask.content_type),
                ("accept", ask.accept),
                (wire.CUSTOM_ATTRIBUTES, ask.custom_attributes),
            )
            if value is not None
        }
        request_id = f"async-{invocation.seq}-{uuid.uuid4().hex[:8]}"
        while True:
            answer = await self.dispatcher.send(INVOCATIONS, body, headers, request_id)
            if not answer.busy:
                return answer
            await asyncio.sleep(answer.retry_after_s)

    async def _write(self, queue: AsyncQueue, invocation: AsyncInvocation) -> None:
        outcome = invocation.outcome
        if invocation.status is not AsyncStatus.ANSWERED or outcome is None:
            return
        await self.s3.write(invocation.destination, outcome.body, outcome.content_type)
        queue.written(invocation.seq, outcome.ok)
        self._retry_at.pop(invocation.seq, None)
        log.info(
            "async invocation %s %s: %s",
            invocation.ask.inference_id,
            "completed" if outcome.ok else "failed",
            invocation.destination,
        )


def with_priority(body: bytes, content_type: str | None) -> bytes:
    """An OpenAI chat or completion body that sets no `priority` runs behind interactive requests (vLLM's
    field); any other body (TGI, embeddings, JSON Lines, not JSON) is sent as it came."""
    if content_type is not None and media_type(content_type) != JSON:
        return body
    try:
        parsed = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return body  # /invocations answers it with its own refusal
    if not isinstance(parsed, dict) or "priority" in parsed or "inputs" in parsed:
        return body
    if "messages" not in parsed and "prompt" not in parsed:
        return body
    return json.dumps({**parsed, "priority": BATCH_PRIORITY}).encode()


def _expired(invocation: AsyncInvocation) -> Outcome:
    ttl = invocation.ask.ttl_s
    message = f"the invocation waited in the queue longer than RequestTTLSeconds ({ttl} s) and did not run"
    return _error(408, message, "request_expired", wire.REQUEST_TTL, ttl)


def _error(status: int, message: str, type_: str, header: str, limit: int | None = None) -> Outcome:
    """An error the runner writes itself, in the JSON shape /invocations refuses with."""
    if limit is None:
        body = error_body(status, message, type_, field=header)
    else:
        body = error_body(status, message, type_, field=header, limit=limit)
    return Outcome(False, json.dumps(body).encode(), JSON)

"""The batch runner: one task per server that takes each open batch in turn (oldest first) through
validation, its lines, and its output files. Every answer is committed as it comes, so a server killed
mid-batch and started again on the same directory runs only the lines that have no answer."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable

import httpx

from llmhost.engine.request import BATCH_PRIORITY
from llmhost.jobs import lines, outputs
from llmhost.jobs.dispatch import Answer, Dispatcher
from llmhost.jobs.protocol import Batch, BatchError, BatchErrors
from llmhost.jobs.status import BatchStatus
from llmhost.jobs.store import JobStore, LineUsage
from llmhost.shared.jsontext import compact
from llmhost.shared.jsontypes import JSONObject

log = logging.getLogger("llmhost")
# endpoints whose requests take vLLM's `priority` (the others never wait for a sequence)
PRIORITIZED = ("/v1/chat/completions", "/v1/completions", "/v1/responses")
# seconds between looks at the store when nothing woke the runner (a batch's window may pass)
IDLE_S = 5.0


class BatchRunner:
    def __init__(
        self, store: Callable[[], JobStore | None], dispatcher: Dispatcher, concurrency: int
    ) -> None:
        """`store`: the jobs directory once opened (None before: nothing to run)."""
        self._store = store
        self.dispatcher = dispatcher
        self.slots = asyncio.Semaphore(concurrency)
        self.woken = asyncio.Event()
        # lines being answered now, by batch: the console and metrics read them
        self.in_flight: dict[str, int] = {}

    def wake(self) -> None:
        self.woken.set()

    async def run(self) -> None:
        """Until cancelled (the server stopping: lines under way are dropped and run again next start)."""
        while True:
            store = self._store()
            todo = [b for b in store.list_batches() if b.status.open] if store else []
            for batch in reversed(todo):  # listed newest first
                await self._advance_or_fail(store, batch.id)  # type: ignore[arg-type]
            if not todo:
                self.woken.clear()
                with contextlib.suppress(TimeoutError):  # a look at the windows of batches now and then
                    await asyncio.wait_for(self.woken.wait(), IDLE_S)

    async def _advance_or_fail(self, store: JobStore, batch_id: str) -> None:
        """Advance the batch; one that cannot go on (its input file unreadable, the app failing) is
        failed with the reason, and the runner goes on with the next."""
        try:
            await self.advance(store, batch_id)
        except (OSError, ExceptionGroup, httpx.HTTPError) as exc:
            log.exception("batch %s failed", batch_id)
            batch = _get(store, batch_id)
            batch.errors = BatchErrors(
                data=[BatchError(code="server_error", message=f"the batch stopped: {exc!r}")]
            )
            batch.status, batch.failed_at = BatchStatus.FAILED, int(time.time())
            store.put_batch(batch)

    async def advance(self, store: JobStore, batch_id: str) -> None:
        """Take the batch as far as it goes: validated, run, written out."""
        batch = _get(store, batch_id)
        if batch.status is BatchStatus.VALIDATING:
            await self._validate(store, batch)
        batch = _get(store, batch_id)
        if batch.status is BatchStatus.IN_PROGRESS:
            await self._run_lines(store, batch)
        batch = _get(store, batch_id)
        if batch.status is BatchStatus.IN_PROGRESS and _expired(batch):
            self._finish(store, batch.id, "expired")
        elif batch.status is BatchStatus.IN_PROGRESS:
            _set(store, batch.id, BatchStatus.FINALIZING, "finalizing_at")
            self._finish(store, batch.id, None)
        elif batch.status is BatchStatus.FINALIZING:
            self._finish(store, batch.id, None)
        elif batch.status is BatchStatus.CANCELLING:
            self._finish(store, batch.id, "cancelled")

    async def _validate(self, store: JobStore, batch: Batch) -> None:
        path = store.file_path(batch.input_file_id)
        total, errors = await asyncio.to_thread(lines.validate, path, batch.endpoint)
        batch = _get(store, batch.id)  # it may have been cancelled meanwhile
        if batch.status is not BatchStatus.VALIDATING:
            return
        batch.request_counts.total = total
        if errors:
            batch.errors = BatchErrors(data=errors)
            batch.status, batch.failed_at = BatchStatus.FAILED, int(time.time())
        else:
            batch.status, batch.in_progress_at = BatchStatus.IN_PROGRESS, int(time.time())
        store.put_batch(batch)

    async def _run_lines(self, store: JobStore, batch: Batch) -> None:
        """Each line without an answer, at most `concurrency` at once, until all ran or the batch stops."""
        answered = store.answered_lines(batch.id)
        self.in_flight[batch.id] = 0
        try:
            async with asyncio.TaskGroup() as group:
                for item in lines.read(store.file_path(batch.input_file_id)):
                    if not isinstance(item, lines.BatchLine) or item.line in answered:
                        continue
                    await self.slots.acquire()
                    if _stopping(_get(store, batch.id)):
                        self.slots.release()
                        break
                    group.create_task(self._run_line(store, batch.id, item))
        finally:
            del self.in_flight[batch.id]

    async def _run_line(self, store: JobStore, batch_id: str, item: lines.BatchLine) -> None:
        self.in_flight[batch_id] += 1
        try:
            answer = await self._answer(store, batch_id, item)
            if answer is not None:
                record = _record(batch_id, item, answer)
                ok = 200 <= answer.status < 300
                store.put_result(batch_id, item.line, ok, compact(record), usage_of(answer.body))
        finally:
            self.in_flight[batch_id] -= 1
            self.slots.release()

    async def _answer(self, store: JobStore, batch_id: str, item: lines.BatchLine) -> Answer | None:
        """The line's answer; a busy server's refusal (429, 503) is retried after its Retry-After until
        the batch stops (None: the line did not run)."""
        body = item.body
        if item.url in PRIORITIZED and "priority" not in body:
            body = {**body, "priority": BATCH_PRIORITY}
        request_id = f"{batch_id}-{item.line}-{uuid.uuid4().hex[:8]}"
        while True:
            answer = await self.dispatcher.post(item.url, body, request_id)
            if not answer.busy:
                return answer
            if _stopping(_get(store, batch_id)):
                return None
            await asyncio.sleep(answer.retry_after_s)

    def _finish(self, store: JobStore, batch_id: str, stopped: str | None) -> None:
        """Write the output files, then the batch's last status: completed, or why it `stopped`."""
        batch = _get(store, batch_id)
        output_id, error_id = outputs.write(store, batch, store.file_path(batch.input_file_id), stopped)
        batch = _get(store, batch_id)
        batch.output_file_id, batch.error_file_id = output_id, error_id
        now = int(time.time())
        if stopped == "expired":
            batch.status, batch.expired_at = BatchStatus.EXPIRED, now
        elif stopped == "cancelled":
            batch.status, batch.cancelled_at = BatchStatus.CANCELLED, now
        else:
            batch.status, batch.completed_at = BatchStatus.COMPLETED, now
        store.put_batch(batch)
        log.info("batch %s %s: %s", batch.id, batch.status.value, batch.request_counts.model_dump())


def _get(store: JobStore, batch_id: str) -> Batch:
    batch = store.get_batch(batch_id)
    if batch is None:  # batches are never deleted
        raise LookupError(batch_id)
    return batch


def _set(store: JobStore, batch_id: str, status: BatchStatus, stamp: str) -> None:
    batch = _get(store, batch_id)
    batch.status = status
    setattr(batch, stamp, int(time.time()))
    store.put_batch(batch)


def _expired(batch: Batch) -> bool:
    return batch.expires_at is not None and time.time() >= batch.expires_at


def _stopping(batch: Batch) -> bool:
    """No new line starts: the batch was cancelled or its window passed."""
    return batch.status is BatchStatus.CANCELLING or _expired(batch)


def _record(batch_id: str, item: lines.BatchLine, answer: Answer) -> JSONObject:
    """The line's answer in OpenAI's output format."""
    return {
        "id": f"batch_req_{batch_id.removeprefix('batch_')}_{item.line}",
        "custom_id": item.custom_id,
        "response": {"status_code": answer.status, "request_id": answer.request_id, "body": answer.body},
        "error": None,
    }


def usage_of(body: JSONObject) -> LineUsage:
    """The tokens an answer reports, in the chat/completions or the Responses API's words."""
    usage = body.get("usage")
    if not isinstance(usage, dict):
        return LineUsage()

    def count(*path: str) -> int:
        node: object = usage
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        return int(node) if isinstance(node, int) else 0

    return LineUsage(
        input_tokens=count("prompt_tokens") or count("input_tokens"),
        cached_tokens=count("prompt_tokens_details", "cached_tokens")
        or count("input_tokens_details", "cached_tokens"),
        output_tokens=count("completion_tokens") or count("output_tokens"),
        reasoning_tokens=count("completion_tokens_details", "reasoning_tokens")
        or count("output_tokens_details", "reasoning_tokens"),
    )

"""A server's jobs: its files, batches, async invocations and their runners over one jobs directory,
opened when first used (so that servers which never run a batch never contend for the directory) or at
startup when it holds batches or invocations to resume."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

from starlette.types import ASGIApp

from llmhost.jobs.async_invocations import AsyncInvocations
from llmhost.jobs.async_runner import AsyncRunner
from llmhost.jobs.async_status import AsyncStatus
from llmhost.jobs.batches import Batches
from llmhost.jobs.dispatch import Dispatcher
from llmhost.jobs.files import Files
from llmhost.jobs.runner import BatchRunner
from llmhost.jobs.settings import JobsSettings
from llmhost.jobs.status import BatchStatus
from llmhost.jobs.store import JobsDirBusyError, JobStore
from llmhost.web.errors import APIError, unavailable

log = logging.getLogger("llmhost")


class Jobs:
    def __init__(self, settings: JobsSettings, app: ASGIApp, scripted: bool = False) -> None:
        """`app`: where the lines are sent (the app these jobs are served by); `scripted`: its
        /invocations is inference.py's (an async invocation's body is sent as it came)."""
        self.settings = settings
        self._store: JobStore | None = None
        self.dispatcher = Dispatcher(app)
        self.runner = BatchRunner(lambda: self._store, self.dispatcher, settings.concurrency)
        self.files = Files(self.store, settings.max_file_bytes, lambda f: self.batches.reading(f))
        self.batches = Batches(self.store, self.files, self.runner.wake)
        self.async_runner = AsyncRunner(
            lambda: self._store, self.dispatcher, settings.concurrency, prioritize=not scripted
        )
        self.invocations = AsyncInvocations(self.store, settings, self.async_runner.wake)
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def token(self) -> str:
        """The key the runner's requests carry (the server accepts it along with its own keys)."""
        return self.dispatcher.token

    def store(self) -> JobStore:
        """The jobs directory, opened now if it is not yet (503 while another process owns it)."""
        if self._store is None:
            try:
                self._store = JobStore(self.settings.root)
            except JobsDirBusyError as exc:
                raise unavailable(str(exc)) from exc
            self.runner.wake()
            self.async_runner.wake()
        return self._store

    def start(self) -> None:
        """Start the runners; a directory left with open batches or async invocations is opened now and
        they resume."""
        if (self.settings.root / "jobs.db").exists():
            with contextlib.suppress(APIError):  # another process owns it: this server opens it on use
                store = self.store()
                n = sum(1 for b in store.list_batches() if b.status.open)
                if n:
                    log.info("resuming %d batches from %s", n, self.settings.root)
                queued = len(store.invocations.open())
                if queued:
                    log.info("resuming %d async invocations from %s", queued, self.settings.root)
        self._tasks = [
            asyncio.create_task(self.runner.run(), name="batch runner"),
            asyncio.create_task(self.async_runner.run(), name="async invocation runner"),
        ]

    async def stop(self) -> None:
        """Stop the runners (lines and invocations under way run again next start) and close the
        directory."""
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.dispatcher.close()
        if self._store is not None:
            self._store.close()
            self._store = None

    def figures(self) -> JobsFigures | None:
        """Batches by status and their requests' progress (None before the directory is opened)."""
        store = self._store
        if store is None:
            return None
        batches = dict.fromkeys(BatchStatus, 0)
        queued = 0
        running = sum(self.runner.in_flight.values())
        for batch in store.list_batches():
            batches[batch.status] += 1
            if batch.status in (BatchStatus.VALIDATING, BatchStatus.IN_PROGRESS):
                counts = batch.request_counts
                queued += max(
                    0,
                    counts.total - counts.completed - counts.failed - self.runner.in_flight.get(batch.id, 0),
                )
        completed, failed = store.answer_totals()
        return JobsFigures(batches, queued, running, completed, failed, store.invocations.counts())


@dataclass(frozen=True, slots=True)
class JobsFigures:
    batches: dict[BatchStatus, int]
    queued: int  # requests of open batches not yet sent
    running: int  # being answered now
    completed: int  # answered, in every batch
    failed: int  # refused (the error files' lines)
    async_invocations: dict[AsyncStatus, int]  # SageMaker async invocations, by status

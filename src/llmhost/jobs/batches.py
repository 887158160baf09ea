"""OpenAI's Batches: created over an uploaded file, read, listed and cancelled; the runner does the work."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from llmhost.jobs.files import Files
from llmhost.jobs.paging import page
from llmhost.jobs.protocol import COMPLETION_WINDOWS, Batch, BatchCreate, Page
from llmhost.jobs.status import BatchStatus
from llmhost.jobs.store import JobStore
from llmhost.web.errors import APIError


def not_found(batch_id: str) -> APIError:
    return APIError(404, f"No such Batch object: {batch_id}", field="batch_id")


class Batches:
    def __init__(self, store: Callable[[], JobStore], files: Files, wake: Callable[[], None]) -> None:
        """`wake`: tells the runner there is new work (a batch created or cancelled)."""
        self._store = store
        self._files = files
        self._wake = wake

    def create(self, ask: BatchCreate) -> Batch:
        meta = self._files.get(ask.input_file_id)
        if meta.purpose != "batch":
            raise APIError(
                400,
                f"input_file_id {ask.input_file_id} has purpose {meta.purpose!r}; a batch reads a "
                "'batch' file",
                field="input_file_id",
            )
        now = int(time.time())
        batch = Batch(
            id=f"batch_{uuid.uuid4().hex[:24]}",
            endpoint=ask.endpoint,
            input_file_id=ask.input_file_id,
            completion_window=ask.completion_window,
            status=BatchStatus.VALIDATING,
            created_at=now,
            expires_at=now + COMPLETION_WINDOWS[ask.completion_window],
            metadata=ask.metadata,
        )
        self._store().put_batch(batch)
        self._wake()
        return batch

    def get(self, batch_id: str) -> Batch:
        batch = self._store().get_batch(batch_id)
        if batch is None:
            raise not_found(batch_id)
        return batch

    def list(self, limit: int, after: str | None) -> Page[Batch]:
        return page(list(self._store().list_batches()), limit, after)

    def cancel(self, batch_id: str) -> Batch:
        """Lines under way finish, no other starts; a batch that has ended is a 409."""
        batch = self.get(batch_id)
        if batch.status in (BatchStatus.CANCELLING, BatchStatus.CANCELLED):
            return batch
        if batch.status not in (BatchStatus.VALIDATING, BatchStatus.IN_PROGRESS):
            raise APIError(
                409, f"Cannot cancel a batch with status '{batch.status.value}'.", field="batch_id"
            )
        batch.status = BatchStatus.CANCELLING
        batch.cancelling_at = int(time.time())
        self._store().put_batch(batch)
        self._wake()
        return batch

    def reading(self, file_id: str) -> str | None:
        """The open batch whose input is `file_id`, if any."""
        for batch in self._store().list_batches():
            if batch.status.open and batch.input_file_id == file_id:
                return batch.id
        return None

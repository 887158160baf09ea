"""OpenAI's Files, for batches: uploads streamed to the jobs directory, listed, read back and deleted;
a file expires (and is deleted) at its `expires_at`."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from llmhost.jobs.paging import page
from llmhost.jobs.protocol import BATCH_FILE_EXPIRY_S, FILE_EXPIRY_BOUNDS_S, FileDeleted, FileObject, Page
from llmhost.jobs.store import JobStore, Order, whole_file
from llmhost.web.errors import APIError

UPLOAD_PATH = "/v1/files"
UPLOAD_PURPOSES = ("batch",)
# room for a multipart body's other parts and boundaries around a file of the largest size
FORM_OVERHEAD_BYTES = 64 * 1024
# bytes read from an upload at a time
CHUNK = 1 << 20


def upload_limit(max_file_bytes: int) -> int:
    """The body limit of an upload (the file's own limit is checked as it is written)."""
    return max_file_bytes + FORM_OVERHEAD_BYTES


def not_found(file_id: str) -> APIError:
    return APIError(404, f"No such File object: {file_id}", field="file_id")


def expiry(expires_after_seconds: int | None, now: int) -> int:
    """When an upload expires: `expires_after[seconds]` after its creation (OpenAI's bounds), else a
    batch file's 30 days."""
    if expires_after_seconds is None:
        return now + BATCH_FILE_EXPIRY_S
    low, high = FILE_EXPIRY_BOUNDS_S
    if not low <= expires_after_seconds <= high:
        raise APIError(
            400,
            f"expires_after[seconds] must be between {low} and {high}, got {expires_after_seconds}",
            field="expires_after[seconds]",
        )
    return now + expires_after_seconds


class Files:
    def __init__(
        self, store: Callable[[], JobStore], max_bytes: int, in_use: Callable[[str], str | None]
    ) -> None:
        """`in_use`: the open batch reading a file, if any (such a file is not deleted)."""
        self._store = store
        self.max_bytes = max_bytes
        self._in_use = in_use

    async def upload(
        self, filename: str, purpose: str, chunks: AsyncIterator[bytes], expires_after_seconds: int | None
    ) -> FileObject:
        """Write the upload to disk a chunk at a time; over `max_bytes` it is refused (413) and removed."""
        if purpose not in UPLOAD_PURPOSES:
            raise APIError(
                400,
                f"purpose {purpose!r} is not supported: llmhost keeps files for {', '.join(UPLOAD_PURPOSES)}",
                field="purpose",
            )
        now = int(time.time())
        expires_at = expiry(expires_after_seconds, now)
        store = self._store()
        file_id = f"file-{uuid.uuid4().hex[:24]}"
        path = store.file_path(file_id)
        size = await self._write(path, chunks)
        meta = FileObject(
            id=file_id, bytes=size, created_at=now, filename=filename, purpose="batch", expires_at=expires_at
        )
        store.put_file(meta)
        return meta

    async def _write(self, path: Path, chunks: AsyncIterator[bytes]) -> int:
        size = 0
        with whole_file(path) as out:
            async for chunk in chunks:
                size += len(chunk)
                if size > self.max_bytes:
                    raise APIError(
                        413,
                        f"file is more than {self.max_bytes} bytes; the limit is {self.max_bytes} bytes "
                        "(--jobs-max-file-mb)",
                        field="file",
                        extra={"limit": self.max_bytes},
                    )
                out.write(chunk)
        return size

    def get(self, file_id: str) -> FileObject:
        meta = self._store().get_file(file_id)
        if meta is None or self._expired(meta):
            raise not_found(file_id)
        return meta

    def path(self, file_id: str) -> Path:
        """Where the file's content is (it exists: `get` found it)."""
        self.get(file_id)
        return self._store().file_path(file_id)

    def list(self, purpose: str | None, limit: int, order: Order, after: str | None) -> Page[FileObject]:
        live = [m for m in self._store().list_files(purpose, order) if not self._expired(m)]
        return page(live, limit, after)

    def delete(self, file_id: str) -> FileDeleted:
        self.get(file_id)
        batch = self._in_use(file_id)
        if batch is not None:
            raise APIError(
                409, f"file {file_id} is the input of batch {batch}, still running", field="file_id"
            )
        self._store().delete_file(file_id)
        return FileDeleted(id=file_id)

    def _expired(self, meta: FileObject) -> bool:
        """Whether the file is past its expiry, deleting it if so (unless a running batch reads it)."""
        if meta.expires_at is None or meta.expires_at > time.time() or self._in_use(meta.id):
            return False
        self._store().delete_file(meta.id)
        return True

"""The jobs directory: uploaded and written files on disk, their records, batches and each line's answer
(and the queue of async invocations) in one SQLite database. One process owns a directory at a time (a
lock file): two runners on the same batches would run lines twice."""

from __future__ import annotations

import fcntl
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal

from llmhost.errors import UnavailableError
from llmhost.jobs.async_store import AsyncQueue
from llmhost.jobs.protocol import Batch, BatchUsage, FileObject, InputTokensDetails, OutputTokensDetails

SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
    id TEXT PRIMARY KEY, created_at INTEGER NOT NULL, object TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS batches (
    id TEXT PRIMARY KEY, created_at INTEGER NOT NULL, object TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS results (
    batch_id TEXT NOT NULL, line INTEGER NOT NULL, ok INTEGER NOT NULL, record TEXT NOT NULL,
    input_tokens INTEGER NOT NULL, cached_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL, reasoning_tokens INTEGER NOT NULL,
    PRIMARY KEY (batch_id, line));
"""
Order = Literal["asc", "desc"]
USAGE_COLUMNS = ("input_tokens", "cached_tokens", "output_tokens", "reasoning_tokens")


class JobsDirBusyError(UnavailableError):
    """Another process owns the jobs directory."""


@dataclass(frozen=True, slots=True)
class LineUsage:
    """The tokens one line's answer reports (its `usage`)."""

    input_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0


class JobStore:
    """Files under `root/files/`, records in `root/jobs.db`; `root` is locked while this is open."""

    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.files_dir = root / "files"
        self.files_dir.mkdir(exist_ok=True)
        self._lock = _lock(root / "jobs.lock")
        # written from the event loop only; WAL with synchronous=FULL: a committed answer survives kill -9
        self.db = sqlite3.connect(root / "jobs.db", isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.executescript(SCHEMA)
        self.invocations = AsyncQueue(self.db)  # SageMaker async invocations, in the same database

    def close(self) -> None:
        self.db.close()
        self._lock.close()

    # -- files -------------------------------------------------------------------------------------
    def file_path(self, file_id: str) -> Path:
        return self.files_dir / file_id

    def put_file(self, meta: FileObject) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO files VALUES (?, ?, ?)",
            (meta.id, meta.created_at, meta.model_dump_json()),
        )

    def get_file(self, file_id: str) -> FileObject | None:
        row = self.db.execute("SELECT object FROM files WHERE id = ?", (file_id,)).fetchone()
        return FileObject.model_validate_json(row[0]) if row else None

    def list_files(self, purpose: str | None, order: Order) -> Iterator[FileObject]:
        direction = "DESC" if order == "desc" else "ASC"
        for (text,) in self.db.execute(
            f"SELECT object FROM files ORDER BY created_at {direction}, rowid {direction}"
        ):
            meta = FileObject.model_validate_json(text)
            if purpose is None or meta.purpose == purpose:
                yield meta

    def delete_file(self, file_id: str) -> None:
        self.db.execute("DELETE FROM files WHERE id = ?", (file_id,))
        self.file_path(file_id).unlink(missing_ok=True)

    # -- batches -----------------------------------------------------------------------------------
    def put_batch(self, batch: Batch) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO batches VALUES (?, ?, ?)",
            (batch.id, batch.created_at, batch.model_dump_json(exclude={"usage"})),
        )

    def get_batch(self, batch_id: str) -> Batch | None:
        row = self.db.execute("SELECT object FROM batches WHERE id = ?", (batch_id,)).fetchone()
        return self._with_counts(Batch.model_validate_json(row[0])) if row else None

    def list_batches(self) -> Iterator[Batch]:
        """Newest first, as OpenAI lists them."""
        for (text,) in self.db.execute("SELECT object FROM batches ORDER BY created_at DESC, rowid DESC"):
            yield self._with_counts(Batch.model_validate_json(text))

    def _with_counts(self, batch: Batch) -> Batch:
        """The batch with its request counts and usage as its stored answers say (their one source)."""
        sums = ", ".join(f"COALESCE(SUM({c}), 0)" for c in ("ok", *USAGE_COLUMNS))
        done = self.db.execute(
            f"SELECT COUNT(*), {sums} FROM results WHERE batch_id = ?", (batch.id,)
        ).fetchone()
        n, ok, inp, cached, out, reasoning = (int(x) for x in done)
        batch.request_counts.completed = ok
        batch.request_counts.failed = n - ok
        batch.usage = BatchUsage(
            input_tokens=inp,
            input_tokens_details=InputTokensDetails(cached_tokens=cached),
            output_tokens=out,
            output_tokens_details=OutputTokensDetails(reasoning_tokens=reasoning),
            total_tokens=inp + out,
        )
        return batch

    # -- answers -----------------------------------------------------------------------------------
    def put_result(self, batch_id: str, line: int, ok: bool, record: str, usage: LineUsage) -> None:
        """A line's answer, kept once: a line answered twice (run again after a restart) keeps its first."""
        self.db.execute(
            "INSERT OR IGNORE INTO results VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                batch_id,
                line,
                int(ok),
                record,
                usage.input_tokens,
                usage.cached_tokens,
                usage.output_tokens,
                usage.reasoning_tokens,
            ),
        )

    def answer_totals(self) -> tuple[int, int]:
        """Answers kept in every batch: (succeeded, refused)."""
        ok, n = self.db.execute("SELECT COALESCE(SUM(ok), 0), COUNT(*) FROM results").fetchone()
        return int(ok), int(n) - int(ok)

    def answered_lines(self, batch_id: str) -> set[int]:
        return {
            int(r[0]) for r in self.db.execute("SELECT line FROM results WHERE batch_id = ?", (batch_id,))
        }

    def write_results(self, batch_id: str, ok: bool, out: IO[str]) -> int:
        """The answers that succeeded (or failed), one JSON line each in input order; how many."""
        n = 0
        rows = self.db.execute(
            "SELECT record FROM results WHERE batch_id = ? AND ok = ? ORDER BY line", (batch_id, int(ok))
        )
        for (record,) in rows:
            out.write(record + "\n")
            n += 1
        return n

    def forget_results(self, batch_id: str) -> None:
        self.db.execute("DELETE FROM results WHERE batch_id = ?", (batch_id,))


def _lock(path: Path) -> IO[str]:
    """An exclusive lock on `path`, held while the returned file stays open; it names the owner's pid."""
    handle = path.open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as exc:
        handle.seek(0)
        owner = handle.read().strip() or "another process"
        handle.close()
        raise JobsDirBusyError(
            f"the jobs directory {path.parent} is in use by pid {owner}: give each server its own --jobs-dir"
        ) from exc
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    return handle


@contextmanager
def whole_file(path: Path) -> Iterator[IO[bytes]]:
    """A file of the jobs folder written under a temporary name and renamed in place once whole: a
    reader (or a restart) never sees part of one."""
    partial = path.with_suffix(".part")
    try:
        with partial.open("wb") as handle:
            yield handle
        partial.rename(path)
    finally:
        partial.unlink(missing_ok=True)

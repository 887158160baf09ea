"""The queue of async invocations: one table of the jobs database (jobs.db), each invocation with what
it asks, its status and, once it has one, its outcome. The outcome is committed before it is written to
S3, so a server killed in between writes the same outcome again: never an answer and an error both."""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass

from llmhost.jobs.async_status import AsyncStatus
from llmhost.jobs.async_wire import AsyncAsk

SCHEMA = """
CREATE TABLE IF NOT EXISTS async_invocations (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, inference_id TEXT NOT NULL, created_at REAL NOT NULL,
    status TEXT NOT NULL, input_location TEXT NOT NULL, body BLOB, content_type TEXT, accept TEXT,
    custom_attributes TEXT, ttl_s INTEGER NOT NULL, timeout_s INTEGER NOT NULL,
    output_location TEXT NOT NULL, failure_location TEXT NOT NULL,
    ok INTEGER, answer BLOB, answer_type TEXT);
"""
COLUMNS = (
    "seq, inference_id, created_at, status, input_location, body, content_type, accept, custom_attributes, "
    "ttl_s, timeout_s, output_location, failure_location, ok, answer, answer_type"
)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What an invocation came to: the answer's body (`ok`) or the error's, and its media type."""

    ok: bool
    body: bytes
    content_type: str


@dataclass(frozen=True, slots=True)
class AsyncInvocation:
    seq: int  # its place in the queue (inference ids are the caller's and may repeat)
    ask: AsyncAsk
    created_at: float
    status: AsyncStatus
    output_location: str
    failure_location: str
    outcome: Outcome | None

    @property
    def destination(self) -> str:
        """Where its outcome is written (it has one)."""
        return self.output_location if self.outcome is None or self.outcome.ok else self.failure_location

    def expired(self, now: float) -> bool:
        """Not started within its RequestTTLSeconds."""
        return self.status is AsyncStatus.QUEUED and now - self.created_at > self.ask.ttl_s


class AsyncQueue:
    """The table, over the jobs database's connection (written from the event loop only)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        self.db.executescript(SCHEMA)

    def add(self, ask: AsyncAsk, output_location: str, failure_location: str) -> AsyncInvocation:
        now = time.time()
        cursor = self.db.execute(
            "INSERT INTO async_invocations (inference_id, created_at, status, input_location, body, "
            "content_type, accept, custom_attributes, ttl_s, timeout_s, output_location, failure_location) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                ask.inference_id,
                now,
                AsyncStatus.QUEUED.value,
                ask.input_location,
                ask.body,
                ask.content_type,
                ask.accept,
                ask.custom_attributes,
                ask.ttl_s,
                ask.timeout_s,
                output_location,
                failure_location,
            ),
        )
        seq = cursor.lastrowid
        assert seq is not None  # an INSERT's
        return AsyncInvocation(seq, ask, now, AsyncStatus.QUEUED, output_location, failure_location, None)

    def get(self, seq: int) -> AsyncInvocation:
        row = self.db.execute(f"SELECT {COLUMNS} FROM async_invocations WHERE seq = ?", (seq,)).fetchone()
        if row is None:  # invocations are never deleted
            raise LookupError(seq)
        return _invocation(row)

    def open(self) -> list[AsyncInvocation]:
        """The invocations the runner has work for, oldest first."""
        marks = ", ".join("?" for _ in AsyncStatus if _.open)
        rows = self.db.execute(
            f"SELECT {COLUMNS} FROM async_invocations WHERE status IN ({marks}) ORDER BY seq",
            tuple(s.value for s in AsyncStatus if s.open),
        )
        return [_invocation(row) for row in rows]

    def start(self, seq: int) -> None:
        self.db.execute(
            "UPDATE async_invocations SET status = ? WHERE seq = ? AND status = ?",
            (AsyncStatus.RUNNING.value, seq, AsyncStatus.QUEUED.value),
        )

    def answer(self, seq: int, outcome: Outcome) -> None:
        """Its outcome, kept once: an invocation that has one keeps its first."""
        self.db.execute(
            "UPDATE async_invocations SET status = ?, ok = ?, answer = ?, answer_type = ? "
            "WHERE seq = ? AND status IN (?, ?)",
            (
                AsyncStatus.ANSWERED.value,
                int(outcome.ok),
                outcome.body,
                outcome.content_type,
                seq,
                AsyncStatus.QUEUED.value,
                AsyncStatus.RUNNING.value,
            ),
        )

    def written(self, seq: int, ok: bool) -> None:
        """Its outcome is in S3: the answer (`ok`) or the error."""
        status = AsyncStatus.COMPLETED if ok else AsyncStatus.FAILED
        self.db.execute(
            "UPDATE async_invocations SET status = ?, body = NULL WHERE seq = ? AND status = ?",
            (status.value, seq, AsyncStatus.ANSWERED.value),
        )

    def counts(self) -> dict[AsyncStatus, int]:
        out = dict.fromkeys(AsyncStatus, 0)
        for status, n in self.db.execute("SELECT status, COUNT(*) FROM async_invocations GROUP BY status"):
            out[AsyncStatus(status)] = int(n)
        return out


def _invocation(row: tuple[object, ...]) -> AsyncInvocation:
    (seq, inference_id, created_at, status, location, body, content_type, accept, attributes) = row[:9]
    ttl_s, timeout_s, output_location, failure_location, ok, answer, answer_type = row[9:]
    ask = AsyncAsk(
        inference_id=str(inference_id),
        input_location=str(location),
        body=body if isinstance(body, bytes) else None,
        content_type=_text(content_type),
        accept=_text(accept),
        custom_attributes=_text(attributes),
        ttl_s=int(str(ttl_s)),
        timeout_s=int(str(timeout_s)),
    )
    outcome = None
    if ok is not None and isinstance(answer, bytes):
        outcome = Outcome(bool(ok), answer, str(answer_type))
    return AsyncInvocation(
        int(str(seq)),
        ask,
        float(str(created_at)),
        AsyncStatus(str(status)),
        str(output_location),
        str(failure_location),
        outcome,
    )


def _text(value: object) -> str | None:
    return None if value is None else str(value)

"""An async invocation's lifecycle (SageMaker Asynchronous Inference), as its queue keeps it."""

from __future__ import annotations

import enum


class AsyncStatus(enum.StrEnum):
    QUEUED = "queued"  # accepted (202) and kept: waits for a slot; its RequestTTLSeconds runs
    RUNNING = "running"  # its input read and sent through /invocations; a server killed now runs it again
    ANSWERED = "answered"  # its outcome committed (answer or error), not yet in S3: written from it, once
    COMPLETED = "completed"  # the answer is at its OutputLocation (and nothing at its FailureLocation)
    FAILED = "failed"  # the error is at its FailureLocation (and nothing at its OutputLocation)

    @property
    def open(self) -> bool:
        """Whether the runner still has work for it (after a restart too)."""
        return self in OPEN


OPEN = frozenset({AsyncStatus.QUEUED, AsyncStatus.RUNNING, AsyncStatus.ANSWERED})

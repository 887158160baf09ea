"""A batch's lifecycle, OpenAI's statuses."""

from __future__ import annotations

import enum


class BatchStatus(enum.StrEnum):
    VALIDATING = "validating"  # its input file is being read line by line; nothing runs yet
    FAILED = "failed"  # the input file did not validate: `errors` names the lines; nothing ran
    IN_PROGRESS = "in_progress"  # its lines run, each once, behind interactive requests
    FINALIZING = "finalizing"  # every line answered (or the batch stopped): the output files are written
    COMPLETED = "completed"  # done: output_file_id (answers) and error_file_id (refusals) are readable
    EXPIRED = "expired"  # its completion window passed first: lines not run are in the error file
    CANCELLING = "cancelling"  # asked to stop: lines under way finish, no new one starts
    CANCELLED = "cancelled"  # stopped: what ran is in the output, what did not in the error file

    @property
    def open(self) -> bool:
        """Whether the runner still has work for it (after a restart too)."""
        return self in OPEN


OPEN = frozenset(
    {BatchStatus.VALIDATING, BatchStatus.IN_PROGRESS, BatchStatus.FINALIZING, BatchStatus.CANCELLING}
)

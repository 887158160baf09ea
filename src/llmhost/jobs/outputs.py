"""A batch's output and error files, written from its stored answers (again, whole, after a restart)."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from llmhost.jobs import lines
from llmhost.jobs.protocol import Batch, FileObject
from llmhost.jobs.store import JobStore, whole_file
from llmhost.shared.jsontext import compact

# what a line that never ran says, by why the batch stopped
NOT_RUN = {
    "expired": ("batch_expired", "This request could not be executed before the completion window expired."),
    "cancelled": ("batch_cancelled", "This request was not executed: the batch was cancelled."),
}


def write(
    store: JobStore, batch: Batch, input_path: Path, stopped: str | None
) -> tuple[str | None, str | None]:
    """The output file (answers that succeeded) and error file (refused lines and, for a batch that
    `stopped` ("expired", "cancelled"), every line that never ran), each in input order; ids of None
    where a file would be empty."""
    suffix = batch.id.removeprefix("batch_")
    out_id, err_id = f"file-out-{suffix}", f"file-err-{suffix}"
    with _writing(store.file_path(out_id)) as out:
        n_out = store.write_results(batch.id, True, out)
    with _writing(store.file_path(err_id)) as err:
        n_err = store.write_results(batch.id, False, err)
        if stopped is not None:
            n_err += _not_run(store, batch, input_path, stopped, err)
    return _keep(store, out_id, n_out, batch), _keep(store, err_id, n_err, batch)


def _not_run(store: JobStore, batch: Batch, input_path: Path, stopped: str, out: IO[str]) -> int:
    code, message = NOT_RUN[stopped]
    answered = store.answered_lines(batch.id)
    n = 0
    for item in lines.read(input_path):
        if isinstance(item, lines.BatchLine) and item.line not in answered:
            record = {
                "id": f"batch_req_{batch.id.removeprefix('batch_')}_{item.line}",
                "custom_id": item.custom_id,
                "response": None,
                "error": {"code": code, "message": message},
            }
            out.write(compact(record) + "\n")
            n += 1
    return n


@contextmanager
def _writing(path: Path) -> Iterator[IO[str]]:
    """A text file of the jobs folder, written whole (`whole_file`)."""
    with whole_file(path) as raw, io.TextIOWrapper(raw, encoding="utf-8") as handle:
        yield handle


def _keep(store: JobStore, file_id: str, n: int, batch: Batch) -> str | None:
    path = store.file_path(file_id)
    if n == 0:
        path.unlink(missing_ok=True)
        return None
    meta = FileObject(
        id=file_id,
        bytes=path.stat().st_size,
        created_at=int(time.time()),
        filename=f"{batch.id}_{'output' if file_id.startswith('file-out') else 'error'}.jsonl",
        purpose="batch_output",
    )
    store.put_file(meta)
    return file_id

"""The jobs folder's database: answers kept once, counts and usage read from them, one owner at a time."""

from __future__ import annotations

import io
import multiprocessing
from pathlib import Path

import pytest

from llmhost.jobs.protocol import Batch
from llmhost.jobs.runner import usage_of
from llmhost.jobs.status import BatchStatus
from llmhost.jobs.store import JobsDirBusyError, JobStore, LineUsage


def batch(batch_id: str = "batch_1", created_at: int = 1) -> Batch:
    return Batch(
        id=batch_id,
        endpoint="/v1/completions",
        input_file_id="file-1",
        completion_window="24h",
        status=BatchStatus.IN_PROGRESS,
        created_at=created_at,
    )


def test_an_answer_is_kept_once_and_counts_come_from_the_answers(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    b = batch()
    b.request_counts.total = 3
    store.put_batch(b)
    store.put_result("batch_1", 1, True, '{"custom_id": "a"}', LineUsage(10, 4, 5, 1))
    store.put_result("batch_1", 1, True, '{"custom_id": "a", "again": 1}', LineUsage(99, 0, 99, 0))
    store.put_result("batch_1", 3, False, '{"custom_id": "c"}', LineUsage())
    got = store.get_batch("batch_1")
    assert got is not None
    assert (got.request_counts.total, got.request_counts.completed, got.request_counts.failed) == (3, 1, 1)
    assert (got.usage.input_tokens, got.usage.input_tokens_details.cached_tokens) == (10, 4)
    assert (got.usage.output_tokens, got.usage.total_tokens) == (5, 15)
    assert store.answered_lines("batch_1") == {1, 3}
    out = io.StringIO()
    assert store.write_results("batch_1", True, out) == 1 and out.getvalue() == '{"custom_id": "a"}\n'
    assert store.answer_totals() == (1, 1)
    store.close()


def test_batches_are_listed_newest_first(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    for i, t in enumerate((5, 9, 7)):
        store.put_batch(batch(f"batch_{i}", t))
    assert [b.id for b in store.list_batches()] == ["batch_1", "batch_2", "batch_0"]
    store.close()


def _open_and_report(root: str, queue: multiprocessing.Queue[str]) -> None:
    try:
        JobStore(Path(root))
        queue.put("opened")
    except JobsDirBusyError as exc:
        queue.put(str(exc))


def test_a_second_process_on_the_same_folder_is_told_who_owns_it(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    spawn = multiprocessing.get_context("spawn")
    queue: multiprocessing.Queue[str] = spawn.Queue()
    other = spawn.Process(target=_open_and_report, args=(str(tmp_path), queue))
    other.start()
    other.join(60)
    message = queue.get(timeout=10)
    assert "is in use by pid" in message and "--jobs-dir" in message
    store.close()
    with pytest.raises(JobsDirBusyError):  # in one process too: a second store on an open folder
        first = JobStore(tmp_path)
        JobStore(tmp_path)
    first.close()


@pytest.mark.parametrize(
    ("usage", "want"),
    [
        (
            {"prompt_tokens": 7, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 2}},
            LineUsage(7, 2, 3, 0),
        ),
        (
            {"input_tokens": 5, "output_tokens": 4, "output_tokens_details": {"reasoning_tokens": 1}},
            LineUsage(5, 0, 4, 1),
        ),
        ({"prompt_tokens": 6, "total_tokens": 6}, LineUsage(6, 0, 0, 0)),
    ],
)
def test_usage_is_read_in_each_apis_words(usage: dict[str, object], want: LineUsage) -> None:
    assert usage_of({"usage": usage}) == want
    assert usage_of({"error": {}}) == LineUsage()

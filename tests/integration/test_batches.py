"""OpenAI's Files and Batches on a real server, through the openai client unchanged: a batch's lines run
through the server's own routes (API keys on), refusals go to the error file while the rest complete,
and a server killed with -9 mid-batch resumes on the same directory with every custom_id answered once."""

from __future__ import annotations

import io
import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from openai import OpenAI
from openai.types import Batch

from tests.integration.conftest import CHAT_TEMPLATE, Server, start_server, stop_server

KEY = "batch-test-key"
ARGS = (
    "--max-concurrent",
    "4",
    "--chat-template",
    str(CHAT_TEMPLATE),
    "--api-key",
    KEY,
    "--jobs-max-file-mb",
    "1",
)


def serve(jobs_dir: Path) -> Server:
    return start_server(jobs_dir.parent, "--jobs-dir", str(jobs_dir), *ARGS)


@pytest.fixture(scope="module")
def jobs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("batches") / "jobs"


@pytest.fixture(scope="module")
def server(jobs_dir: Path) -> Iterator[Server]:
    srv = serve(jobs_dir)
    yield srv
    stop_server(srv)


@pytest.fixture(scope="module")
def client(server: Server) -> OpenAI:
    return OpenAI(base_url=f"{server.url}/v1", api_key=KEY, max_retries=0)


def line(custom_id: str, body: dict[str, object], url: str = "/v1/chat/completions") -> str:
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": url, "body": body})


def chat(text: str, max_tokens: int = 4) -> dict[str, object]:
    return {"messages": [{"role": "user", "content": text}], "max_tokens": max_tokens, "temperature": 0}


def upload(client: OpenAI, lines: list[str]) -> str:
    data = ("\n".join(lines) + "\n").encode()
    return client.files.create(file=("batch.jsonl", io.BytesIO(data)), purpose="batch").id


def wait(
    client: OpenAI, batch_id: str, done: tuple[str, ...] = ("completed", "failed", "expired", "cancelled")
) -> Batch:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        batch = client.batches.retrieve(batch_id)
        if batch.status in done:
            return batch
        time.sleep(0.3)
    raise AssertionError(f"batch {batch_id} still {batch.status}")


def records(client: OpenAI, file_id: str | None) -> list[dict[str, object]]:
    if file_id is None:
        return []
    return [json.loads(x) for x in client.files.content(file_id).text.splitlines()]


def test_a_batch_answers_every_line_once_and_refusals_go_to_the_error_file(
    client: OpenAI, server: Server
) -> None:
    lines = [line(f"q{i}", chat(f"Count to {i}.")) for i in range(5)]
    lines.insert(2, line("bad", {**chat("x"), "max_tokens": -1}))
    file_id = upload(client, lines)
    assert client.files.retrieve(file_id).purpose == "batch"
    assert file_id in [f.id for f in client.files.list(purpose="batch")]
    batch = client.batches.create(
        input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h", metadata={"k": "v"}
    )
    assert batch.status == "validating" and batch.metadata == {"k": "v"}
    done = wait(client, batch.id)
    assert done.status == "completed", done
    assert done.request_counts is not None
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (6, 5, 1)
    assert done.completed_at and done.in_progress_at and done.finalizing_at
    outputs = records(client, done.output_file_id)
    assert [r["custom_id"] for r in outputs] == [f"q{i}" for i in range(5)], "input order, each once"
    for r in outputs:
        response = r["response"]
        assert isinstance(response, dict) and response["status_code"] == 200 and response["request_id"]
        assert response["body"]["object"] == "chat.completion"
    assert done.usage is not None
    assert done.usage.output_tokens == sum(
        r["response"]["body"]["usage"]["completion_tokens"] for r in outputs
    )  # type: ignore[index]
    errors = records(client, done.error_file_id)
    assert [r["custom_id"] for r in errors] == ["bad"]
    assert errors[0]["response"]["status_code"] in (400, 422)  # type: ignore[index]
    assert "max_tokens" in json.dumps(errors[0]["response"])
    assert client.files.retrieve(done.output_file_id).purpose == "batch_output"  # type: ignore[arg-type]
    assert batch.id in [b.id for b in client.batches.list(limit=100)]
    metrics = httpx.get(f"{server.url}/metrics", headers={"Authorization": f"Bearer {KEY}"}, timeout=10).text
    assert 'llmhost_batches{status="completed"}' in metrics
    assert 'llmhost_batch_requests_total{outcome="failed"} 1.0' in metrics
    with pytest.raises(openai.ConflictError):
        client.batches.cancel(batch.id)


def test_a_file_with_a_line_for_another_endpoint_fails_validation_naming_the_line(client: OpenAI) -> None:
    lines = [
        line("a", chat("hi")),
        "not json",
        line("b", {"prompt": "x"}, url="/v1/completions"),
        line("a", chat("again")),
    ]
    batch = client.batches.create(
        input_file_id=upload(client, lines), endpoint="/v1/chat/completions", completion_window="24h"
    )
    done = wait(client, batch.id)
    assert done.status == "failed" and done.errors is not None and done.errors.data is not None
    found = {(e.code, e.line) for e in done.errors.data}
    assert found == {("invalid_json_line", 2), ("mismatched_endpoint", 3), ("duplicate_custom_id", 4)}
    assert (
        done.output_file_id is None and done.request_counts is not None and done.request_counts.completed == 0
    )


def test_a_cancelled_batch_keeps_what_ran_and_names_what_did_not(client: OpenAI) -> None:
    lines = [line(f"c{i}", chat(f"Tell a story {i}.", max_tokens=24)) for i in range(24)]
    batch = client.batches.create(
        input_file_id=upload(client, lines), endpoint="/v1/chat/completions", completion_window="24h"
    )
    wait(client, batch.id, done=("in_progress",))
    assert client.batches.cancel(batch.id).status == "cancelling"
    done = wait(client, batch.id)
    assert done.status == "cancelled" and done.cancelled_at
    ran = [r["custom_id"] for r in records(client, done.output_file_id)]
    not_run = records(client, done.error_file_id)
    assert sorted(ran + [r["custom_id"] for r in not_run]) == sorted(f"c{i}" for i in range(24))  # type: ignore[type-var]
    assert not_run and all(r["error"]["code"] == "batch_cancelled" for r in not_run)  # type: ignore[index]


def test_refusals_name_the_field_in_openai_words(client: OpenAI, server: Server) -> None:
    with pytest.raises(openai.BadRequestError) as wrong:
        client.files.create(file=("a.jsonl", io.BytesIO(b"{}\n")), purpose="fine-tune")
    assert wrong.value.body["param"] == "purpose"  # type: ignore[index]
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve("file-nope")
    with pytest.raises(openai.NotFoundError):
        client.batches.retrieve("batch_nope")
    with pytest.raises(openai.NotFoundError) as missing:
        client.batches.create(
            input_file_id="file-nope", endpoint="/v1/chat/completions", completion_window="24h"
        )
    assert missing.value.body["param"] == "file_id"  # type: ignore[index]
    with pytest.raises(openai.APIStatusError) as large:
        client.files.create(file=("big.jsonl", io.BytesIO(b"x" * (1024 * 1024 + 1))), purpose="batch")
    assert large.value.status_code == 413 and large.value.body["limit"] == 1024 * 1024  # type: ignore[index]
    with pytest.raises(openai.UnprocessableEntityError):
        client.batches.create(input_file_id="f", endpoint="/v1/moderations", completion_window="24h")  # type: ignore[arg-type]


def test_deleting_a_file_removes_it(client: OpenAI) -> None:
    file_id = upload(client, [line("d", chat("hi"))])
    assert client.files.delete(file_id).deleted
    with pytest.raises(openai.NotFoundError):
        client.files.content(file_id)


def test_a_server_killed_mid_batch_resumes_it_with_every_line_answered_exactly_once(
    tmp_path: Path,
) -> None:
    jobs = tmp_path / "jobs"
    first = serve(jobs)
    n = 16
    try:
        c = OpenAI(base_url=f"{first.url}/v1", api_key=KEY, max_retries=0)
        lines = [line(f"k{i}", chat(f"Say {i} and more.", max_tokens=16)) for i in range(n)]
        batch = c.batches.create(
            input_file_id=upload(c, lines), endpoint="/v1/chat/completions", completion_window="24h"
        )
        deadline = time.monotonic() + 120
        while (counts := c.batches.retrieve(batch.id).request_counts) is None or counts.completed < 3:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert counts.completed < n, "killed mid-batch"
    finally:
        first.process.send_signal(signal.SIGKILL)
        first.process.wait()
    second = serve(jobs)
    try:
        c = OpenAI(base_url=f"{second.url}/v1", api_key=KEY, max_retries=0)
        done = wait(c, batch.id)
        assert done.status == "completed" and done.request_counts is not None
        assert (done.request_counts.completed, done.request_counts.failed) == (n, 0)
        ids = [r["custom_id"] for r in records(c, done.output_file_id)]
        assert ids == [f"k{i}" for i in range(n)], "every custom_id once, none lost, none twice"
    finally:
        stop_server(second)

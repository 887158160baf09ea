"""The batch runner over a real jobs folder, sending its lines to a small ASGI app through the same
in-process transport a server uses: a busy answer is sent again, a refusal goes to the error file, a
window that passes stops the batch with every line accounted for."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from llmhost.jobs.dispatch import Dispatcher
from llmhost.jobs.protocol import Batch
from llmhost.jobs.runner import BatchRunner
from llmhost.jobs.status import BatchStatus
from llmhost.jobs.store import JobStore


class Upstream:
    """Answers /v1/completions: 503 the first `busy` times a prompt comes, 400 for max_tokens < 0,
    else its prompt back after `delay_s`; records the priority each body carried."""

    def __init__(self, busy: int = 0, delay_s: float = 0.0) -> None:
        self.busy, self.delay_s = busy, delay_s
        self.seen: dict[str, int] = {}
        self.priorities: list[object] = []
        self.app = Starlette(routes=[Route("/v1/completions", self.answer, methods=["POST"])])

    async def answer(self, request: Request) -> JSONResponse:
        body = await request.json()
        prompt = body["prompt"]
        self.seen[prompt] = self.seen.get(prompt, 0) + 1
        self.priorities.append(body.get("priority"))
        if self.seen[prompt] <= self.busy:
            return JSONResponse({"error": {"message": "busy"}}, 503, headers={"Retry-After": "0.05"})
        if body.get("max_tokens", 1) < 0:
            return JSONResponse({"error": {"message": "max_tokens must be >= 0", "param": "max_tokens"}}, 400)
        await asyncio.sleep(self.delay_s)
        usage = {"prompt_tokens": 3, "completion_tokens": 2}
        return JSONResponse({"object": "text_completion", "choices": [{"text": prompt}], "usage": usage})


def start(
    tmp_path: Path, bodies: list[dict[str, object]], expires_in_s: float = 3600
) -> tuple[JobStore, str]:
    store = JobStore(tmp_path)
    with store.file_path("file-in").open("w") as f:
        for i, body in enumerate(bodies):
            line = {"custom_id": f"c{i}", "method": "POST", "url": "/v1/completions", "body": body}
            f.write(json.dumps(line) + "\n")
    now = time.time()
    batch = Batch(
        id="batch_t",
        endpoint="/v1/completions",
        input_file_id="file-in",
        completion_window="24h",
        status=BatchStatus.VALIDATING,
        created_at=int(now),
        expires_at=int(now + expires_in_s),
    )
    store.put_batch(batch)
    return store, batch.id


def lines_of(store: JobStore, file_id: str | None) -> list[dict[str, object]]:
    assert file_id is not None
    return [json.loads(x) for x in store.file_path(file_id).read_text().splitlines()]


async def test_busy_answers_are_sent_again_and_refusals_go_to_the_error_file(tmp_path: Path) -> None:
    upstream = Upstream(busy=2)
    bodies: list[dict[str, object]] = [{"prompt": f"p{i}"} for i in range(4)]
    bodies[1]["max_tokens"] = -1
    bodies[2]["priority"] = -3  # a line's own priority is kept
    store, batch_id = start(tmp_path, bodies)
    runner = BatchRunner(lambda: store, Dispatcher(upstream.app), concurrency=2)
    await runner.advance(store, batch_id)
    done = store.get_batch(batch_id)
    assert done is not None and done.status is BatchStatus.COMPLETED
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (4, 3, 1)
    assert done.usage.output_tokens == 6
    out = lines_of(store, done.output_file_id)
    assert [r["custom_id"] for r in out] == ["c0", "c2", "c3"]
    [refused] = lines_of(store, done.error_file_id)
    assert refused["custom_id"] == "c1" and refused["response"]["status_code"] == 400  # type: ignore[index]
    assert all(n == 3 for p, n in upstream.seen.items() if p != "p1"), "two 503s, then the answer"
    assert set(upstream.priorities) == {1, -3}


async def test_a_window_that_passes_stops_the_batch_and_names_the_lines_not_run(tmp_path: Path) -> None:
    upstream = Upstream(delay_s=0.4)
    store, batch_id = start(tmp_path, [{"prompt": f"p{i}"} for i in range(8)], expires_in_s=1.0)
    runner = BatchRunner(lambda: store, Dispatcher(upstream.app), concurrency=1)
    await runner.advance(store, batch_id)
    done = store.get_batch(batch_id)
    assert done is not None and done.status is BatchStatus.EXPIRED and done.expired_at
    ran = [r["custom_id"] for r in lines_of(store, done.output_file_id)]
    not_run = lines_of(store, done.error_file_id)
    assert 1 <= len(ran) < 8
    assert all(r["error"]["code"] == "batch_expired" and r["response"] is None for r in not_run)  # type: ignore[index]
    assert sorted(ran + [str(r["custom_id"]) for r in not_run]) == [f"c{i}" for i in range(8)]


async def test_a_batch_cancelled_while_it_runs_keeps_what_ran(tmp_path: Path) -> None:
    upstream = Upstream(delay_s=0.2)
    store, batch_id = start(tmp_path, [{"prompt": f"p{i}"} for i in range(10)])
    runner = BatchRunner(lambda: store, Dispatcher(upstream.app), concurrency=2)
    running = asyncio.create_task(runner.advance(store, batch_id))
    while len(store.answered_lines(batch_id)) < 2:
        await asyncio.sleep(0.05)
    batch = store.get_batch(batch_id)
    assert batch is not None
    batch.status = BatchStatus.CANCELLING
    store.put_batch(batch)
    await running
    done = store.get_batch(batch_id)
    assert done is not None and done.status is BatchStatus.CANCELLED
    ran = lines_of(store, done.output_file_id)
    not_run = lines_of(store, done.error_file_id)
    assert len(ran) + len(not_run) == 10 and len(not_run) >= 4

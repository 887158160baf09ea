"""One `llmhost batch` run: the input uploaded once, the batch followed to its end with a progress bar,
its answers and refusals written to the output in input order. What a run needs to resume is kept in
a work folder keyed by the input's content and the target: run the same command again after an
interruption and it follows the same batch (a local model's server resumes it from its jobs folder)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmhost.bench.figures.cost import cost_per_1m_tokens
from llmhost.bench.process import HOST, ServerProcess, free_port, llmhost_command
from llmhost.jobs import lines
from llmhost.jobs.settings import default_jobs_dir
from llmhost.offline import s3io
from llmhost.offline.client import ENDED, BatchClient
from llmhost.store.artifact import sha256_file

# seconds a local model's server gets to load
STARTUP_TIMEOUT_S = 600


@dataclass(frozen=True)
class BatchRun:
    """`url`: a running server or endpoint; else `model` is served for the run with `serve_args`."""

    input: str
    output: str
    url: str | None = None
    model: str = "default"
    serve_args: tuple[str, ...] = ()
    api_key: str = ""
    work_dir: Path | None = None
    price_per_hour: float = 0.0
    poll_s: float = 0.5


@dataclass(frozen=True)
class Summary:
    batch_id: str
    status: str
    completed: int
    failed: int
    seconds: float  # this run's wall time
    output_tokens: int  # generated during this run
    cost_per_1m_tokens: float | None  # at --price-per-hour, from this run's output tokens/s

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.seconds if self.seconds > 0 else 0.0


Progress = Callable[[int, int], None]  # (lines answered, lines in all)


def run(job: BatchRun, progress: Progress) -> Summary:
    target = job.url or f"model:{job.model} {' '.join(job.serve_args)}"
    work = job.work_dir or default_work_dir(job.input, target)
    work.mkdir(parents=True, exist_ok=True)
    local_input = s3io.fetch(job.input, work)
    endpoint = endpoint_of(local_input)
    with _target(job, work) as url:
        started = time.monotonic()  # the batch's time, not a local model's loading
        client = BatchClient(url, job.api_key)
        try:
            batch_id = _resume_or_create(
                client, work / "state.json", sha256_file(local_input), local_input, endpoint
            )
            before = _output_tokens(client.get(batch_id))
            batch = _follow(client, batch_id, job.poll_s, progress)
            merged = work / "output.jsonl"
            _merge(client, batch, local_input, merged)
        finally:
            client.close()
        seconds = time.monotonic() - started
    s3io.publish(merged, job.output)
    tokens = _output_tokens(batch) - before
    counts = batch.get("request_counts") or {}
    rate = tokens / seconds if seconds > 0 else 0.0
    cost = cost_per_1m_tokens(rate, job.price_per_hour) if job.price_per_hour > 0 and rate > 0 else None
    return Summary(
        batch_id, batch["status"], counts.get("completed", 0), counts.get("failed", 0), seconds, tokens, cost
    )


def default_work_dir(input_location: str, target: str) -> Path:
    key = hashlib.sha256(f"{input_location}\n{target}".encode()).hexdigest()[:16]
    return default_jobs_dir().parent / "batch-runs" / key


def endpoint_of(path: Path) -> str:
    """The route the file's lines call (its first request's `url`; the server checks the others)."""
    for item in lines.read(path):
        if isinstance(item, lines.BatchLine):
            return item.url
    raise ValueError(f"{path}: no request in the file")


@contextlib.contextmanager
def _target(job: BatchRun, work: Path) -> Iterator[str]:
    """The URL the batch goes to: the one given, or a local server of `job.model` on the run's jobs
    folder, stopped (drained) at the end."""
    if job.url:
        yield job.url
        return
    port = free_port()
    argv = [
        *llmhost_command(),
        "serve",
        job.model,
        "--host",
        HOST,
        "--port",
        str(port),
        "--jobs-dir",
        str(work / "jobs"),
        *job.serve_args,
    ]
    server = ServerProcess(argv, {}, work / "serve.log")
    url = f"http://{HOST}:{port}"
    try:
        asyncio.run(server.wait_ready(f"{url}/ping", STARTUP_TIMEOUT_S))
        yield url
    finally:
        server.stop()


def _resume_or_create(client: BatchClient, state_file: Path, digest: str, path: Path, endpoint: str) -> str:
    """The batch an earlier run of this input created, if the server still has it running or done; else
    a new one over the file uploaded now."""
    with contextlib.suppress(OSError, ValueError, KeyError):
        state = json.loads(state_file.read_text())
        if state["input_sha256"] == digest:
            known = client.get(state["batch_id"])
            if known is not None and known["status"] not in ("failed", "cancelled", "expired"):
                return str(state["batch_id"])
    batch_id = client.create(client.upload(path), endpoint)
    state_file.write_text(json.dumps({"input_sha256": digest, "batch_id": batch_id}))
    return batch_id


def _follow(client: BatchClient, batch_id: str, poll_s: float, progress: Progress) -> dict[str, Any]:
    while True:
        batch = client.get(batch_id)
        if batch is None:
            raise RuntimeError(f"batch {batch_id} is gone from the server")
        counts = batch.get("request_counts") or {}
        progress(counts.get("completed", 0) + counts.get("failed", 0), counts.get("total", 0))
        if batch["status"] in ENDED:
            return batch
        time.sleep(poll_s)


def _merge(client: BatchClient, batch: dict[str, Any], input_path: Path, out: Path) -> None:
    """The output and error files as one, in the input's order (as `vllm run-batch` writes it); a batch
    that failed validation is an error naming its lines."""
    if batch["status"] == "failed":
        errors = (batch.get("errors") or {}).get("data") or []
        raise ValueError("the batch failed validation: " + "; ".join(e["message"] for e in errors))
    records: dict[str, str] = {}
    for file_id in (batch.get("output_file_id"), batch.get("error_file_id")):
        if file_id:
            part = out.with_suffix(".part")
            client.download(file_id, part)
            for raw in part.read_text(encoding="utf-8").splitlines():
                records[json.loads(raw)["custom_id"]] = raw
            part.unlink()
    with out.open("w", encoding="utf-8") as f:
        for item in lines.read(input_path):
            if isinstance(item, lines.BatchLine) and item.custom_id in records:
                f.write(records[item.custom_id] + "\n")


def _output_tokens(batch: dict[str, Any] | None) -> int:
    return int(((batch or {}).get("usage") or {}).get("output_tokens", 0))

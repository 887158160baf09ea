"""`llmhost batch` run as a user runs it: against a local model it starts (and, killed mid-run, run
again to resume the same batch with every line answered once), and against a running server with
its input and output on S3 (moto on 127.0.0.1)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.conftest import Server
from tests.s3server import FAKE_CREDS, moto_server

LOCAL = ("--", "--threads", "1", "--max-concurrent", "4")


def write_input(path: Path, n: int, new_tokens: int = 6) -> list[str]:
    ids = [f"id-{i}" for i in range(n)]
    with path.open("w") as f:
        for i, custom_id in enumerate(ids):
            body = {"prompt": f"Item {i}:", "max_tokens": new_tokens, "temperature": 0, "ignore_eos": True}
            f.write(
                json.dumps({"custom_id": custom_id, "method": "POST", "url": "/v1/completions", "body": body})
            )
            f.write("\n")
    return ids


def batch_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "llmhost.cli", "batch", *args]


def answered(path: Path) -> list[str]:
    records = [json.loads(x) for x in path.read_text().splitlines()]
    assert all(r["response"]["status_code"] == 200 for r in records), records
    return [r["custom_id"] for r in records]


def test_a_run_killed_midway_resumes_its_batch_when_run_again(tmp_path: Path) -> None:
    ids = write_input(tmp_path / "in.jsonl", 12, new_tokens=24)
    work, out = tmp_path / "work", tmp_path / "out.jsonl"
    args = batch_cmd(str(tmp_path / "in.jsonl"), str(out), "--work-dir", str(work), *LOCAL)
    first = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 120
    while not (work / "state.json").exists() or not _some_answered(work):
        assert first.poll() is None and time.monotonic() < deadline, (
            first.stdout.read() if first.stdout else ""
        )
        time.sleep(0.2)
    batch_id = json.loads((work / "state.json").read_text())["batch_id"]
    os.killpg(first.pid, signal.SIGKILL)  # the CLI and its server, mid-batch
    first.wait()
    assert not out.exists()
    done = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"batch {batch_id} completed: 12 answered, 0 refused" in done.stdout
    assert answered(out) == ids, "every line once, in input order"


def _some_answered(work: Path) -> bool:
    import sqlite3

    db = work / "jobs" / "jobs.db"
    if not db.exists():
        return False
    try:
        with sqlite3.connect(db, timeout=1) as conn:
            return int(conn.execute("SELECT COUNT(*) FROM results").fetchone()[0]) >= 2
    except sqlite3.OperationalError:
        return False


def test_input_and_output_on_s3_against_a_running_server(tmp_path: Path, server: Server) -> None:
    ids = write_input(tmp_path / "in.jsonl", 3)
    with moto_server() as s3:
        client = s3.client()
        client.create_bucket(Bucket="jobs")
        client.upload_file(str(tmp_path / "in.jsonl"), "jobs", "in/batch.jsonl")
        env = {**os.environ, **FAKE_CREDS, "LLMHOST_S3_ENDPOINT_URL": s3.url}
        args = batch_cmd(
            "s3://jobs/in/batch.jsonl",
            "s3://jobs/out/answers.jsonl",
            "--url",
            server.url,
            "--work-dir",
            str(tmp_path / "w"),
        )
        done = subprocess.run(args, capture_output=True, text=True, timeout=300, env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        client.download_file("jobs", "out/answers.jsonl", str(tmp_path / "answers.jsonl"))
    assert answered(tmp_path / "answers.jsonl") == ids
    assert "3 answered, 0 refused" in done.stdout and "tokens/s" in done.stdout


def test_a_file_that_fails_validation_is_an_error_naming_its_lines(tmp_path: Path, server: Server) -> None:
    (tmp_path / "in.jsonl").write_text(
        json.dumps({"custom_id": "a", "method": "POST", "url": "/v1/completions", "body": {"prompt": "x"}})
        + "\n"
        + json.dumps({"custom_id": "a", "method": "POST", "url": "/v1/completions", "body": {"prompt": "y"}})
        + "\n"
    )
    args = batch_cmd(
        str(tmp_path / "in.jsonl"),
        str(tmp_path / "out.jsonl"),
        "--url",
        server.url,
        "--work-dir",
        str(tmp_path / "w"),
    )
    done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "line 2: custom_id 'a' is used by an earlier line" in done.stderr, done.stderr
    assert not (tmp_path / "out.jsonl").exists()


@pytest.mark.parametrize("extra", [("--url", "http://127.0.0.1:9", "--", "--threads", "1")])
def test_options_for_a_local_server_with_a_url_are_refused(tmp_path: Path, extra: tuple[str, ...]) -> None:
    write_input(tmp_path / "in.jsonl", 1)
    done = subprocess.run(
        batch_cmd(str(tmp_path / "in.jsonl"), str(tmp_path / "o.jsonl"), *extra),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "with --url" in done.stderr

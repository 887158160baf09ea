"""Data capture against a real `llmhost serve`: lines in SageMaker's format under
ENDPOINT/VARIANT/yyyy/mm/dd/hh/, a streamed answer captured whole, no API key in any file, input-only
mode uploaded to a real S3 (moto's server) when the server stops, --capture-percent 0 writing nothing, and
a destination that fails (no S3 there) leaving requests answered 200 while the dropped lines count (an
unwritable folder: tests/unit/test_capture.py)."""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.conftest import CHAT_TEMPLATE, Server, free_port, start_server, stop_server
from tests.integration.console_helpers import WAIT_MS, Watched, chromium, needs_chromium
from tests.s3server import FAKE_CREDS, moto_server

SECRET = "capture-secret-key-0123456789"
AUTH = {"Authorization": f"Bearer {SECRET}"}
FOLDER = re.compile(r"^gemma-capture/AllTraffic/\d{4}/\d\d/\d\d/\d\d/\d\d-\d\d-\d{3}-[0-9a-f-]{36}\.jsonl$")
ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
WRITTEN = "llmhost_capture_lines_written_total"
DROPPED = "llmhost_capture_lines_dropped_total"


def chat(text: str = "Say hi.", **more: object) -> dict[str, object]:
    return {"messages": [{"role": "user", "content": text}], "max_tokens": 4, "temperature": 0, **more}


def capturing(tmp: Path, *args: str) -> Server:
    return start_server(
        tmp, "--chat-template", str(CHAT_TEMPLATE), "--served-model-name", "gemma-capture", *args
    )


def lines(root: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for f in sorted(root.rglob("*.jsonl")) for x in f.read_text().splitlines()]


def metric(server: Server, name: str) -> float:
    """A family's sum in /metrics, asked with the key."""
    text = httpx.get(f"{server.url}/metrics", headers=AUTH, timeout=10).text
    return sum(
        float(x.rsplit(" ", 1)[1]) for x in text.splitlines() if x.startswith((name + " ", name + "{"))
    )


def wait_for(check: Any, timeout_s: float = 30) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError("not within the time")


@pytest.fixture(scope="module")
def capture_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("capture") / "out"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, capture_dir: Path) -> Iterator[Server]:
    srv = capturing(tmp_path_factory.mktemp("serve"), "--capture-dir", str(capture_dir), "--api-key", SECRET)
    yield srv
    stop_server(srv)


def test_lines_are_sagemakers_data_capture(server: Server, capture_dir: Path) -> None:
    sent = json.dumps(chat("Name a color.")).encode()
    headers = {**AUTH, "Content-Type": "application/json", "X-Amzn-SageMaker-Inference-Id": "inf-42"}
    r = httpx.post(f"{server.url}/invocations", content=sent, headers=headers, timeout=120)
    assert r.status_code == 200
    record = wait_for(
        lambda: [x for x in lines(capture_dir) if x["eventMetadata"].get("inferenceId") == "inf-42"]
    )[0]
    assert record["eventVersion"] == "0"
    captured = record["captureData"]
    assert captured["endpointInput"] == {
        "observedContentType": "application/json",
        "mode": "INPUT",
        "data": sent.decode(),
        "encoding": "JSON",
    }
    out = captured["endpointOutput"]
    assert (out["mode"], out["encoding"]) == ("OUTPUT", "JSON")
    assert out["observedContentType"].startswith("application/json")
    assert out["data"] == r.text
    assert (
        ISO.match(record["eventMetadata"]["inferenceTime"]) and len(record["eventMetadata"]["eventId"]) == 36
    )
    for f in capture_dir.rglob("*.jsonl"):
        assert FOLDER.match(f.relative_to(capture_dir).as_posix()), f
    # a refusal is no inference, and the key was never written
    assert httpx.post(f"{server.url}/v1/chat/completions", json=chat(), timeout=30).status_code == 401
    assert metric(server, WRITTEN) >= 1
    for f in capture_dir.rglob("*"):
        if f.is_file():
            assert SECRET not in f.read_text() and "Bearer" not in f.read_text()


def test_a_streamed_answer_is_captured_whole(server: Server, capture_dir: Path) -> None:
    body = chat("Count to three.", stream=True, user="streamed-one")
    with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=body, headers=AUTH, timeout=120) as r:
        assert r.status_code == 200
        received = b"".join(r.iter_bytes())
    assert received.rstrip().endswith(b"data: [DONE]")

    def streamed() -> list[dict[str, Any]]:
        return [x for x in lines(capture_dir) if "streamed-one" in x["captureData"]["endpointInput"]["data"]]

    out = wait_for(streamed)[0]["captureData"]["endpointOutput"]
    assert out["observedContentType"].startswith("text/event-stream")
    assert out["encoding"] == "BASE64"
    assert base64.b64decode(out["data"]) == received


def console_capture(server: Server) -> dict[str, Any]:
    """The served model's capture in the console's API, once it shows a request answered now."""
    r = httpx.post(f"{server.url}/v1/chat/completions", json=chat(), headers=AUTH, timeout=120)
    assert r.status_code == 200

    def shown() -> dict[str, Any] | None:
        overview = httpx.get(f"{server.url}/console/api/overview", headers=AUTH, timeout=10).json()
        capture = dict(overview["components"][0]["capture"])
        # the sampler reads the server's own registry every period: once it has read the line written
        written = metric(server, WRITTEN)
        return capture if written >= 1 and capture["lines_written"] == written else None

    return dict(wait_for(shown, timeout_s=60))


def test_the_console_shows_capture_on_with_its_lines(server: Server, capture_dir: Path) -> None:
    shown = console_capture(server)
    assert shown["destination"] == str(capture_dir)
    assert shown["location"] == f"{capture_dir}/gemma-capture/AllTraffic/"
    assert (shown["percent"], shown["modes"]) == (100, ["input", "output"])
    assert (shown["lines_dropped"], shown["dropped_by_reason"]) == (0, {"queue_full": 0, "write_failed": 0})


@needs_chromium
def test_the_console_page_shows_capture_on(server: Server) -> None:
    written = console_capture(server)["lines_written"]
    for browser in chromium():
        w = Watched(browser, SECRET)
        w.page.goto(f"{server.url}/console")
        on = 'div.comp[data-component="gemma-capture"] p.capture[data-capture="on"]'
        w.page.wait_for_selector(on, timeout=WAIT_MS)
        shown = w.page.inner_text(on)
        assert "data capture: on, 100% of requests (input, output) to " in shown and "0 dropped" in shown
        assert int(w.page.get_attribute(on, "data-written") or 0) >= written
        w.check_clean()
        w.close()


def test_percent_zero_writes_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "none"
    srv = capturing(tmp_path, "--capture-dir", str(folder), "--capture-percent", "0")
    try:
        for _ in range(3):
            assert httpx.post(f"{srv.url}/v1/chat/completions", json=chat(), timeout=120).status_code == 200
        time.sleep(1.5)  # beyond the writer's tick
        assert srv.metric(WRITTEN) == 0 and srv.metric(DROPPED) == 0
    finally:
        stop_server(srv)
    assert not folder.exists()


def s3_capturing(tmp: Path, url: str, *args: str) -> Server:
    """A server whose S3 is `url` (credentials and endpoint from its environment, as on AWS)."""
    with pytest.MonkeyPatch.context() as env:
        for name, value in FAKE_CREDS.items():
            env.setenv(name, value)
        env.setenv("LLMHOST_S3_ENDPOINT_URL", url)
        return capturing(tmp, "--capture-dir", "s3://captures/monitor", *args)


def test_input_only_to_s3_uploaded_at_shutdown(tmp_path: Path) -> None:
    with moto_server() as s3:
        s3.client().create_bucket(Bucket="captures")

        def objects() -> list[str]:
            found = s3.client().list_objects_v2(Bucket="captures", Prefix="monitor/").get("Contents", [])
            return [o["Key"] for o in found]

        # no upload falls due while it runs: what it holds is uploaded when it stops
        srv = s3_capturing(tmp_path, s3.url, "--capture-mode", "input", "--capture-interval-s", "600")
        try:
            sent = chat("Hello there.")
            assert httpx.post(f"{srv.url}/v1/chat/completions", json=sent, timeout=120).status_code == 200
            assert not objects()
        finally:
            stop_server(srv)
        assert srv.process.returncode == 0
        [key] = objects()
        assert re.match(r"^monitor/gemma-capture/AllTraffic/\d{4}/\d\d/\d\d/\d\d/[^/]+\.jsonl$", key)
        record = json.loads(s3.client().get_object(Bucket="captures", Key=key)["Body"].read())
        assert list(record["captureData"]) == ["endpointInput"]
        assert json.loads(record["captureData"]["endpointInput"]["data"]) == sent


def test_s3_down_never_fails_a_request(tmp_path: Path) -> None:
    nothing_there = f"http://127.0.0.1:{free_port()}"
    srv = s3_capturing(tmp_path, nothing_there, "--capture-interval-s", "0.5", "--capture-variant", "blue")
    try:
        for _ in range(2):
            assert httpx.post(f"{srv.url}/v1/chat/completions", json=chat(), timeout=120).status_code == 200
        wait_for(lambda: srv.metric(DROPPED) >= 2, timeout_s=60)
        assert srv.metric(WRITTEN) == 0
    finally:
        stop_server(srv)
    assert "capture: writing to s3://captures/monitor/ failed" in srv.log.read_text()

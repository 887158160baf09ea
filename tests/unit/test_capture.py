"""Data capture's pure parts: SageMaker's line format and encodings, file names and folders, sampling,
the settings' checks (a server's and an endpoint file's), the writer's bounded queue and failing sinks,
and which routes are captured."""

from __future__ import annotations

import base64
import json
import random
import re
import threading
from pathlib import Path

import pytest
from fastapi.routing import APIRoute

from llmhost.endpoint.control.replica import copy_command
from llmhost.endpoint.spec import SpecError, parse_endpoint
from llmhost.engine.config import EngineConfig
from llmhost.server.capture import is_inference
from llmhost.server.routes.apis import CLIENT_APIS
from llmhost.server.settings import ServerSettings
from llmhost.web.capture.config import CaptureConfig, Mode, parse_modes
from llmhost.web.capture.record import Event, Payload, encoding_of, file_name, hour_folder, iso_time, line
from llmhost.web.capture.sinks import FileSink, Line
from llmhost.web.capture.writer import EVENT_OVERHEAD, CaptureWriter

# 2024-05-01 13:36:30.123 UTC
T = 1714570590.123
FILE_NAME = re.compile(r"^\d\d-\d\d-\d{3}-[0-9a-f-]{36}\.jsonl$")


def event(body: bytes = b'{"a": 1}', answer: bytes = b'{"b": 2}', **kw: object) -> Event:
    return Event(
        time=T,
        input=Payload("application/json", (body,)),
        output=Payload("application/json", (answer,)),
        **kw,  # type: ignore[arg-type]
    )


def test_a_line_is_sagemakers_record() -> None:
    record = json.loads(line(event(inference_id="inf-1"), event_id="e-1"))
    assert record == {
        "captureData": {
            "endpointInput": {
                "observedContentType": "application/json",
                "mode": "INPUT",
                "data": '{"a": 1}',
                "encoding": "JSON",
            },
            "endpointOutput": {
                "observedContentType": "application/json",
                "mode": "OUTPUT",
                "data": '{"b": 2}',
                "encoding": "JSON",
            },
        },
        "eventMetadata": {
            "eventId": "e-1",
            "inferenceTime": "2024-05-01T13:36:30.123Z",
            "inferenceId": "inf-1",
        },
        "eventVersion": "0",
    }
    assert line(event()).endswith(b"}\n") and line(event()).count(b"\n") == 1


def test_encodings_follow_sagemakers_content_types() -> None:
    assert encoding_of("application/json") == "JSON"
    assert encoding_of("application/json; charset=utf-8") == "JSON"
    assert encoding_of("application/vnd.api+json") == "JSON"
    assert encoding_of("text/csv") == "CSV"
    for other in ("text/event-stream", "application/x-ndjson", "application/octet-stream", ""):
        assert encoding_of(other) == "BASE64"


def test_a_stream_and_a_body_that_is_not_utf8_are_base64() -> None:
    sse = b'data: {"x": 1}\n\ndata: [DONE]\n\n'
    streamed = Event(T, Payload("text/csv", (b"\xff\xfe",)), Payload("text/event-stream", (sse[:7], sse[7:])))
    record = json.loads(line(streamed))["captureData"]
    assert record["endpointInput"]["encoding"] == "BASE64"
    assert base64.b64decode(record["endpointInput"]["data"]) == b"\xff\xfe"
    assert record["endpointOutput"]["encoding"] == "BASE64"
    assert base64.b64decode(record["endpointOutput"]["data"]) == sse


def test_input_only_has_no_output() -> None:
    record = json.loads(line(Event(T, Payload("text/csv", (b"1,2\n",)), None)))
    assert list(record["captureData"]) == ["endpointInput"]
    assert record["captureData"]["endpointInput"]["encoding"] == "CSV"
    assert "inferenceId" not in record["eventMetadata"]


def test_times_folders_and_file_names() -> None:
    assert iso_time(T) == "2024-05-01T13:36:30.123Z"
    assert hour_folder("ep", "AllTraffic", T) == "ep/AllTraffic/2024/05/01/13"
    name = file_name(T)
    assert FILE_NAME.match(name) and name.startswith("36-30-123-")
    assert file_name(T) != name


def test_sampling_takes_the_percent_asked() -> None:
    def taken(percent: int) -> int:
        config = CaptureConfig("d", "ep", percent=percent, rng=random.Random(7))
        return sum(config.sampled() for _ in range(10_000))

    assert taken(0) == 0
    assert taken(100) == 10_000
    assert 2_700 < taken(30) < 3_300


def test_modes_and_checks() -> None:
    assert parse_modes("input") == {Mode.INPUT}
    assert parse_modes("Output, input") == {Mode.INPUT, Mode.OUTPUT}
    for bad in ("", "inputs", "input,body"):
        with pytest.raises(ValueError, match="--capture-mode"):
            parse_modes(bad)
    with pytest.raises(ValueError, match=r"--capture-percent must be in 0\.\.100, got 101"):
        CaptureConfig("d", "ep", percent=101)
    with pytest.raises(ValueError, match="--capture-variant"):
        CaptureConfig("d", "ep", variant="../x")
    with pytest.raises(ValueError, match="--capture-dir"):
        CaptureConfig("s3:///key", "ep")
    prefix = CaptureConfig("s3://bucket/capture", "ep").s3_prefix
    assert prefix is not None and prefix.key == "capture/"


def test_the_writer_appends_the_hours_lines_to_one_file(tmp_path: Path) -> None:
    writer = CaptureWriter(FileSink(tmp_path, "ep", "AllTraffic"), max_bytes=1 << 20)
    writer.start()
    for _ in range(3):
        assert writer.offer(event())
    writer.close()
    files = list(tmp_path.rglob("*.jsonl"))
    assert len(files) == 1 and files[0].parent == tmp_path / "ep/AllTraffic/2024/05/01/13"
    assert len(files[0].read_text().splitlines()) == 3
    assert (writer.written, writer.dropped, writer.failed) == (3, 0, 0)


def test_a_new_file_appears_with_its_first_lines(tmp_path: Path) -> None:
    """A reader polling the folder (as the operations guide's example does) never opens a file that
    is empty or holds part of a line: each new file is written aside and renamed into place."""
    sink = FileSink(tmp_path, "ep", "v")
    seen: dict[Path, str] = {}
    folder = [tmp_path]  # the folder of the hour being written: the reader watches it alone
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            for f in folder[0].glob("*.jsonl"):
                seen.setdefault(f, f.read_text())

    reader = threading.Thread(target=poll)
    reader.start()
    record = line(event(body=b'{"a": "' + b"x" * 20_000 + b'"}'))
    try:
        for hour in range(60):  # a new hour, a new file
            at = T + 3600 * hour
            folder[0] = tmp_path / hour_folder("ep", "v", at)
            sink.write([Line(at, record), Line(at, record)])
    finally:
        done.set()
        reader.join()
        sink.close()
    files = sorted(tmp_path.rglob("*.jsonl"))
    assert len(files) == 60 and not list(tmp_path.rglob("*.part"))
    assert all(FILE_NAME.match(f.name) for f in files)
    for f, text in seen.items():
        assert text.endswith("\n") and len(text.splitlines()) == 2, f


def test_a_full_queue_drops_and_counts_without_waiting(tmp_path: Path) -> None:
    one = event().size + EVENT_OVERHEAD
    writer = CaptureWriter(FileSink(tmp_path, "ep", "v"), max_bytes=2 * one)  # not started: nothing drains
    assert [writer.offer(event()) for _ in range(4)] == [True, True, False, False]
    assert writer.dropped == 2 and writer.queued_bytes == 2 * one
    writer.close()
    assert writer.written == 2


def test_a_sink_that_fails_counts_its_lines_and_recovers(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    writer = CaptureWriter(FileSink(blocker / "capture", "ep", "v"), max_bytes=1 << 20)
    writer.offer(event())
    writer.offer(event())
    writer.close()
    assert (writer.written, writer.failed) == (0, 2)


def test_every_route_that_runs_the_model_is_captured() -> None:
    reads_only = {
        "/tokenize",
        "/detokenize",
        "/v1/messages/count_tokens",
        "/api/show",
        "/api/pull",
        "/api/copy",
    }
    posts = {
        route.path
        for module in CLIENT_APIS
        for route in module.router.routes
        if isinstance(route, APIRoute) and "POST" in route.methods
    }
    assert posts - reads_only, "no POST route found"
    for path in posts - reads_only:
        assert is_inference(path.replace("{name}", "my-endpoint")), path
    for path in reads_only & posts:
        assert not is_inference(path), path


def test_an_endpoint_files_capture_keys_reach_its_copies() -> None:
    engine = {"capture_dir": "s3://b/cap/", "capture_percent": 20, "capture_mode": "input"}
    spec = parse_endpoint({"name": "ep", "components": [{"name": "chat", "engine": engine}]})
    argv = copy_command(spec.components[0], "m.gguf", 9000, 1)
    joined = " ".join(argv)
    assert "--capture-dir s3://b/cap/ --capture-percent 20 --capture-mode input" in joined
    assert "--served-model-name chat" in joined  # the first folder of its files
    # what the console says of them: the same settings, filed under the same folders
    config = spec.components[0].engine.capture("chat")
    assert config is not None and (config.location, config.percent) == ("s3://b/cap/chat/AllTraffic/", 20)


@pytest.mark.parametrize(
    ("engine", "error"),
    [
        ({"capture_dir": "d", "capture_percent": 101}, r"capture-percent must be in 0\.\.100, got 101"),
        ({"capture_dir": "d", "capture_mode": "body"}, "capture-mode must be input, output or input,output"),
        ({"capture_percent": 5}, "capture_percent given without capture_dir"),
    ],
)
def test_an_endpoint_files_capture_keys_are_checked_at_load(engine: dict[str, object], error: str) -> None:
    with pytest.raises(SpecError, match=error):
        parse_endpoint({"name": "ep", "components": [{"name": "chat", "engine": engine}]})


def test_serve_refuses_capture_settings_without_a_folder() -> None:
    with pytest.raises(ValueError, match="--capture-percent, --capture-variant given without --capture-dir"):
        ServerSettings(Path("m.gguf"), EngineConfig(), capture_percent=5, capture_variant="blue")
    settings = ServerSettings(Path("m.gguf"), EngineConfig(), served_model_name="chat", capture_dir="d")
    config = settings.capture()
    assert config is not None and (config.endpoint, config.variant, config.percent) == (
        "chat",
        "AllTraffic",
        100,
    )

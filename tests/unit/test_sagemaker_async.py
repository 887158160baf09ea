"""InvokeEndpointAsync's pure parts: its headers read against the service's bounds, where answers and
errors are written, which bodies get a batch priority, the --async-* prefixes, and the queue's rule that
an invocation keeps its first outcome."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from starlette.datastructures import Headers

from llmhost.engine.request import BATCH_PRIORITY
from llmhost.jobs import async_wire as wire
from llmhost.jobs.async_runner import with_priority
from llmhost.jobs.async_status import AsyncStatus
from llmhost.jobs.async_store import AsyncQueue, Outcome
from llmhost.jobs.settings import JobsSettings
from llmhost.store.s3uri import S3Ref

INPUT = {wire.INPUT_LOCATION: "s3://bucket/in/q.json"}


def parse(headers: dict[str, str], body: bytes = b"") -> wire.AsyncAsk:
    return wire.parse(Headers(headers), body)


def test_a_call_with_its_headers_is_read_with_sagemakers_defaults() -> None:
    ask = parse(INPUT)
    assert ask.input_location == "s3://bucket/in/q.json" and ask.body is None
    assert (ask.ttl_s, ask.timeout_s) == (21_600, 900)
    assert len(ask.inference_id) == 36 and ask.content_type is None and ask.accept is None


def test_every_header_is_kept() -> None:
    ask = parse(
        {
            **INPUT,
            wire.CONTENT_TYPE: "application/json",
            wire.ACCEPT: "application/json",
            wire.INFERENCE_ID: "my-id",
            wire.REQUEST_TTL: "60",
            wire.INVOCATION_TIMEOUT: "3600",
            wire.CUSTOM_ATTRIBUTES: "trace=1",
        }
    )
    assert (ask.inference_id, ask.ttl_s, ask.timeout_s) == ("my-id", 60, 3600)
    assert (ask.content_type, ask.accept, ask.custom_attributes) == ("application/json",) * 2 + ("trace=1",)


def test_headers_are_read_whatever_their_case() -> None:
    assert parse({"x-amzn-sagemaker-inputlocation": "s3://b/k"}).input_location == "s3://b/k"


def test_an_inline_body_stands_for_the_input_location() -> None:
    ask = parse({}, b'{"prompt": "x"}')
    assert ask.input_location == "" and ask.body == b'{"prompt": "x"}'


@pytest.mark.parametrize(
    ("headers", "body", "named"),
    [
        ({}, b"", "missing X-Amzn-SageMaker-InputLocation"),
        ({wire.INPUT_LOCATION: "https://bucket/key"}, b"", "X-Amzn-SageMaker-InputLocation must be"),
        ({wire.INPUT_LOCATION: "s3:///key"}, b"", "X-Amzn-SageMaker-InputLocation must be"),
        ({wire.INPUT_LOCATION: "s3://bucket/prefix/"}, b"", "X-Amzn-SageMaker-InputLocation must be"),
        (INPUT, b"{}", "mutually exclusive"),
        ({}, b"x" * 128_001, "128000 bytes"),
        (
            {**INPUT, wire.REQUEST_TTL: "59"},
            b"",
            "RequestTTLSeconds must be a whole number of seconds from 60",
        ),
        ({**INPUT, wire.REQUEST_TTL: "21601"}, b"", "to 21600"),
        ({**INPUT, wire.INVOCATION_TIMEOUT: "0"}, b"", "InvocationTimeoutSeconds must be"),
        ({**INPUT, wire.INVOCATION_TIMEOUT: "1.5"}, b"", "from 1 to 3600"),
        ({**INPUT, wire.INFERENCE_ID: " lead"}, b"", "X-Amzn-SageMaker-Inference-Id must be 1 to 64"),
        ({**INPUT, wire.INFERENCE_ID: "x" * 65}, b"", "X-Amzn-SageMaker-Inference-Id"),
        ({**INPUT, "X-Amzn-SageMaker-S3OutputPathExtension": "a"}, b"", "S3OutputPathExtension is not"),
    ],
)
def test_a_call_that_cannot_be_queued_names_the_header(
    headers: dict[str, str], body: bytes, named: str
) -> None:
    with pytest.raises(wire.AskError, match=named.replace(".", r"\.")):
        parse(headers, body)


def test_answers_and_errors_are_named_after_the_inference_id() -> None:
    prefix = S3Ref("out", "answers/")
    assert wire.output_location(prefix, "abc") == "s3://out/answers/abc.out"
    assert wire.failure_location(prefix, "abc") == "s3://out/answers/abc-error.out"


def test_the_failure_prefix_defaults_to_the_output_prefix_and_prefixes_end_in_a_slash(tmp_path: Path) -> None:
    settings = JobsSettings(tmp_path, async_output="s3://out/answers")
    assert settings.output_prefix == S3Ref("out", "answers/") == settings.failure_prefix
    both = JobsSettings(tmp_path, async_output="s3://out", async_failure="s3://err/x/")
    assert (both.output_prefix, both.failure_prefix) == (S3Ref("out", ""), S3Ref("err", "x/"))
    assert JobsSettings(tmp_path).output_prefix is None


@pytest.mark.parametrize(
    ("output", "failure", "named"),
    [
        ("/tmp/out", "", "--async-output"),
        ("s3://out/", "http://x", "--async-failure"),
        ("", "s3://e/", "without"),
    ],
)
def test_a_prefix_that_is_not_s3_is_refused(tmp_path: Path, output: str, failure: str, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        JobsSettings(tmp_path, async_output=output, async_failure=failure)


def test_a_chat_or_completion_body_runs_behind_interactive_requests() -> None:
    for body in ({"messages": []}, {"prompt": "x"}):
        sent = json.loads(with_priority(json.dumps(body).encode(), "application/json; charset=utf-8"))
        assert sent == {**body, "priority": BATCH_PRIORITY}
    assert json.loads(with_priority(b'{"prompt": "x"}', None))["priority"] == BATCH_PRIORITY


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (b'{"prompt": "x", "priority": 5}', None),  # its own
        (b'{"inputs": "x"}', None),  # TGI takes no priority
        (b'{"input": "x"}', None),  # embeddings
        (b'{"prompt": "x"}\n{"prompt": "y"}\n', "application/jsonlines"),
        (b"not json", None),
        (b'["prompt"]', None),
    ],
)
def test_other_bodies_are_sent_as_they_came(body: bytes, content_type: str | None) -> None:
    assert with_priority(body, content_type) == body


def test_an_invocation_keeps_its_first_outcome_and_is_written_once() -> None:
    queue = AsyncQueue(sqlite3.connect(":memory:", isolation_level=None))
    ask = parse({**INPUT, wire.INFERENCE_ID: "q"})
    seq = queue.add(ask, "s3://o/q.out", "s3://o/q-error.out").seq
    assert [i.seq for i in queue.open()] == [seq] and queue.get(seq).ask == ask
    queue.start(seq)
    assert queue.get(seq).status is AsyncStatus.RUNNING
    queue.answer(seq, Outcome(True, b"{}", "application/json"))
    queue.answer(seq, Outcome(False, b"late", "application/json"))  # a second run after a restart
    answered = queue.get(seq)
    assert answered.status is AsyncStatus.ANSWERED and answered.outcome == Outcome(
        True, b"{}", "application/json"
    )
    assert answered.destination == "s3://o/q.out"
    queue.written(seq, True)
    assert queue.get(seq).status is AsyncStatus.COMPLETED and queue.open() == []
    assert queue.counts()[AsyncStatus.COMPLETED] == 1


def test_a_failed_outcome_goes_to_the_failure_location_and_expiry_counts_only_in_the_queue() -> None:
    queue = AsyncQueue(sqlite3.connect(":memory:", isolation_level=None))
    queued = queue.add(parse({**INPUT, wire.REQUEST_TTL: "60"}), "s3://o/a.out", "s3://o/a-error.out")
    assert not queued.expired(queued.created_at + 60) and queued.expired(queued.created_at + 61)
    queue.start(queued.seq)
    assert not queue.get(queued.seq).expired(queued.created_at + 61), "started in time: it runs"
    queue.answer(queued.seq, Outcome(False, b"{}", "application/json"))
    assert queue.get(queued.seq).destination == "s3://o/a-error.out"
    queue.written(queued.seq, False)
    assert queue.get(queued.seq).status is AsyncStatus.FAILED

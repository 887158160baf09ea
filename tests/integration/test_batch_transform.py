"""SageMaker Batch Transform's container contract against a real `llmhost serve` on 127.0.0.1:
GET /execution-parameters, and /invocations answering a JSON Lines mini-batch line by line. A second
server is started as SageMaker starts a batch transform's container (its SAGEMAKER_* variables set): the
variables are read once, at start."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.integration.conftest import Server, start_server, stop_server
from tests.integration.test_errors import error

MIB = 1024 * 1024
JSONLINES = {"content-type": "application/jsonlines"}
CHAT = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 4, "temperature": 0}
COMPLETION = {"prompt": "Once upon a time", "max_tokens": 6, "temperature": 0}
BATCH_ENV = {
    "SAGEMAKER_BATCH": "true",
    "SAGEMAKER_MAX_PAYLOAD_IN_MB": "1",
    "SAGEMAKER_BATCH_STRATEGY": "SINGLE_RECORD",
    "SAGEMAKER_MAX_CONCURRENT_TRANSFORMS": "2",
}


def lines(*records: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


def post(url: str, body: bytes, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.post(f"{url}/invocations", content=body, headers=headers or JSONLINES, timeout=120)


@pytest.fixture(scope="module")
def batch_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with pytest.MonkeyPatch.context() as env:
        for name, value in BATCH_ENV.items():
            env.setenv(name, value)
        srv = start_server(tmp_path_factory.mktemp("batch"), "--max-concurrent", "4", "--max-queue", "4")
    yield srv
    stop_server(srv)


def test_execution_parameters_are_the_limits_in_force(server: Server) -> None:
    r = httpx.get(f"{server.url}/execution-parameters", timeout=10)
    assert r.status_code == 200
    # the shared server runs 8 sequences; the payload limit is SageMaker's 6 MB
    assert r.json() == {"MaxConcurrentTransforms": 8, "BatchStrategy": "MULTI_RECORD", "MaxPayloadInMB": 6}


def test_records_are_answered_line_by_line_in_order(server: Server) -> None:
    other = {**CHAT, "messages": [{"role": "user", "content": "Name a colour."}], "max_tokens": 3}
    r = post(server.url, lines(CHAT, COMPLETION, other) + b"\n")  # SageMaker's trailing newline
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/jsonlines")
    assert r.text.endswith("\n")
    answers = [json.loads(line) for line in r.text.splitlines()]
    assert [a["object"] for a in answers] == ["chat.completion", "text_completion", "chat.completion"]
    assert [a["usage"]["completion_tokens"] <= n for a, n in zip(answers, (4, 6, 3), strict=True)] == [
        True
    ] * 3
    assert all(a["model"] == "gemma-test" for a in answers)
    # each line is what /invocations answers for that record alone (greedy, the same shape)
    alone = httpx.post(f"{server.url}/invocations", json=COMPLETION, timeout=120).json()
    assert set(answers[1]) == set(alone) and alone["choices"][0]["text"]


def test_a_refused_record_refuses_the_body_naming_its_line(server: Server) -> None:
    bad = {**CHAT, "max_tokens": -1}
    r = post(server.url, lines(COMPLETION) + b"\n" + lines(CHAT, bad))
    assert r.status_code == 422, r.text
    e = error(r)
    assert (e["line"], e["field"]) == (4, "max_tokens")  # the empty line 2 counts
    assert str(e["message"]).startswith("line 4: ")
    assert "choices" not in r.text  # the refusal alone, no other record's answer


def test_a_tgi_record_is_refused_in_tgis_shape(server: Server) -> None:
    over = {"inputs": "Hi", "parameters": {"max_new_tokens": 100_000}}
    r = post(server.url, lines(COMPLETION, over))
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["error_type"] == "validation" and body["line"] == 2
    assert body["field"] == "parameters.max_new_tokens"


@pytest.mark.parametrize(
    ("body", "line", "field"),
    [
        (lines(COMPLETION) + b"not json\n", 2, "body"),
        (lines(COMPLETION, {**CHAT, "stream": True}), 2, "stream"),
        (lines(COMPLETION, {"text": "no API's member"}), 2, "inputs"),
    ],
)
def test_a_bad_line_is_refused_before_any_answer(server: Server, body: bytes, line: int, field: str) -> None:
    r = post(server.url, body)
    assert 400 <= r.status_code < 500, r.text
    e = error(r)
    assert (e["line"], e["field"]) == (line, field)


def test_a_body_over_max_payload_is_413(server: Server) -> None:
    limit = httpx.get(f"{server.url}/execution-parameters", timeout=10).json()["MaxPayloadInMB"] * MIB
    record = lines({"prompt": "a" * 1000, "max_tokens": 1})
    big = record * (limit // len(record) + 1)
    r = post(server.url, big)  # refused by its Content-Length
    assert r.status_code == 413 and error(r)["limit"] == limit

    def chunks() -> Iterator[bytes]:  # no Content-Length: refused while reading
        for start in range(0, len(big), MIB):
            yield big[start : start + MIB]

    r = httpx.post(f"{server.url}/invocations", content=chunks(), headers=JSONLINES, timeout=120)
    assert r.status_code == 413 and error(r)["limit"] == limit


def test_sagemakers_batch_variables_are_honoured(batch_server: Server) -> None:
    r = httpx.get(f"{batch_server.url}/execution-parameters", timeout=10)
    assert r.json() == {"MaxConcurrentTransforms": 2, "BatchStrategy": "SINGLE_RECORD", "MaxPayloadInMB": 1}
    one = post(batch_server.url, lines(COMPLETION) + b"\n")
    assert one.status_code == 200 and len(one.text.splitlines()) == 1
    assert json.loads(one.text)["object"] == "text_completion"
    two = post(batch_server.url, lines(COMPLETION, COMPLETION))
    assert two.status_code == 400
    e = error(two)
    assert e["batch_strategy"] == "SINGLE_RECORD" and "SINGLE_RECORD" in str(e["message"])
    big = post(batch_server.url, b'{"prompt": "' + b"a" * MIB + b'"}\n')
    assert big.status_code == 413 and error(big)["limit"] == MIB

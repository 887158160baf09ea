"""SageMaker Asynchronous Inference: boto3's `sagemaker-runtime` client's invoke_endpoint_async, unchanged,
against a real `llmhost serve` whose answers go to a real S3 (moto's server) on 127.0.0.1: a 202 at once,
then the real-time answer at the OutputLocation or the refusal at the FailureLocation (never both), and
a server killed with -9 with invocations queued writes each once started again on the same --jobs-dir."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from botocore.exceptions import ClientError

from tests.integration.conftest import CHAT_TEMPLATE, Server, start_server, stop_server
from tests.integration.endpoint_helpers import ENGINE, start_endpoint, stop_endpoint
from tests.integration.test_sagemaker_runtime import runtime
from tests.s3server import FAKE_CREDS, S3Server, moto_server

INPUTS, OUTPUTS = "async-in", "async-out"
OUTPUT_PREFIX, FAILURE_PREFIX = f"s3://{OUTPUTS}/answers/", f"s3://{OUTPUTS}/errors/"


def chat(text: str, max_tokens: int = 4, **more: object) -> dict[str, object]:
    return {
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "temperature": 0,
        **more,
    }


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with moto_server() as server:
        client = server.client()
        client.create_bucket(Bucket=INPUTS)
        client.create_bucket(Bucket=OUTPUTS)
        # every write of an object is kept: a test can count them
        client.put_bucket_versioning(Bucket=OUTPUTS, VersioningConfiguration={"Status": "Enabled"})
        yield server


def serve(s3: S3Server, jobs_dir: Path, *more: str) -> Server:
    """A server that reaches `s3` as AWS (credentials and endpoint from its environment)."""
    with pytest.MonkeyPatch.context() as env:
        for name, value in FAKE_CREDS.items():
            env.setenv(name, value)
        env.setenv("LLMHOST_S3_ENDPOINT_URL", s3.url)
        args = ("--chat-template", str(CHAT_TEMPLATE), "--jobs-dir", str(jobs_dir))
        return start_server(jobs_dir.parent, *args, "--async-output", OUTPUT_PREFIX, *more)


@pytest.fixture(scope="module")
def async_server(s3: S3Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = serve(s3, tmp_path_factory.mktemp("async") / "jobs", "--async-failure", FAILURE_PREFIX)
    yield srv
    stop_server(srv)


def put_input(s3: S3Server, key: str, body: dict[str, object]) -> str:
    s3.client().put_object(Bucket=INPUTS, Key=key, Body=json.dumps(body).encode())
    return f"s3://{INPUTS}/{key}"


def invoke_async(server: Server, **kw: Any) -> dict[str, Any]:
    response: dict[str, Any] = runtime(server.url).invoke_endpoint_async(EndpointName="anything", **kw)
    return response


def key_of(uri: str) -> str:
    return uri.removeprefix(f"s3://{OUTPUTS}/")


def exists(s3: S3Server, uri: str) -> bool:
    return bool(s3.client().list_objects_v2(Bucket=OUTPUTS, Prefix=key_of(uri)).get("KeyCount"))


def read(s3: S3Server, uri: str) -> Any:
    return json.loads(s3.client().get_object(Bucket=OUTPUTS, Key=key_of(uri))["Body"].read())


def writes(s3: S3Server, uri: str) -> int:
    versions = s3.client().list_object_versions(Bucket=OUTPUTS, Prefix=key_of(uri)).get("Versions", [])
    return sum(1 for v in versions if v["Key"] == key_of(uri))


def wait_for_either(s3: S3Server, response: dict[str, Any], timeout_s: float = 120) -> str:
    """The location written first (polled): OutputLocation or FailureLocation."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for uri in (response["OutputLocation"], response["FailureLocation"]):
            if exists(s3, uri):
                return str(uri)
        time.sleep(0.2)
    raise AssertionError(f"nothing written for {response['InferenceId']}")


def test_an_async_invocation_answers_202_then_writes_the_real_time_answer(
    async_server: Server, s3: S3Server
) -> None:
    body = chat("Say hello.")
    real_time = json.loads(
        runtime(async_server.url)
        .invoke_endpoint(EndpointName="anything", Body=json.dumps(body), ContentType="application/json")[
            "Body"
        ]
        .read()
    )
    started = time.monotonic()
    r = invoke_async(
        async_server,
        InputLocation=put_input(s3, "hello.json", body),
        ContentType="application/json",
        Accept="application/json",
        InferenceId="hello-1",
        RequestTTLSeconds=600,
        InvocationTimeoutSeconds=120,
        CustomAttributes="trace=abc",
    )
    assert r["ResponseMetadata"]["HTTPStatusCode"] == 202 and r["ResponseMetadata"]["RequestId"]
    assert r["InferenceId"] == "hello-1"
    assert r["OutputLocation"] == f"{OUTPUT_PREFIX}hello-1.out"
    assert r["FailureLocation"] == f"{FAILURE_PREFIX}hello-1-error.out"
    assert time.monotonic() - started < 5, "answered at once, not after the generation"
    assert wait_for_either(s3, r) == r["OutputLocation"]
    answer = read(s3, r["OutputLocation"])
    assert answer["object"] == "chat.completion"
    assert answer["choices"][0]["message"] == real_time["choices"][0]["message"], "alone both times: greedy"
    for count in ("prompt_tokens", "completion_tokens"):  # the second finds the prompt cached
        assert answer["usage"][count] == real_time["usage"][count]
    assert not exists(s3, r["FailureLocation"])
    assert writes(s3, r["OutputLocation"]) == 1
    metrics = httpx.get(f"{async_server.url}/metrics", timeout=10).text
    completed = next(
        x for x in metrics.splitlines() if x.startswith('llmhost_async_invocations{status="completed"}')
    )
    assert float(completed.rsplit(" ", 1)[1]) >= 1


def test_an_inference_id_is_made_when_none_is_given(async_server: Server, s3: S3Server) -> None:
    r = invoke_async(async_server, InputLocation=put_input(s3, "noid.json", chat("Hi.", 2)))
    inference_id = r["InferenceId"]
    assert len(inference_id) == 36 and r["OutputLocation"] == f"{OUTPUT_PREFIX}{inference_id}.out"
    assert wait_for_either(s3, r) == r["OutputLocation"]


def test_a_refused_body_writes_the_refusal_at_the_failure_location_and_no_output(
    async_server: Server, s3: S3Server
) -> None:
    r = invoke_async(
        async_server, InputLocation=put_input(s3, "bad.json", chat("x", -1)), ContentType="application/json"
    )
    assert r["ResponseMetadata"]["HTTPStatusCode"] == 202
    assert wait_for_either(s3, r) == r["FailureLocation"]
    refusal = read(s3, r["FailureLocation"])
    assert refusal["error"]["field"] == "max_tokens" and refusal["error"]["code"] in (400, 422)
    time.sleep(0.5)
    assert not exists(s3, r["OutputLocation"])


def test_an_input_that_cannot_be_read_fails_naming_its_location(async_server: Server, s3: S3Server) -> None:
    missing = f"s3://{INPUTS}/no-such-input.json"
    r = invoke_async(async_server, InputLocation=missing, InferenceId="missing-input")
    assert wait_for_either(s3, r) == r["FailureLocation"]
    error = read(s3, r["FailureLocation"])["error"]
    assert error["field"] == "X-Amzn-SageMaker-InputLocation" and missing in error["message"]
    assert "no-such-input.json" in error["message"] and "no object" in error["message"]


def test_an_invocation_past_its_timeout_is_abandoned_and_fails(async_server: Server, s3: S3Server) -> None:
    long = chat("Write a very long story.", 1500, ignore_eos=True)
    r = invoke_async(async_server, InputLocation=put_input(s3, "long.json", long), InvocationTimeoutSeconds=1)
    assert wait_for_either(s3, r, timeout_s=60) == r["FailureLocation"]
    error = read(s3, r["FailureLocation"])["error"]
    assert error["type"] == "invocation_timeout" and error["limit"] == 1
    assert error["field"] == "X-Amzn-SageMaker-InvocationTimeoutSeconds"
    assert not exists(s3, r["OutputLocation"])


def test_an_inline_body_runs_as_an_input_location_does(async_server: Server, s3: S3Server) -> None:
    r = invoke_async(async_server, Body=json.dumps(chat("Hi.", 2)), ContentType="application/json")
    assert wait_for_either(s3, r) == r["OutputLocation"]
    assert read(s3, r["OutputLocation"])["object"] == "chat.completion"


@pytest.mark.parametrize(
    ("kw", "named"),
    [
        ({}, "X-Amzn-SageMaker-InputLocation"),
        ({"InputLocation": "https://bucket/key.json"}, "X-Amzn-SageMaker-InputLocation"),
        ({"InputLocation": "s3://bucket/"}, "X-Amzn-SageMaker-InputLocation"),
        ({"InputLocation": "s3://b/k", "Filename": "mine.out"}, "X-Amzn-SageMaker-Filename"),
    ],
)
def test_a_call_without_a_usable_input_location_is_a_validation_error(
    async_server: Server, kw: dict[str, str], named: str
) -> None:
    with pytest.raises(ClientError) as caught:
        invoke_async(async_server, **kw)
    error = caught.value.response
    assert error["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert error["Error"]["Code"] == "ValidationError" and named in error["Error"]["Message"]


@pytest.mark.parametrize(
    ("header", "value", "limit"),
    [
        ("X-Amzn-SageMaker-RequestTTLSeconds", "30", "60 to 21600"),
        ("X-Amzn-SageMaker-InvocationTimeoutSeconds", "3601", "1 to 3600"),
        ("X-Amzn-SageMaker-Inference-Id", "x" * 65, "1 to 64"),
    ],
)
def test_a_header_out_of_the_services_bounds_is_refused_naming_it(
    async_server: Server, header: str, value: str, limit: str
) -> None:
    # botocore checks these bounds itself: sent as raw HTTP, as another client could
    headers = {"X-Amzn-SageMaker-InputLocation": f"s3://{INPUTS}/k.json", header: value}
    r = httpx.post(f"{async_server.url}/endpoints/e/async-invocations", headers=headers, timeout=10)
    assert r.status_code == 400 and r.headers["x-amzn-ErrorType"] == "ValidationError"
    assert header in r.json()["message"] and limit in r.json()["message"]


def test_a_server_without_async_output_refuses_naming_the_flag(server: Server) -> None:
    with pytest.raises(ClientError) as caught:
        invoke_async(server, InputLocation=f"s3://{INPUTS}/k.json")
    error = caught.value.response
    assert error["ResponseMetadata"]["HTTPStatusCode"] == 400 and error["Error"]["Code"] == "ValidationError"
    assert "--async-output" in error["Error"]["Message"]


def test_a_server_killed_with_queued_invocations_writes_each_once_when_started_again(
    s3: S3Server, tmp_path: Path
) -> None:
    jobs = tmp_path / "jobs"
    n = 4
    first = serve(s3, jobs, "--max-concurrent", "1")
    try:
        location = put_input(s3, "kill.json", chat("Count from one to twenty.", 24))
        queued = [invoke_async(first, InputLocation=location, InferenceId=f"kill-{i}") for i in range(n)]
    finally:
        first.process.send_signal(signal.SIGKILL)
        first.process.wait()
    written_before = [r for r in queued if exists(s3, r["OutputLocation"])]
    assert len(written_before) < n, "killed with invocations queued"
    second = serve(s3, jobs, "--max-concurrent", "1")
    try:
        for r in queued:
            assert wait_for_either(s3, r) == r["OutputLocation"]
        for r in queued:
            assert read(s3, r["OutputLocation"])["object"] == "chat.completion"
            assert not exists(s3, r["FailureLocation"]), "an answer, never an error too"
            if r not in written_before:  # a kill between its write and its commit may write it twice
                assert writes(s3, r["OutputLocation"]) == 1
    finally:
        stop_server(second)


def test_an_endpoints_router_takes_async_invocations_for_its_component(s3: S3Server, tmp_path: Path) -> None:
    yaml_text = (
        f"name: asyncep\nasync_inference: {{output: {OUTPUT_PREFIX}endpoint/}}\njobs_dir: jobs\n"
        f"components:\n  - name: only\n    copies: 1\n    engine: {ENGINE}\n"
    )
    with pytest.MonkeyPatch.context() as env:
        for name, value in FAKE_CREDS.items():
            env.setenv(name, value)
        env.setenv("LLMHOST_S3_ENDPOINT_URL", s3.url)
        ep = start_endpoint(tmp_path, yaml_text)
    try:
        body = {"prompt": "Hello", "max_tokens": 3, "temperature": 0}
        r = runtime(ep.url).invoke_endpoint_async(
            EndpointName="asyncep",
            InputLocation=put_input(s3, "ep.json", body),
            ContentType="application/json",
        )
        assert r["OutputLocation"].startswith(f"{OUTPUT_PREFIX}endpoint/")
        assert wait_for_either(s3, r) == r["OutputLocation"]
        answer = read(s3, r["OutputLocation"])
        assert answer["model"] == "only" and answer["usage"]["completion_tokens"] == 3
        assert (tmp_path / "jobs" / "jobs.db").exists(), "the file's jobs_dir, relative to it"
    finally:
        stop_endpoint(ep)

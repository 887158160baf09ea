"""boto3's `sagemaker-runtime` client, unchanged (SigV4-signed, real botocore parsing), against a real
`llmhost serve` and a real `llmhost endpoint up` on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from botocore.config import Config

from tests.integration.conftest import Server
from tests.integration.endpoint_helpers import ENGINE, Endpoint, start_endpoint, stop_endpoint
from tests.integration.neartie import assert_same_or_near_tie

TGI = {"inputs": "The capital of France is", "parameters": {"max_new_tokens": 8}}
CHAT = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8, "temperature": 0}
COMPLETION = {"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0}
ENDPOINT = f"""
name: rt
components:
  - name: gemma
    copies: 1
    resources: {{num_cpus: 1, memory_mb: 600}}
    engine: {ENGINE}
    startup_health_check_timeout_s: 90
"""


def runtime(url: str) -> Any:
    return boto3.client(
        "sagemaker-runtime",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="y",
        config=Config(read_timeout=120),
    )


def invoke(client: Any, body: dict[str, Any], **kw: str) -> tuple[Any, dict[str, Any]]:
    r = client.invoke_endpoint(
        EndpointName="anything", Body=json.dumps(body), ContentType="application/json", **kw
    )
    return json.loads(r["Body"].read()), r


def streamed(client: Any, body: dict[str, Any], **kw: str) -> tuple[str, dict[str, Any]]:
    """The PayloadParts of a response stream, joined."""
    r = client.invoke_endpoint_with_response_stream(
        EndpointName="anything", Body=json.dumps(body), ContentType="application/json", **kw
    )
    parts = [event["PayloadPart"]["Bytes"] for event in r["Body"]]
    return b"".join(parts).decode(), r


def generate_stream(url: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> str:
    with httpx.stream("POST", f"{url}/generate_stream", json=body, headers=headers, timeout=60) as s:
        return s.read().decode()


@pytest.fixture(scope="module")
def ep(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoint]:
    endpoint = start_endpoint(tmp_path_factory.mktemp("runtime"), ENDPOINT)
    yield endpoint
    stop_endpoint(endpoint)


def test_invoke_endpoint_tgi_body(server: Server) -> None:
    out, r = invoke(runtime(server.url), TGI, CustomAttributes="trace=abc")
    expected = httpx.post(f"{server.url}/generate", json=TGI, timeout=60).json()["generated_text"]
    assert out == [{"generated_text": expected}] and expected
    assert r["ContentType"] == "application/json" and r["InvokedProductionVariant"] == "AllTraffic"
    assert r["CustomAttributes"] == "trace=abc"


def test_invoke_endpoint_openai_bodies(server: Server) -> None:
    client = runtime(server.url)
    chat, _ = invoke(client, CHAT, Accept="application/json")
    assert chat["object"] == "chat.completion" and chat["choices"][0]["message"]["content"]
    completion, _ = invoke(client, COMPLETION, Accept="*/*")
    assert completion["object"] == "text_completion" and completion["choices"][0]["text"]
    assert completion["usage"]["completion_tokens"] <= 8


def stream_events(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[len("data:") :]) for line in text.splitlines() if line.startswith("data:")]


def as_logprobs(events: list[dict[str, Any]]) -> dict[str, Any]:
    """TGI stream events as an OpenAI logprobs object, for the near-tie comparison."""
    return {
        "tokens": [e["token"]["text"] for e in events],
        "top_logprobs": [{t["text"]: t["logprob"] for t in e["top_tokens"]} for e in events],
    }


def test_response_stream_is_the_generate_stream(server: Server) -> None:
    # the same greedy tokens, up to a near-tie flip: another test's request may still be decoding
    # beside one of the two on this shared server, and batch shape moves logits by a hair
    body = {**TGI, "parameters": {**TGI["parameters"], "top_n_tokens": 5, "details": True}}
    text, r = streamed(runtime(server.url), body, CustomAttributes="k=v")
    ours, theirs = stream_events(text), stream_events(generate_stream(server.url, body))
    assert [sorted(e) for e in ours] == [sorted(e) for e in theirs] and len(ours) == 8
    assert_same_or_near_tie(as_logprobs(theirs), as_logprobs(ours))
    assert text.startswith("data:") and '"generated_text":"' in text.replace(" ", "")
    assert r["ContentType"].startswith("text/event-stream") and r["CustomAttributes"] == "k=v"
    assert r["InvokedProductionVariant"] == "AllTraffic"
    text, _ = streamed(runtime(server.url), COMPLETION, Accept="text/event-stream")
    assert text.rstrip().endswith("data: [DONE]")


def test_a_body_the_model_refuses_is_a_model_error(server: Server) -> None:
    client = runtime(server.url)
    for call in (client.invoke_endpoint, client.invoke_endpoint_with_response_stream):
        with pytest.raises(client.exceptions.ModelError) as caught:
            call(EndpointName="anything", Body=json.dumps({"foo": 1}), ContentType="application/json")
        err = caught.value.response
        assert err["OriginalStatusCode"] == 422 and err["ResponseMetadata"]["HTTPStatusCode"] == 424
        original = json.loads(err["OriginalMessage"])
        assert original["error"]["field"] == "inputs" and "'messages'" in original["error"]["message"]
        assert err["LogStreamArn"].endswith(err["ResponseMetadata"]["RequestId"])


def test_request_problems_are_validation_errors(server: Server) -> None:
    client = runtime(server.url)
    wrong = [
        ({"ContentType": "text/csv"}, "ContentType"),
        ({"Accept": "text/csv"}, "Accept"),
        ({"InferenceComponentName": "other"}, "InferenceComponentName"),
    ]
    for kw, named in wrong:
        with pytest.raises(client.exceptions.ValidationError, match=named):
            client.invoke_endpoint(
                **{"EndpointName": "x", "Body": json.dumps(TGI), "ContentType": "application/json", **kw}
            )
    with pytest.raises(client.exceptions.ValidationError, match="Accept"):
        streamed(client, TGI, Accept="application/json")
    out, _ = invoke(client, TGI, InferenceComponentName="gemma-test")
    assert out[0]["generated_text"]


def test_through_the_endpoint(ep: Endpoint) -> None:
    client = runtime(ep.url)
    out, r = invoke(client, TGI, InferenceComponentName="gemma", CustomAttributes="trace=ep")
    assert out[0]["generated_text"] and r["CustomAttributes"] == "trace=ep"
    assert r["InvokedProductionVariant"] == "AllTraffic"
    text, _ = streamed(client, TGI, InferenceComponentName="gemma")
    assert text == generate_stream(ep.url, TGI, {"X-Amzn-SageMaker-Inference-Component": "gemma"})
    completion, _ = invoke(client, COMPLETION)  # one component: the header is optional
    assert completion["choices"][0]["text"]
    with pytest.raises(client.exceptions.ValidationError, match="unknown inference component 'nope'"):
        invoke(client, TGI, InferenceComponentName="nope")
    with pytest.raises(client.exceptions.ValidationError, match="unknown inference component 'nope'"):
        streamed(client, TGI, InferenceComponentName="nope")
    with pytest.raises(client.exceptions.ModelError) as caught:
        invoke(client, {"foo": 1}, InferenceComponentName="gemma")
    assert caught.value.response["OriginalStatusCode"] == 422


def test_endpoint_log_has_no_tracebacks(ep: Endpoint) -> None:
    log = Path(ep.log).read_text()
    assert "Traceback" not in log, log[-3000:]

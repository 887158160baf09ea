"""code/inference.py's error paths, the engine model behind a model_fn, and the SageMaker Runtime paths
through the script (boto3), against a real `llmhost serve` on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import EventStreamError

from tests.integration.conftest import Server, start_server, stop_server
from tests.integration.test_custom_code import model_dir
from tests.integration.test_sagemaker_runtime import runtime

pytestmark = pytest.mark.integration

TEXT = {"Content-Type": "text/plain"}

HOOKS = """
import asyncio
import json
import sys

from llmhost.inference import engine_model


def model_fn(model_dir):
    # its own object: the engine stays reachable through engine_model()
    return {"tag": "mine", "engine": engine_model().name}


def input_fn(body, content_type):
    if content_type.startswith("application/json"):
        return json.loads(body)
    return {"text": body.decode()}


def _exiting():
    yield {"piece": "one"}
    sys.exit(4)


async def _broken(engine, prompt):
    async for piece in engine.astream(prompt, max_new_tokens=2):
        yield {"piece": piece}
    raise RuntimeError("stream broke")


async def predict_fn(data, model):
    command, _, prompt = data.get("text", "").partition(":")
    engine = engine_model()
    if command == "generate":
        return {"model": model, "text": await engine.agenerate(prompt, max_new_tokens=4)}
    if command == "thread":  # the blocking call, from a worker thread: allowed
        return {"text": await asyncio.to_thread(engine.generate, prompt, max_new_tokens=4)}
    if command == "stream":
        return ({"piece": piece} async for piece in engine.astream(prompt, max_new_tokens=4))
    if command == "broken":
        return _broken(engine, prompt)
    if command == "exit-stream":
        return _exiting()
    if command == "blocking":  # on the event loop: refused, it would wait for the loop it blocks
        return engine.generate(prompt)
    if command == "typo":
        return await engine.agenerate(prompt, temprature=0.5)
    if command == "exit":
        sys.exit(3)
    if command == "set":  # not JSON: the default output_fn cannot write it
        return {1, 2}
    raise ValueError(f"unknown command {command!r}")
"""


@pytest.fixture(scope="module")
def hooks_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("custom-hooks")
    srv = start_server(tmp, "--served-model-name", "gemma-hooks", str(model_dir(tmp / "model", HOOKS)))
    yield srv
    stop_server(srv)


def events(text: str) -> list[Any]:
    return [json.loads(line[len("data: ") :]) for line in text.splitlines() if line.startswith("data: ")]


def test_model_fn_object_and_the_engine_both_reach_predict_fn(hooks_server: Server) -> None:
    with hooks_server.client() as c:
        r = c.post("/invocations", content=b"generate:The capital of France is", headers=TEXT)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["model"] == {"tag": "mine", "engine": "gemma-hooks"} and body["text"]
        r = c.post("/invocations", content=b"thread:Once upon a time", headers=TEXT)
        assert r.status_code == 200 and r.json()["text"]


def test_async_stream_and_a_stream_failing_mid_way(hooks_server: Server) -> None:
    with hooks_server.client() as c:
        r = c.post("/invocations", content=b"stream:Once upon a time", headers=TEXT)
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        pieces = events(r.text)
        assert pieces and all(set(p) == {"piece"} for p in pieces)
        r = c.post("/invocations", content=b"broken:Once upon a time", headers=TEXT)
        *pieces, last = events(r.text)
        assert pieces and all("piece" in p for p in pieces)
        assert last["error"]["message"] == "predict_fn's stream raised RuntimeError: stream broke"


def test_sys_exit_in_user_code_does_not_stop_the_server(hooks_server: Server) -> None:
    with hooks_server.client() as c:
        r = c.post("/invocations", content=b"exit:", headers=TEXT)
        assert r.status_code == 500
        err = r.json()["error"]
        assert err["field"] == "predict_fn" and err["message"] == "predict_fn raised SystemExit: 3"
        r = c.post("/invocations", content=b"exit-stream:", headers=TEXT)
        first, last = events(r.text)
        assert first == {"piece": "one"} and "SystemExit(4)" in last["error"]["message"]
        assert c.post("/invocations", content=b"generate:Hello", headers=TEXT).status_code == 200
    assert hooks_server.process.poll() is None


def test_model_object_refusals_are_clear(hooks_server: Server) -> None:
    with hooks_server.client() as c:
        r = c.post("/invocations", content=b"blocking:Hi", headers=TEXT)
        assert r.status_code == 500
        err = r.json()["error"]
        assert err["field"] == "predict_fn"
        assert "model.generate() blocks: in an async function use `await model.agenerate()`" in err["message"]
        r = c.post("/invocations", content=b"typo:Hi", headers=TEXT)
        assert r.status_code == 500
        assert "TypeError: unknown sampling argument(s) ['temprature']" in r.json()["error"]["message"]


def test_a_prediction_the_default_output_fn_cannot_write_is_a_json_500(hooks_server: Server) -> None:
    with hooks_server.client() as c:
        r = c.post("/invocations", content=b"set:", headers=TEXT)
        assert r.status_code == 500 and r.headers["content-type"] == "application/json"
        err = r.json()["error"]
        assert err["field"] == "output_fn" and err["request_id"] == r.headers["x-request-id"]
        assert err["message"].startswith("predict_fn returned set, which the default output_fn cannot write")


def test_tgi_and_openai_routes_are_unaffected_by_inference_py(hooks_server: Server) -> None:
    tgi = {"inputs": "The capital of France is", "parameters": {"max_new_tokens": 4}}
    with hooks_server.client() as c:
        r = c.post("/generate", json=tgi)
        assert r.status_code == 200 and r.json()["generated_text"]
        r = c.post("/", json=tgi)
        assert r.status_code == 200 and r.json()[0]["generated_text"]
        r = c.post("/v1/completions", json={"prompt": "Hi", "max_tokens": 2})
        assert r.status_code == 200 and r.json()["object"] == "text_completion"


def test_sagemaker_runtime_goes_through_inference_py(hooks_server: Server) -> None:
    """InvokeEndpoint reaches the container's /invocations on SageMaker: the script answers it."""
    client = runtime(hooks_server.url)
    r = client.invoke_endpoint(EndpointName="e", Body=b"generate:The sky is", ContentType="text/plain")
    body = json.loads(r["Body"].read())
    assert body["model"]["tag"] == "mine" and body["text"]
    assert r["ContentType"] == "application/json" and r["InvokedProductionVariant"] == "AllTraffic"
    r = client.invoke_endpoint_with_response_stream(
        EndpointName="e", Body=b"stream:Once upon a time", ContentType="text/plain"
    )
    text = b"".join(e["PayloadPart"]["Bytes"] for e in r["Body"]).decode()
    assert events(text) and all("piece" in p for p in events(text))
    assert r["ContentType"].startswith("text/event-stream")
    with pytest.raises(client.exceptions.ModelError) as caught:
        client.invoke_endpoint(EndpointName="e", Body=b"set:", ContentType="text/plain")
    assert caught.value.response["OriginalStatusCode"] == 500
    assert json.loads(caught.value.response["OriginalMessage"])["error"]["field"] == "output_fn"
    r = client.invoke_endpoint_with_response_stream(
        EndpointName="e", Body=b"broken:Hi", ContentType="text/plain"
    )
    with pytest.raises(EventStreamError, match="stream broke"):
        for _ in r["Body"]:
            pass


def test_engine_model_outside_a_server_says_so() -> None:
    from llmhost.inference import engine_model

    with pytest.raises(RuntimeError, match="no engine runs in this process"):
        engine_model()

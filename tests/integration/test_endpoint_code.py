"""An endpoint (`llmhost endpoint up`, real router and copy on 127.0.0.1) whose component is a model
directory with code/inference.py: its copies find the script as `llmhost serve DIR` does; and the
copies' internal key: a request that skips the router is refused."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from tests.integration.endpoint_helpers import ENGINE, Endpoint, copy_headers, start_endpoint, stop_endpoint
from tests.integration.test_custom_code import ARTIFACT_SAYS, as_artifact, model_dir
from tests.integration.test_sagemaker_runtime import runtime

pytestmark = pytest.mark.integration

TGI = {"inputs": "The capital of France is", "parameters": {"max_new_tokens": 4}}

WRAPS = """
import json

def input_fn(body, content_type):
    return json.loads(body)  # a list too: the default predict_fn takes a JSON object only

def output_fn(prediction, accept):
    return json.dumps({"via": "output_fn", "prediction": prediction}), "application/json"
"""


@pytest.fixture(scope="module")
def ep(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoint]:
    tmp = tmp_path_factory.mktemp("endpoint-code")
    directory = as_artifact(model_dir(tmp / "model", WRAPS))
    endpoint = start_endpoint(
        tmp,
        f"""
name: code
components:
  - name: wrapped
    model: {directory}
    resources: {{num_cpus: 1, memory_mb: 600}}
    engine: {ENGINE}
    startup_health_check_timeout_s: 90
""",
    )
    yield endpoint
    stop_endpoint(endpoint)


def test_invocations_through_the_copy_go_through_output_fn(ep: Endpoint) -> None:
    [component] = ep.status()["components"]
    assert component["model_dir"] == str(ep.log.parent / "model")
    # the copy was started on the directory: it read the artifact's settings as `serve DIR` does
    assert ARTIFACT_SAYS in next(ep.log_dir.glob("wrapped-0.log")).read_text()
    r = httpx.post(f"{ep.url}/invocations", json=TGI, timeout=120)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["via"] == "output_fn" and body["prediction"][0]["generated_text"]
    # a list from input_fn cannot feed the default predict_fn: a JSON 500 naming input_fn, relayed
    r = httpx.post(f"{ep.url}/invocations", json=[1, 2], timeout=60)
    assert r.status_code == 500
    err = r.json()["error"]
    assert err["field"] == "input_fn" and err["message"].startswith("input_fn returned list")
    # boto3 through the router: the copy's runtime path runs the script too
    answer = runtime(ep.url).invoke_endpoint(
        EndpointName="code", Body=json.dumps(TGI), ContentType="application/json"
    )
    assert json.loads(answer["Body"].read())["via"] == "output_fn"


def test_a_copy_refuses_requests_that_skip_the_router(ep: Endpoint) -> None:
    [replica] = ep.replicas("wrapped")
    copy = f"http://127.0.0.1:{replica['port']}"
    direct = httpx.post(f"{copy}/invocations", json=TGI, timeout=60)
    assert direct.status_code == 401 and direct.json()["error"]["type"] == "authentication_error"
    assert httpx.get(f"{copy}/metrics", timeout=10).status_code == 401
    assert httpx.get(f"{copy}/ping", timeout=10).status_code == 200  # probes stay open
    keyed = httpx.post(f"{copy}/invocations", json=TGI, headers=copy_headers(replica), timeout=120)
    assert keyed.status_code == 200 and keyed.json()["via"] == "output_fn"
    # the router sends the key on every relayed request and scrape
    assert httpx.post(f"{ep.url}/invocations", json=TGI, timeout=120).status_code == 200
    scraped = httpx.get(f"{ep.url}/metrics", timeout=10).text  # the copy's own families, relabelled
    assert any(
        line.startswith("llmhost_requests_total{") and 'copy="wrapped-0"' in line
        for line in scraped.splitlines()
    )
    key = copy_headers(replica)["x-api-key"]
    logs = [ep.log.read_text(), *(p.read_text() for p in ep.log_dir.glob("*.log"))]
    assert not any(key in text for text in logs) and key not in json.dumps(ep.status())


def test_router_health(ep: Endpoint) -> None:
    r = httpx.get(f"{ep.url}/health", timeout=10)
    assert r.status_code == 200
    assert r.json() == {
        "status": "ready",
        "phase": "serving",
        "components": {"wrapped": {"copies": 1, "ready": 1}},
    }

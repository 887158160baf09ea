"""API keys on a real `llmhost serve` and a real endpoint (router and admin API), 127.0.0.1 only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anthropic
import boto3
import botocore.exceptions
import httpx
import openai
import pytest

from tests.integration.conftest import start_server, stop_server
from tests.integration.endpoint_helpers import ENGINE, start_endpoint, stop_endpoint

BODY = {"prompt": "Hello", "max_tokens": 2, "temperature": 0}


def test_server_requires_a_key_except_on_probes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    keys = tmp_path / "keys"
    keys.write_text("# one per line\nfrom-file\n")
    monkeypatch.setenv("LLMHOST_API_KEYS", "from-env")
    srv = start_server(
        tmp_path,
        "--api-key",
        "from-flag",
        "--api-key-file",
        str(keys),
        "--max-total-tokens",
        "256",
        "--max-input-tokens",
        "128",
    )
    try:
        with httpx.Client(base_url=srv.url, timeout=60) as c:
            assert c.get("/ping").status_code == 200 and c.get("/health").status_code == 200
            refused = c.post("/v1/completions", json=BODY)
            assert refused.status_code == 401 and refused.json()["error"]["request_id"]
            assert c.post("/invocations", json={"inputs": "Hi"}).status_code == 401
            assert c.get("/metrics").status_code == 401
            wrong = c.post("/v1/completions", json=BODY, headers={"Authorization": "Bearer from-fla"})
            assert wrong.status_code == 401
            for key in ("from-flag", "from-file", "from-env"):
                assert c.post(
                    "/v1/completions", json=BODY, headers={"Authorization": f"Bearer {key}"}
                ).is_success
                assert c.post(
                    "/generate",
                    json={"inputs": "Hi", "parameters": {"max_new_tokens": 2}},
                    headers={"x-api-key": key},
                ).is_success
        client = openai.OpenAI(base_url=f"{srv.url}/v1", api_key="from-flag", max_retries=0)
        assert client.completions.create(model="m", prompt="Hi", max_tokens=2).choices
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=f"{srv.url}/v1", api_key="nope", max_retries=0).models.list()
        # Anthropic's client sends x-api-key and reads Anthropic's error shape
        with pytest.raises(anthropic.AuthenticationError) as denied:
            anthropic.Anthropic(base_url=srv.url, api_key="nope", max_retries=0).messages.count_tokens(
                model="m", messages=[{"role": "user", "content": "Hi"}]
            )
        assert denied.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
        # boto3 signs with SigV4 (not checked); the key goes in x-api-key, added before signing
        runtime = boto3.client(
            "sagemaker-runtime",
            endpoint_url=srv.url,
            region_name="us-east-1",
            aws_access_key_id="x",
            aws_secret_access_key="y",
        )
        body = json.dumps({"inputs": "Hi", "parameters": {"max_new_tokens": 2}})
        with pytest.raises(botocore.exceptions.ClientError):
            runtime.invoke_endpoint(EndpointName="e", Body=body, ContentType="application/json")

        def add_key(request: Any, **_: Any) -> None:
            request.headers["x-api-key"] = "from-file"

        runtime.meta.events.register("before-sign.sagemaker-runtime.*", add_key)
        answer = runtime.invoke_endpoint(EndpointName="e", Body=body, ContentType="application/json")
        assert json.loads(answer["Body"].read())[0]["generated_text"]
    finally:
        stop_server(srv)
    assert "from-flag" not in srv.log.read_text() and "from-env" not in srv.log.read_text()


def test_endpoint_router_and_admin_require_a_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the router's own keys must not reach the copies: they are started without any
    monkeypatch.setenv("LLMHOST_API_KEYS", "ep-key")
    yaml_text = f"""
name: keys
instance: {{type: local, price_per_hour: 0.1}}
components:
  - name: a
    resources: {{num_cpus: 1, memory_mb: 600}}
    engine: {ENGINE}
    startup_health_check_timeout_s: 90
"""
    ep = start_endpoint(tmp_path, yaml_text)
    try:
        with httpx.Client(base_url=ep.url, timeout=60) as c:
            assert c.get("/ping").status_code == 200
            assert c.post("/v1/completions", json=BODY).status_code == 401
            assert c.get("/admin/status").status_code == 401
            assert c.post("/admin/scale", json={"component": "a", "copies": 2}).status_code == 401
            auth = {"Authorization": "Bearer ep-key"}
            assert c.post("/v1/completions", json=BODY, headers=auth).is_success
            assert c.post(
                "/generate",
                json={"inputs": "Hi", "parameters": {"max_new_tokens": 2}},
                headers={"x-api-key": "ep-key"},
            ).is_success
            assert c.get("/admin/status", headers=auth).json()["components"][0]["name"] == "a"
        cmd = [sys.executable, "-m", "llmhost.cli", "endpoint", "status", "--port", str(ep.port)]
        env = {k: v for k, v in os.environ.items() if k != "LLMHOST_API_KEYS"}
        denied = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
        assert denied.returncode == 1 and "API key" in denied.stderr
        allowed = subprocess.run(
            cmd, capture_output=True, text=True, timeout=60, env={**env, "LLMHOST_API_KEY": "ep-key"}
        )
        assert allowed.returncode == 0, allowed.stderr
    finally:
        stop_endpoint(ep)

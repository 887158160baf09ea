"""API keys on a real `llmhost serve` and a real endpoint (router and admin API), 127.0.0.1 only."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anthropic
import boto3
import botocore.exceptions
import httpx
import openai
import pytest

from tests.integration.conftest import free_port, start_server, stop_server
from tests.integration.endpoint_helpers import ENGINE, start_endpoint, stop_endpoint, up_command

BODY = {"prompt": "Hello", "max_tokens": 2, "temperature": 0}
QUOTA_KEYS = """\
# named keys with quotas (docs/guides/operations.md)
- {key: sk-alice-secret, name: alice, requests_per_minute: 5}
- {key: sk-bob-secret, name: bob}
- {key: sk-carol-secret, name: carol, tokens_per_minute: 100}
"""


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
    # the router counts a named key's requests a minute; tokens a minute it cannot count: refused
    keys = tmp_path / "keys.yaml"
    keys.write_text("- {key: team-secret, name: team, tokens_per_minute: 1000}\n")
    up = [*up_command(tmp_path / "endpoint.yaml", free_port(), tmp_path), "--api-key-file", str(keys)]
    (tmp_path / "endpoint.yaml").write_text(yaml_text)
    refused = subprocess.run(up, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "tokens_per_minute is counted by `llmhost serve`" in refused.stderr
    keys.write_text("- {key: team-secret, name: team, requests_per_minute: 2}\n")
    ep = start_endpoint(tmp_path, yaml_text, args=("--api-key-file", str(keys)))
    try:
        with httpx.Client(base_url=ep.url, timeout=60) as c:
            team = {"x-api-key": "team-secret"}
            first = c.get("/admin/status", headers=team)
            assert first.is_success and first.headers["x-ratelimit-remaining-requests"] == "1"
            assert c.post("/v1/completions", json=BODY, headers=team).is_success
            limited = c.post("/v1/completions", json=BODY, headers=team)
            assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1
            assert limited.json()["error"]["type"] == "rate_limit_error"
            text = c.get("/metrics", headers={"x-api-key": "ep-key"}).text
            assert metric(text, 'llmhost_api_key_rate_limited_total{key_name="team",limit="requests"}') == 1
            assert "team-secret" not in text
            keys.write_text("- {key: other-secret, name: other}\n")
            ep.process.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 10
            while c.get("/admin/status", headers={"x-api-key": "other-secret"}).status_code == 401:
                assert time.monotonic() < deadline, "the key file was not reloaded"
                time.sleep(0.2)
            assert c.get("/admin/status", headers=team).status_code == 401
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


def metric(text: str, line_start: str) -> float:
    """The value of the one sample of /metrics that starts with `line_start`."""
    [line] = [line for line in text.splitlines() if line.startswith(line_start)]
    return float(line.rsplit(" ", 1)[1])


def test_server_quotas_per_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LLMHOST_API_KEYS", raising=False)
    monkeypatch.delenv("LLMHOST_API_KEY", raising=False)
    keys = tmp_path / "keys.yaml"
    keys.write_text(QUOTA_KEYS)
    srv = start_server(
        tmp_path, "--api-key-file", str(keys), "--max-total-tokens", "256", "--max-input-tokens", "128"
    )
    try:
        alice = openai.OpenAI(base_url=f"{srv.url}/v1", api_key="sk-alice-secret", max_retries=0)
        for n in range(5):
            answer = alice.completions.with_raw_response.create(model="m", prompt="Hi", max_tokens=2)
            assert answer.headers["x-ratelimit-limit-requests"] == "5"
            assert answer.headers["x-ratelimit-remaining-requests"] == str(4 - n)
            assert answer.headers["x-ratelimit-reset-requests"].endswith("s")
        with pytest.raises(openai.RateLimitError) as limited:
            alice.completions.create(model="m", prompt="Hi", max_tokens=2)
        assert 1 <= int(limited.value.response.headers["retry-after"]) <= 12
        assert "requests_per_minute (5)" in limited.value.message
        bob = openai.OpenAI(base_url=f"{srv.url}/v1", api_key="sk-bob-secret", max_retries=0)
        unlimited = bob.completions.with_raw_response.create(model="m", prompt="Hi", max_tokens=2)
        assert "x-ratelimit-limit-requests" not in unlimited.headers
        # tokens: prompt + max_tokens taken at admission, what was not generated given back after
        carol = openai.OpenAI(base_url=f"{srv.url}/v1", api_key="sk-carol-secret", max_retries=0)
        started = time.monotonic()
        raw = carol.completions.with_raw_response.create(model="m", prompt="Hi", max_tokens=20)
        refilled = (time.monotonic() - started) * 100 / 60  # while it ran: 100 a minute
        usage = raw.parse().usage
        assert usage is not None and raw.headers["x-ratelimit-limit-tokens"] == "100"
        taken = 100 - usage.prompt_tokens - 20
        assert taken <= int(raw.headers["x-ratelimit-remaining-tokens"]) <= taken + refilled
        chunks = carol.completions.create(
            model="m", prompt="Hello", max_tokens=4, stream=True, stream_options={"include_usage": True}
        )
        streamed = next(c.usage for c in chunks if c.usage is not None)
        with pytest.raises(openai.RateLimitError) as too_large:
            carol.completions.create(model="m", prompt="Hi", max_tokens=120)
        assert "lower max_tokens" in too_large.value.message
        assert too_large.value.response.headers["retry-after"]
        with httpx.Client(base_url=srv.url, timeout=60, headers={"x-api-key": "sk-bob-secret"}) as c:
            text = c.get("/metrics").text
        assert metric(text, 'llmhost_api_key_requests_total{key_name="alice"}') == 5
        assert metric(text, 'llmhost_api_key_rate_limited_total{key_name="alice",limit="requests"}') == 1
        assert metric(text, 'llmhost_api_key_rate_limited_total{key_name="carol",limit="tokens"}') == 1
        assert metric(text, 'llmhost_api_key_tokens_total{key_name="carol"}') == (
            usage.total_tokens + streamed.total_tokens
        )
        assert "secret" not in text

        # SIGHUP reads the file again: a new key is accepted with its quota, the others still are
        keys.write_text(QUOTA_KEYS + "- {key: sk-dave-secret, name: dave, requests_per_minute: 1}\n")
        srv.process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        with httpx.Client(base_url=srv.url, timeout=60) as c:
            while c.get("/v1/models", headers={"x-api-key": "sk-dave-secret"}).status_code == 401:
                assert time.monotonic() < deadline, "the key file was not reloaded"
                time.sleep(0.2)
            assert c.get("/v1/models", headers={"x-api-key": "sk-dave-secret"}).status_code == 429
        assert bob.models.list().data and srv.process.poll() is None
    finally:
        stop_server(srv)
    log = srv.log.read_text()
    assert "secret" not in log and "API keys reloaded" in log
    assert "API key 'alice' over its requests_per_minute" in log

"""`llmhost endpoint up --ray` with no address: the endpoint starts its own local Ray, requires its
API key like the single-host endpoint, and on SIGTERM deletes the application and stops that Ray."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx
import psutil
import pytest

from llmhost.endpoint.cli import CLIENT_KEY_ENV
from tests.integration.conftest import CHAT_TEMPLATE
from tests.integration.endpoint_helpers import stop_endpoint
from tests.integration.ray_helpers import LOOPBACK_ONLY, start_ray_endpoint

os.environ.update(LOOPBACK_ONLY)  # before Ray is imported, here and in the endpoint's process
import ray.serve  # noqa: F401  (`make test` installs the ray extra: missing, these tests fail)

pytestmark = pytest.mark.timeout(600)

KEY = "test-key-123"
# the template file is read where `up` runs; its text travels to the copies
ENDPOINT = f"""
name: solo
components:
  - name: only
    resources: {{num_cpus: 1, memory_mb: 900}}
    engine: {{max_input_tokens: 128, max_total_tokens: 256, chat_template: {CHAT_TEMPLATE}}}
    startup_health_check_timeout_s: 180
"""


def test_local_ray_serves_and_stops_with_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ep = start_ray_endpoint(tmp_path, ENDPOINT, "", "--api-key", KEY)
    try:
        ray_processes = psutil.Process(ep.process.pid).children(recursive=True)
        assert ray_processes  # the local Ray's processes are the endpoint's
        body = {"inputs": "Hello", "parameters": {"max_new_tokens": 4}}
        assert httpx.post(f"{ep.url}/invocations", json=body, timeout=120).status_code == 401
        r = httpx.post(f"{ep.url}/invocations", json=body, timeout=120, headers={"x-api-key": KEY})
        assert r.status_code == 200 and r.json()[0]["generated_text"], r.text
        chat = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}  # no model: the only one
        r = httpx.post(f"{ep.url}/v1/chat/completions", json=chat, timeout=120, headers={"x-api-key": KEY})
        assert r.status_code == 200 and r.json()["model"] == "only", r.text
        # Anthropic's and OpenAI's agent APIs through the ingress, routed by model
        message = {"model": "only", "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]}
        refused = httpx.post(f"{ep.url}/v1/messages", json=message, timeout=120)
        assert refused.status_code == 401 and refused.json()["error"]["type"] == "authentication_error"
        r = httpx.post(f"{ep.url}/v1/messages", json=message, timeout=120, headers={"x-api-key": KEY})
        assert r.status_code == 200 and r.json()["type"] == "message" and r.json()["content"], r.text
        streamed = {"model": "only", "input": "Hi", "max_output_tokens": 4, "stream": True}
        r = httpx.post(f"{ep.url}/v1/responses", json=streamed, timeout=120, headers={"x-api-key": KEY})
        last = r.text.rstrip().split("\n\n")[-1]
        assert r.status_code == 200, r.text
        assert last.startswith(("event: response.completed", "event: response.incomplete")), r.text
        monkeypatch.setenv(CLIENT_KEY_ENV, KEY)
        shown = ep.cli("status", "--json")
        assert shown.returncode == 0 and '"backend": "ray"' in shown.stdout, shown.stderr
        ep.process.send_signal(signal.SIGTERM)
        assert ep.process.wait(timeout=120) == 0
        assert "stopped (signalled)" in ep.log.read_text()
        _, alive = psutil.wait_procs(ray_processes, timeout=60)
        assert not alive, [p.info for p in alive]
    finally:
        stop_endpoint(ep)

"""A fault stays with the request that caused it, against a real `llmhost serve` on 127.0.0.1."""

from __future__ import annotations

import http.client
import json
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import pytest

from tests.integration.conftest import Server, start_server, stop_server
from tests.integration.neartie import assert_same_or_near_tie

POST_ROUTES = [
    "/v1/completions",
    "/v1/chat/completions",
    "/invocations",
    "/",
    "/generate",
    "/generate_stream",
    "/tokenize",
    "/detokenize",
]


def greedy(url: str, prompt: str, **extra: Any) -> httpx.Response:
    body = {"prompt": prompt, "max_tokens": 12, "temperature": 0, "ignore_eos": True, "logprobs": 5, **extra}
    return httpx.post(f"{url}/v1/completions", json=body, timeout=120)


BAD_FIELDS: list[tuple[dict[str, Any], str]] = [
    ({"logit_bias": {"999999999": 5}}, "logit_bias"),
    ({"logit_bias": {"-1": 5}}, "logit_bias"),
    ({"top_k": 2**40}, "top_k"),
    ({"stop": ["x"] * 100}, "stop"),
    ({"stop": "y" * 10_000}, "stop"),
    ({"logit_bias": {str(i): 1 for i in range(5000)}}, "logit_bias"),
]


@pytest.mark.parametrize(("bad", "field"), BAD_FIELDS)
def test_a_bad_request_among_good_ones_is_refused_alone(
    server: Server, bad: dict[str, Any], field: str
) -> None:
    prompts = ["The river flows", "Seven bridges of", "A recipe for bread:"]
    alone = [greedy(server.url, p).json()["choices"][0]["logprobs"] for p in prompts]
    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(greedy, server.url, p) for p in prompts]
        refused = pool.submit(greedy, server.url, "The river flows", **bad).result()
        together = [f.result() for f in futures]
    assert 400 <= refused.status_code < 500, refused.text
    assert refused.json()["error"]["field"].split(".")[0] == field
    for r, logprobs in zip(together, alone, strict=True):
        assert r.status_code == 200
        assert_same_or_near_tie(logprobs, r.json()["choices"][0]["logprobs"])


def deep(n: int) -> bytes:
    return b'{"prompt": ' + b"[" * n + b"]" * n + b"}"


MALFORMED = [
    b"",
    b"{",
    b"[]",
    b"null",
    b'"text"',
    b'{"prompt": NaN}',
    b'{"prompt": "x", "max_tokens": 1e999}',
    b'{"inputs": "x", "parameters": {"temperature": Infinity}}',
    b"\xff\xfe",
    deep(100),
    deep(100_000),
    b'{"prompt": "x", "max_tokens": ' + b"9" * 5000 + b"}",
    b'{"messages": [{"role": "user"}], "n": {}}',
]


def test_malformed_bodies_get_4xx_json_and_the_connection_stays_usable(server: Server) -> None:
    address = urlparse(server.url)
    conn = http.client.HTTPConnection(address.hostname or "", address.port, timeout=60)
    try:
        conn.request("GET", "/ping")
        conn.getresponse().read()
        sock = conn.sock
        for route in POST_ROUTES:
            for body in MALFORMED:
                conn.request("POST", route, body=body, headers={"content-type": "application/json"})
                resp = conn.getresponse()
                raw = resp.read()
                assert 400 <= resp.status < 500, (route, body[:40], resp.status, raw[:200])
                assert "error" in json.loads(raw), (route, body[:40])
                assert resp.getheader("x-request-id")
        conn.request("POST", "/tokenize", body=b'{"content": "still here"}')
        resp = conn.getresponse()
        assert resp.status == 200 and json.loads(resp.read())["tokens"]
        assert conn.sock is sock, "the server closed the connection"
    finally:
        conn.close()


def test_request_id_is_echoed_or_made(server: Server) -> None:
    r = httpx.post(f"{server.url}/v1/completions", json={"prompt": 5}, headers={"X-Request-Id": "abc-123"})
    assert r.status_code == 422 and r.headers["x-request-id"] == "abc-123"
    assert r.json()["error"]["request_id"] == "abc-123"
    made = httpx.get(f"{server.url}/ping").headers["x-request-id"]
    assert len(made) == 32 and made != "abc-123"
    odd = httpx.get(f"{server.url}/ping", headers={"X-Request-Id": "bad id\twith spaces"})
    assert odd.headers["x-request-id"] != "bad id\twith spaces"


@pytest.fixture
def timeout_server(tmp_path: Path) -> Iterator[Server]:
    srv = start_server(
        tmp_path,
        "--max-concurrent",
        "1",
        "--max-input-tokens",
        "64",
        "--max-total-tokens",
        "512",
        "--max-batch-tokens",
        "64",
        "--queue-timeout-s",
        "0.5",
        "--request-timeout-s",
        "3",
    )
    yield srv
    stop_server(srv)


def test_queue_and_request_timeouts_answer_503_and_free_the_sequence(timeout_server: Server) -> None:
    url = timeout_server.url
    long = {"prompt": "Count:", "max_tokens": 400, "ignore_eos": True}
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(httpx.post, f"{url}/v1/completions", json=long, timeout=60)
        time.sleep(0.3)
        t0 = time.monotonic()
        queued = httpx.post(f"{url}/v1/completions", json={"prompt": "Hi", "max_tokens": 2}, timeout=60)
        waited = time.monotonic() - t0
        running = first.result()
    assert queued.status_code == 503 and queued.headers["retry-after"] == "1", queued.text
    assert "queue timeout" in queued.json()["error"]["message"] and waited < 5
    assert running.status_code == 503 and "request timeout" in running.json()["error"]["message"]
    assert timeout_server.metric("llmhost_num_requests_running") == 0
    assert timeout_server.metric("llmhost_request_failures_total") >= 2
    ok = httpx.post(f"{url}/v1/completions", json={"prompt": "Hi", "max_tokens": 2}, timeout=60)
    assert ok.status_code == 200


def test_sigterm_while_streaming_finishes_the_stream_then_exits_0(tmp_path: Path) -> None:
    srv = start_server(tmp_path, "--max-total-tokens", "512", "--max-input-tokens", "64")
    try:
        body = {"prompt": "Once upon a time", "max_tokens": 60, "ignore_eos": True, "stream": True}
        chunks: list[str] = []
        with httpx.stream("POST", f"{srv.url}/v1/completions", json=body, timeout=60) as r:
            lines = r.iter_lines()
            while not chunks:
                line = next(lines)
                if line.startswith("data: {"):
                    chunks.append(line)
            srv.process.send_signal(signal.SIGTERM)
            time.sleep(0.5)
            assert httpx.get(f"{srv.url}/ping", timeout=5).status_code == 503
            refused = httpx.post(f"{srv.url}/v1/completions", json={"prompt": "x"}, timeout=5)
            assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
            chunks += [line for line in lines if line.startswith("data: ")]
        assert chunks[-1] == "data: [DONE]", chunks[-3:]
        finish = [json.loads(c[6:])["choices"][0]["finish_reason"] for c in chunks[:-1]]
        assert finish[-1] == "length"
        assert srv.process.wait(timeout=30) == 0
    finally:
        stop_server(srv)

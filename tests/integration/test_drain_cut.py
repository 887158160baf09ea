"""Streams longer than the drain's grace period: on SIGTERM each keeps streaming until the grace is
over, then ends with its own API's error event (OpenAI and TGI SSE errors, Anthropic `error`, Responses
`response.failed`) before its connection closes; the server exits 0."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from tests.integration.conftest import CHAT_TEMPLATE, start_server

LONG = 2000
# the chat streams are greedy: sampled, about one in thirty ends with the model's end of turn within
# the grace period (measured over 160), and is then no longer in flight to be cut
# path, body, what the stream's error event carries
STREAMS: dict[str, tuple[str, dict[str, Any], str]] = {
    "openai": (
        "/v1/completions",
        {"prompt": "Once upon a time", "max_tokens": LONG, "ignore_eos": True, "stream": True},
        'data: {"error"',
    ),
    "tgi": (
        "/generate_stream",
        {"inputs": "Once upon a time", "parameters": {"max_new_tokens": LONG}},
        '"error"',
    ),
    "anthropic": (
        "/v1/messages",
        {
            "model": "m",
            "max_tokens": LONG,
            "temperature": 0,
            "stream": True,
            "messages": [{"role": "user", "content": "Tell a long story"}],
        },
        "event: error",
    ),
    "responses": (
        "/v1/responses",
        {
            "model": "m",
            "input": "Tell a long story",
            "max_output_tokens": LONG,
            "temperature": 0,
            "stream": True,
        },
        "event: response.failed",
    ),
}


def test_streams_cut_at_the_grace_get_their_error_event(tmp_path: Path) -> None:
    srv = start_server(
        tmp_path,
        "--shutdown-grace-s",
        "2",
        "--max-concurrent",
        "4",
        "--max-total-tokens",
        "4096",
        "--max-input-tokens",
        "256",
        "--chat-template",
        str(CHAT_TEMPLATE),
    )
    texts: dict[str, str] = {}
    started = {name: threading.Event() for name in STREAMS}

    def run(name: str) -> None:
        path, body, _ = STREAMS[name]
        chunks: list[str] = []
        with httpx.Client(base_url=srv.url, timeout=120) as c, c.stream("POST", path, json=body) as r:
            for chunk in r.iter_text():
                chunks.append(chunk)
                started[name].set()
        texts[name] = "".join(chunks)

    threads = [threading.Thread(target=run, args=(n,)) for n in STREAMS]
    for t in threads:
        t.start()
    for name, event in started.items():
        assert event.wait(120), f"{name} never streamed"
    srv.process.send_signal(signal.SIGTERM)
    cut_at = time.monotonic()
    for t in threads:
        t.join(120)
    assert srv.process.wait(60) == 0, srv.log.read_text()
    log = srv.log.read_text()
    assert "grace period of 2 s over with 4 request(s) in flight" in log, log[-3000:]
    assert time.monotonic() - cut_at < 60
    for name, (_, _, marker) in STREAMS.items():
        text = texts[name]
        assert marker in text and "shutting down" in text, (name, text[-600:])
    assert "exception was never retrieved" not in log and "Traceback" not in log

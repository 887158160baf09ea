"""Property-based fuzz of every POST route against a real server: whatever the body, never a 5xx, always
JSON. Bounded: a fixed number of examples per route, a server whose limits keep each generation short."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.integration.conftest import CHAT_TEMPLATE, Server, start_server, stop_server

EXAMPLES = 60

# token ids and counts at and beyond every limit, and NaN / Infinity (Python's json writes them)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(),
    st.text(max_size=20),
    st.sampled_from([-1, 0, 1, 2, 2**31, 262144, 10**9, "", "x", "1e999"]),
)
keys = st.one_of(st.text(max_size=8), st.integers(-5, 300_000).map(str))
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=12,
)
# stands for an array nested this deep, written into the JSON text (Python's json cannot build it)
DEEP = "__deep__"

VALID: dict[str, dict[str, Any]] = {
    "/v1/completions": {"prompt": "Hello", "max_tokens": 2},
    "/v1/chat/completions": {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2},
    "/invocations": {"inputs": "Hello", "parameters": {"max_new_tokens": 2}},
    "/": {"inputs": "Hello", "parameters": {"max_new_tokens": 2}},
    "/generate": {"inputs": "Hello", "parameters": {"max_new_tokens": 2}},
    "/generate_stream": {"inputs": "Hello", "parameters": {"max_new_tokens": 2}},
    "/tokenize": {"content": "Hello"},
    "/detokenize": {"tokens": [1, 2]},
    "/v1/messages": {"model": "m", "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]},
    "/v1/messages/count_tokens": {"model": "m", "messages": [{"role": "user", "content": "Hi"}]},
    "/v1/responses": {"input": "Hi", "max_output_tokens": 2},
}
FIELDS = [
    "prompt",
    "messages",
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "n",
    "stream",
    "stop",
    "seed",
    "logit_bias",
    "logprobs",
    "top_logprobs",
    "echo",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "ignore_eos",
    "stream_options",
    "inputs",
    "parameters",
    "content",
    "tokens",
    "max_completion_tokens",
    "with_pieces",
    "add_special",
    "response_format",
    "json_schema",
    "grammar",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "typical_p",
    "best_of",
    "system",
    "stop_sequences",
    "metadata",
    "input",
    "instructions",
    "max_output_tokens",
    "text",
    "store",
    "previous_response_id",
]
PARAMETERS = [
    "max_new_tokens",
    "temperature",
    "top_p",
    "top_k",
    "repetition_penalty",
    "do_sample",
    "stop",
    "seed",
    "details",
    "top_n_tokens",
    "return_full_text",
    "frequency_penalty",
    "truncate",
    "typical_p",
    "grammar",
    "decoder_input_details",
    "best_of",
    "watermark",
]


# Messages blocks and Responses items: well-formed parts with a field replaced by arbitrary JSON
BLOCKS: list[dict[str, Any]] = [
    {"type": "text", "text": "Hi"},
    {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}},
    {"type": "tool_result", "tool_use_id": "t1", "content": "ok"},
    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA"}},
    {"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}},
]
ITEMS: list[dict[str, Any]] = [
    {"role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
    {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c1", "output": "ok"},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "x"}]},
    {"role": "user", "content": [{"type": "input_image", "image_url": "x"}]},
]
NESTED = {
    "/v1/messages": ("messages", BLOCKS),
    "/v1/messages/count_tokens": ("messages", BLOCKS),
    "/v1/responses": ("input", ITEMS),
}


@st.composite
def nested(draw: st.DrawFn, route: str) -> list[Any]:
    field, parts = NESTED[route]
    chosen = draw(st.lists(st.sampled_from(parts), min_size=1, max_size=4))
    picked = [json.loads(json.dumps(p)) for p in chosen]
    for part in picked:
        if draw(st.booleans()):
            part[draw(st.sampled_from(sorted(part)))] = draw(json_values)
    if field == "input":
        return picked
    role = draw(st.sampled_from(["user", "assistant"]))
    return [{"role": "user", "content": "Hi"}, {"role": role, "content": picked}]


@st.composite
def mutated(draw: st.DrawFn, route: str) -> bytes:
    """A valid body with a few fields replaced by arbitrary JSON, or arbitrary JSON outright."""
    if draw(st.integers(0, 9)) == 0:
        return json.dumps(draw(json_values)).encode()
    values = st.one_of(json_values, st.just(DEEP))
    body = json.loads(json.dumps(VALID[route]))
    for name in draw(st.lists(st.sampled_from(FIELDS), max_size=3)):
        body[name] = draw(values)
    if isinstance(body.get("parameters"), dict):
        for name in draw(st.lists(st.sampled_from(PARAMETERS), max_size=2)):
            body["parameters"][name] = draw(values)
    if route in NESTED and draw(st.booleans()):
        body[NESTED[route][0]] = draw(nested(route))
    n = draw(st.integers(1, 5000))
    return json.dumps(body).replace(f'"{DEEP}"', "[" * n + "]" * n).encode()


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(
        tmp_path_factory.mktemp("fuzz"),
        "--max-concurrent",
        "2",
        "--max-input-tokens",
        "32",
        "--max-total-tokens",
        "48",
        "--max-batch-tokens",
        "32",
        "--chat-template",
        str(CHAT_TEMPLATE),
    )
    yield srv
    stop_server(srv)


@pytest.mark.parametrize("route", list(VALID))
def test_no_body_gets_a_5xx(fuzz_server: Server, route: str, tmp_path: Path) -> None:
    client = httpx.Client(base_url=fuzz_server.url, timeout=60)

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(body=mutated(route))
    def check(body: bytes) -> None:
        r = client.post(route, content=body, headers={"content-type": "application/json"})
        assert r.status_code < 500, (route, body[:300], r.status_code, r.text[:300])
        if r.headers.get("content-type", "").startswith("application/json"):
            r.json()

    try:
        check()
    finally:
        client.close()

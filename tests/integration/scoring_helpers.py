"""Scoring and the tokenizer routes through an endpoint (the router, or the Ray ingress) of two
components `a` and `b` of the default model."""

from __future__ import annotations

import httpx

from llmhost.endpoint.dataplane.routing import COMPONENT_HEADER, COPY_HEADER


def assert_scoring_routes(c: httpx.Client) -> None:
    r = c.get("/tokenizer_info", params={"model": "b"})
    assert r.status_code == 200 and r.headers[COPY_HEADER].startswith("b-"), r.text
    assert r.json()["bos_token"] == "<bos>" and r.json()["model"] == "b"
    r = c.get("/tokenizer_info")  # two components, none named
    assert r.status_code == 400 and r.json()["error"]["field"] == "model"
    r = c.post("/tokenize", json={"model": "a", "prompt": "Hello world", "add_special_tokens": False})
    assert r.status_code == 200 and r.headers[COPY_HEADER].startswith("a-"), r.text
    ids = r.json()["tokens"]
    r = c.post("/detokenize", headers={COMPONENT_HEADER: "b"}, json={"tokens": ids})
    assert r.json()["prompt"] == r.json()["content"] == "Hello world"
    body = {"model": "b", "prompt": [ids, ids[:1]], "echo": True, "logprobs": 1, "max_tokens": 0}
    r = c.post("/v1/completions", json=body)
    assert r.status_code == 200 and r.headers[COPY_HEADER].startswith("b-"), r.text
    first, second = sorted(r.json()["choices"], key=lambda ch: ch["index"])
    assert first["text"] == "Hello world" and second["text"] == "Hello"
    assert first["logprobs"]["token_logprobs"][0] is None and len(first["logprobs"]["tokens"]) == len(ids)
    assert first["logprobs"]["text_offset"] == [0, 5] and r.json()["usage"]["completion_tokens"] == 0

"""Scoring prompts through /v1/completions (echo with logprobs, max_tokens 0), text offsets, the
tokenizer endpoints in vLLM's shape, and the combinations refused, on the real server."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import psutil
import pytest

from tests.integration.conftest import Server

PROMPT = "The capital of France is Paris"
# a prompt scored alone is scored the same each time (flash attention: to 3.2e-8 whatever else the KV cache
# holds); batched beside other prompts, llama.cpp moves a token's logprob by up to 2.0 nats on this model
ALONE = 1e-5
BATCHED = 2.5
WIDE = "Café au lait, 서울 and 😀 emoji"


def complete(c: httpx.Client, **body: Any) -> dict[str, Any]:
    r = c.post("/v1/completions", json={"model": "gemma-test", "temperature": 0, **body})
    assert r.status_code == 200, r.text
    return dict(r.json())


def assert_offsets_index_the_text(choice: dict[str, Any]) -> None:
    """Each offset points where its token's text starts in the choice's text; offsets never decrease."""
    text, lp = choice["text"], choice["logprobs"]
    offsets = lp["text_offset"]
    assert len(offsets) == len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"])
    assert offsets == sorted(offsets) and all(0 <= o <= len(text) for o in offsets)
    for token, offset in zip(lp["tokens"], offsets, strict=True):
        if "\ufffd" not in token and not (token.startswith("<") and token.endswith(">")):
            assert text[offset : offset + len(token)] == token, (token, offset, text)


def test_echo_with_logprobs_scores_every_prompt_token_then_the_generated_ones(server: Server) -> None:
    with server.client() as c:
        one = complete(c, prompt=PROMPT, echo=True, logprobs=3, max_tokens=1)
        zero = complete(c, prompt=PROMPT, echo=True, logprobs=3, max_tokens=0)
    choice, n_prompt = one["choices"][0], one["usage"]["prompt_tokens"]
    lp = choice["logprobs"]
    assert choice["text"].startswith(PROMPT) and len(lp["tokens"]) == n_prompt + 1
    assert lp["tokens"][0] == "<bos>" and lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert all(isinstance(v, float) and v <= 0 for v in lp["token_logprobs"][1:])
    assert all(
        len(top) == 3 and max(top.values()) >= v
        for top, v in zip(lp["top_logprobs"][1:], lp["token_logprobs"][1:], strict=True)
    )
    assert lp["text_offset"][-1] == len(PROMPT)  # the generated token starts after the echo
    assert_offsets_index_the_text(choice)
    # max_tokens 0: the same prompt scores, nothing generated
    scored = zero["choices"][0]
    assert scored["text"] == PROMPT and scored["finish_reason"] == "length"
    assert zero["usage"]["completion_tokens"] == 0 and zero["usage"]["prompt_tokens"] == n_prompt
    assert scored["logprobs"]["tokens"] == lp["tokens"][:-1]
    assert scored["logprobs"]["text_offset"] == lp["text_offset"][:-1]
    assert scored["logprobs"]["token_logprobs"][1:] == pytest.approx(lp["token_logprobs"][1:-1], abs=ALONE)


def test_offsets_with_multibyte_characters_and_without_echo(server: Server) -> None:
    with server.client() as c:
        scored = complete(c, prompt=WIDE, echo=True, logprobs=1, max_tokens=4, ignore_eos=True)
        plain = complete(c, prompt=WIDE, logprobs=1, max_tokens=4, ignore_eos=True)
    choice = scored["choices"][0]
    assert choice["text"].startswith(WIDE)
    assert_offsets_index_the_text(choice)
    # without echo the offsets index the generated text alone, from 0
    gen = plain["choices"][0]
    assert gen["logprobs"]["text_offset"][0] == 0 and len(gen["logprobs"]["tokens"]) == 4
    assert_offsets_index_the_text(gen)


def test_token_id_prompts_are_used_as_given(server: Server) -> None:
    with server.client() as c:
        r = c.post("/tokenize", json={"prompt": PROMPT, "add_special_tokens": False})
        ids = r.json()["tokens"]
        assert r.json()["count"] == len(ids) and r.json()["token_strs"] is None
        with_bos = c.post("/tokenize", json={"prompt": PROMPT}).json()["tokens"]
        assert with_bos[1:] == ids and len(with_bos) == len(ids) + 1
        bare = complete(c, prompt=ids, echo=True, logprobs=0, max_tokens=0)["choices"][0]
        given = complete(c, prompt=with_bos, echo=True, logprobs=0, max_tokens=0)["choices"][0]
        text = complete(c, prompt=PROMPT, echo=True, logprobs=0, max_tokens=0)["choices"][0]
    assert bare["text"] == PROMPT and bare["logprobs"]["tokens"][0] != "<bos>"  # no BOS added
    assert len(bare["logprobs"]["tokens"]) == len(ids)
    assert given["logprobs"] == text["logprobs"]  # the string's tokens are those ids with BOS


def test_each_choice_of_each_prompt_scores_its_prompt(server: Server) -> None:
    prompts = [PROMPT, "One, two, three, four"]
    with server.client() as c:
        out = complete(c, prompt=prompts, n=2, echo=True, logprobs=1, max_tokens=2, ignore_eos=True)
        alone = [complete(c, prompt=p, echo=True, logprobs=1, max_tokens=0)["choices"][0] for p in prompts]
    choices = sorted(out["choices"], key=lambda ch: ch["index"])
    assert [ch["index"] for ch in choices] == [0, 1, 2, 3]
    for ch in choices:
        ref = alone[ch["index"] // 2]["logprobs"]
        n = len(ref["tokens"])
        assert ch["text"].startswith(prompts[ch["index"] // 2])
        assert ch["logprobs"]["tokens"][:n] == ref["tokens"] and len(ch["logprobs"]["tokens"]) == n + 2
        assert ch["logprobs"]["token_logprobs"][1:n] == pytest.approx(ref["token_logprobs"][1:], abs=BATCHED)
        assert_offsets_index_the_text(ch)


def test_streamed_echo_with_logprobs_matches_the_whole_answer(server: Server) -> None:
    body = {
        "model": "gemma-test",
        "prompt": PROMPT,
        "echo": True,
        "logprobs": 2,
        "max_tokens": 3,
        "temperature": 0,
        "ignore_eos": True,
    }
    with server.client() as c:
        whole = complete(c, **{k: v for k, v in body.items() if k not in ("model", "temperature")})
        with c.stream("POST", "/v1/completions", json={**body, "stream": True}) as r:
            assert r.status_code == 200
            events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e)["choices"][0] for e in events[:-1]]
    assert chunks[0]["text"].startswith(PROMPT)  # the first chunk holds the prompt and its logprobs
    merged: dict[str, list[Any]] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for ch in chunks:
        for key in merged:
            merged[key] += (ch["logprobs"] or {}).get(key, [])
    want = whole["choices"][0]
    assert "".join(ch["text"] for ch in chunks) == want["text"]
    assert merged["tokens"] == want["logprobs"]["tokens"]
    assert merged["text_offset"] == want["logprobs"]["text_offset"]
    assert merged["token_logprobs"][1:] == pytest.approx(want["logprobs"]["token_logprobs"][1:], abs=ALONE)


BAD: list[tuple[dict[str, Any], int, str]] = [
    ({"prompt": PROMPT, "max_tokens": 0}, 400, "max_tokens"),  # nothing to generate, nothing echoed
    ({"prompt": PROMPT, "max_tokens": 0, "logprobs": 1}, 400, "max_tokens"),
    ({"prompt": PROMPT, "echo": True, "logprobs": 1, "n": 2, "best_of": 3}, 400, "best_of"),
    ({"prompt": PROMPT, "echo": True, "logprobs": 21, "max_tokens": 0}, 422, "logprobs"),
    ({"prompt": [[2, 10], [2, 10**7]], "echo": True, "logprobs": 1, "max_tokens": 0}, 422, "prompt"),
    ({"prompt": PROMPT, "echo": True, "max_tokens": -1}, 422, "max_tokens"),
    ({"prompt": [PROMPT, 5], "echo": True, "logprobs": 1}, 422, "prompt"),  # text and ids mixed
]


def test_bad_scoring_requests_are_refused_naming_the_field_next_to_good_ones(server: Server) -> None:
    good = {"prompt": PROMPT, "echo": True, "logprobs": 2, "max_tokens": 0}
    with server.client() as c:
        alone = complete(c, **good)["choices"][0]["logprobs"]

        def send(body: dict[str, Any]) -> httpx.Response:
            return c.post("/v1/completions", json={"model": "gemma-test", "temperature": 0, **body})

        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(send, [b for bad in BAD for b in (bad[0], good)]))
    for (body, status, field), bad, ok in zip(BAD, answers[::2], answers[1::2], strict=True):
        assert bad.status_code == status, (body, bad.text)
        assert field in (bad.json()["error"].get("field") or "") or field in bad.json()["error"]["message"]
        assert ok.status_code == 200
        lp = ok.json()["choices"][0]["logprobs"]
        assert lp["tokens"] == alone["tokens"] and lp["text_offset"] == alone["text_offset"]
        assert lp["token_logprobs"][1:] == pytest.approx(alone["token_logprobs"][1:], abs=BATCHED)


def test_tokenizer_endpoints_in_vllm_and_llama_server_shapes(server: Server) -> None:
    with server.client() as c:
        info = c.get("/tokenizer_info").json()
        vllm = c.post("/tokenize", json={"prompt": "Hello world", "return_token_strs": True}).json()
        llama = c.post("/tokenize", json={"content": "Hello world"}).json()
        back = c.post("/detokenize", json={"tokens": llama["tokens"]}).json()
        both = c.post("/tokenize", json={"content": "a", "prompt": "b"})
        neither = c.post("/tokenize", json={"add_special_tokens": True})
    assert info["bos_token"] == "<bos>" and info["eos_token"] == "<eos>" and info["add_bos_token"] is True
    assert info["model"] == "gemma-test" and info["chat_template"] and info["model_max_length"] == 2048
    assert vllm["tokens"][1:] == llama["tokens"] and vllm["count"] == len(vllm["tokens"])
    assert vllm["token_strs"][0] == "<bos>" and vllm["max_model_len"] == 2048
    assert back == {"content": "Hello world", "prompt": "Hello world"}
    assert both.status_code == neither.status_code == 422 and both.json()["error"]["field"] == "prompt"


def test_a_long_prompt_scored_grows_the_server_by_a_step_of_logits_at_most(server: Server) -> None:
    """llama.cpp keeps a decode's logits rows twice (its compute buffer and the rows it hands back), each
    at the most a decode asked for. A scored prompt is computed 16 positions a step at Gemma 3's
    262,144-token vocabulary (16 MiB of rows), so scoring ~500 tokens grows the server by about 2 x 16
    MiB; all of them in one step grew it by 1 GiB."""
    proc = psutil.Process(server.process.pid)
    with server.client() as c:
        complete(c, prompt=PROMPT, max_tokens=1)
        before = proc.memory_info().rss
        scored = complete(
            c,
            prompt="The quick brown fox jumps over the lazy dog. " * 50,
            echo=True,
            logprobs=1,
            max_tokens=0,
        )
    assert scored["usage"]["prompt_tokens"] > 450
    grown_mib = (proc.memory_info().rss - before) / 2**20
    assert grown_mib < 2 * 16 + 64, f"{grown_mib:.0f} MiB"  # + 64: the request's own buffers

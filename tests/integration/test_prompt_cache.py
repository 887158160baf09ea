"""The host-memory cache tier on the real model, through the real server: a conversation evicted from
the context comes back from host memory, and its answer is what a cold prefill gives."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.conftest import Server, start_server, stop_server
from tests.integration.neartie import assert_same_or_near_tie

SYSTEM_A = " ".join(f"Rule {i}: the harbour keeps berth {i} free for grain ships." for i in range(22))
SYSTEM_B = " ".join(f"Note {i}: the library lends book {i} for two weeks at most." for i in range(22))


def complete(url: str, prompt: str, max_tokens: int) -> dict[str, Any]:
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "logprobs": 5, "ignore_eos": True}
    r = httpx.post(f"{url}/v1/completions", json=body, timeout=120)
    r.raise_for_status()
    result: dict[str, Any] = r.json()
    return result


@pytest.fixture(scope="module")
def hot(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    # one slot: each conversation takes the one before it out of the context
    srv = start_server(
        tmp_path_factory.mktemp("prompt-cache"),
        "--max-concurrent",
        "1",
        "--max-input-tokens",
        "1024",
        "--max-total-tokens",
        "1280",
        "--prompt-cache-mb",
        "64",
    )
    yield srv
    stop_server(srv)


def test_an_evicted_conversation_is_restored_from_host_memory_and_answers_as_a_cold_prefill(
    hot: Server, tmp_path: Path
) -> None:
    assert "prompt cache (host memory tier): 64 MiB" in hot.log.read_text()
    turn1 = f"{SYSTEM_A}\nUser: which berth is free for grain?\nAssistant:"
    first = complete(hot.url, turn1, 16)
    n_turn1 = first["usage"]["prompt_tokens"]
    assert n_turn1 > 250
    stores = hot.metric("llmhost_prompt_cache_stores_total")
    complete(hot.url, f"{SYSTEM_B}\nUser: how long can I keep a book?\nAssistant:", 16)
    assert hot.metric("llmhost_prompt_cache_stores_total") > stores, "the first conversation was not saved"
    assert hot.metric("llmhost_prompt_cache_bytes") > 0

    turn2 = f"{turn1}{first['choices'][0]['text']}\nUser: and for ships with timber?\nAssistant:"
    hits = hot.metric("llmhost_prompt_cache_hits_total")
    restored = hot.metric("llmhost_prompt_cache_restored_tokens_total")
    warm = complete(hot.url, turn2, 24)
    cache_n = warm["timings"]["cache_n"]
    assert cache_n >= n_turn1, f"only {cache_n} of turn 1's {n_turn1} prompt tokens were reused"
    assert hot.metric("llmhost_prompt_cache_hits_total") == hits + 1
    assert hot.metric("llmhost_prompt_cache_restored_tokens_total") == restored + cache_n
    assert warm["usage"]["prompt_tokens_details"]["cached_tokens"] == cache_n

    cold_server = start_server(
        tmp_path, "--max-concurrent", "2", "--prefix-cache-seqs", "0", "--prompt-cache-mb", "0"
    )
    try:
        cold = complete(cold_server.url, turn2, 24)
        assert cold_server.metric("llmhost_prompt_cache_capacity_bytes") == 0
    finally:
        stop_server(cold_server)
    assert cold["timings"]["cache_n"] == 0
    assert_same_or_near_tie(cold["choices"][0]["logprobs"], warm["choices"][0]["logprobs"])

"""Continuous batching and prefix caching on the real model, through the real server."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from tests.integration.conftest import Server, start_server, stop_server
from tests.integration.neartie import assert_same_or_near_tie

STEP_SEQUENCES = "llmhost_step_sequences"

TARGET = "The history of the Roman Empire begins"
OTHERS = [
    "Write a short poem about the sea.",
    "List three uses of copper:",
    "In 1969, the first humans",
    "def fibonacci(n):",
    "The recipe for a simple tomato soup is",
    "Photosynthesis is the process by which",
    "Dear hiring manager, I am writing to",
]


def complete(url: str, prompt: str, max_tokens: int = 24) -> dict[str, Any]:
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "logprobs": 5, "ignore_eos": True}
    r = httpx.post(f"{url}/v1/completions", json=body, timeout=120)
    r.raise_for_status()
    result: dict[str, Any] = r.json()
    return result


def test_greedy_alone_equals_greedy_beside_seven_others(server: Server) -> None:
    alone = complete(server.url, TARGET)
    multi_before = server.metric(f"{STEP_SEQUENCES}_count") - server.bucket(STEP_SEQUENCES, "1.0")
    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(complete, server.url, p) for p in [TARGET, *OTHERS]]
        batched = futures[0].result()
        for f in futures[1:]:
            assert f.result()["usage"]["completion_tokens"] == 24
    multi_after = server.metric(f"{STEP_SEQUENCES}_count") - server.bucket(STEP_SEQUENCES, "1.0")
    assert multi_after > multi_before, "the 8 requests never shared a decode step"
    assert_same_or_near_tie(alone["choices"][0]["logprobs"], batched["choices"][0]["logprobs"])


def stream_tokens(url: str, prompt: str, n: int) -> int:
    body = {"prompt": prompt, "max_tokens": n, "temperature": 0, "stream": True, "ignore_eos": True}
    chunks = 0
    with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=120) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks += bool(json.loads(line[6:])["choices"][0]["text"])
    return chunks


def test_eight_concurrent_streams_share_decode_steps(server: Server) -> None:
    steps_before = server.metric(f"{STEP_SEQUENCES}_count")
    single_before = server.bucket(STEP_SEQUENCES, "1.0")
    wide_before = steps_before - server.bucket(STEP_SEQUENCES, "4.0")
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda p: stream_tokens(server.url, p, 32), [TARGET, *OTHERS]))
    assert all(r > 0 for r in results)
    steps = server.metric(f"{STEP_SEQUENCES}_count") - steps_before
    single = server.bucket(STEP_SEQUENCES, "1.0") - single_before
    wide = steps_before + steps - server.bucket(STEP_SEQUENCES, "4.0") - wide_before
    # 8 x 32 tokens decoded one sequence at a time would take >= 256 steps
    assert steps < 8 * 32 / 2, f"{steps} steps for 8 x 32 tokens: little overlap"
    assert wide > 0, "no step carried more than 4 sequences"
    assert single < steps


def test_shared_prefix_is_not_prefilled_again(server: Server) -> None:
    prefix = " ".join(f"Rule {i}: answer politely and cite the handbook section {i}." for i in range(40))
    first = complete(server.url, prefix + "\nQuestion: what is rule 3?", max_tokens=4)
    second = complete(server.url, prefix + "\nQuestion: how many rules are there?", max_tokens=4)
    n_prompt = second["usage"]["prompt_tokens"]
    assert n_prompt > 400
    timings = second["timings"]
    assert timings["cache_n"] >= n_prompt - 20
    assert timings["prompt_n"] < 20
    assert timings["prompt_n"] + timings["cache_n"] == n_prompt
    assert first["timings"]["prompt_n"] > timings["prompt_n"]
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] == timings["cache_n"]


def test_a_cached_answer_matches_a_cold_one(server: Server, tmp_path: Path) -> None:
    """The prefix cache changes how much is prefilled, never what is generated (beyond batch-shape
    near ties): the same prompt on a server with the cache off gives the same tokens."""
    prefix = " ".join(f"Clause {i}: the tenant shall keep the premises in good repair." for i in range(30))
    prompt = prefix + "\nIn plain words, the tenant must"
    complete(server.url, prefix + "\nSummary:", max_tokens=2)  # caches the shared prefix
    cached = complete(server.url, prompt)
    assert cached["timings"]["cache_n"] > 300
    cold_server = start_server(tmp_path, "--max-concurrent", "2", "--prefix-cache-seqs", "0")
    try:
        cold = complete(cold_server.url, prompt)
    finally:
        stop_server(cold_server)
    assert cold["timings"]["cache_n"] == 0
    assert_same_or_near_tie(cold["choices"][0]["logprobs"], cached["choices"][0]["logprobs"])

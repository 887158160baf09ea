"""Continuous batching and prefix caching on the real model, through the real server."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from tests.integration.conftest import Server

# llama.cpp's arithmetic differs slightly with batch shape; a greedy choice may only flip where the
# two best candidates were this close (natural-log probability gap == logit gap).
NEAR_TIE_LOGIT_GAP = 0.5
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


def assert_same_or_near_tie(alone: dict[str, Any], batched: dict[str, Any]) -> None:
    a, b = alone["choices"][0]["logprobs"], batched["choices"][0]["logprobs"]
    for step, (ta, tb) in enumerate(zip(a["tokens"], b["tokens"], strict=True)):
        if ta == tb:
            continue
        top = dict(a["top_logprobs"][step])
        best = max(top.values())
        top2_gap = best - sorted(top.values())[-2]
        assert top2_gap < NEAR_TIE_LOGIT_GAP, f"step {step}: {ta!r} vs {tb!r} with top-2 gap {top2_gap:.3f}"
        # the batched choice was itself a near-best candidate when decoded alone
        assert tb in top, f"step {step}: batched chose {tb!r}, not among alone's top {list(top)}"
        gap = best - top[tb]
        assert gap < NEAR_TIE_LOGIT_GAP, f"step {step}: {tb!r} was {gap:.3f} below alone's best {ta!r}"
        return  # after a legitimate flip the continuations differ by construction


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
    assert_same_or_near_tie(alone, batched)


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

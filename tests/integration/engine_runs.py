"""Running one greedy request to its end on an in-process engine, and its logprobs in the OpenAI shape
that `neartie.assert_same_or_near_tie` compares."""

from __future__ import annotations

from typing import Any

from llmhost.engine import Engine, GenerationEvent, GenerationRequest, SamplingParams


def run_greedy(eng: Engine, rid: str, prompt: list[int], n: int) -> list[GenerationEvent]:
    """`n` greedy tokens (end of generation ignored) with the top 5 logprobs of each."""
    events: list[GenerationEvent] = []
    params = SamplingParams(max_tokens=n, temperature=0.0, logprobs=5, ignore_eos=True)
    eng.add(GenerationRequest(rid, prompt, params))
    while eng.has_work:
        events += eng.step()
    return events


def logprobs_of(events: list[GenerationEvent]) -> dict[str, Any]:
    lps = [lp for ev in events for lp in ev.logprobs]
    return {
        "tokens": [str(lp.token) for lp in lps],
        "top_logprobs": [{str(t): v for t, v in lp.top} for lp in lps],
    }

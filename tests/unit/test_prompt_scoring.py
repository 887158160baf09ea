"""max_tokens 0: the engine computes the prompt (and its logprobs), then ends the request without
sampling, next to requests that generate."""

from __future__ import annotations

import math

from llmhost.engine import FinishReason, GenerationRequest, SamplingParams
from tests.unit.engine_fakes import CYCLE, FakeModel, config, engine_factory, expected
from tests.unit.test_engine_faults import Recorder


def test_max_tokens_zero_scores_the_prompt_and_generates_nothing() -> None:
    model = FakeModel()
    engine = engine_factory(model, config(max_batch_tokens=4))
    rec = Recorder()
    prompt = [1, 2, 3, 9, 10, 11, 30]  # prefilled over two steps
    scored = SamplingParams(max_tokens=0, temperature=0.0, logprobs=1, prompt_logprobs=True)
    engine.add(GenerationRequest("score", prompt, scored))
    engine.add(GenerationRequest("gen", [5, 6], SamplingParams(max_tokens=3, temperature=0.0)))
    for _ in range(20):
        if not engine.has_work:
            break
        rec.step(engine)
    assert not engine.has_work
    events = rec.events["score"]
    last = events[-1]
    assert last.finish_reason is FinishReason.LENGTH and last.error is None
    assert rec.tokens("score") == [] and last.completion_tokens == 0 and last.prompt_tokens == len(prompt)
    lps = [lp for e in events for lp in e.prompt_logprobs]
    assert [lp.token for lp in lps] == prompt[1:]
    # the fake model predicts t + 1 with nearly all its mass: those positions are near certain
    for before, lp in zip(prompt, lps, strict=False):
        predicted = (before + 1) % CYCLE
        assert (lp.logprob > -0.01) == (lp.token == predicted) and lp.logprob < 0
        assert lp.top[0][0] == predicted and math.isfinite(lp.logprob)
    assert last.timings is not None and last.timings.prompt_n == len(prompt) and last.timings.predicted_n == 0
    assert rec.tokens("gen") == expected([5, 6], 3)

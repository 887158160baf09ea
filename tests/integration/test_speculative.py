"""n-gram speculative decoding on the real model: same greedy tokens, fewer decode steps."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from llmhost.engine import (
    Engine,
    EngineConfig,
    GenerationEvent,
    GenerationRequest,
    LlamaModel,
    SamplingParams,
)
from llmhost.engine.drafter import Drafter
from llmhost.optimize.quantize import quantize
from llmhost.store import resolve_model
from tests.integration.neartie import NEAR_TIE_LOGIT_GAP

PASSAGE = (
    "The harbour master keeps a ledger of every ship that enters the bay: its name, its cargo, "
    "the hour it arrived and the berth it was given. On stormy nights the ledger is the only record "
    "of who is safe inside the breakwater."
)
PROMPTS = [
    f"{PASSAGE}\n\nCopy the passage above exactly:\n{PASSAGE[:60]}",
    f"Summary of the text below, quoting it.\nText: {PASSAGE}\nSummary: The harbour master keeps a ledger",
    "List the numbers: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,",
    "Once upon a time",
]
NEW_TOKENS = 40


def generate(speculative: str, prompts: list[str], draft: str = "") -> tuple[dict[str, Any], Engine]:
    cfg = EngineConfig(
        max_concurrent=4,
        max_total_tokens=512,
        max_input_tokens=256,
        max_batch_tokens=128,
        n_threads=1,
        speculative=speculative,
        draft_tokens=4,
        draft_model=draft,
    )
    model = LlamaModel(resolve_model(), cfg)
    drafter = Drafter(LlamaModel(draft, cfg), model.n_vocab) if draft else None
    engine = Engine(model, cfg, drafter=drafter)
    events: dict[str, list[GenerationEvent]] = {}
    params = SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0, logprobs=5, ignore_eos=True)
    for i, text in enumerate(prompts):
        request = GenerationRequest(f"r{i}", model.tokenize(text), params)
        engine.add(request)
    while engine.has_work:
        for ev in engine.step():
            events.setdefault(ev.request_id, []).append(ev)
    out = {rid: [lp for ev in evs for lp in ev.logprobs] for rid, evs in events.items()}
    out["_timings"] = {rid: evs[-1].timings for rid, evs in events.items()}
    engine.close()
    return out, engine


def assert_same_or_near_tie(base: list[Any], spec: list[Any]) -> None:
    assert len(base) == len(spec) == NEW_TOKENS
    for step, (a, b) in enumerate(zip(base, spec, strict=True)):
        if a.token == b.token:
            continue
        top = dict(a.top)
        best = max(top.values())
        assert b.token in top, f"step {step}: speculation chose {b.token}, not among {list(top)}"
        assert best - top[b.token] < NEAR_TIE_LOGIT_GAP, f"step {step}: not a near tie"
        return


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[dict[str, Any], Engine]]]:
    # a draft that disagrees with the target now and then (the target re-quantized to 2 bits), so
    # verification both accepts and rejects guesses
    draft = tmp_path_factory.mktemp("draft") / "q2k.gguf"
    quantize(resolve_model(), draft, "Q2_K", allow_requantize=True)
    yield {
        "base_alone": generate("", PROMPTS[:1]),
        "spec_alone": generate("ngram", PROMPTS[:1]),
        "base_batched": generate("", PROMPTS),
        "spec_batched": generate("ngram", PROMPTS),
        "draft_alone": generate("draft", PROMPTS[:1], str(draft)),
        "draft_batched": generate("draft", PROMPTS, str(draft)),
    }


def test_greedy_tokens_identical_alone(runs: dict[str, tuple[dict[str, Any], Engine]]) -> None:
    assert_same_or_near_tie(runs["base_alone"][0]["r0"], runs["spec_alone"][0]["r0"])


def test_greedy_tokens_identical_batched(runs: dict[str, tuple[dict[str, Any], Engine]]) -> None:
    base, spec = runs["base_batched"][0], runs["spec_batched"][0]
    for rid in ("r0", "r1", "r2", "r3"):
        assert_same_or_near_tie(base[rid], spec[rid])


def test_drafts_are_accepted_and_save_steps(runs: dict[str, tuple[dict[str, Any], Engine]]) -> None:
    (spec, spec_engine), (_, base_engine) = runs["spec_alone"], runs["base_alone"]
    t = spec["_timings"]["r0"]
    assert t.draft_n > 0 and t.draft_n_accepted > NEW_TOKENS // 4
    assert spec_engine.steps < base_engine.steps
    stats = runs["spec_batched"][1].stats()
    assert stats.draft_tokens_accepted > 0 and stats.draft_tokens >= stats.draft_tokens_accepted


def test_draft_model_gives_the_same_greedy_tokens(runs: dict[str, tuple[dict[str, Any], Engine]]) -> None:
    assert_same_or_near_tie(runs["base_alone"][0]["r0"], runs["draft_alone"][0]["r0"])
    base, drafted = runs["base_batched"][0], runs["draft_batched"][0]
    proposed = accepted = 0
    for rid in ("r0", "r1", "r2", "r3"):
        assert_same_or_near_tie(base[rid], drafted[rid])
        t = drafted["_timings"][rid]
        proposed, accepted = proposed + t.draft_n, accepted + t.draft_n_accepted
    assert 0 < accepted < proposed, f"{accepted} of {proposed} drafts accepted: rejection never exercised"
    assert runs["draft_batched"][1].steps < runs["base_batched"][1].steps


def test_draft_model_must_share_the_vocabulary(tmp_path: Any) -> None:
    from llmhost.engine import ModelLoadError
    from llmhost.optimize.convert import convert_hf
    from tests.unit.optimize.tiny import make_tiny_hf

    tiny = tmp_path / "tiny.gguf"
    convert_hf(make_tiny_hf(tmp_path / "hf"), tiny, outtype="f32")
    cfg = EngineConfig(max_concurrent=1, max_total_tokens=128, max_input_tokens=64, max_batch_tokens=64)
    with pytest.raises(ModelLoadError, match="share a vocabulary"):
        Drafter(LlamaModel(tiny, cfg), 262144)

"""`isolate_prompts`: a prompt chunk is decoded in a llama_decode call of its own, never beside other
requests' prompt chunks or decode tokens, and every request still gets its answer."""

from __future__ import annotations

from llmhost.engine import GenerationRequest, SamplingParams
from tests.unit.engine_fakes import FakeModel, config, engine_factory, expected

PROMPTS = {"a": [1, 2, 3], "b": [10, 11, 12, 13, 14], "c": [20, 21], "d": [30, 31, 32, 33]}


def serve(isolate: bool, late: dict[str, list[int]]) -> tuple[FakeModel, dict[str, list[int]]]:
    """PROMPTS admitted together, `late` ones after the first step (beside decoding sequences)."""
    model = FakeModel()
    engine = engine_factory(model, config(isolate_prompts=isolate, max_concurrent=8))
    out: dict[str, list[int]] = {}

    def add(prompts: dict[str, list[int]]) -> None:
        for rid, prompt in prompts.items():
            engine.add(GenerationRequest(rid, prompt, SamplingParams(max_tokens=4, temperature=0.0)))

    add(PROMPTS)
    for step in range(100):
        if step == 1:
            add(late)
        for event in engine.step():
            out.setdefault(event.request_id, []).extend(event.token_ids)
        if step > 1 and not engine.has_work:
            break
    return model, out


def prompt_items(model: FakeModel) -> list[int]:
    """Per decode call, how many of its items are prompts (each prompt here fits one chunk, from
    position 0; a decode token never starts there)."""
    return [sum(start == 0 for _, start, _, _ in items) for items in model.decodes]


def test_prompts_are_decoded_alone_and_answers_kept() -> None:
    late = {"e": [40, 41, 42]}
    model, out = serve(True, late)
    everything = PROMPTS | late
    assert out == {rid: expected(p, 4) for rid, p in everything.items()}
    for items, n_prompts in zip(model.decodes, prompt_items(model), strict=True):
        assert n_prompts == 0 or len(items) == 1, items
    # the late prompt ran while the others decoded, yet in a call of its own
    assert [([40, 41, 42], 0)] in [[(t, s) for t, s, _, _ in items] for items in model.decodes]


def test_without_it_prompts_share_decode_calls() -> None:
    model, out = serve(False, {"e": [40, 41, 42]})
    assert out["e"] == expected([40, 41, 42], 4)
    assert prompt_items(model)[0] == len(PROMPTS)
    late = next(items for items in model.decodes if any(t == [40, 41, 42] for t, _, _, _ in items))
    assert len(late) == 1 + len(PROMPTS)  # beside the decoding sequences' tokens

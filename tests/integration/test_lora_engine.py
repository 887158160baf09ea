"""LoRA adapters on the real model: one engine serves the base and several adapters.

Adapters are random low-rank updates of the default model's attention query weights, made here with
the `gguf` package. With an adapter, greedy output is llama-cpp-python's own (`Llama(lora_path=...)`,
same GGUF, same adapter); a zero adapter answers as the base; mixed traffic over the base and three
adapters answers as each request alone (up to a near tie, see neartie.py)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from llama_cpp import Llama

from llmhost.engine import (
    Engine,
    EngineConfig,
    GenerationEvent,
    GenerationRequest,
    InvalidRequestError,
    LlamaModel,
    ModelLoadError,
    SamplingParams,
)
from llmhost.engine.llamacpp.adapters import AdapterInUseError
from llmhost.engine.lora import AdapterSpec
from llmhost.store import resolve_model
from tests.integration.engine_runs import logprobs_of
from tests.integration.lora_helpers import write_adapter
from tests.integration.neartie import assert_same_or_near_tie

N_TOKENS = 8
PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def adapters(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("lora")
    base = Path(resolve_model())
    made = {f"a{i}": write_adapter(tmp / f"a{i}.gguf", base, seed=i) for i in (1, 2, 3)}
    made["zero"] = write_adapter(tmp / "zero.gguf", base, seed=0, zero=True)
    made["bad"] = write_adapter(tmp / "bad.gguf", base, seed=0, shape_off_by=3)
    return made


@pytest.fixture(scope="module")
def engine(adapters: dict[str, Path]) -> Iterator[Engine]:
    specs = tuple(AdapterSpec(n, str(p)) for n, p in adapters.items() if n != "bad")
    cfg = EngineConfig(
        max_concurrent=8,
        max_total_tokens=128,
        max_input_tokens=64,
        max_batch_tokens=128,
        n_threads=1,
        prefix_cache_seqs=4,
        prompt_cache_mb=0,
        adapters=specs,
    )
    eng = Engine(LlamaModel(resolve_model(), cfg), cfg)
    yield eng
    eng.close()


def run(eng: Engine, requests: list[tuple[str, list[int], tuple[tuple[str, float], ...]]]) -> dict[str, list]:
    """Greedy requests (end of generation ignored) run together: each one's events."""
    events: dict[str, list[GenerationEvent]] = {rid: [] for rid, _, _ in requests}
    params = SamplingParams(max_tokens=N_TOKENS, temperature=0.0, logprobs=5, ignore_eos=True)
    for rid, prompt, chosen in requests:
        eng.add(GenerationRequest(rid, prompt, params, adapters=chosen))
    while eng.has_work:
        for event in eng.step():
            events[event.request_id].append(event)
    return events


def tokens_of(events: list[GenerationEvent]) -> list[int]:
    return [t for ev in events for t in ev.token_ids]


def llama_cpp_python_greedy(prompt: list[int], lora: Path | None) -> list[int]:
    llm = Llama(
        model_path=str(resolve_model()),
        lora_path=str(lora) if lora else None,
        n_ctx=128,
        n_batch=128,
        n_threads=1,
        verbose=False,
    )
    try:
        return list(itertools.islice(llm.generate(prompt, temp=0.0, top_k=1, reset=True), N_TOKENS))
    finally:
        llm.close()


def test_adapter_output_is_llama_cpp_pythons_with_that_adapter(
    engine: Engine, adapters: dict[str, Path]
) -> None:
    prompt = engine.model.tokenize(PROMPT)
    ours = run(engine, [("base", prompt, ()), ("a1", prompt, (("a1", 1.0),))])
    for name, lora in (("a1", adapters["a1"]), ("base", None)):  # base steps ran after a1's: cleared
        theirs = {"tokens": [str(t) for t in llama_cpp_python_greedy(prompt, lora)]}
        assert_same_or_near_tie(logprobs_of(ours[name]), theirs)
    # the adapter changes the answer: the comparison above is not the base's against itself
    assert tokens_of(ours["a1"]) != tokens_of(ours["base"])


def test_a_zero_adapter_answers_as_the_base(engine: Engine) -> None:
    prompt = engine.model.tokenize("Once upon a time")
    out = run(engine, [("base", prompt, ())])
    zero = run(engine, [("zero", prompt, (("zero", 1.0),))])
    # llama.cpp adds the adapter's (zero) product in a graph of its own shape: equal up to a near tie
    assert_same_or_near_tie(logprobs_of(out["base"]), logprobs_of(zero["zero"]))


def test_mixed_requests_over_base_and_three_adapters_answer_as_alone(engine: Engine) -> None:
    prompts = [engine.model.tokenize(t) for t in ("The capital of France is", "Water boils at")]
    sets: list[tuple[tuple[str, float], ...]] = [(), (("a1", 1.0),), (("a2", 1.0),), (("a3", 0.5),)]
    requests = [(f"r{i}", prompts[i % 2], sets[i % 4]) for i in range(8)]
    alone = {rid: run(engine, [(rid, p, s)])[rid] for rid, p, s in requests}
    together = run(engine, requests)
    for rid, _, _ in requests:
        assert len(tokens_of(together[rid])) == N_TOKENS
        assert_same_or_near_tie(logprobs_of(alone[rid]), logprobs_of(together[rid]))
    # the adapters answer differently from one another on the same prompt
    assert len({tuple(tokens_of(alone[f"r{i}"])) for i in (0, 2, 4, 6)}) > 1


def test_a_budget_of_one_adapter_reloads_on_demand_and_answers_as_without_it(
    engine: Engine, adapters: dict[str, Path]
) -> None:
    specs = tuple(AdapterSpec(n, str(p)) for n, p in adapters.items() if n != "bad")
    cfg = replace(engine.config, adapters=specs, max_loras=1, prefix_cache_seqs=0)
    budget = Engine(LlamaModel(resolve_model(), cfg), cfg)
    try:
        assert budget.adapters.loaded == 1  # all four checked against the model, one kept
        prompt = engine.model.tokenize("Seven budgets later")  # no cached prefix in either engine
        sets: list[tuple[tuple[str, float], ...]] = [(), (("a1", 1.0),), (("a2", 1.0),), (("a3", 0.5),)]
        requests = [(f"b{i}", prompt, sets[i % 4]) for i in range(8)]
        together = run(budget, requests)  # three adapters running at once: none freed while in use
        for rid, _, chosen in requests:
            alone = run(engine, [(rid, prompt, chosen)])[rid]
            assert_same_or_near_tie(logprobs_of(alone), logprobs_of(together[rid]))
        run(budget, [("next", prompt, (("a2", 1.0),))])
        assert budget.adapters.loaded == 1  # the idle ones freed once a request arrived
        status = {s.name: s for s in budget.adapters.status(budget.adapters_in_use())}
        assert status["a2"].loaded and not status["a1"].loaded
    finally:
        budget.close()


def test_an_adapter_is_unloaded_only_when_no_request_uses_it(
    engine: Engine, adapters: dict[str, Path]
) -> None:
    spec = AdapterSpec("late", str(adapters["a3"]))
    assert engine.adapters.load(spec, set())
    prompt = engine.model.tokenize(PROMPT)
    late = (("late", 1.0),)
    engine.add(GenerationRequest("uses", prompt, SamplingParams(max_tokens=2), adapters=late))
    with pytest.raises(AdapterInUseError, match="'late' is in use"):
        engine.adapters.unload("late", set(engine.adapters_in_use()))
    while engine.has_work:
        engine.step()
    engine.adapters.unload("late", set(engine.adapters_in_use()))
    with pytest.raises(InvalidRequestError, match="no LoRA adapter named 'late'"):
        engine.add(GenerationRequest("after", prompt, SamplingParams(), adapters=(("late", 1.0),)))
    with pytest.raises(KeyError):
        engine.adapters.unload("late", set())


def test_an_unknown_adapter_is_refused_naming_it(engine: Engine) -> None:
    with pytest.raises(InvalidRequestError, match="no LoRA adapter named 'nope'"):
        engine.add(GenerationRequest("x", [2, 3], SamplingParams(), adapters=(("nope", 1.0),)))
    assert not engine.has_work


def test_an_adapter_for_another_model_is_refused_and_the_engine_keeps_serving(
    engine: Engine, adapters: dict[str, Path]
) -> None:
    with pytest.raises(ModelLoadError, match=r"bad\.gguf"):
        engine.model.load_adapter(str(adapters["bad"]))
    prompt = engine.model.tokenize(PROMPT)
    assert len(tokens_of(run(engine, [("after", prompt, (("a2", 1.0),))])["after"])) == N_TOKENS

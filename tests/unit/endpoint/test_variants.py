"""Production and shadow variants: the endpoint file's `variants:` (each a component of its own, its
keys over the component's), the weighted choice (a seeded generator), the target header, weights set
at run time, and reading an answer's output text for the shadows' comparison."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from llmhost.endpoint.control.component import Component
from llmhost.endpoint.control.manager import with_copies
from llmhost.endpoint.control.variants import (
    TARGET_HEADER,
    Variant,
    VariantError,
    VariantSet,
    weighted_choice,
)
from llmhost.endpoint.dataplane.answer_text import answer_text, greedy
from llmhost.endpoint.spec import ComponentSpec, SpecError, parse_components, parse_endpoint
from llmhost.store.model import ResolvedModel


def endpoint(variants: list[dict[str, Any]], **component: Any) -> dict[str, Any]:
    return {"name": "ep", "components": [{"name": "chat", **component, "variants": variants}]}


def error_of(variants: list[dict[str, Any]], **component: Any) -> str:
    with pytest.raises(SpecError) as info:
        parse_endpoint(endpoint(variants, **component), "ep.yaml")
    return str(info.value)


# --- the endpoint file -----------------------------------------------------------------------------


def test_a_variant_takes_the_components_keys_and_overrides_its_own() -> None:
    spec = parse_endpoint(
        endpoint(
            [
                {"name": "a", "weight": 3},
                {"name": "b", "weight": 1, "model": "./b.gguf", "copies": 2, "engine": {"max_concurrent": 2}},
                {"name": "s", "shadow": 100},
            ],
            resources={"num_cpus": 0.5, "memory_mb": 600},
            engine={"max_concurrent": 4},
        )
    )
    [chat] = spec.components
    assert chat.initial_copies == 0  # its variants have the copies
    a, b, s = chat.variant_specs()
    assert [a.name, b.name, s.name] == ["chat:a", "chat:b", "chat:s"]
    assert a.model == "default" and a.engine.max_concurrent == 4 and a.resources.memory_mb == 600
    assert (b.model, b.initial_copies, b.engine.max_concurrent, b.resources.num_cpus) == (
        "./b.gguf",
        2,
        2,
        0.5,
    )
    assert [c.name for c in with_copies(list(spec.components))] == ["chat:a", "chat:b", "chat:s"]
    assert spec.batch_lines() == 4 + 2 * 2 + 4  # every variant's copies' sequences


def test_each_variant_captures_under_its_own_name_unless_the_file_names_one() -> None:
    spec = parse_endpoint(
        endpoint(
            [{"name": "a"}, {"name": "b", "engine": {"capture_dir": "cap", "capture_variant": "canary"}}],
            engine={"capture_dir": "cap"},
        )
    )
    a, b = spec.components[0].variant_specs()
    assert a.serve_options()["capture_variant"] == "a"  # SageMaker's {endpoint}/{variant}/ folders
    assert b.serve_options()["capture_variant"] == "canary"
    # the console says the same of each variant's copies, filed under the component they serve
    configs = [s.engine.capture("chat") for s in (a, b)]
    assert [c.location if c else None for c in configs] == ["cap/chat/a/", "cap/chat/canary/"]
    [plain] = parse_endpoint(endpoint([{"name": "a"}])).components[0].variant_specs()
    assert "capture_variant" not in plain.serve_options(), "no capture, no capture option"


def test_a_component_without_variants_is_unchanged() -> None:
    [c] = parse_components({"name": "plain", "copies": 2})
    assert c.variants == [] and c.initial_copies == 2 and with_copies([c]) == [c]


@pytest.mark.parametrize(
    ("variants", "component", "said"),
    [
        ([{"name": "a", "weight": 0}, {"name": "b", "weight": 0}], {}, "weights are all 0"),
        ([{"name": "a"}, {"name": "a"}], {}, "name 'a' appears twice"),
        (
            [{"name": "a", "weight": -1}],
            {},
            "variants[0](a).weight: Input should be greater than or equal to 0",
        ),
        ([{"name": "a", "weight": 1e7}], {}, "variants[0](a).weight: Input should be less than or equal to"),
        (
            [{"name": "a"}, {"name": "s", "shadow": 101}],
            {},
            "variants[1](s).shadow: Input should be less than",
        ),
        ([{"name": "a"}, {"name": "s", "shadow": -1}], {}, "variants[1](s).shadow: Input should be greater"),
        ([{"name": "s", "shadow": 50}], {}, "at least one must be a production variant"),
        ([{"name": "a"}, {"name": "s", "shadow": 5, "weight": 2}], {}, "`weight` does not apply"),
        ([{"name": "a b"}], {}, "variants[0](a b).name: String should match pattern"),
        ([{"name": "a", "color": 1}], {}, "variants[0](a).color: unknown key"),
        ([{"name": "a", "copies": 0}], {}, "variants[0](a): copies: 0 needs autoscaling"),
        ([{"name": "a"}], {"on_demand": {}}, "a component with variants cannot have on_demand"),
        ([{"name": "a"}], {"adapters": [{"name": "x", "path": "x.gguf"}]}, "cannot have adapters"),
        (
            [{"name": "a", "weight": float("nan")}],
            {},
            "variants[0](a).weight: Input should be a finite number",
        ),
    ],
)
def test_bad_variants_are_refused_naming_the_key(
    variants: list[dict[str, Any]], component: dict[str, Any], said: str
) -> None:
    message = error_of(variants, **component)
    assert message.startswith("ep.yaml: components[0](chat)")
    assert said in message


def test_an_adapter_component_cannot_live_on_a_component_with_variants() -> None:
    data = endpoint([{"name": "a"}])
    data["components"].append({"name": "lora", "base": "chat", "adapter": {"path": "x.gguf"}})
    with pytest.raises(SpecError, match="its base 'chat' has variants"):
        parse_endpoint(data)


def test_shadow_zero_and_weight_zero_are_accepted() -> None:
    [chat] = parse_endpoint(
        endpoint([{"name": "a", "weight": 0}, {"name": "b"}, {"name": "s", "shadow": 0}])
    ).components
    assert [(v.weight, v.shadow) for v in chat.variants] == [(0, None), (1, None), (1, 0)]


# --- the choice ------------------------------------------------------------------------------------


def test_weighted_choice_follows_the_weights() -> None:
    rng = random.Random(7)
    drawn = Counter(weighted_choice([3, 1, 0], rng) for _ in range(40_000))
    assert drawn[2] == 0  # weight 0: never
    assert abs(drawn[0] / 40_000 - 0.75) < 0.01


def test_weighted_choice_is_reproducible_and_refuses_no_weight() -> None:
    first = [weighted_choice([1, 1, 2], random.Random(3)) for _ in range(5)]
    assert first == [weighted_choice([1, 1, 2], random.Random(3)) for _ in range(5)]
    with pytest.raises(ValueError, match="no weight is above 0"):
        weighted_choice([0, 0], random.Random(1))


class FixedDraws(random.Random):
    """A generator answering the given draws in turn."""

    def __init__(self, draws: list[float]) -> None:
        super().__init__(0)
        self.draws = draws

    def random(self) -> float:
        return self.draws.pop(0)


def test_weighted_choice_at_the_boundaries() -> None:
    assert weighted_choice([3, 1], FixedDraws([0.0])) == 0
    assert weighted_choice([3, 1], FixedDraws([0.74])) == 0
    assert weighted_choice([3, 1], FixedDraws([0.75])) == 1
    assert weighted_choice([3, 0], FixedDraws([0.9999999])) == 0
    assert weighted_choice([0, 2, 0], FixedDraws([0.5])) == 1


def variant_set(rng: random.Random | None = None) -> VariantSet:
    model = ResolvedModel(gguf=Path("m.gguf"))
    spec = ComponentSpec(name="chat")

    def member(name: str) -> Component:
        return Component(spec.model_copy(update={"name": f"chat:{name}"}), model)

    variants = [
        Variant("a", member("a"), 3, None),
        Variant("b", member("b"), 1, None),
        Variant("s", member("s"), 1, 50),
    ]
    return VariantSet("chat", variants, rng)


def test_the_target_header_pins_a_production_variant() -> None:
    vs = variant_set(random.Random(1))
    assert {vs.choose("b").name for _ in range(20)} == {"b"}
    with pytest.raises(VariantError) as info:
        vs.choose("c")
    assert info.value.field == TARGET_HEADER
    assert (
        f"{TARGET_HEADER}: component 'chat' has no production variant 'c'; its production variants: a, b"
        == str(info.value)
    )
    with pytest.raises(VariantError, match="a shadow variant"):
        vs.choose("s")


def test_a_shadow_gets_its_percent_of_the_requests() -> None:
    vs = variant_set(FixedDraws([0.49, 0.5]))
    assert [v.name for v in vs.copied_to()] == ["s"]
    assert vs.copied_to() == []


def test_weights_set_at_run_time() -> None:
    vs = variant_set(random.Random(5))
    vs.set_weights({"a": 0, "b": 2, "s": 100})
    assert [(v.weight, v.shadow) for v in vs.variants] == [(0, None), (2, None), (1, 100)]
    assert {vs.choose(None).name for _ in range(50)} == {"b"}
    states = {s["name"]: s for s in vs.status()}
    assert states["b"]["share"] == 1.0 and states["a"]["share"] == 0.0
    assert states["s"]["weight"] is None and states["s"]["shadow"] is not None


@pytest.mark.parametrize(
    ("weights", "said"),
    [
        ({"x": 1}, "has no variant 'x'; its variants: a, b, s"),
        ({"a": -1}, "weights.a: must be between 0 and 1e+06, got -1"),
        ({"a": float("inf")}, "weights.a: must be between 0 and 1e+06"),
        ({"a": 1e300}, "weights.a: must be between 0 and 1e+06, got 1e+300"),
        ({"s": 150}, "weights.s: must be between 0 and 100 (a shadow variant's percent), got 150"),
        ({"a": 0, "b": 0}, "would all be 0"),
    ],
)
def test_bad_weights_change_nothing(weights: dict[str, float], said: str) -> None:
    vs = variant_set()
    with pytest.raises(VariantError) as info:
        vs.set_weights({"b": 5, **weights})
    assert said in str(info.value)
    assert [(v.weight, v.shadow) for v in vs.variants] == [(3, None), (1, None), (1, 50)]


def test_empty_weights_are_refused() -> None:
    with pytest.raises(VariantError, match="give at least one"):
        variant_set().set_weights({})


# --- what is compared ------------------------------------------------------------------------------


def sse(*events: dict[str, Any], done: bool = True) -> bytes:
    out = "".join(f"data: {json.dumps(e)}\n\n" for e in events)
    return (out + ("data: [DONE]\n\n" if done else "")).encode()


JSON = "application/json"


@pytest.mark.parametrize(
    ("body", "content_type", "text"),
    [
        ({"choices": [{"text": "Paris"}]}, JSON, "Paris"),
        ({"choices": [{"message": {"role": "assistant", "content": "Hi"}}]}, JSON, "Hi"),
        ([{"generated_text": "tgi"}], JSON, "tgi"),
        ({"generated_text": "gen"}, JSON, "gen"),
        (
            {"type": "message", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            JSON,
            "ab",
        ),
        (
            {
                "object": "response",
                "output": [{"type": "message", "content": [{"type": "output_text", "text": "r"}]}],
            },
            JSON,
            "r",
        ),
        ({"model": "m", "response": "ollama", "done": True}, JSON, "ollama"),
        ({"error": {"message": "no"}}, JSON, None),
    ],
)
def test_a_whole_answers_text(body: Any, content_type: str, text: str | None) -> None:
    assert answer_text(json.dumps(body).encode(), content_type) == text


def test_a_streamed_answers_text() -> None:
    chat = sse(
        {"choices": [{"delta": {"role": "assistant"}}]},
        {"choices": [{"delta": {"content": "He"}}]},
        {"choices": [{"delta": {"content": "llo"}}]},
        {"choices": [], "usage": {}},
    )
    assert answer_text(chat, "text/event-stream; charset=utf-8") == "Hello"
    completion = sse({"choices": [{"text": "a"}]}, {"choices": [{"text": "b"}]})
    assert answer_text(completion, "text/event-stream") == "ab"
    tgi = (
        b'data:{"token": {"text": "x", "special": false}}\n\n'
        b'data:{"token": {"text": "</s>", "special": true}, "generated_text": "x"}\n\n'
    )
    assert answer_text(tgi, "text/event-stream") == "x"
    anthropic = sse(
        {"type": "message_start"},
        {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "A"}},
        {"type": "message_stop"},
        done=False,
    )
    assert answer_text(anthropic, "text/event-stream") == "A"
    responses = sse(
        {"type": "response.output_text.delta", "delta": "R"}, {"type": "response.completed"}, done=False
    )
    assert answer_text(responses, "text/event-stream") == "R"
    ollama = b'{"response": "o", "done": false}\n{"response": "k", "done": true}\n'
    assert answer_text(ollama, "application/x-ndjson") == "ok"
    cut = sse({"choices": [{"text": "a"}]}, {"error": {"message": "copy died"}})
    assert answer_text(cut, "text/event-stream") is None
    assert answer_text(b"\x00\x00", "application/vnd.amazon.eventstream") is None


@pytest.mark.parametrize(
    ("body", "is_greedy"),
    [
        ({"temperature": 0}, True),
        ({"temperature": 0.0, "model": "chat"}, True),
        ({"temperature": 0.7}, False),
        ({}, False),  # the API's default temperature samples
        ({"temperature": False}, False),
        ({"options": {"temperature": 0}}, True),  # Ollama
        ({"inputs": "x"}, True),  # TGI does not sample unless asked
        ({"inputs": "x", "parameters": {"do_sample": True}}, False),
        ({"inputs": "x", "parameters": {"temperature": 0.5}}, False),
        ({"inputs": "x", "parameters": {"max_new_tokens": 4, "top_k": 0}}, True),
    ],
)
def test_greedy_requests_are_the_compared_ones(body: dict[str, Any], is_greedy: bool) -> None:
    assert greedy(json.dumps(body).encode()) is is_greedy
    assert greedy(b"not json") is False

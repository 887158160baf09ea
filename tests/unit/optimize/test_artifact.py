"""Ahead-of-time artifacts on a tiny model: keyed reuse, rebuilds, and a restored system-prompt state."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmhost.engine import (
    Engine,
    EngineConfig,
    GenerationEvent,
    GenerationRequest,
    LlamaModel,
    SamplingParams,
)
from llmhost.engine.kv.prefix_state import load_prefix_state
from llmhost.optimize.artifact import (
    ArtifactError,
    Recipe,
    artifact_key,
    build_or_reuse,
)
from llmhost.store.artifact import (
    ARTIFACT_JSON,
    MODEL_GGUF,
    QUALITY_JSON,
    RECIPE_YAML,
    STATE_BIN,
    environment,
    serving_hints,
)

SYSTEM = "the cat watches the birds that sing in the morning , then the cat sleeps under the old table ."


@pytest.fixture(scope="module")
def built(tiny_f32: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("artifact") / "a"
    art = build_or_reuse(
        tiny_f32, out, Recipe(quantize="q8_0", system_prompt=SYSTEM, system_prompt_mode="raw")
    )
    assert not art.reused
    return out


def test_layout(built: Path) -> None:
    for name in (MODEL_GGUF, RECIPE_YAML, QUALITY_JSON, ARTIFACT_JSON, STATE_BIN):
        assert (built / name).is_file(), name
    info = json.loads((built / ARTIFACT_JSON).read_text())
    assert info["load"]["best"] in ("mmap", "read")
    assert set(info["load"]["seconds"]) == {"mmap", "mmap+repack", "read", "read+repack"}
    assert isinstance(info["load"]["repack"], bool)
    assert info["prefix_state"]["tokens"] > 10
    quality = json.loads((built / QUALITY_JSON).read_text())
    assert quality["greedy_agreement"]["agreement"] >= 0.9
    assert quality["perplexity"]["perplexity"] > 1


def test_key_covers_model_recipe_cpu_and_engine() -> None:
    env = environment()
    base = artifact_key("aa", Recipe(), env)
    assert base == artifact_key("aa", Recipe(), env)
    assert base != artifact_key("ab", Recipe(), env)
    assert base != artifact_key("aa", Recipe(quantize="q4_0"), env)
    assert base != artifact_key("aa", Recipe(), {**env, "cpu_features_sha256": "other"})
    assert base != artifact_key("aa", Recipe(), {**env, "engine": {"llmhost": "0", "llama_cpp_python": "0"}})


def test_same_key_is_reused_changed_key_is_rebuilt(tiny_f32: Path, tmp_path: Path) -> None:
    recipe = Recipe(system_prompt=SYSTEM, system_prompt_mode="raw")
    first = build_or_reuse(tiny_f32, tmp_path, recipe)
    again = build_or_reuse(tiny_f32, tmp_path, recipe)
    assert again.reused and again.key == first.key
    changed = build_or_reuse(
        tiny_f32, tmp_path, Recipe(system_prompt=SYSTEM + " more", system_prompt_mode="raw")
    )
    assert not changed.reused and changed.key != first.key
    # an artifact made elsewhere (other CPU / engine / model) carries another key: rebuilt
    info = json.loads((tmp_path / ARTIFACT_JSON).read_text())
    info["key"] = "0" * 64
    (tmp_path / ARTIFACT_JSON).write_text(json.dumps(info))
    assert not build_or_reuse(
        tiny_f32, tmp_path, Recipe(system_prompt=SYSTEM + " more", system_prompt_mode="raw")
    ).reused
    # a damaged GGUF is not reused either
    with (tmp_path / MODEL_GGUF).open("ab") as f:
        f.write(b"\0")
    assert not build_or_reuse(
        tiny_f32, tmp_path, Recipe(system_prompt=SYSTEM + " more", system_prompt_mode="raw")
    ).reused


def test_chat_mode_needs_a_chat_template(tiny_f32: Path, tmp_path: Path) -> None:
    with pytest.raises(ArtifactError, match="no chat template"):
        build_or_reuse(tiny_f32, tmp_path, Recipe(system_prompt=SYSTEM))
    template = "{{ bos_token }}{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
    art = build_or_reuse(tiny_f32, tmp_path, Recipe(system_prompt=SYSTEM, chat_template=template))
    tokens, _ = load_prefix_state(art.directory / STATE_BIN)
    model = LlamaModel(
        art.gguf,
        EngineConfig(
            max_concurrent=1,
            max_input_tokens=100,
            max_total_tokens=128,
            prefix_cache_seqs=0,
            n_threads=1,
        ),
    )
    try:
        assert tokens == model.tokenize(f"<system>{SYSTEM}\n<user>", add_special=True)
    finally:
        model.close()


def test_serving_hints_never_pass_a_mismatched_state(built: Path, tmp_path: Path) -> None:
    hints = serving_hints(built, flash_attn=True)
    assert hints is not None and hints.prefix_state_path.endswith(STATE_BIN) and not hints.reason
    assert "flash_attn" in serving_hints(built, flash_attn=False).reason  # type: ignore[union-attr]
    assert serving_hints(tmp_path, flash_attn=True) is None  # not an artifact
    info = json.loads((built / ARTIFACT_JSON).read_text())
    info["key_parts"]["engine"] = {"llmhost": "0.0.0", "llama_cpp_python": "0"}
    other = tmp_path / "other"
    other.mkdir()
    for name in (MODEL_GGUF, STATE_BIN):
        (other / name).write_bytes((built / name).read_bytes())
    (other / ARTIFACT_JSON).write_text(json.dumps(info))
    assert "engine version" in serving_hints(other, True).reason  # type: ignore[union-attr]
    info = json.loads((built / ARTIFACT_JSON).read_text())
    (other / ARTIFACT_JSON).write_text(json.dumps(info))
    assert serving_hints(other, True).prefix_state_path  # type: ignore[union-attr]  # copied: sha256 ok
    (other / STATE_BIN).write_bytes((built / STATE_BIN).read_bytes()[:-1] + b"x")
    assert "altered" in serving_hints(other, True).reason  # type: ignore[union-attr]


def run(engine: Engine, prompt: list[int]) -> tuple[list[int], GenerationEvent]:
    events: list[GenerationEvent] = []
    params = SamplingParams(max_tokens=8, temperature=0, ignore_eos=True)
    engine.add(GenerationRequest("r", prompt, params))
    while engine.has_work:
        events += engine.step()
    assert events[-1].finished
    return [t for e in events for t in e.token_ids], events[-1]


def test_preloaded_state_prefills_only_the_suffix(built: Path) -> None:
    config = EngineConfig(
        max_concurrent=2,
        max_input_tokens=200,
        max_total_tokens=256,
        prefix_cache_seqs=2,
        n_threads=1,
        flash_attn=True,
    )
    tokens, state = load_prefix_state(built / STATE_BIN)
    outputs: list[list[int]] = []
    for preload in (False, True):
        engine = Engine(LlamaModel(built / MODEL_GGUF, config), config)
        try:
            prompt = engine.model.tokenize(SYSTEM + " the dog runs")
            assert prompt[: len(tokens)] == tokens
            if preload:
                assert engine.kv.preload_prefix(tokens, state)
            generated, final = run(engine, prompt)
        finally:
            engine.close()
        assert final.timings is not None
        expected_cached = len(tokens) if preload else 0
        assert final.timings.cache_n == expected_cached
        assert final.timings.prompt_n == len(prompt) - expected_cached
        outputs.append(generated)
    # the restored KV is the same KV: greedy tokens are identical to a cold prefill
    assert len(outputs[0]) == 8
    assert outputs[0] == outputs[1]


def test_a_state_that_does_not_fit_is_refused(built: Path) -> None:
    config = EngineConfig(
        max_concurrent=1,
        max_input_tokens=100,
        max_total_tokens=128,
        prefix_cache_seqs=1,
        n_threads=1,
        flash_attn=False,
    )
    tokens, state = load_prefix_state(built / STATE_BIN)
    engine = Engine(LlamaModel(built / MODEL_GGUF, config), config)
    try:
        # saved with flash attention (V not transposed): llama.cpp rejects it, the id is freed
        assert not engine.kv.preload_prefix(tokens, state)
        assert engine.scheduler.cache.held_seqs == 0
        _, final = run(engine, engine.model.tokenize(SYSTEM))
        assert final.timings is not None and final.timings.cache_n == 0
    finally:
        engine.close()

"""Serve settings in any combination within their declared bounds: refused before anything loads with a
message naming the settings, or an EngineConfig whose llama.cpp context cannot abort (issue #43:
`--max-batch-tokens 4 --max-concurrent 8` and `--max-concurrent 1 --max-batch-tokens 1` aborted)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from llmhost.endpoint.spec import ComponentSpec
from llmhost.engine.config import LLAMA_MAX_SEQ, EngineConfig
from llmhost.settings.serve import SERVE_SPEC

NAMES = (
    "max_concurrent",
    "max_batch_tokens",
    "max_input_tokens",
    "max_total_tokens",
    "prefix_cache_seqs",
    "max_queue",
    "speculative",
    "draft_tokens",
)


def bounded(name: str, top: int) -> st.SearchStrategy[int]:
    """A setting's values from its declared least value (0: unset, its variable or default) up."""
    least = int(SERVE_SPEC[name].ge or 0)
    return st.integers(min_value=0 if SERVE_SPEC[name].env else least, max_value=top)


COMBINATIONS = st.fixed_dictionaries(
    {
        "max_concurrent": bounded("max_concurrent", 300),
        "max_batch_tokens": bounded("max_batch_tokens", 600),
        "max_input_tokens": bounded("max_input_tokens", 5000),
        "max_total_tokens": bounded("max_total_tokens", 5000),
        "prefix_cache_seqs": bounded("prefix_cache_seqs", 300),
        "max_queue": bounded("max_queue", 100),
        "speculative": st.sampled_from(["", "ngram"]),
    }
)


def check(values: dict[str, Any]) -> EngineConfig | str:
    try:
        return SERVE_SPEC.engine_config(values, {})
    except ValueError as exc:
        return str(exc)


@settings(max_examples=400, deadline=None)
@given(COMBINATIONS)
def test_each_combination_is_refused_naming_settings_or_cannot_abort(values: dict[str, Any]) -> None:
    config = check(values)
    if isinstance(config, str):
        assert any(name in config for name in NAMES), config
        return
    # what llama.cpp asserts at context creation and at each decode
    assert config.max_batch_tokens >= config.max_concurrent
    assert config.llama_n_batch >= config.n_seq_max
    assert config.llama_n_batch >= config.max_batch_tokens
    assert config.n_seq_max <= LLAMA_MAX_SEQ
    assert config.max_input_tokens < config.max_total_tokens


@pytest.mark.parametrize(
    ("batch", "concurrent", "ok"), [(4, 8, False), (1, 1, True), (8, 8, True), (7, 8, False)]
)
def test_the_issue_43_settings(batch: int, concurrent: int, ok: bool) -> None:
    config = check({"max_batch_tokens": batch, "max_concurrent": concurrent})
    if ok:
        assert isinstance(config, EngineConfig) and config.llama_n_batch >= config.n_seq_max
    else:
        assert isinstance(config, str)
        assert f"max_batch_tokens ({batch}) must be >= max_concurrent ({concurrent})" in config


def test_an_endpoint_file_with_them_is_refused_naming_them() -> None:
    with pytest.raises(ValidationError, match=r"max_batch_tokens \(4\) must be >= max_concurrent \(8\)"):
        ComponentSpec(name="a", engine={"max_batch_tokens": 4, "max_concurrent": 8})
    ComponentSpec(name="a", engine={"max_batch_tokens": 1, "max_concurrent": 1})
    with pytest.raises(ValidationError, match="max_concurrent \\+ prefix_cache_seqs"):
        ComponentSpec(
            name="a", engine={"max_concurrent": 250, "prefix_cache_seqs": 8, "max_batch_tokens": 512}
        )


def _serve(args: list[str], env: dict[str, str] | None = None) -> Any:
    from typer.testing import CliRunner

    from llmhost.cli import app

    # a model that is not there: the settings are refused before any model is looked for, let alone loaded
    return CliRunner().invoke(app, ["serve", "/nowhere/model.gguf", *args], env=env)


def test_llmhost_serve_refuses_them_as_a_usage_error_before_looking_for_the_model() -> None:
    result = _serve(["--max-batch-tokens", "4", "--max-concurrent", "8"])
    assert result.exit_code == 2, result.output
    assert "max_batch_tokens (4) must be >= max_concurrent (8)" in result.output
    assert "nowhere" not in result.output and "serving" not in result.output


def test_the_rule_applies_to_the_values_in_effect_the_variables_too() -> None:
    result = _serve(["--max-batch-tokens", "4"], env={"MAX_CONCURRENT_REQUESTS": "8"})
    assert result.exit_code == 2, result.output
    assert "max_batch_tokens (4) must be >= max_concurrent (8)" in result.output
    refused = pytest.raises(ValidationError, match=r"max_batch_tokens \(4\) must be >= max_concurrent \(8\)")
    with refused, pytest.MonkeyPatch.context() as mp:  # an endpoint's copies inherit the variables of `up`
        mp.setenv("MAX_CONCURRENT_REQUESTS", "8")
        ComponentSpec(name="a", engine={"max_batch_tokens": 4})


def test_endpoint_up_refuses_a_file_with_them_naming_the_key_path(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from llmhost.endpoint.cli import app

    file = tmp_path / "ep.yaml"
    engine = {"max_batch_tokens": 4, "max_concurrent": 8}
    file.write_text(
        yaml.safe_dump(
            {"name": "ep", "components": [{"name": "a", "model": "/nowhere/model.gguf", "engine": engine}]}
        )
    )
    result = CliRunner().invoke(app, ["up", str(file)])
    assert result.exit_code == 2, result.output
    assert "components[0](a): engine: max_batch_tokens (4) must be >= max_concurrent (8)" in result.output


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--ubatch-size", "600"], ("ubatch_size (600)", "max_batch_tokens (512")),
        (["--ubatch-size", "64", "--max-batch-tokens", "32"], ("ubatch_size (64)", "max_batch_tokens (32")),
        (["--ubatch-size", "64", "--embeddings"], ("--ubatch-size", "--embeddings")),
        (["--pooling", "mean"], ("--pooling", "--embeddings")),
        (["--speculative", "ngram", "--draft-model", "d.gguf"], ("draft_model", "speculative", "ngram")),
        (["--speculative", "draft"], ("speculative: draft", "draft_model")),
    ],
)
def test_settings_that_do_not_go_together_are_refused_naming_them(
    args: list[str], names: tuple[str, ...]
) -> None:
    result = _serve(args, env={})
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())  # the usage error's box wraps long lines
    assert all(n in text for n in names), text


# on the real engine: small enough that each combination loads and answers in a fraction of a second
ENGINE_COMBINATIONS = st.fixed_dictionaries(
    {
        "max_concurrent": bounded("max_concurrent", 6),
        "max_batch_tokens": bounded("max_batch_tokens", 64),
        "ubatch_size": st.integers(min_value=0, max_value=64),
        "max_input_tokens": bounded("max_input_tokens", 300),
        "max_total_tokens": bounded("max_total_tokens", 512),
        "prefix_cache_seqs": bounded("prefix_cache_seqs", 4),
        "speculative": st.sampled_from(["", "ngram"]),
        "swa_full": st.booleans(),
    }
)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.tinymodels import build_tiny_gguf

    return build_tiny_gguf(tmp_path_factory.mktemp("tiny") / "gemma3.gguf", arch="gemma3")


@settings(max_examples=25, deadline=None, derandomize=True)
@given(ENGINE_COMBINATIONS)
def test_each_combination_is_refused_or_serves_on_the_real_engine(
    tiny_model: Path, values: dict[str, Any]
) -> None:
    """A combination that passes the settings' checks loads, gets the batches it asked llama.cpp for, and
    generates; one that does not is refused naming its settings (an abort would end this process)."""
    import llama_cpp as lc

    from llmhost.engine import Engine, LlamaModel
    from tests.integration.engine_runs import run_greedy

    config = check({**values, "threads": 1})
    if isinstance(config, str):
        assert any(name in config for name in (*NAMES, "ubatch_size", "swa_full")), config
        return
    engine = Engine(LlamaModel(tiny_model, config), config)
    try:
        assert lc.llama_n_ubatch(engine.model.ctx) == config.llama_n_ubatch
        assert lc.llama_n_batch(engine.model.ctx) == config.llama_n_batch
        prompt = engine.model.tokenize("The settings go together")[: config.max_input_tokens]
        events = run_greedy(engine, "r", prompt, 3)
        assert sum(len(e.token_ids) for e in events) == 3
    finally:
        engine.close()


def test_ubatch_size_reaches_llama_cpps_context(tiny_model: Path) -> None:
    import llama_cpp as lc

    from llmhost.engine import LlamaModel

    for ubatch, want in ((0, 512), (64, 64)):  # 0: llama.cpp's default, within the batch
        config = check({"ubatch_size": ubatch, "max_batch_tokens": 512, "threads": 1})
        assert isinstance(config, EngineConfig)
        model = LlamaModel(tiny_model, config)
        try:
            assert lc.llama_n_ubatch(model.ctx) == want
        finally:
            model.close()

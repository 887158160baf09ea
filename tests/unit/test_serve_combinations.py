"""Serve settings in any combination within their declared bounds: refused before anything loads with a
message naming the settings, or an EngineConfig whose llama.cpp context cannot abort (issue #43:
`--max-batch-tokens 4 --max-concurrent 8` and `--max-concurrent 1 --max-batch-tokens 1` aborted)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from llmhost.endpoint.spec import ComponentSpec
from llmhost.engine.config import LLAMA_MAX_SEQ, EngineConfig
from llmhost.serve_spec import SERVE_SPEC

NAMES = ("max_concurrent", "max_batch_tokens", "max_input_tokens", "max_total_tokens", "prefix_cache_seqs",
         "max_queue", "speculative", "draft_tokens")  # fmt: skip


def bounded(name: str, top: int) -> st.SearchStrategy[int]:
    """A setting's values from its declared least value (0: unset, its variable or default) up."""
    least = int(SERVE_SPEC[name].ge or 0)
    return st.integers(min_value=0 if SERVE_SPEC[name].env else least, max_value=top)


COMBINATIONS = st.fixed_dictionaries({
    "max_concurrent": bounded("max_concurrent", 300),
    "max_batch_tokens": bounded("max_batch_tokens", 600),
    "max_input_tokens": bounded("max_input_tokens", 5000),
    "max_total_tokens": bounded("max_total_tokens", 5000),
    "prefix_cache_seqs": bounded("prefix_cache_seqs", 300),
    "max_queue": bounded("max_queue", 100),
    "speculative": st.sampled_from(["", "ngram"]),
})  # fmt: skip


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


@pytest.mark.parametrize(("batch", "concurrent", "ok"),
                         [(4, 8, False), (1, 1, True), (8, 8, True), (7, 8, False)])  # fmt: skip
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
        ComponentSpec(name="a", engine={"max_concurrent": 250, "max_batch_tokens": 512})

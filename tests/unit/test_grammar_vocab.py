"""The grammar engine's view of a vocabulary, built by llmhost as llguidance's own helper builds it."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import llama_cpp
import llguidance.llamacpp
import pytest

from llmhost.engine.llamacpp.grammar_vocab import grammar_tokenizer
from tests.tinymodels import smollm2_gguf


@pytest.fixture(scope="module")
def vocab() -> Iterator[Any]:
    """SmolLM2's vocabulary alone (49,152 tokens, control tokens among them), no weights loaded."""
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(str(smollm2_gguf()).encode(), params)
    assert model
    yield llama_cpp.llama_model_get_vocab(model)
    llama_cpp.llama_model_free(model)


def test_the_vocabulary_is_llguidances_own(vocab: Any) -> None:
    n = llama_cpp.llama_vocab_n_tokens(vocab)
    ours = grammar_tokenizer(vocab, n + 3, [2])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        theirs = llguidance.llamacpp.lltokenizer_from_vocab(vocab, n_vocab=n + 3, eos_token=[2])
    assert ours.vocab_size == theirs.vocab_size == n + 3 and ours.eos_token == theirs.eos_token
    ids = list(range(n + 3))
    assert [ours.decode_bytes([i]) for i in ids] == [theirs.decode_bytes([i]) for i in ids]
    special = [i for i in ids if ours.is_special_token(i)]
    assert special == [i for i in ids if theirs.is_special_token(i)] and len(special) > 10
    text = "<|im_start|>user\nHello, wörld! 12345<|im_end|>"
    assert ours.tokenize_str(text) == theirs.tokenize_str(text)

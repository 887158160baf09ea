"""Structured output: a grammar that the sampled tokens of one sequence must follow, with llguidance.

llguidance was picked on figures (benchmarks/constraint_engines.py, Gemma 3's 262,144-token vocabulary,
a nested JSON schema): 0.25 ms median per token to compute and apply the mask, 1.3 ms to compile;
xgrammar 1.5 ms per token and 716 ms to compile; llama.cpp's grammar sampler 27.5 ms per token (it walks
a candidate array over the whole vocabulary), more than a decode step of the default model.

Masks are applied in place to the sequence's logits row just before sampling, so a constrained
sequence shares the batch's decode with unconstrained ones and leaves their logits untouched.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import llguidance
import numpy as np
import numpy.typing as npt

from llmhost.engine.llamacpp.grammar_vocab import grammar_tokenizer
from llmhost.engine.request import Constraint, ConstraintKind, InvalidRequestError

# JSON the way APIs return it: no free whitespace (a base model would otherwise pad forever)
_JSON_OPTIONS: Any = {"whitespace_flexible": False}
_ANY_OBJECT = '{"type": "object"}'


def grammar_of(constraint: Constraint) -> str:
    """llguidance's grammar text for a constraint; raises InvalidRequestError naming the field."""
    kind, value = constraint.kind, constraint.value
    try:
        if kind is ConstraintKind.JSON_OBJECT:
            return str(llguidance.LLMatcher.grammar_from_json_schema(_ANY_OBJECT, defaults=_JSON_OPTIONS))
        if kind is ConstraintKind.JSON_SCHEMA:
            json.loads(value)
            return str(llguidance.LLMatcher.grammar_from_json_schema(value, defaults=_JSON_OPTIONS))
        if kind is ConstraintKind.REGEX:
            return str(llguidance.LLMatcher.grammar_from_regex(value))
        if kind is ConstraintKind.GBNF:
            from llguidance.gbnf_to_lark import gbnf_to_lark

            return str(llguidance.LLMatcher.grammar_from_lark(gbnf_to_lark(value)))
        return str(llguidance.LLMatcher.grammar_from_lark(value))
    except Exception as exc:  # compiling user text: whatever it raises is about that text
        raise InvalidRequestError(constraint.field, f"{constraint.field}: {exc}") from exc


class ConstraintCompiler:
    """The model's vocabulary as llguidance sees it, and the check that a grammar is usable before a request
    is queued.

    The vocabulary is built on the first structured request (~2.6 CPU-seconds for Gemma 3's 262k tokens),
    not at load, as vLLM builds its grammar backend: most processes never constrain a request, and copies
    started by an endpoint (scale-out, models on demand) should be ready and stoppable without it."""

    def __init__(self, vocab: Any, n_vocab: int, eos_tokens: Callable[[], list[int]]) -> None:
        """`eos_tokens` is asked for when the vocabulary is built: finding them walks the vocabulary too."""
        self.n_vocab = n_vocab
        self._vocab, self._eos_tokens = vocab, eos_tokens
        self._lock = threading.Lock()
        self._built: llguidance.LLTokenizer | None = None

    def close(self) -> None:
        """Wait for a build under way: it reads the model, which its owner is about to free."""
        with self._lock:
            self._vocab = None

    @property
    def tokenizer(self) -> llguidance.LLTokenizer:
        with self._lock:
            if self._built is None:
                if self._vocab is None:
                    raise RuntimeError("the model was closed")
                self._built = grammar_tokenizer(self._vocab, self.n_vocab, self._eos_tokens())
            return self._built

    def check(self, constraint: Constraint) -> str:
        """The grammar of `constraint`, or InvalidRequestError naming the construct llguidance refused.

        Blocks until the vocabulary is built: call it off the event loop."""
        grammar = grammar_of(constraint)
        try:
            is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar, self.tokenizer)
        except Exception as exc:  # checking user text: whatever it raises is about that text
            raise InvalidRequestError(constraint.field, f"{constraint.field}: {exc}") from exc
        if is_error:
            raise InvalidRequestError(constraint.field, f"{constraint.field}: unsupported: {messages[0]}")
        return grammar

    def matcher(self, grammar: str) -> TokenMatcher:
        return TokenMatcher(llguidance.LLMatcher(self.tokenizer, grammar, log_level=0), self.n_vocab)


class TokenMatcher:
    """The grammar state of one sequence: masks its logits row, then follows the sampled token."""

    def __init__(self, matcher: llguidance.LLMatcher, n_vocab: int) -> None:
        self._matcher = matcher
        self._n_vocab = n_vocab
        self._bits = np.zeros((n_vocab + 31) // 32, dtype=np.int32)

    def mask(self, logits: npt.NDArray[np.float32]) -> None:
        """Set every token the grammar does not allow next to -inf, in place."""
        self._matcher.unsafe_compute_mask_ptr(self._bits.ctypes.data, self._bits.nbytes)
        if self._matcher.is_error():
            raise RuntimeError(f"grammar: {self._matcher.get_error()}")
        allowed = np.unpackbits(self._bits.view(np.uint8), bitorder="little", count=self._n_vocab)
        np.putmask(logits, allowed == 0, -np.inf)

    def accept(self, token: int) -> None:
        if not self._matcher.consume_token(token):
            raise RuntimeError(f"grammar refused token {token}: {self._matcher.get_error()}")

    @property
    def done(self) -> bool:
        """The grammar is complete and allows nothing more: the output ends here."""
        return bool(self._matcher.is_stopped())

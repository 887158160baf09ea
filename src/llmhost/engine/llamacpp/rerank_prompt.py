"""A reranker's input for one (query, document) pair, built as llama-server builds it, so that the
same GGUF gives the same scores: the GGUF's `tokenizer.chat_template.rerank` prompt with `{query}` and
`{document}` filled in (Qwen3-Reranker-style models), else the query and the document joined by the
special tokens the vocabulary asks for (BOS, EOS or SEP between and after: a BERT cross-encoder).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any, Protocol

import llama_cpp as lc

from llmhost.errors import LlmhostError

# how far below the limit a document cut for a template is tried again: cut text may tokenize longer
_RETRIES = 4


class Vocabulary(Protocol):
    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]: ...

    def detokenize(self, tokens: list[int], special: bool = False) -> str: ...


class PairTooLongError(LlmhostError, ValueError):
    """The pair is longer than the limit and was not to be cut (the API names the document: 422)."""

    status = 422

    def __init__(self, n_tokens: int, limit: int) -> None:
        super().__init__(f"{n_tokens} tokens; the limit is {limit}")
        self.n_tokens = n_tokens
        self.limit = limit


def _kept(tokens: list[int], n: int, keep_end: bool) -> list[int]:
    return tokens[len(tokens) - n :] if keep_end else tokens[:n]


def rerank_template(model: Any) -> str | None:
    """The GGUF's rerank prompt, or None."""
    raw = lc.llama_model_chat_template(model, b"rerank")
    return ctypes.string_at(raw).decode("utf-8", "replace") if raw else None


@dataclass(frozen=True, slots=True)
class PairFormat:
    """What a vocabulary adds around a pair (a token id, or -1 for none), or the template that replaces it."""

    template: str | None
    bos: int
    eos: int  # after the query and after the document: the vocabulary's EOS, else its SEP
    sep: int  # between the query's EOS and the document

    @classmethod
    def of(cls, model: Any, vocab: Any) -> PairFormat:
        eos = int(lc.llama_vocab_eos(vocab))
        if eos < 0:
            eos = int(lc.llama_vocab_sep(vocab))
        return cls(
            template=rerank_template(model),
            bos=int(lc.llama_vocab_bos(vocab)) if lc.llama_vocab_get_add_bos(vocab) else -1,
            eos=eos if lc.llama_vocab_get_add_eos(vocab) else -1,
            sep=int(lc.llama_vocab_sep(vocab)) if lc.llama_vocab_get_add_sep(vocab) else -1,
        )

    def tokens(
        self, vocab: Vocabulary, query: str, document: str, limit: int, cut: bool, keep_end: bool = False
    ) -> list[int]:
        """The pair's tokens. Longer than `limit`: the document cut to fit if `cut` (its end kept with
        `keep_end`, its start otherwise), else PairTooLongError (also when the query leaves no room)."""
        if self.template is not None:
            return self._templated(vocab, query, document, limit, cut, keep_end)
        doc = vocab.tokenize(document, add_special=False, parse_special=False)
        head = self._around(vocab.tokenize(query, add_special=False, parse_special=False), [])
        room = limit - len(head) - (1 if self.eos >= 0 else 0)
        if len(doc) > room:
            if not cut or room < 1:
                raise PairTooLongError(len(head) + len(doc) + (self.eos >= 0), limit)
            doc = _kept(doc, room, keep_end)
        return head + doc + ([self.eos] if self.eos >= 0 else [])

    def _around(self, query: list[int], doc: list[int]) -> list[int]:
        """[BOS] query [EOS] [SEP] doc; the closing EOS is the caller's."""
        out = [self.bos] if self.bos >= 0 else []
        out += query
        out += [self.eos] if self.eos >= 0 else []
        out += [self.sep] if self.sep >= 0 else []
        return out + doc

    def _templated(
        self, vocab: Vocabulary, query: str, document: str, limit: int, cut: bool, keep_end: bool
    ) -> list[int]:
        def fill(doc: str) -> list[int]:
            assert self.template is not None
            prompt = self.template.replace("{query}", query).replace("{document}", doc)
            return vocab.tokenize(prompt, add_special=False, parse_special=True)

        tokens = fill(document)
        if len(tokens) <= limit:
            return tokens
        if not cut:
            raise PairTooLongError(len(tokens), limit)
        doc = vocab.tokenize(document, add_special=False, parse_special=False)
        over = len(tokens) - limit
        for _ in range(_RETRIES):
            keep = len(doc) - over
            if keep < 1:
                break
            tokens = fill(vocab.detokenize(_kept(doc, keep, keep_end)))
            if len(tokens) <= limit:
                return tokens
            over += len(tokens) - limit
        raise PairTooLongError(len(tokens), limit)

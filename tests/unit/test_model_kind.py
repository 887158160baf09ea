"""What a GGUF is for, read from its metadata (the model decides: embeddings, scores or text), the
defaults a short trained context gives, and the reranker's pair format on a fake vocabulary."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmhost.engine.config import EMBED_MAX_INPUT_TOKENS, EngineConfig
from llmhost.engine.llamacpp.model_kind import ModelKind, model_purpose
from llmhost.engine.llamacpp.rerank_prompt import PairFormat, PairTooLongError
from llmhost.settings.serve import engine_fallbacks
from tests.tinymodels import N_CTX_TRAIN_BERT, build_tiny_gguf


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("kinds")
    return {
        "llama": build_tiny_gguf(d / "llama.gguf", arch="llama"),
        "bert": build_tiny_gguf(d / "bert.gguf", arch="bert"),
        "bert-rerank": build_tiny_gguf(d / "bert-rerank.gguf", arch="bert", reranker=True),
        "qwen3-rerank": build_tiny_gguf(d / "qwen3-rerank.gguf", arch="qwen3", reranker=True),
    }


def test_the_gguf_says_what_it_is_for(models: dict[str, Path]) -> None:
    assert model_purpose(models["llama"]).kind is ModelKind.GENERATE
    bert = model_purpose(models["bert"])
    assert (bert.kind, bert.pooling, bert.n_ctx_train) == (ModelKind.EMBED, "mean", N_CTX_TRAIN_BERT)
    assert model_purpose(models["bert-rerank"]).kind is ModelKind.RERANK
    assert model_purpose(models["qwen3-rerank"]).kind is ModelKind.RERANK


def test_a_short_trained_context_is_the_default_limit() -> None:
    default = EngineConfig()
    assert engine_fallbacks({}, 0) == {}
    assert engine_fallbacks({}, 2 * default.max_total_tokens) == {}
    assert engine_fallbacks({}, 1024) == {"max_total_tokens": 1024, "max_input_tokens": 512}
    assert engine_fallbacks({"embeddings": True}, 0) == {"max_input_tokens": EMBED_MAX_INPUT_TOKENS}
    assert engine_fallbacks({"embeddings": True}, 128) == {"max_input_tokens": 128}
    # the defaults it gives make a valid engine
    EngineConfig(**engine_fallbacks({}, 1024))


class Vocab:
    """One token per character; `<s>` / `</s>` parsed as one token each when parse_special."""

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        out: list[int] = []
        i = 0
        while i < len(text):
            if parse_special and text.startswith("<s>", i):
                out.append(1000)
                i += 3
            else:
                out.append(ord(text[i]))
                i += 1
        return out

    def detokenize(self, tokens: list[int], special: bool = False) -> str:
        return "".join("<s>" if t == 1000 else chr(t) for t in tokens)


def test_a_pair_is_written_as_llama_server_writes_it_and_cut_as_asked() -> None:
    vocab = Vocab()
    bert = PairFormat(template=None, bos=1, eos=2, sep=3)
    assert bert.tokens(vocab, "q", "doc", 64, cut=False) == [1, ord("q"), 2, 3, *map(ord, "doc"), 2]
    with pytest.raises(PairTooLongError) as err:
        bert.tokens(vocab, "q", "abcdefgh", 8, cut=False)
    assert (err.value.n_tokens, err.value.limit) == (13, 8)
    assert bert.tokens(vocab, "q", "abcdefgh", 8, cut=True) == [
        1,
        ord("q"),
        2,
        3,
        ord("a"),
        ord("b"),
        ord("c"),
        2,
    ]
    assert bert.tokens(vocab, "q", "abcdefgh", 8, cut=True, keep_end=True)[4:7] == [
        ord("f"),
        ord("g"),
        ord("h"),
    ]
    bare = PairFormat(template=None, bos=-1, eos=-1, sep=-1)
    assert bare.tokens(vocab, "q", "d", 8, cut=False) == [ord("q"), ord("d")]
    templated = PairFormat(template="<s>Q:{query} D:{document}", bos=1, eos=2, sep=3)
    assert templated.tokens(vocab, "a", "b", 64, cut=False) == [1000, *map(ord, "Q:a D:b")]
    cut = templated.tokens(vocab, "a", "bcdefgh", 9, cut=True)
    assert len(cut) <= 9 and vocab.detokenize(cut).startswith("<s>Q:a D:b")
    with pytest.raises(PairTooLongError):
        templated.tokens(vocab, "a long query", "b", 9, cut=True)  # the query alone is over the limit

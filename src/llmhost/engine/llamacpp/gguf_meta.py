"""What a loaded GGUF says about itself, read through llama.cpp from the model handle (no context
needed): its description and special tokens, the KV bytes of a position, its pooling."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

import llama_cpp as lc

from llmhost.engine.kv.memory_fit import kv_bytes

# how an embeddings context pools its token vectors into one per sequence; "auto": the model's own
# (its GGUF's pooling_type), mean for a model that has none (a generative model)
POOLING = {
    "auto": lc.LLAMA_POOLING_TYPE_UNSPECIFIED,
    "mean": lc.LLAMA_POOLING_TYPE_MEAN,
    "cls": lc.LLAMA_POOLING_TYPE_CLS,
    "last": lc.LLAMA_POOLING_TYPE_LAST,
    # a reranker's: the classification head's score of the pooled vector, not a vector
    "rank": lc.LLAMA_POOLING_TYPE_RANK,
}
POOLING_NAMES = {value: name for name, value in POOLING.items()}


@dataclass(slots=True, frozen=True)
class ModelInfo:
    path: str
    description: str
    n_ctx_train: int
    n_vocab: int
    n_params: int
    size_bytes: int
    chat_template: str | None
    bos_token: str
    eos_token: str
    pad_token: str | None = None  # None: the vocabulary has none
    add_bos: bool = False  # tokenizing text with special tokens starts it with BOS


def meta(model: Any, key: str) -> str | None:
    """A GGUF metadata value as text; None when the file has no such key."""
    buf = ctypes.create_string_buffer(256)
    n = lc.llama_model_meta_val_str(model, key.encode(), buf, len(buf))
    return buf.value.decode("utf-8", "replace") if n >= 0 else None


def token_piece(vocab: Any, token: int, special: bool = False) -> bytes:
    """The bytes of one token (`special`: control tokens as their text rather than nothing)."""
    buf = ctypes.create_string_buffer(64)
    n = lc.llama_token_to_piece(vocab, token, buf, len(buf), 0, special)
    if n < 0:
        buf = ctypes.create_string_buffer(-n)
        n = lc.llama_token_to_piece(vocab, token, buf, len(buf), 0, special)
    return buf.raw[:n]


def gguf_pooling(model: Any) -> int:
    """The pooling type the GGUF declares; mean when it has none (a generative model)."""
    arch = meta(model, "general.architecture") or ""
    raw = meta(model, f"{arch}.pooling_type") or ""
    model_type = int(raw) if raw.lstrip("-").isdigit() else lc.LLAMA_POOLING_TYPE_NONE
    usable = (
        lc.LLAMA_POOLING_TYPE_MEAN,
        lc.LLAMA_POOLING_TYPE_CLS,
        lc.LLAMA_POOLING_TYPE_LAST,
        lc.LLAMA_POOLING_TYPE_RANK,
    )
    return model_type if model_type in usable else lc.LLAMA_POOLING_TYPE_MEAN


def cache_ggml_type(name: str) -> int:
    """ggml's number of the KV cache type `name`, as llama_context_params.type_k/type_v take it."""
    return int(getattr(lc, f"GGML_TYPE_{name.upper()}"))


def kv_bytes_per_token(model: Any, type_k: str = "f16", type_v: str = "f16") -> int:
    """K and V of one position over all layers in the given cache types. A head's size is the GGUF's
    key/value length, else the model's width over its heads (llama.cpp's own default): SmolLM2's GGUF
    has no head sizes, and counting the whole width per layer (an upper bound) said 67.5 KiB a token
    where it takes 22.5."""
    n_layer = int(lc.llama_model_n_layer(model))
    arch = meta(model, "general.architecture") or ""
    width = int(lc.llama_model_n_embd(model)) // max(1, int(lc.llama_model_n_head(model)))
    k = _int_or(meta(model, f"{arch}.attention.key_length"), width)
    v = _int_or(meta(model, f"{arch}.attention.value_length"), width)
    return kv_bytes(n_layer, int(lc.llama_model_n_head_kv(model)), k, v, type_k, type_v)


def _int_or(text: str | None, default: int) -> int:
    return int(text) if text and text.strip().isdigit() else default


def read_info(model: Any, vocab: Any, path: str) -> ModelInfo:
    desc = ctypes.create_string_buffer(256)
    lc.llama_model_desc(model, desc, len(desc))
    tmpl = lc.llama_model_chat_template(model, None)

    def text(token: int) -> str:
        return token_piece(vocab, token, special=True).decode("utf-8", "replace")

    pad = int(lc.llama_vocab_pad(vocab))

    return ModelInfo(
        path=path,
        description=desc.value.decode("utf-8", "replace"),
        n_ctx_train=int(lc.llama_model_n_ctx_train(model)),
        n_vocab=int(lc.llama_vocab_n_tokens(vocab)),
        n_params=int(lc.llama_model_n_params(model)),
        size_bytes=int(lc.llama_model_size(model)),
        chat_template=tmpl.decode("utf-8") if tmpl else None,
        bos_token=text(int(lc.llama_vocab_bos(vocab))),
        eos_token=text(int(lc.llama_vocab_eos(vocab))),
        pad_token=text(pad) if pad >= 0 else None,  # -1: llama.cpp's "no such token"
        add_bos=bool(lc.llama_vocab_get_add_bos(vocab)),
    )

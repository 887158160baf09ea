"""A llama.cpp vocabulary as llguidance's grammar engine sees it (engine/sample/constraint.py)."""

from __future__ import annotations

import ctypes
from typing import Any

import llama_cpp
import llguidance


def grammar_tokenizer(vocab: Any, n_vocab: int, eos_tokens: list[int]) -> llguidance.LLTokenizer:
    """llguidance's tokenizer of a llama.cpp vocabulary, as `llguidance.llamacpp.lltokenizer_from_vocab`
    makes it (each token's text; a control token, or a user-defined one written like one, marked with a
    leading 0xff byte as special), but asking llama.cpp for each token's attributes by the current name:
    llguidance's helper calls llama-cpp-python's deprecated alias, which warns (ignored, yet paid) once per
    token: 1.5-1.8 CPU-seconds here against its 1.9-2.2 over Gemma 3's 262,144 tokens, paid by each server
    on its first structured request."""
    to_piece, get_attr = llama_cpp.llama_token_to_piece, llama_cpp.llama_vocab_get_attr
    control, user_defined = llama_cpp.LLAMA_TOKEN_ATTR_CONTROL, llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED
    size = 16 * 1024
    buffer = ctypes.create_string_buffer(size + 1)
    tokens: list[bytes] = []
    for token in range(llama_cpp.llama_vocab_n_tokens(vocab)):
        n = to_piece(vocab, token, buffer, size, 0, True)
        if n < 0:
            raise ValueError(f"token {token}'s text is longer than {size} bytes")
        text = ctypes.string_at(buffer, n)
        attr = get_attr(vocab, token)
        if attr & control or (attr & user_defined and text.startswith(b"<") and text.endswith(b">")):
            text = b"\xff" + text
        tokens.append(text)
    tokens += [b""] * (n_vocab - len(tokens))
    tokenize = ctypes.cast(llama_cpp.llama_tokenize, ctypes.c_void_p).value  # the C function itself
    built: llguidance.LLTokenizer = llguidance.LLTokenizer.from_llamacpp(  # type: ignore[attr-defined]
        tokens=tokens, vocab_ptr=vocab, tokenize_fptr=tokenize, eos_token=eos_tokens, slices=None
    )
    return built

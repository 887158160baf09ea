"""Embeddings and rerank scores: inputs packed into shared llama_decode calls and pooled per sequence
by llama.cpp (a reranker's pooling gives its classification head's scores). The vectors come back as
the model gives them; normalizing is the API's choice. `embedder_loop.AsyncEmbedder` runs this on its
own thread for the server.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from llmhost.engine.config import EMBED_MAX_INPUT_TOKENS, LLAMA_MAX_SEQ, LOAD_MODES, EngineConfig
from llmhost.engine.llamacpp.gguf_meta import POOLING
from llmhost.engine.llamacpp.model import LlamaModel
from llmhost.engine.request import InvalidRequestError, RequestTooLargeError
from llmhost.errors import LlmhostError

log = logging.getLogger(__name__)

Vector = npt.NDArray[np.float32]
DecodeItem = tuple[list[int], int, int, int]

# Every input starts at a multiple of ALIGN tokens of its decode, and the decode's length is one too
# (padding tokens form a sequence of their own): llama.cpp's CPU matmuls handle a batch's rows in
# blocks, with another path for the leftover rows, so unaligned, an input's vector moves (by up to 1e-2)
# with what it is batched with. Measured on x86 (AVX-512, repacked weights or not): 8 still moved it by
# 3e-3; with 16 it matches the input decoded alone to ~1e-7.
ALIGN = 16
PAD_TOKEN = 0  # what the padding sequence holds: attention never crosses sequences, so any id does


def aligned(n_tokens: int) -> int:
    return -(-n_tokens // ALIGN) * ALIGN


def layout(inputs: Sequence[list[int]], pad_seq: int) -> list[DecodeItem]:
    """The decode items of `inputs`: input i as sequence i from position 0, each followed by padding
    (sequence `pad_seq`) up to the next multiple of ALIGN."""
    items: list[DecodeItem] = []
    pad_pos = 0
    for seq, tokens in enumerate(inputs):
        items.append((tokens, 0, seq, len(tokens)))
        gap = aligned(len(tokens)) - len(tokens)
        if gap:
            items.append(([PAD_TOKEN] * gap, pad_pos, pad_seq, gap))
            pad_pos += gap
    return items


@dataclass(slots=True, frozen=True)
class EmbedderConfig:
    # tokens of one input; llama.cpp pools a sequence within one decode, so none may be longer
    max_input_tokens: int = EMBED_MAX_INPUT_TOKENS
    # tokens one llama_decode carries; raised to fit the longest input (see `decode_tokens`)
    max_batch_tokens: int = 512
    # tokens of inputs packed into a decode before it runs (one input at least, whatever its length):
    # llama.cpp's CPU attention without flash attention computes a decode's tokens against all its
    # tokens, the other sequences' masked rather than skipped, so packing costs more than it saves.
    # Measured on 2 cores, 32 inputs, bge-small's and MiniLM-L6's shapes: 64 gives 2.0-2.3x the inputs/s
    # of 512 for 8- to 100-word inputs (and 128 within 12% of 64); on Gemma 3 270M, whose vocabulary's
    # logits dominate, 16 to 512 are within 15%
    pack_tokens: int = 64
    # inputs one llama_decode carries, each its own sequence
    max_batch_inputs: int = 64
    # inputs one request may send (OpenAI's bound)
    max_inputs: int = 2048
    # requests in flight (queued or being embedded); one more is refused (429)
    max_requests: int = 72
    # how token vectors are pooled: auto (the model's own, mean if it has none), mean, cls, last, rank
    pooling: str = "auto"
    n_threads: int = 0  # 0: available_cpus()
    # llama.cpp's flash attention: faster (on 2 cores, bge-small's shape: 1.1x, MiniLM-L6's: 1.25x), but
    # its CPU kernel makes a vector depend on what it is decoded with, by up to ~5e-4 of its largest
    # component (measured, 16-token aligned inputs); off, a vector is the one decoded alone to ~1e-7
    flash_attn: bool = False
    load_mode: str = "auto"
    repack: bool = True
    # consecutive failed decodes before the embedder declares itself dead (the server then exits)
    max_failures: int = 3

    def __post_init__(self) -> None:
        positive = {
            "max_input_tokens": self.max_input_tokens,
            "max_batch_tokens": self.max_batch_tokens,
            "pack_tokens": self.pack_tokens,
            "max_batch_inputs": self.max_batch_inputs,
            "max_inputs": self.max_inputs,
            "max_requests": self.max_requests,
            "max_failures": self.max_failures,
        }
        for name, value in positive.items():
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if self.n_seq > LLAMA_MAX_SEQ:
            raise ValueError(
                f"max_batch_inputs must be below {LLAMA_MAX_SEQ} (llama.cpp's sequences, one of them "
                f"for padding), got {self.max_batch_inputs}"
            )
        if self.pooling not in POOLING:
            raise ValueError(f"pooling must be one of {', '.join(POOLING)}, got {self.pooling!r}")
        if self.load_mode not in LOAD_MODES or self.n_threads < 0:
            raise ValueError(
                f"load_mode must be one of {', '.join(LOAD_MODES)} and n_threads >= 0, "
                f"got {self.load_mode!r}, {self.n_threads}"
            )

    @classmethod
    def from_engine(cls, engine: EngineConfig, pooling: str = "auto") -> EmbedderConfig:
        """The server's flags, read for embeddings: the same input, batch and in-flight limits, and
        flash attention."""
        return cls(
            max_input_tokens=engine.max_input_tokens,
            max_batch_tokens=engine.max_batch_tokens,
            max_requests=engine.max_concurrent + engine.max_queue,
            pooling=pooling,
            n_threads=engine.n_threads,
            flash_attn=engine.flash_attn,
            load_mode=engine.load_mode,
            repack=engine.repack,
        )

    @property
    def n_seq(self) -> int:
        """llama.cpp sequences: the inputs' and the padding one, rounded up to a power of two (the
        context's micro-batch must be a multiple of it, or llama.cpp's pooling graph fails to build)."""
        return 1 << self.max_batch_inputs.bit_length()

    @property
    def decode_tokens(self) -> int:
        """Tokens of one decode: at least max_batch_tokens and the longest input, a multiple of n_seq."""
        need = max(self.max_batch_tokens, aligned(self.max_input_tokens))
        step = max(self.n_seq, ALIGN)
        return -(-need // step) * step

    def model_config(self) -> EngineConfig:
        """The context LlamaModel creates for it."""
        return EngineConfig(
            max_concurrent=self.n_seq,
            max_input_tokens=self.max_input_tokens,
            max_total_tokens=self.max_input_tokens + 1,  # unused: nothing is generated
            max_batch_tokens=self.decode_tokens,
            prefix_cache_seqs=0,
            n_threads=self.n_threads,
            flash_attn=self.flash_attn,
            load_mode=self.load_mode,
            repack=self.repack,
        )


def check_inputs(inputs: Sequence[list[int]], config: EmbedderConfig, n_vocab: int) -> None:
    """Raise RequestTooLargeError / InvalidRequestError naming the field `input` and the limit."""
    if not inputs:
        raise RequestTooLargeError("input", 0, 1, "input is empty: at least one input is needed")
    if len(inputs) > config.max_inputs:
        raise RequestTooLargeError(
            "input",
            len(inputs),
            config.max_inputs,
            f"input has {len(inputs)} items; at most {config.max_inputs} are allowed per request",
        )
    for i, tokens in enumerate(inputs):
        if not tokens:
            raise RequestTooLargeError("input", 0, 1, f"input {i} is empty: at least one token is needed")
        if len(tokens) > config.max_input_tokens:
            raise RequestTooLargeError(
                "input",
                len(tokens),
                config.max_input_tokens,
                f"input {i} has {len(tokens)} tokens; max_input_tokens is {config.max_input_tokens}",
            )
        if min(tokens) < 0 or max(tokens) >= n_vocab:
            bad = next(t for t in tokens if not 0 <= t < n_vocab)
            raise InvalidRequestError(
                "input", f"input {i}: token id {bad} is outside the vocabulary [0, {n_vocab})", n_vocab - 1
            )


class EmbeddingError(LlmhostError, RuntimeError):
    """A decode failed; the requests it held fail with it (HTTP 500), the others go on."""


class Embedder:
    """The embeddings context. `embed` runs on one thread at a time; the vocabulary on any."""

    def __init__(self, model: LlamaModel, config: EmbedderConfig) -> None:
        self.model = model
        self.config = config
        self.pad_seq = config.max_batch_inputs  # the sequence after the inputs'

    def embed(self, inputs: Sequence[list[int]]) -> list[Vector]:
        """One llama_decode of at most max_batch_inputs inputs whose aligned lengths fit decode_tokens."""
        self.model.clear()
        self.model.decode(layout(inputs, self.pad_seq))
        return [self.model.pooled(seq) for seq in range(len(inputs))]

    def close(self) -> None:
        self.model.close()


def load_embedder(model_path: str, config: EmbedderConfig) -> Embedder:
    t0 = time.perf_counter()
    model = LlamaModel(model_path, config.model_config(), pooling=config.pooling)
    log.info(
        "loaded %s for embeddings in %.2f s: %d dimensions, %s pooling, %d tokens per decode",
        model_path,
        time.perf_counter() - t0,
        model.n_embd,
        model.pooling_name,
        config.decode_tokens,
    )
    return Embedder(model, config)

"""The llama.cpp context a model serves with: its parameters from the engine's settings (sizes,
threads, one KV stream per sequence or one buffer, cache types, flash attention, the logits rows a decode
may ask for; for embeddings, the pooling and KV for one decode) and, where llama.cpp refuses to create
it, which settings to lower."""

from __future__ import annotations

from typing import Any

import llama_cpp as lc

from llmhost.engine.config import EngineConfig
from llmhost.engine.llamacpp.backend import KvBufferTally
from llmhost.engine.llamacpp.gguf_meta import POOLING, cache_ggml_type, gguf_pooling


def new_context(model: Any, config: EngineConfig, pooling: str | None) -> tuple[Any, float]:
    """The context of `model` (NULL where llama.cpp refuses it) and the MiB its KV cache takes (its
    cache types, and sliding-window layers at their window or not). `pooling` (a POOLING name) makes it
    an embeddings context."""
    cparams = _context_params(config, pooling is not None)
    if pooling is not None:
        _embedding_params(cparams, model, config, pooling or "auto")
    else:
        cparams.n_outputs_max = config.llama_n_outputs(
            lc.llama_vocab_n_tokens(lc.llama_model_get_vocab(model))
        )
    with KvBufferTally() as kv:
        ctx = lc.llama_init_from_model(model, cparams)
    return ctx, kv.mib


def _context_params(config: EngineConfig, unified: bool) -> Any:
    cparams = lc.llama_context_default_params()
    cparams.n_ctx = config.n_ctx
    cparams.n_batch = config.llama_n_batch
    cparams.n_ubatch = config.llama_n_ubatch
    cparams.n_seq_max = config.n_seq_max
    cparams.n_threads = config.threads
    cparams.n_threads_batch = config.threads_batch
    # a KV stream per sequence: attention reads its own cells only (one buffer shared by all costs
    # every token a scan of every sequence's: 124 vs 74 ms a decode step of 8 sequences beside 4
    # streams of cached KV, benchmarks/kv_layout.py)
    cparams.kv_unified = unified
    cparams.swa_full = config.swa_full
    cparams.flash_attn_type = (
        lc.LLAMA_FLASH_ATTN_TYPE_ENABLED if config.flash_attn else lc.LLAMA_FLASH_ATTN_TYPE_DISABLED
    )
    cparams.type_k = cache_ggml_type(config.cache_type_k)
    cparams.type_v = cache_ggml_type(config.cache_type_v)
    cparams.no_perf = True
    return cparams


def _embedding_params(cparams: Any, model: Any, config: EngineConfig, pooling: str) -> None:
    cparams.embeddings = True
    cparams.pooling_type = gguf_pooling(model) if pooling == "auto" else POOLING[pooling]
    # KV for one decode only (cleared after each), and that decode in one micro-batch: llama.cpp
    # pools within a micro-batch, and a non-causal model attends over the whole sequence
    cparams.n_ctx = config.max_batch_tokens
    cparams.n_ubatch = config.max_batch_tokens


def refusal(config: EngineConfig, pooling: str | None, kv_bytes_per_token: int) -> str:
    """Why llama.cpp could not create the context, naming the settings that size it."""
    if pooling is not None:
        return (
            f"llama.cpp could not create an embeddings context of {config.max_batch_tokens} tokens; "
            "lower --max-batch-tokens or --max-input-tokens"
        )
    kv_mb = config.n_ctx * kv_bytes_per_token / 2**20
    types = f"{config.cache_type_k}/{config.cache_type_v}"
    return (
        f"llama.cpp could not create a context of {config.n_ctx} tokens "
        f"({config.max_concurrent} running + {config.prefix_cache_seqs} extra cached streams "
        f"x {config.max_total_tokens} tokens, about {kv_mb:.0f} MiB of {types} KV): "
        "lower --max-concurrent, --prefix-cache-seqs or --max-total-tokens"
        + (
            ""
            if types == "f16/f16"
            else ", or use --cache-type-k/-v f16 (a quantized type needs head sizes in blocks of 32)"
        )
    )

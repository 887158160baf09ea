"""The loaded model and its context: the one place that calls llama.cpp (through llama-cpp-python).

Everything else in the engine works on token ids and plain data.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import llama_cpp as lc
import numpy as np
import numpy.typing as npt

from llmhost.engine.config import EngineConfig
from llmhost.engine.kv.host_cache import StateKey
from llmhost.engine.kv.memory_fit import KvShape, MemoryFitError, fit_memory, new_checkpoints, plan, rss_bytes
from llmhost.engine.kv.prefix_cache import KvCopy, KvEdit, KvMove, KvTrim
from llmhost.engine.llamacpp.backend import SwaLayerTally, extra_buffers, init_backend
from llmhost.engine.llamacpp.context import new_context, refusal
from llmhost.engine.llamacpp.gguf_check import GGUFError, check_gguf
from llmhost.engine.llamacpp.gguf_meta import POOLING_NAMES, kv_bytes_per_token, read_info, token_piece
from llmhost.engine.llamacpp.projector import Projector, ProjectorError
from llmhost.engine.llamacpp.rerank_prompt import PairFormat
from llmhost.engine.llamacpp.state import read_state, state_size, write_state
from llmhost.engine.llamacpp.state_format import keep_from, n_streams, restream
from llmhost.engine.media import MediaSpan
from llmhost.engine.projector_memory import projector_memory
from llmhost.errors import ModelError

log = logging.getLogger(__name__)

_LOAD_MODES = {
    "auto": lc.LLAMA_LOAD_MODE_AUTO,
    "mmap": lc.LLAMA_LOAD_MODE_MMAP,
    "read": lc.LLAMA_LOAD_MODE_NONE,
}


class ModelLoadError(ModelError, RuntimeError):
    """The GGUF could not be loaded or its context could not be created, with the reason."""


class LlamaModel:
    """A GGUF model, one llama.cpp context sized for the engine's limits, and one reusable batch.

    `pooling` (a POOLING name) makes it an embeddings context instead: every sequence's vectors pooled
    into one, KV for a single decode of `max_batch_tokens` (cleared after each), `max_concurrent`
    sequences; the model's trained context bounds `max_input_tokens` rather than `max_total_tokens`."""

    def __init__(self, path: str | Path, config: EngineConfig, pooling: str | None = None) -> None:
        init_backend()
        self.config = config
        self.path = str(path)
        self.pooling = pooling
        rss_before = rss_bytes()
        model, layers = self._load(config)
        self._model = model
        self._vocab = lc.llama_model_get_vocab(model)
        self.info = read_info(model, self._vocab, self.path)
        self.n_vocab = self.info.n_vocab
        self.n_embd = int(lc.llama_model_n_embd_out(model))
        # a reranker's scores per sequence (its classification head's labels), where it pools by rank
        self.n_cls_out = int(lc.llama_model_n_cls_out(model))
        self.weights_bytes = self.info.size_bytes
        # positions a sliding-window layer looks back (0: no such layers): llama.cpp reuses the SWA cells
        # of positions further back than that for other sequences, even in a full-size SWA cache
        self.swa_window = int(lc.llama_model_n_swa(model))
        # a KV cache of one cell per position (not a recurrent state): what kv_floor checks
        self._kv_cells = not (lc.llama_model_is_recurrent(model) or lc.llama_model_is_hybrid(model))
        # K and V of one position in the configured cache types (what sizes the KV cache)
        self.kv_bytes_per_token = kv_bytes_per_token(model, config.cache_type_k, config.cache_type_v)
        n_layer = int(lc.llama_model_n_layer(model))  # the load log also counts the output layer
        self.kv_shape = KvShape(self.kv_bytes_per_token, n_layer, layers.swa, self.swa_window)
        self._check_trained_context(config)
        # --mmproj's share of memory, counted before the projector loads (after the context)
        self.projector_memory = projector_memory(config.mmproj) if config.mmproj and pooling is None else None
        if pooling is None:
            config = self.config = self._fit_memory(config, rss_before)
        # a KV stream per sequence, but an embeddings context holds a whole input in one buffer
        self._unified = pooling is not None
        self._ctx = self._new_context(config)
        self._mem = lc.llama_get_memory(self._ctx)
        self._n_streams = 1 if self._unified else config.n_seq_max
        # streams a copy queued in llama.cpp (done at the next decode) reads from and writes to
        self._copying_from: set[int] = set()
        self._copying_to: set[int] = set()
        bos = int(lc.llama_vocab_bos(self._vocab))
        self._flush_token = bos if bos >= 0 else 0
        self.copies_done_early = 0  # decodes made only to have queued copies done before a state op
        self.n_batch = config.max_batch_tokens
        self._batch = lc.llama_batch_init(self.n_batch, 0, 1)
        # SWA checkpoints only where sliding-window layers keep their window (in full they serve any prefix)
        windowed = self.swa_window > 0 and not config.swa_full and pooling is None
        self.checkpoints = new_checkpoints(config, self.kv_shape, windowed)
        # under M-RoPE a sequence ending in a medium reports fewer positions held (its cells' largest
        # temporal position, + 1) than the prompt positions the medium takes: each such count, with
        # where the media decoded to it end, so that a sequence holding one still counts as whole
        self._media_ends: dict[int, set[int]] = {}
        self.projector = self._projector(config) if config.mmproj and pooling is None else None

    def _projector(self, config: EngineConfig) -> Projector:
        try:
            ubatch = min(config.llama_n_ubatch, config.max_batch_tokens)
            return Projector(config.mmproj, self._model, self.path, config.threads, ubatch)
        except ProjectorError as exc:
            self.close()
            raise ModelLoadError(str(exc)) from None

    def _load(self, config: EngineConfig) -> tuple[Any, SwaLayerTally]:
        """llama.cpp's model, and the sliding-window layers its load log counted."""
        mparams = lc.llama_model_default_params()
        mparams.n_gpu_layers = 0
        mparams.load_mode = _LOAD_MODES[config.load_mode]
        mparams.use_extra_bufts = extra_buffers(config.repack)
        try:  # the file's structure first: llama.cpp's parser is no place for a crafted header
            check_gguf(self.path)
        except GGUFError as exc:
            raise ModelLoadError(str(exc)) from None
        with SwaLayerTally() as layers:
            model = lc.llama_model_load_from_file(self.path.encode(), mparams)
        if not model:
            raise ModelLoadError(f"llama.cpp could not load {self.path} (not a GGUF model, or corrupt)")
        return model, layers

    def _check_trained_context(self, config: EngineConfig) -> None:
        """An embeddings context holds one input per sequence; a generation context, prompt + output:
        either must fit the context the model was trained on."""
        limit, value = (
            ("max_total_tokens", config.max_total_tokens)
            if self.pooling is None
            else ("max_input_tokens", config.max_input_tokens)
        )
        if value > self.info.n_ctx_train:
            self.close()
            raise ModelLoadError(
                f"{limit} {value} exceeds the model's trained context {self.info.n_ctx_train}; "
                f"lower --{limit.replace('_', '-')}"
            )

    def _fit_memory(self, config: EngineConfig, rss_before: int) -> EngineConfig:
        """As many extra cached streams as --memory-mb holds beside the weights and the running ones."""
        try:
            p = plan(
                config, rss_before, self.weights_bytes, self.kv_shape, self.projector_memory, self.n_vocab
            )
            return fit_memory(config, p)
        except MemoryFitError as exc:
            self.close()
            raise ModelLoadError(f"{self.path}: {exc}") from None

    @functools.cached_property
    def eog_tokens(self) -> list[int]:
        """The end-of-generation tokens, found when first needed (ignore_eos, a constraint): asking
        llama.cpp about each of Gemma's 262k tokens takes 0.1 s, which most server starts never need."""
        return [t for t in range(self.n_vocab) if lc.llama_vocab_is_eog(self._vocab, t)]

    def _new_context(self, config: EngineConfig) -> Any:
        ctx, self.kv_mib = new_context(self._model, config, self.pooling)
        if not ctx:
            self.close()
            raise ModelLoadError(refusal(config, self.pooling, self.kv_bytes_per_token))
        return ctx

    @functools.cached_property
    def pooling_name(self) -> str:
        """The pooling the embeddings context uses (mean, cls, last, rank); "" for a generation context."""
        if self.pooling is None:
            return ""
        return POOLING_NAMES.get(int(lc.llama_pooling_type(self._ctx)), "unknown")

    # -- vocabulary ----------------------------------------------------------------------------------
    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        data = text.encode("utf-8")
        cap = len(data) + 8
        buf = (lc.llama_token * cap)()
        n = lc.llama_tokenize(self._vocab, data, len(data), buf, cap, add_special, parse_special)
        if n < 0:
            cap = -n
            buf = (lc.llama_token * cap)()
            n = lc.llama_tokenize(self._vocab, data, len(data), buf, cap, add_special, parse_special)
        return list(buf[:n])

    @functools.cached_property
    def pair_format(self) -> PairFormat:
        """How a reranker's (query, document) pair is written: see rerank_prompt."""
        return PairFormat.of(self._model, self._vocab)

    def pair_tokens(
        self, query: str, document: str, limit: int, cut: bool, keep_end: bool = False
    ) -> list[int]:
        return self.pair_format.tokens(self, query, document, limit, cut, keep_end)

    def piece(self, token: int, special: bool = False) -> bytes:
        return token_piece(self._vocab, token, special)

    def detokenize(self, tokens: list[int], special: bool = False) -> str:
        return b"".join(self.piece(t, special) for t in tokens).decode("utf-8", "replace")

    def is_eog(self, token: int) -> bool:
        return bool(lc.llama_vocab_is_eog(self._vocab, token))

    @property
    def vocab(self) -> Any:
        return self._vocab

    @property
    def ctx(self) -> Any:
        return self._ctx

    # -- KV ------------------------------------------------------------------------------------------
    def apply(self, op: KvEdit) -> None:
        """Perform a trim, a copy between streams, or a move (a copy, then the source emptied).
        llama.cpp copies the source stream's whole buffer at the next decode (its cells' bookkeeping at
        once), so the copy holds every cell the source does; the copy is then cut to the prefix."""
        if isinstance(op, KvMove):
            self.apply(KvCopy(op.src, op.dst, op.n_tokens))
            self.apply(KvTrim(op.src, 0))
            return
        if isinstance(op, KvCopy):
            lc.llama_memory_seq_cp(self._mem, op.src, op.dst, -1, -1)
            if not self._unified:
                self._copying_from.add(op.src)
                self._copying_to.add(op.dst)
            lc.llama_memory_seq_rm(self._mem, op.dst, op.n_tokens, -1)
        elif not lc.llama_memory_seq_rm(self._mem, op.seq, op.keep, -1):
            raise RuntimeError(f"llama_memory_seq_rm({op.seq}, {op.keep}) failed")
        self.checkpoints.follow(op)

    def _finish_copies(self, seq_id: int, writing: bool, pos: int | None = None) -> None:
        """Before a state of `seq_id` is read (or written: `writing`), have llama.cpp do the stream copies
        it queued that involve it, or the state would miss (or be overwritten by) them. llama.cpp has no
        call for that but a decode, so one token is decoded after `seq_id`'s positions (`pos`, where
        the sliding-window cells end elsewhere) and removed."""
        pending = seq_id in self._copying_to or (writing and seq_id in self._copying_from)
        if not pending:
            return
        pos = self.seq_len(seq_id) if pos is None else pos
        self.decode([([self._flush_token], pos, seq_id, 0)])
        lc.llama_memory_seq_rm(self._mem, seq_id, pos, -1)
        self.copies_done_early += 1

    # -- decode --------------------------------------------------------------------------------------
    def decode(self, items: list[tuple[list[int], int, int, int]]) -> list[int]:
        """One llama_decode over (tokens, start_pos, seq_id, n_logits) items.

        `n_logits`: how many of the item's last positions need logits (0, 1, or all to verify drafts).
        Returns, per item, the batch index of its first position with logits, else -1.
        """
        total = sum(len(tokens) for tokens, _, _, _ in items)
        if total > self.n_batch:  # checked first: the batch arrays hold n_batch tokens
            raise ValueError(f"batch of {total} tokens exceeds n_batch {self.n_batch}")
        batch = self._batch
        n = 0
        out_idx: list[int] = [-1] * len(items)
        # llama.cpp puts streams in one micro-batch only where their sequence ids run consecutively
        for k in sorted(range(len(items)), key=lambda k: items[k][2]):
            tokens, start, seq_id, n_logits = items[k]
            first = n + len(tokens) - n_logits
            for j, tok in enumerate(tokens):
                batch.token[n] = tok
                batch.pos[n] = start + j
                batch.n_seq_id[n] = 1
                batch.seq_id[n][0] = seq_id
                batch.logits[n] = 1 if n >= first else 0
                n += 1
            out_idx[k] = first if n_logits else -1
        batch.n_tokens = n
        rc = lc.llama_decode(self._ctx, batch)
        if rc != 0:
            raise RuntimeError(f"llama_decode failed with code {rc} on a batch of {n} tokens")
        self._copying_from.clear()
        self._copying_to.clear()
        return out_idx

    def encode_media(self, span: MediaSpan) -> npt.NDArray[np.float32]:
        """A prompt medium's embeddings, from the projector's encoder."""
        if self.projector is None:
            raise RuntimeError("this model has no projector: it takes text only")
        return self.projector.encode(span)

    def decode_media(self, span: MediaSpan, embd: npt.NDArray[np.float32], seq_id: int) -> None:
        """A medium's embeddings into `seq_id` at its positions, in llama_decode calls of their own."""
        if self.projector is None:
            raise RuntimeError("this model has no projector: it takes text only")
        self.projector.decode(self._ctx, span, embd, seq_id, self.n_batch)
        self._copying_from.clear()  # its decode did the copies llama.cpp queued
        self._copying_to.clear()
        held = self.seq_len(seq_id)
        if held != span.end:  # M-RoPE: an image's cells all sit at its first position
            self._media_ends.setdefault(held, set()).add(span.end)

    def iter_logits(
        self, tokens: list[int], seq_id: int = 0, start_pos: int = 0
    ) -> Iterator[npt.NDArray[np.float32]]:
        """Decode `tokens` into one sequence, yielding the logits of every token, chunk by chunk (as many
        tokens as a decode may return logits for: `EngineConfig.llama_n_outputs`).

        Each chunk is a copy of shape (chunk_len, n_vocab); row i predicts the token after tokens[i].
        """
        step = min(self.n_batch, self.config.llama_n_outputs(self.n_vocab))
        for off in range(0, len(tokens), step):
            chunk = tokens[off : off + step]
            self.decode([(chunk, start_pos + off, seq_id, len(chunk))])
            ptr = lc.llama_get_logits(self._ctx)
            yield np.ctypeslib.as_array(ptr, shape=(len(chunk), self.n_vocab)).copy()

    def seq_len(self, seq_id: int) -> int:
        """Positions held by `seq_id` (max position + 1; 0 when empty)."""
        return int(lc.llama_memory_seq_pos_max(self._mem, seq_id)) + 1

    def holds_context(self, seq_id: int, pos: int) -> bool:
        """Whether `seq_id` holds what a token at `pos` attends to: positions up to `pos` - 1, from 0 or,
        in sliding-window layers, from a window back (see `kv_floor`)."""
        held = self.seq_len(seq_id)
        reaches = held == pos or pos in self._media_ends.get(held, ())
        return reaches and (pos == 0 or pos >= self.kv_floor(seq_id))

    def kv_floor(self, seq_id: int) -> int:
        """The shortest prefix of `seq_id`'s KV that a token can be decoded after (0: every prefix).

        A sequence whose positions ran more than a sliding window past some cells may have lost them:
        llama.cpp gives such cells, masked for it, to other sequences' tokens (measured: 200 of a
        900-token sequence's positions gone after another sequence's 300-token prefill). Cells go
        lowest position first, so its KV serves only prefixes long enough that their next token's
        window starts at or above the first position still held. A cache without sliding-window
        layers losing any position serves no prefix."""
        if not self._kv_cells:
            return 0
        first = int(lc.llama_memory_seq_pos_min(self._mem, seq_id))
        if first <= 0:  # -1: empty
            return 0
        return first + self.swa_window - 1 if self.swa_window else sys.maxsize

    def reach(self, seq_id: int, n_tokens: int) -> int:
        """Of the first `n_tokens` positions of `seq_id`, the longest prefix a copy can be decoded after:
        all of them where its cells hold their window, else the newest SWA checkpoint within them, else 0."""
        if n_tokens >= self.kv_floor(seq_id):
            return n_tokens
        cp = self.checkpoints.newest_at_or_before(seq_id, n_tokens)
        return cp.n_tokens if cp is not None else 0

    def checkpoint(self, seq_id: int, prompt_len: int) -> bool:
        """Save `seq_id`'s sliding-window cells of its last window of positions (all a token attends to)."""
        n = self.seq_len(seq_id)
        if not self.checkpoints.wants(seq_id, n, prompt_len):
            return False
        self._finish_copies(seq_id, writing=False)
        data = read_state(self._ctx, seq_id, swa_only=True)
        return self.checkpoints.add(seq_id, n, keep_from(data, n - self.swa_window) or data)

    def restore_checkpoint(self, seq_id: int, n_tokens: int) -> bool:
        """Give `seq_id` (a copy of `n_tokens` positions whose window moved on) the sliding-window cells
        of its checkpoint at `n_tokens`; False where it has none or llama.cpp refuses it."""
        cp = self.checkpoints.at(seq_id, n_tokens)
        return cp is not None and self.restore_swa(seq_id, n_tokens, cp.data)

    def restore_swa(self, seq_id: int, n_tokens: int, data: bytes) -> bool:
        """Give `seq_id`, holding `n_tokens` positions, the sliding-window cells of a checkpoint made at
        `n_tokens` (its own, or one saved with a host-memory state); False where llama.cpp refuses them
        or they do not reach what the next token attends to."""
        self._finish_copies(seq_id, writing=True, pos=n_tokens)
        if not write_state(self._ctx, seq_id, data, swa_only=True):
            return False
        self.checkpoints.restored += 1
        return self.holds_context(seq_id, n_tokens)

    def state_seq_size(self, seq_id: int) -> int:
        return state_size(self._ctx, seq_id)  # bytes state_seq_save(seq_id) returns

    @property
    def state_key(self) -> StateKey:
        """What a saved sequence state of this context is valid for: these weights, its K and V cache
        types, V transposed unless flash attention is on, SWA positions all kept or not; no adapters (the
        scheduler sets those of each sequence)."""
        info, c = self.info, self.config
        kv = f"{c.cache_type_k}/{c.cache_type_v} flash_attn={int(c.flash_attn)} swa_full={int(c.swa_full)}"
        return StateKey(f"{info.path}:{info.size_bytes}:{info.description}", adapters="", kv=kv)

    # -- LoRA adapters -------------------------------------------------------------------------------
    def load_adapter(self, path: str) -> Any:
        """A LoRA adapter GGUF loaded for this model; ModelLoadError where llama.cpp refuses it (not a
        LoRA GGUF, another architecture, tensors of other shapes: its loader returns NULL)."""
        adapter = lc.llama_adapter_lora_init(self._model, str(path).encode())
        if not adapter:
            raise ModelLoadError(
                f"llama.cpp could not load the LoRA adapter {path} for {self.info.description or self.path} "
                "(not a LoRA GGUF, or made for another model: architecture or tensor shapes differ; "
                "the server log has llama.cpp's reason)"
            )
        return adapter

    def free_adapter(self, adapter: Any) -> None:
        lc.llama_adapter_lora_free(adapter)

    def use_adapters(self, adapters: list[tuple[Any, float]]) -> None:
        """Apply these (adapter, scale) pairs to the context for the decodes that follow (none: the
        base model); llama.cpp changes nothing when they are the ones already applied."""
        n = len(adapters)
        handles = (lc.llama_adapter_lora_p_ctypes * max(n, 1))(*(a for a, _ in adapters))
        scales = (ctypes.c_float * max(n, 1))(*(s for _, s in adapters))
        if lc.llama_set_adapters_lora(self._ctx, handles, n, scales) != 0:
            raise RuntimeError(f"llama_set_adapters_lora failed for {n} adapter(s)")

    def state_seq_save(self, seq_id: int) -> bytes:
        """The KV state of one sequence (llama_state_seq_get_data), to restore with state_seq_load."""
        self._finish_copies(seq_id, writing=False)
        return read_state(self._ctx, seq_id)

    def state_seq_load(self, seq_id: int, data: bytes) -> int:
        """Restore a saved sequence state into `seq_id`; returns the positions it holds, 0 on failure.

        A state saved with another number of KV streams is re-laid for this context's first."""
        self._finish_copies(seq_id, writing=True)
        self.checkpoints.forget(seq_id)
        if n_streams(data) != self._n_streams:
            data = restream(data, self._n_streams) or data
        if not write_state(self._ctx, seq_id, data):
            lc.llama_memory_seq_rm(self._mem, seq_id, 0, -1)
            return 0
        return self.seq_len(seq_id)

    def pooled(self, seq_id: int) -> npt.NDArray[np.float32]:
        """A copy of the pooled vector of `seq_id` after a decode in an embeddings context: n_embd
        floats, or a reranker's n_cls_out scores."""
        ptr = lc.llama_get_embeddings_seq(self._ctx, seq_id)
        if not ptr:
            raise RuntimeError(f"llama.cpp returned no pooled embedding for sequence {seq_id}")
        size = self.n_cls_out if self.pooling_name == "rank" else self.n_embd
        return np.ctypeslib.as_array(ptr, shape=(size,)).copy()

    def clear(self) -> None:
        """Drop every sequence's KV (an embeddings context starts each decode empty)."""
        lc.llama_memory_clear(self._mem, True)
        self.checkpoints.forget()

    def logits(self, batch_index: int) -> npt.NDArray[np.float32]:
        ptr = lc.llama_get_logits_ith(self._ctx, batch_index)
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,))

    def logits_rows(self, batch_index: int, n: int) -> npt.NDArray[np.float32]:
        """The logits of `n` consecutive batch positions that all requested logits: llama.cpp stores
        output rows in batch order, so they are one (n, n_vocab) block."""
        ptr = lc.llama_get_logits_ith(self._ctx, batch_index)
        return np.ctypeslib.as_array(ptr, shape=(n, self.n_vocab))

    def close(self) -> None:
        projector: Projector | None = getattr(self, "projector", None)
        if projector is not None:
            projector.close()
            self.projector = None
        if getattr(self, "_batch", None) is not None:
            lc.llama_batch_free(self._batch)
            self._batch = None
        if getattr(self, "_ctx", None):
            lc.llama_free(self._ctx)
            self._ctx = None
        if getattr(self, "_model", None):
            lc.llama_model_free(self._model)
            self._model = None

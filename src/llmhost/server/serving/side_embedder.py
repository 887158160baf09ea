"""A generation server's embeddings, as Ollama gives them: the same GGUF loaded a second time as a
pooled embeddings context beside the generation engine, on the first embeddings request.

Loaded with memory mapping and without repacking: its weights are then the file's pages in the page
cache, shared with the generation model's mapped tensors (and with every other process serving the
file), not a second private copy. Lazily, because a server that never embeds then pays nothing; measured
on Gemma 3 270M Q4_K_M with `llmhost serve`'s defaults (one thread; 859 MiB RSS, 587 MiB private, once
started): the first embeddings request adds 474 MiB of RSS, 482 of them the file's mapped pages (shared,
clean: the page cache's, reclaimable) and 232 MiB private (its KV, compute and output buffers). A decode
then grows the private part by what llama.cpp's buffers hold of its tokens, chiefly the vocabulary's
logits, which an embeddings context of a generation model computes and throws away: 919 MiB more for one
512-token input (about 1.8 MiB a token decoded at once with a 262k vocabulary; a 1,536-token input
would take 3 GiB, so inputs and decodes here are 512 tokens at most).
Loaded at start instead, every generation server would carry the 474 MiB from its first second.

Its failure is its own: a load that fails, or decodes that keep failing, answer the embeddings
requests (503 naming why) and never stop generation; it shuts down with the server.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from pathlib import Path

from llmhost.engine.config import EMBED_MAX_INPUT_TOKENS, EngineConfig
from llmhost.engine.embedder import EmbedderConfig
from llmhost.engine.embedder_loop import AsyncEmbedder
from llmhost.engine.worker import EngineState
from llmhost.web.errors import unavailable

log = logging.getLogger("llmhost.server")

# seconds the first embeddings request waits for the context to load (Gemma 3 270M: 0.6 s)
LOAD_WAIT_S = 120.0


def side_config(engine: EngineConfig) -> EmbedderConfig:
    """The generation server's limits read for embeddings (inputs up to its --max-input-tokens, and 512
    tokens at most), pooled
    as the model pools (mean for a model without a pooling type, llama.cpp's rule), mapped and not
    repacked so that the weights' pages are shared (see the module's docstring)."""
    config = EmbedderConfig.from_engine(engine, "auto")
    # a decode's tokens bound its logits buffers (~1.8 MiB a token with a 262k vocabulary): at most
    # llama-server's embeddings limit, so a long input costs a generation server ~1 GiB, not several
    most = min(config.max_input_tokens, EMBED_MAX_INPUT_TOKENS)
    return dataclasses.replace(
        config,
        max_input_tokens=most,
        max_batch_tokens=min(config.max_batch_tokens, most),
        load_mode="mmap",
        repack=False,
    )


class SideEmbedder:
    """The embeddings context of a server that generates; loaded on first use (`ready`)."""

    def __init__(self, model_path: str | Path, engine: EngineConfig) -> None:
        self.worker = AsyncEmbedder(model_path, side_config(engine))
        self.started = False

    def start(self) -> AsyncEmbedder:
        """Its load started (once); the worker, loading or ready."""
        if not self.started:
            self.started = True
            log.info("loading %s as an embeddings context beside generation", self.worker.model_path)
            self.worker.start()
        return self.worker

    async def ready(self) -> AsyncEmbedder:
        """The worker once loaded; a 503 naming why where its load failed or it died."""
        worker = self.start()
        if worker.state is EngineState.LOADING:
            await asyncio.to_thread(worker.wait_ready, LOAD_WAIT_S)
        if not worker.ready:
            why = worker.error or f"it is {worker.state.value}"
            raise unavailable(f"the embeddings context of this generation server is not serving: {why}")
        return worker

    def shutdown(self) -> None:
        if self.started:
            self.worker.shutdown()

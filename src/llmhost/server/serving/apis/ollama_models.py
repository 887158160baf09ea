"""Ollama's model routes on one copy: /api/tags, /api/show, /api/ps, /api/version, and /api/embed
(/api/embeddings); what they say of the model is read from its GGUF."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import math
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import gguf
from starlette.requests import Request

from llmhost.engine.llamacpp.gguf_check import check_file
from llmhost.server.protocol import ollama as proto
from llmhost.server.serving.apis.embeddings import EmbeddingsServing
from llmhost.server.serving.apis.ollama import check_keep_alive
from llmhost.server.serving.apis.ollama_params import check_options, supports_thinking, supports_tools
from llmhost.server.serving.apis.truncation import Cut
from llmhost.server.serving.chat_template import ChatTemplate, ChatTemplateError
from llmhost.server.serving.context import ServingContext
from llmhost.shared.jsontypes import JSONObject

API = "ollama"
# the Ollama release whose API this one follows (clients check /api/version for features)
VERSION = "0.12.0"
_BIG_ARRAY = 64  # metadata arrays longer than this (the vocabulary, merges) only with `verbose`


def tagged(name: str) -> str:
    """A model name as Ollama lists it: `name:tag`, `latest` when it has no tag."""
    return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"


def human_count(n: int) -> str:
    """A parameter count as Ollama writes it: "7.6B", "134.52M"."""
    if n >= 1_000_000_000:
        return f"{n / 1e9:.1f}B"
    if n >= 1_000_000:
        return f"{n / 1e6:.2f}M"
    return f"{n / 1e3:.2f}K" if n >= 1000 else str(n)


@functools.lru_cache(maxsize=16)
def read_metadata(path: str, verbose: bool = False) -> JSONObject:
    """The GGUF's key-value metadata (big arrays empty unless `verbose`, as Ollama's /api/show), with
    `general.parameter_count` counted from its tensors when the file does not say it. Read from the header
    directly: 0.03 CPU-s for the default model, 0.5 with `verbose` (gguf.GGUFReader maps its 262k-token
    vocabulary as numpy views first: ~11 CPU-s on each server's first /api/tags, /api/ps or /api/show)."""
    layout = check_file(path, read_arrays=sys.maxsize if verbose else _BIG_ARRAY)
    big = {k for k in layout.arrays if not isinstance(layout.metadata[k], list)}
    meta: JSONObject = {k: [] if k in big else v for k, v in layout.metadata.items()}
    if not isinstance(meta.get("general.parameter_count"), int):
        meta["general.parameter_count"] = sum(math.prod(dims) for dims, _ in layout.tensors.values())
    return meta


def model_entry(name: str, path: str) -> proto.ModelEntry:
    """One model as /api/tags lists it, read from its GGUF (blocking: call it off the event loop)."""
    stat = os.stat(path)
    meta = read_metadata(path)
    n_params = meta["general.parameter_count"]
    assert isinstance(n_params, int)  # read_metadata counts it when the file does not say it
    return proto.ModelEntry(
        name=tagged(name),
        model=tagged(name),
        modified_at=iso(stat.st_mtime),
        size=stat.st_size,
        digest=digest(path, stat.st_size, stat.st_mtime),
        details=details(meta, n_params),
    )


def adapter_entry(name: str, path: str, base: proto.ModelEntry) -> proto.ModelEntry:
    """A LoRA adapter as /api/tags lists it: its own file, its base's details with the base as its
    parent (an Ollama model made `FROM` the base with an `ADAPTER`)."""
    try:
        stat = os.stat(path)
        size, modified, sha = stat.st_size, iso(stat.st_mtime), digest(path, stat.st_size, stat.st_mtime)
    except OSError:  # a file gone since it was loaded: the adapter still serves from memory
        size, modified, sha = 0, base.modified_at, ""
    details = base.details.model_copy(update={"parent_model": base.name})
    return proto.ModelEntry(
        name=tagged(name), model=tagged(name), modified_at=modified, size=size, digest=sha, details=details
    )


def running_entry(
    entry: proto.ModelEntry, expires_in_s: float | None, context_length: int
) -> proto.RunningModel:
    """One loaded model as /api/ps lists it; `expires_in_s` None: it stays loaded (a far date, as
    Ollama writes for `keep_alive: -1`)."""
    left = 10 * 365 * 86400 if expires_in_s is None else max(0.0, expires_in_s)
    return proto.RunningModel(
        name=entry.name,
        model=entry.model,
        size=entry.size,
        digest=entry.digest,
        details=entry.details,
        expires_at=iso(time.time() + left),
        size_vram=0,
        context_length=context_length,
    )


def quantization(meta: JSONObject) -> str:
    file_type = meta.get("general.file_type")
    if not isinstance(file_type, int):
        return "unknown"
    try:
        return gguf.LlamaFileType(file_type).name.removeprefix("MOSTLY_")
    except ValueError:
        return "unknown"


def details(meta: JSONObject, n_params: int) -> proto.Details:
    family = str(meta.get("general.architecture", "unknown"))
    return proto.Details(
        parent_model="",
        format="gguf",
        family=family,
        families=[family],
        parameter_size=human_count(n_params),
        quantization_level=quantization(meta),
    )


@functools.lru_cache(maxsize=16)
def digest(path: str, size: int, mtime: float) -> str:
    """A name for the file's content (its size and time of change, not a hash of gigabytes)."""
    return hashlib.sha256(f"{Path(path).name}:{size}:{mtime}".encode()).hexdigest()


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


class OllamaModels:
    def __init__(self, ctx: ServingContext, embeddings: EmbeddingsServing) -> None:
        self.ctx = ctx
        self.embeddings = embeddings

    @property
    def name(self) -> str:
        return tagged(self.ctx.settings.model_name)

    def _entry(self) -> proto.ModelEntry:
        self.ctx.require_model()
        return model_entry(self.ctx.settings.model_name, str(self.ctx.settings.model_path))

    def _entries(self) -> list[proto.ModelEntry]:
        """The model, then its LoRA adapters (each a model Ollama's clients can pick)."""
        base = self._entry()
        return [base, *(adapter_entry(s.name, s.path, base) for s in self.ctx.adapters.specs)]

    async def tags(self) -> proto.TagsResponse:
        return proto.TagsResponse(models=await asyncio.to_thread(self._entries))

    async def ps(self) -> proto.PsResponse:
        """The loaded model and its adapters: they stay loaded while the server runs (an adapter freed
        under --max-loras is loaded again by the request naming it)."""
        entries = await asyncio.to_thread(self._entries)
        return proto.PsResponse(models=[running_entry(e, None, self._n_ctx()) for e in entries])

    def _n_ctx(self) -> int:
        if self.ctx.embedder is not None:
            return self.ctx.embedder.config.max_input_tokens
        return self.ctx.settings.engine.max_total_tokens

    def capabilities(self, template: str) -> list[str]:
        """The model's (ServingContext.capabilities), and for a generation model the chat features."""
        found = self.ctx.capabilities()
        if "completion" not in found:
            return found
        if supports_tools(self._chat_template(template), self.ctx.settings.tool_format):
            found.append("tools")
        if supports_thinking(template, self.ctx.settings.reasoning_format):
            found.append("thinking")
        return found + self.ctx.input_capabilities()  # vision, audio: what its --mmproj reads

    def _chat_template(self, source: str) -> ChatTemplate | None:
        """The chat template requests render with; None where there is none, or it does not parse (each
        chat request says why, /api/show still answers)."""
        try:
            return self.ctx.chat_template() if source else None
        except ChatTemplateError:
            return None

    async def show(self, body: proto.ModelRequest) -> proto.ShowResponse:
        self.ctx.names.check_ollama(body.model_name())
        name = body.model_name().removesuffix(":latest")
        entry = await asyncio.to_thread(self._entry)
        adapter = next((s for s in self.ctx.adapters.specs if s.name == name), None)
        modelfile = f"# llmhost serves this GGUF as it is\nFROM {self.ctx.settings.model_path}\n"
        if adapter is not None:  # as Ollama shows a model made FROM its base with an ADAPTER
            entry = adapter_entry(adapter.name, adapter.path, entry)
            modelfile = (
                f"# a LoRA adapter of {self.name} (scale {adapter.scale:g})\nFROM {self.name}\n"
                f"ADAPTER {adapter.path}\n"
            )
        meta = await asyncio.to_thread(read_metadata, str(self.ctx.settings.model_path), body.verbose)
        template = self.ctx.settings.chat_template or self.ctx.model.info.chat_template or ""
        arch = meta.get("general.architecture", "")
        info = {k: v for k, v in meta.items() if not k.startswith("tokenizer.chat_template")}
        info[f"{arch}.context_length"] = meta.get(f"{arch}.context_length", self.ctx.model.info.n_ctx_train)
        return proto.ShowResponse(
            modelfile=modelfile,
            parameters=f"num_ctx {self._n_ctx()}",
            template=template,
            details=entry.details,
            model_info=info,
            capabilities=self.capabilities(template),
            modified_at=entry.modified_at,
        )

    async def embed(self, raw: JSONObject, request: Request) -> proto.EmbedResponse:
        check_options(raw)
        body = proto.EmbedRequest.model_validate(raw)
        self.ctx.names.check_ollama(body.model)
        check_keep_alive(body.keep_alive)
        self.embeddings.check_base(body.model)
        started = time.monotonic_ns()
        embedder = await self.embeddings.ready()
        inputs: list[str | list[int]] = [body.input] if isinstance(body.input, str) else list(body.input)
        cut = Cut(embedder.config.max_input_tokens) if body.truncate else None
        vectors, n_tokens = await self.embeddings.vectors(
            inputs, request, API, cut, dimensions=body.dimensions
        )
        return proto.EmbedResponse(
            model=body.model,
            embeddings=[v.tolist() for v in vectors],
            total_duration=time.monotonic_ns() - started,
            load_duration=0,
            prompt_eval_count=n_tokens,
        )

    async def embeddings_v1(self, raw: JSONObject, request: Request) -> proto.EmbeddingResponse:
        """The older /api/embeddings: one prompt (an empty one: an empty vector, as Ollama answers)."""
        check_options(raw)
        body = proto.EmbeddingsRequest.model_validate(raw)
        self.ctx.names.check_ollama(body.model)
        check_keep_alive(body.keep_alive)
        self.embeddings.check_base(body.model)
        self.embeddings.embedder()
        if not body.prompt:
            return proto.EmbeddingResponse(embedding=[])
        vectors, _ = await self.embeddings.vectors([body.prompt], request, API)
        return proto.EmbeddingResponse(embedding=vectors[0].tolist())

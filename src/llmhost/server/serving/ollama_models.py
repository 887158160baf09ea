"""Ollama's model routes on one copy: /api/tags, /api/show, /api/ps, /api/version, and /api/embed
(/api/embeddings); what they say of the model is read from its GGUF."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import gguf
from starlette.requests import Request

from llmhost.server.protocol import ollama as proto
from llmhost.server.serving.context import ServingContext
from llmhost.server.serving.embeddings import EmbeddingsServing
from llmhost.server.serving.ollama import check_keep_alive
from llmhost.server.serving.ollama_params import check_options, supports_thinking, supports_tools
from llmhost.web.errors import APIError

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


def _value(field: gguf.ReaderField, verbose: bool) -> Any:
    if (
        field.types
        and field.types[0] == gguf.GGUFValueType.ARRAY
        and len(field.data) > _BIG_ARRAY
        and not verbose
    ):
        return []
    return field.contents()


@functools.lru_cache(maxsize=16)
def read_metadata(path: str, verbose: bool = False) -> dict[str, Any]:
    """The GGUF's key-value metadata (big arrays empty unless `verbose`, as Ollama's /api/show), with
    `general.parameter_count` counted from its tensors when the file does not say it."""
    reader = gguf.GGUFReader(path)
    meta = {name: _value(f, verbose) for name, f in reader.fields.items() if not name.startswith("GGUF.")}
    if not isinstance(meta.get("general.parameter_count"), int):
        meta["general.parameter_count"] = sum(int(t.n_elements) for t in reader.tensors)
    return meta


def model_entry(name: str, path: str) -> dict[str, Any]:
    """One model as /api/tags lists it, read from its GGUF (blocking: call it off the event loop)."""
    stat = os.stat(path)
    meta = read_metadata(path)
    return {
        "name": tagged(name),
        "model": tagged(name),
        "modified_at": iso(stat.st_mtime),
        "size": stat.st_size,
        "digest": digest(path, stat.st_size, stat.st_mtime),
        "details": details(meta, int(meta["general.parameter_count"])),
    }


def running_entry(entry: dict[str, Any], expires_in_s: float | None, context_length: int) -> dict[str, Any]:
    """One loaded model as /api/ps lists it; `expires_in_s` None: it stays loaded (a far date, as
    Ollama writes for `keep_alive: -1`)."""
    left = 10 * 365 * 86400 if expires_in_s is None else max(0.0, expires_in_s)
    return {**entry, "expires_at": iso(time.time() + left), "size_vram": 0, "context_length": context_length}


def quantization(meta: dict[str, Any]) -> str:
    file_type = meta.get("general.file_type")
    if not isinstance(file_type, int):
        return "unknown"
    try:
        return gguf.LlamaFileType(file_type).name.removeprefix("MOSTLY_")
    except ValueError:
        return "unknown"


def details(meta: dict[str, Any], n_params: int) -> dict[str, Any]:
    family = str(meta.get("general.architecture", "unknown"))
    return {
        "parent_model": "",
        "format": "gguf",
        "family": family,
        "families": [family],
        "parameter_size": human_count(n_params),
        "quantization_level": quantization(meta),
    }


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

    def _entry(self) -> dict[str, Any]:
        self.ctx.require_model()
        return model_entry(self.ctx.settings.model_name, str(self.ctx.settings.model_path))

    async def tags(self) -> dict[str, Any]:
        return {"models": [await asyncio.to_thread(self._entry)]}

    async def ps(self) -> dict[str, Any]:
        """The loaded model: it stays loaded while the server runs."""
        entry = await asyncio.to_thread(self._entry)
        return {"models": [running_entry(entry, None, self._n_ctx())]}

    def _n_ctx(self) -> int:
        if self.ctx.embedder is not None:
            return self.ctx.embedder.config.max_input_tokens
        return self.ctx.settings.engine.max_total_tokens

    def capabilities(self, template: str) -> list[str]:
        if self.ctx.embedder is not None:
            return ["embedding"]
        found = ["completion"]
        if supports_tools(template):
            found.append("tools")
        if supports_thinking(template, self.ctx.settings.reasoning_format):
            found.append("thinking")
        return found

    async def show(self, body: proto.ModelRequest) -> dict[str, Any]:
        body.model_name()
        entry = await asyncio.to_thread(self._entry)
        meta = await asyncio.to_thread(read_metadata, str(self.ctx.settings.model_path), body.verbose)
        template = self.ctx.settings.chat_template or self.ctx.model.info.chat_template or ""
        arch = meta.get("general.architecture", "")
        info = {k: v for k, v in meta.items() if not k.startswith("tokenizer.chat_template")}
        info[f"{arch}.context_length"] = meta.get(f"{arch}.context_length", self.ctx.model.info.n_ctx_train)
        return {
            "modelfile": f"# llmhost serves this GGUF as it is\nFROM {self.ctx.settings.model_path}\n",
            "parameters": f"num_ctx {self._n_ctx()}",
            "template": template,
            "details": entry["details"],
            "model_info": info,
            "capabilities": self.capabilities(template),
            "modified_at": entry["modified_at"],
        }

    async def embed(self, raw: dict[str, Any], request: Request) -> dict[str, Any]:
        check_options(raw)
        body = proto.EmbedRequest.model_validate(raw)
        check_keep_alive(body.keep_alive)
        started = time.monotonic_ns()
        embedder = self.embeddings.embedder()
        if body.dimensions is not None and body.dimensions != embedder.n_embd:
            raise APIError(
                400,
                f"dimensions {body.dimensions} is not supported: this model's embeddings have "
                f"{embedder.n_embd} dimensions",
                field="dimensions",
            )
        inputs: list[str | list[int]] = [body.input] if isinstance(body.input, str) else list(body.input)
        limit = embedder.config.max_input_tokens if body.truncate else None
        vectors, n_tokens = await self.embeddings.vectors(inputs, request, API, limit)
        return {
            "model": body.model,
            "embeddings": [v.tolist() for v in vectors],
            "total_duration": time.monotonic_ns() - started,
            "load_duration": 0,
            "prompt_eval_count": n_tokens,
        }

    async def embeddings_v1(self, raw: dict[str, Any], request: Request) -> dict[str, Any]:
        """The older /api/embeddings: one prompt (an empty one: an empty vector, as Ollama answers)."""
        check_options(raw)
        body = proto.EmbeddingsRequest.model_validate(raw)
        check_keep_alive(body.keep_alive)
        self.embeddings.embedder()
        if not body.prompt:
            return {"embedding": []}
        vectors, _ = await self.embeddings.vectors([body.prompt], request, API)
        return {"embedding": vectors[0].tolist()}

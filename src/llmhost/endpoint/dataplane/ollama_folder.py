"""Ollama's /api/pull, /api/copy and /api/delete where they mean something: the models of an endpoint's
`models_dir`. A pull fetches an `s3://` model reference (into llmhost's cache, as `llmhost serve
s3://...` does) and links it into the folder as NAME.gguf; a copy is a new name for the same GGUF (a link
`DEST.gguf`, with the source's NAME.yaml); a delete removes a model's entry from the folder (a NAME.gguf
file or link, its NAME.yaml, a linked model directory) and drains its copy. The folder is scanned again
after each, as `endpoint reload` does."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Protocol

from starlette.responses import JSONResponse, Response, StreamingResponse

from llmhost.endpoint.bodies import Rescanned
from llmhost.endpoint.dataplane.routing import NDJSON, error
from llmhost.endpoint.spec import NAME_PATTERN, ComponentSpec, EndpointSpec
from llmhost.server.serving.apis.ollama_models import digest
from llmhost.store import resolve


class FolderOwner(Protocol):
    spec: EndpointSpec
    folder: list[ComponentSpec]

    async def reload(self) -> Rescanned: ...


def _name(model: str) -> str:
    """A component's name for Ollama's `name:latest`."""
    return model.removesuffix(":latest")


class ModelsFolder:
    def __init__(self, owner: FolderOwner) -> None:
        self.owner = owner
        self.lock = asyncio.Lock()  # one change of the folder at a time

    def _path(self) -> Path | None:
        folder = self.owner.spec.models_dir
        return None if folder is None else Path(folder.path).expanduser()

    def _entry(self, name: str) -> Path | None:
        """The folder entry of the model `name` (NAME.gguf or NAME/), if it is one of the folder's."""
        if name not in {s.name for s in self.owner.folder}:
            return None
        found = [s.model for s in self.owner.folder if s.name == name]
        return Path(found[0]) if found else None

    def _refusal(self, model: str) -> Response | Path:
        if self._path() is None:
            return error(
                400,
                "this endpoint has no models_dir: its models are the components of its file, "
                "which Ollama's API does not change",
                field="model",
            )
        entry = self._entry(_name(model))
        if entry is None:
            return error(
                404,
                f"model {model!r} not found in the endpoint's models_dir",
                "not_found_error",
                field="model",
            )
        return entry

    async def copy(self, source: str, destination: str) -> Response:
        entry = self._refusal(source)
        if isinstance(entry, Response):
            return entry
        name = _name(destination)
        if not re.match(NAME_PATTERN, name):
            return error(
                400,
                f"destination {destination!r} is not a model name (letters, digits, '.', '_', "
                "'-'; at most 63)",
                field="destination",
            )
        async with self.lock:
            folder = self._path()
            assert folder is not None
            target = folder / (f"{name}.gguf" if entry.suffix == ".gguf" else name)
            if target.exists() or target.is_symlink() or name in {s.name for s in self.owner.folder}:
                return error(400, f"model {name!r} exists already", field="destination")
            await asyncio.to_thread(_link, entry, target)
            await self.owner.reload()
        return Response(status_code=200)

    async def pull(self, ref: str, stream: bool) -> Response:
        """Ollama's progress stream: `pulling manifest`, the file once fetched (`total` = `completed`:
        the download reports no progress to the router), `success`; or an `error` object."""
        if self._path() is None:
            return error(400, "this endpoint has no models_dir to pull a model into", field="model")
        if not ref.startswith("s3://"):
            return error(
                400,
                f"model {ref!r}: llmhost pulls s3:// model references into the models_dir, "
                "not Ollama's library",
                field="model",
            )
        name = pulled_name(ref)
        if not re.match(NAME_PATTERN, name) or name in {s.name for s in self.owner.folder}:
            return error(
                400,
                f"model {ref!r} gives the name {name!r}, which is no model name or is taken",
                field="model",
            )
        steps = self._pulling(ref, name)
        if stream:
            return StreamingResponse(steps, media_type=NDJSON)
        lines = [line async for line in steps]
        body = json.loads(lines[-1])
        return JSONResponse(body, status_code=502 if "error" in body else 200)

    async def _pulling(self, ref: str, name: str) -> AsyncIterator[bytes]:
        yield _line({"status": "pulling manifest"})
        try:
            resolved = await asyncio.to_thread(resolve, ref)
        except Exception as exc:  # the fetch's failure, whatever it is, is this request's answer
            yield _line({"error": f"pulling {ref}: {exc}"})
            return
        size = resolved.gguf.stat().st_size
        yield _line(
            {
                "status": f"pulling {name}",
                "digest": digest(str(resolved.gguf), size, resolved.gguf.stat().st_mtime),
                "total": size,
                "completed": size,
            }
        )
        async with self.lock:
            folder = self._path()
            assert folder is not None
            target = folder / f"{name}.gguf"
            if target.exists() or target.is_symlink():
                yield _line({"error": f"model {name!r} exists already"})
                return
            target.symlink_to(resolved.gguf)
            await self.owner.reload()
        yield _line({"status": "success"})

    async def delete(self, model: str) -> Response:
        entry = self._refusal(model)
        if isinstance(entry, Response):
            return entry
        if entry.is_dir() and not entry.is_symlink():
            return error(
                400,
                f"model {model!r} is a model directory ({entry}): llmhost removes files and "
                "links from the folder, not a directory; remove it yourself, then reload",
                field="model",
            )
        async with self.lock:
            await asyncio.to_thread(_remove, entry)
            await self.owner.reload()
        return Response(status_code=200)


def pulled_name(ref: str) -> str:
    """The model name a reference gives: its GGUF's stem (s3://b/models/smol.gguf: smol), or its last
    folder (s3://b/models/smol/: smol)."""
    last = ref.rstrip("/").rsplit("/", 1)[-1]
    return last.removesuffix(".gguf")


def _line(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj).encode() + b"\n"


def _side(entry: Path) -> Path:
    return entry.with_name(entry.stem + ".yaml") if entry.suffix == ".gguf" else entry.with_suffix(".yaml")


def _link(entry: Path, target: Path) -> None:
    target.symlink_to(entry.resolve())
    side = _side(entry)
    if side.is_file():
        shutil.copyfile(side, _side(target))


def _remove(entry: Path) -> None:
    entry.unlink()
    _side(entry).unlink(missing_ok=True)

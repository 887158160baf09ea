"""Ollama's /api/copy and /api/delete where they mean something: the models of an endpoint's
`models_dir`. A copy is a new name for the same GGUF (a link `DEST.gguf`, with the source's NAME.yaml); a
delete removes a model's entry from the folder (a NAME.gguf file or link, its NAME.yaml, a linked model
directory) and drains its copy. The folder is scanned again after each, as `endpoint reload` does."""

from __future__ import annotations

import asyncio
import re
import shutil
from pathlib import Path
from typing import Protocol

from starlette.responses import Response

from llmhost.endpoint.routing import error
from llmhost.endpoint.spec import NAME_PATTERN, ComponentSpec, EndpointSpec


class FolderOwner(Protocol):
    spec: EndpointSpec
    folder: list[ComponentSpec]

    async def reload(self) -> dict[str, list[str]]: ...


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
            return error(400, "this endpoint has no models_dir: its models are the components of its file, "
                         "which Ollama's API does not change", field="model")  # fmt: skip
        entry = self._entry(_name(model))
        if entry is None:
            return error(404, f"model {model!r} not found in the endpoint's models_dir", "not_found_error",
                         field="model")  # fmt: skip
        return entry

    async def copy(self, source: str, destination: str) -> Response:
        entry = self._refusal(source)
        if isinstance(entry, Response):
            return entry
        name = _name(destination)
        if not re.match(NAME_PATTERN, name):
            return error(400, f"destination {destination!r} is not a model name (letters, digits, '.', '_', "
                         "'-'; at most 63)", field="destination")  # fmt: skip
        async with self.lock:
            folder = self._path()
            assert folder is not None
            target = folder / (f"{name}.gguf" if entry.suffix == ".gguf" else name)
            if target.exists() or target.is_symlink() or name in {s.name for s in self.owner.folder}:
                return error(400, f"model {name!r} exists already", field="destination")
            await asyncio.to_thread(_link, entry, target)
            await self.owner.reload()
        return Response(status_code=200)

    async def delete(self, model: str) -> Response:
        entry = self._refusal(model)
        if isinstance(entry, Response):
            return entry
        if entry.is_dir() and not entry.is_symlink():
            return error(400, f"model {model!r} is a model directory ({entry}): llmhost removes files and "
                         "links from the folder, not a directory; remove it yourself, then reload",
                         field="model")  # fmt: skip
        async with self.lock:
            await asyncio.to_thread(_remove, entry)
            await self.owner.reload()
        return Response(status_code=200)


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

"""Resolve a multimodal projector reference (`--mmproj`, an endpoint's `engine: mmproj`) to a local GGUF
file, as a model reference resolves: a local file, a folder's one mmproj GGUF, an s3:// object or an
hf:// repository's file (or its one mmproj GGUF), downloaded once into the same caches with the same
credentials. The reference must name one projector: a model, nothing or several are an error naming
the choices. Whether the file is a projector's is read from it when it loads (its architecture)."""

from __future__ import annotations

from pathlib import Path

from llmhost.store.ggufnames import is_projector_file
from llmhost.store.model import AmbiguousModelError, ModelNotFoundError
from llmhost.store.resolve import DEFAULT_MODEL_REF


def resolve_projector(ref: str) -> Path:
    """The projector's file; ModelNotFoundError (its subclasses) naming what `ref` is and what to give."""
    if ref == DEFAULT_MODEL_REF:
        raise ModelNotFoundError(f"{ref!r} is the default model, not a multimodal projector")
    if ref.startswith("hf://"):
        from llmhost.store.hub import fetch_projector

        return fetch_projector(ref)
    if ref.startswith("s3://"):
        return _s3_object(ref)
    path = Path(ref).expanduser()
    if path.is_dir():
        return _one_in(path)
    if path.is_file():
        return path.resolve()
    raise ModelNotFoundError(
        f"{ref}: no such file (a projector GGUF, its folder, an s3:// or hf:// reference)"
    )


def _s3_object(ref: str) -> Path:
    """One s3:// object: a prefix or an archive holds a model's files, not one projector to pick by name."""
    from llmhost.store.s3 import resolve_s3

    if not ref.lower().endswith(".gguf"):
        raise ModelNotFoundError(f"{ref}: name the projector's .gguf object (not a prefix or an archive)")
    return resolve_s3(ref).gguf


def _one_in(folder: Path) -> Path:
    found = sorted(p for p in folder.iterdir() if is_projector_file(p.name) and p.is_file())
    if not found:
        raise ModelNotFoundError(f"{folder}: no multimodal projector (an mmproj GGUF) in the folder")
    if len(found) > 1:
        raise AmbiguousModelError(
            f"{folder} holds {len(found)} multimodal projectors ({', '.join(map(str, found))}): name one"
        )
    return found[0].resolve()

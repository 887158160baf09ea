"""What the Hugging Face Hub's cache holds of GGUF models, and removing one: `llmhost models` and
`llmhost models rm`. Reads the cache's layout (models--OWNER--REPO/{refs,snapshots,blobs}) as
huggingface_hub writes it; never asks the hub."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from llmhost.store.ggufnames import group_models
from llmhost.store.hub import REVISION, cached_listing, choose, hub_cache_dir, repo_dir
from llmhost.store.hubref import HubModelError, HubRef


@dataclass(frozen=True, slots=True)
class CachedModel:
    ref: str  # hf://OWNER/REPO/FILE: the reference that serves it
    commit: str
    current: bool  # the snapshot `main` points to (an older one stays until removed)
    size: int  # bytes, every part of a split model
    path: Path  # the file llama.cpp loads


def _repo_of(folder: Path) -> str | None:
    name = folder.name
    if not name.startswith("models--") or name.count("--") < 2:
        return None
    return name.removeprefix("models--").replace("--", "/", 1)


def cached_models(cache: Path | None = None) -> list[CachedModel]:
    """Every GGUF model of every cached snapshot, by reference."""
    cache = cache or hub_cache_dir()
    found = []
    for folder in sorted(cache.glob("models--*")) if cache.is_dir() else []:
        repo = _repo_of(folder)
        if repo is None:
            continue
        main = folder / "refs" / REVISION
        current = main.read_text().strip() if main.is_file() else ""
        for snapshot in sorted((folder / "snapshots").glob("*")):
            files = [p.relative_to(snapshot).as_posix() for p in snapshot.rglob("*.gguf") if p.is_file()]
            for model in group_models(files):
                size = sum((snapshot / part).stat().st_size for part in model.parts)
                ref = f"hf://{repo}/{model.first}"
                current_one = snapshot.name == current
                found.append(CachedModel(ref, snapshot.name, current_one, size, snapshot / model.first))
    return found


def remove(ref: HubRef) -> list[Path]:
    """Delete from the cache what `ref` names: a whole repository (no file, no quantization), else the
    files of the one model it names in the current snapshot, with the blobs no other snapshot uses.
    Returns the paths removed."""
    storage = repo_dir(ref.repo)
    if not storage.is_dir():
        raise HubModelError(f"{ref.uri}: {ref.repo} is not in the cache {hub_cache_dir()}")
    if ref.file is None and ref.quant is None:
        shutil.rmtree(storage)  # snapshot links are unlinked, never followed
        return [storage]
    listing = cached_listing(ref, "removing")
    model = choose(ref, listing)
    snapshot = storage / "snapshots" / listing.commit
    removed = []
    for part in model.parts:
        pointer = snapshot / part
        blob = pointer.resolve()
        pointer.unlink(missing_ok=True)
        removed.append(pointer)
        if blob != pointer and not _still_used(storage, blob):
            blob.unlink(missing_ok=True)
    return removed


def _still_used(storage: Path, blob: Path) -> bool:
    return any(p.is_symlink() and p.resolve() == blob for p in (storage / "snapshots").rglob("*"))

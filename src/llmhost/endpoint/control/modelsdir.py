"""A folder of models as on-demand components: each `NAME.gguf` file and each model directory `NAME/`
(a directory holding a GGUF, as `llmhost serve` resolves it) is the component NAME; a `NAME.yaml` beside
it gives its component settings over the folder's `defaults`; a `NAME.yaml` alone with a `model:`
reference (`hf://…`, `s3://…`, a path) is the component NAME too. Scanned at start and on `endpoint
reload`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from llmhost.endpoint.spec import (
    NAME_PATTERN,
    ComponentSpec,
    ModelsDirSpec,
    SpecError,
    read_yaml,
)
from llmhost.endpoint.spec_errors import format_errors
from llmhost.engine.config import EngineConfig
from llmhost.engine.kv.memory_fit import gguf_kv_shape, guess_logits_bytes, running_kv_bytes
from llmhost.engine.llamacpp.gguf_check import GGUFError, check_file
from llmhost.engine.projector_memory import projector_memory
from llmhost.settings.serve import default_value
from llmhost.store.ggufnames import SPLIT, is_mmproj
from llmhost.store.model import (
    AmbiguousModelError,
    ModelNotFoundError,
    model_in,
    model_parts,
    projectors_beside,
)

# what a loaded copy takes beyond its GGUF's pages and its running sequences' KV: the Python process and
# the server (measured: 135 MiB for the default model), llama.cpp's compute buffers as decodes touch them
# (a step's prompt logits at most 2 x 16 MiB: EngineConfig.prompt_logits_rows) and the engine's margin
PROCESS_OVERHEAD_MB = 300


def estimated_memory_mb(gguf: Path, engine: dict[str, Any] | None = None) -> int:
    """memory_mb of a model that sets none: its files' size (every part of a split model), the KV cache
    of its running sequences (the copy's engine settings, else serve's defaults: sliding-window layers
    at their window unless swa_full, with the SWA checkpoints' budget; extra cached streams are kept
    as far as this leaves room), the multimodal projector it loads (engine's mmproj, a model folder's
    own among them: its weights, encoder and media embeddings, as the copy's own memory fit counts
    them), with speculative decoding its guesses' logits rows, and the process's overhead."""
    engine = engine or {}
    size = sum(part.stat().st_size for part in model_parts(gguf))
    if engine.get("mmproj"):
        size += projector_memory(Path(engine["mmproj"]).expanduser()).total_bytes

    def setting(name: str) -> Any:
        return engine[name] if engine.get(name) is not None else default_value(name)

    try:
        metadata = check_file(model_parts(gguf)[0]).metadata
    except GGUFError:  # its load fails and says why (the endpoint serves the other models meanwhile)
        metadata = {}
    shape = gguf_kv_shape(metadata, setting("cache_type_k"), setting("cache_type_v"))
    names = (
        "max_concurrent",
        "max_total_tokens",
        "max_input_tokens",
        "max_batch_tokens",
        "ubatch_size",
        "swa_full",
        "swa_checkpoints",
        "speculative",
        "draft_tokens",
    )
    n_vocab = metadata.get("tokenizer.ggml.tokens")
    try:
        config = EngineConfig(**{n: setting(n) for n in names})
        kv = running_kv_bytes(config, shape)
        guesses = guess_logits_bytes(config, n_vocab) if isinstance(n_vocab, int) else 0
    except ValueError:  # settings its start refuses: counted every position whole
        kv = int(setting("max_concurrent")) * int(setting("max_total_tokens")) * shape.bytes_per_token
        guesses = 0
    return math.ceil((size + kv + guesses) / 2**20) + PROCESS_OVERHEAD_MB


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _candidates(folder: Path) -> dict[str, list[Path]]:
    """Model paths by the name they give (several: a clash)."""
    found: dict[str, list[Path]] = {}
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith("."):
            continue
        if entry.is_file() and entry.suffix == ".gguf":
            if is_mmproj(entry.name):
                continue  # a multimodal projector goes with a model, it is none itself
            split = SPLIT.match(entry.name)
            if split is None:
                found.setdefault(entry.stem, []).append(entry)
            elif int(split["no"]) == 1:  # a split model is its first part, named without the suffix
                found.setdefault(split["prefix"], []).append(entry)
        elif entry.is_dir():
            try:
                model_in(entry)
            except AmbiguousModelError as exc:  # several models: which one is not ours to guess
                raise SpecError(f"models_dir {folder}: {exc}") from None
            except ModelNotFoundError:
                continue  # a folder without a GGUF is not a model
            found.setdefault(entry.name, []).append(entry)
    for side in sorted(folder.glob("*.yaml")):
        if side.stem not in found and not side.name.startswith(".") and _names_a_model(side):
            found[side.stem] = [side]  # a model by reference alone (hf://, s3://, a path elsewhere)
    return found


def _names_a_model(side: Path) -> bool:
    own = read_yaml(side)
    return isinstance(own, dict) and "model" in own


def _settings(name: str, model: Path, defaults: dict[str, Any]) -> dict[str, Any]:
    """The folder's defaults with the model's own NAME.yaml over them (a NAME.yaml that is the model
    gives its `model:` reference too)."""
    side = model.with_name(name + ".yaml")
    if not side.is_file():
        return dict(defaults)
    own = read_yaml(side)
    if own is None:
        return dict(defaults)
    if not isinstance(own, dict):
        raise SpecError(f"{side}: expected a mapping of component settings, got {type(own).__name__}")
    for key in ("name", "model", "copies", "autoscaling"):
        if key in own and not (key == "model" and side == model):
            raise SpecError(f"{side}: {key}: not a setting of a folder's model (the file names the model)")
    return _merge(defaults, own)


def _weights(model: Path, ref: str) -> Path:
    """The GGUF whose size estimates a model's memory: a NAME.yaml's reference resolved (an hf:// or
    s3:// model downloaded now, once, into its cache), a folder's one model, or the file itself."""
    if model.suffix != ".yaml":
        return model if model.is_file() else model_in(model)
    from llmhost.store import resolve

    try:
        return resolve(ref).gguf
    except OSError as exc:
        raise SpecError(f"{model}: model: {exc}") from None


def _component(name: str, model: Path, folder: ModelsDirSpec) -> ComponentSpec:
    if not re.match(NAME_PATTERN, name):
        raise SpecError(
            f"{model}: {name!r} is not a component name (letters, digits, '.', '_', '-'; "
            "at most 63): rename the file"
        )
    raw = _settings(name, model, folder.defaults)
    ref = str(raw.pop("model", model))
    if model.suffix == ".yaml" and "://" not in ref and ref != "default":
        ref = str(model.parent / Path(ref).expanduser())  # a path, from the folder (absolute stays)
    raw.setdefault("on_demand", {})
    engine = raw.get("engine") or {}
    if model.is_dir() and not (engine.get("mmproj") or engine.get("no_mmproj")):
        raw = _with_projector(raw, model)
    resources = dict(raw.get("resources") or {})
    if "memory_mb" not in resources:
        resources["memory_mb"] = estimated_memory_mb(_weights(model, ref), raw.get("engine"))
        if resources.get("max_memory_mb") is not None:
            resources["memory_mb"] = min(resources["memory_mb"], resources["max_memory_mb"])
    raw["resources"] = resources
    try:
        return ComponentSpec.model_validate({**raw, "name": name, "model": ref})
    except ValidationError as exc:
        raise SpecError(f"model {name!r} ({model}): {format_errors(exc, raw)}") from None


def _with_projector(raw: dict[str, Any], model: Path) -> dict[str, Any]:
    """A model folder's settings with the mmproj beside its model as `engine: mmproj` (as `llmhost serve
    FOLDER` loads it); several there are an error naming them."""
    found = projectors_beside(model_in(model))
    if len(found) > 1:
        raise SpecError(
            f"models_dir model {model}: {len(found)} multimodal projectors beside it ({', '.join(found)}): "
            "keep one, or name it as engine: mmproj in its NAME.yaml"
        )
    if not found:
        return raw
    return {**raw, "engine": {**(raw.get("engine") or {}), "mmproj": found[0]}}


def scan(folder: ModelsDirSpec, declared: Collection[str] = ()) -> list[ComponentSpec]:
    """One on-demand component per model in the folder, by name; a name two models give (or a declared
    component has) is an error naming both."""
    path = Path(folder.path).expanduser()
    if not path.is_dir():
        raise SpecError(f"models_dir {path}: not a directory")
    try:
        found = _candidates(path)
    except OSError as exc:
        raise SpecError(f"models_dir {path}: cannot read: {exc.strerror or exc}") from None
    specs = []
    for name, paths in found.items():
        if len(paths) > 1:
            raise SpecError(
                f"models_dir {path}: name clash: {' and '.join(p.name for p in paths)} "
                f"both give the model name {name!r}; rename one"
            )
        if name in declared:
            raise SpecError(
                f"models_dir {path}: name clash: {paths[0].name} gives the model name {name!r}, "
                "which a declared component has; rename one"
            )
        specs.append(_component(name, paths[0], folder))
    return specs

"""The LoRA merge as a step of `llmhost optimize`: adapters named as `serve --lora` names them
(`PATH[:SCALE]`, PATH any model reference), pinned by their sha256 in the recipe, merged by
`lora_merge` and recorded in the artifact's recipe.yaml."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from typing_extensions import TypedDict

from llmhost.store.artifact import sha256_file

Say = Callable[[str], None]


class MergeInput(TypedDict):
    """An adapter of a recipe: where it is, its scale, and its digest (part of the artifact's key)."""

    name: str
    path: str
    scale: float
    sha256: str


# a step of recipe.yaml: the adapters merged, how many weights they updated, their type, in how long
class MergeStep(TypedDict):
    merge_lora: list[MergeInput]
    merged_tensors: int
    type: str
    seconds: float


def merge_inputs(texts: Sequence[str], option: str = "--merge-lora") -> list[MergeInput]:
    """Each `PATH[:SCALE]` resolved as a model reference (an s3:// one downloaded) and hashed."""
    from llmhost.engine.lora import parse_scaled
    from llmhost.store import ModelNotFoundError, resolve

    inputs: list[MergeInput] = []
    for text in texts:
        ref, scale = parse_scaled(text)
        try:
            path = resolve(ref).gguf
        except ModelNotFoundError as exc:
            raise ModelNotFoundError(f"{option} {text}: {exc}") from exc
        digest = sha256_file(path)
        inputs.append({"name": adapter_name(path), "path": str(path), "scale": scale, "sha256": digest})
    return inputs


def adapter_name(path: Path) -> str:
    """The adapter's `general.name` where it records one, else its file's name."""
    from llmhost.engine.llamacpp.gguf_check import GGUFError, check_file

    try:
        name = check_file(path).metadata.get("general.name")
    except GGUFError:
        name = None  # the merge refuses it, naming the file
    return name if isinstance(name, str) and name else path.stem


def merge_step(base: Path, out: Path, inputs: Sequence[MergeInput], merged_type: str, say: Say) -> MergeStep:
    """Write `out`, `base` with `inputs` merged in, and what recipe.yaml records of it."""
    from llmhost.optimize.lora_merge import MergeError, merge_lora

    for adapter in inputs:
        if sha256_file(Path(adapter["path"])) != adapter["sha256"]:
            raise MergeError(f"adapter {adapter['path']} changed since the recipe was made (sha256 differs)")
    say(f"merging {', '.join(a['name'] for a in inputs)} into {base}")
    result = merge_lora(base, [(a["path"], a["scale"]) for a in inputs], out, merged_type)
    return {
        "merge_lora": list(inputs),
        "merged_tensors": len(result.merged),
        "type": merged_type,
        "seconds": round(result.seconds, 3),
    }

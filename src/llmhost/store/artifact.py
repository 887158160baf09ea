"""An optimize artifact's files, as serving reads them: their names, the digests and environment a saved
state is checked against, the recipe's serving settings, and what `llmhost serve DIR` takes from them
(`ServeHints`). Neutral on purpose: serving reads artifacts without importing the optimize toolkit,
which writes them (`llmhost.optimize.artifact`).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import yaml
from pydantic import TypeAdapter, ValidationError
from typing_extensions import TypedDict

from llmhost import __version__
from llmhost.shared import yamltext
from llmhost.shared.jsontypes import JSONValue

ARTIFACT_JSON = "artifact.json"
RECIPE_YAML = "recipe.yaml"
QUALITY_JSON = "quality.json"
MODEL_GGUF = "model.gguf"
STATE_BIN = "state.bin"

# serving settings a recipe may record in recipe.yaml's `serving:` section (`llmhost optimize run`)
SERVING_KEYS = ("speculative", "draft_tokens", "ngram_size")


def sha256_file(path: str | Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def cpu_features() -> list[str]:
    """This CPU's feature flags (/proc/cpuinfo `flags` or `Features`), sorted; [] where unknown."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return sorted(set(value.split()))
    return []


# artifact.json, as `llmhost optimize` writes it; every key may be missing from a file (one written by
# hand, or by an older llmhost): readers fall back on their defaults


class EngineVersions(TypedDict, total=False):
    llmhost: str
    llama_cpp_python: str


class Environment(TypedDict, total=False):
    """What the artifact's key depends on besides the model and the recipe: this CPU, this engine."""

    cpu_features_sha256: str
    engine: EngineVersions


class KeyParts(Environment, total=False):
    model_sha256: str
    recipe_sha256: str


class GGUFRecord(TypedDict, total=False):
    file: str
    size: int
    mtime_ns: int
    sha256: str


class LoadChoice(TypedDict, total=False):
    """The fastest start-up measured: mmap or plain reads, with or without weight repacking."""

    best: str
    repack: bool
    seconds: dict[str, float]  # each setting's best time


class PrefixStateRecord(TypedDict, total=False):
    """The system prompt's saved KV state."""

    file: str
    tokens: int
    mode: str  # chat or raw
    flash_attn: bool  # the layout it was saved in
    sha256: str


class ArtifactInfo(TypedDict, total=False):
    format: int
    key: str
    key_parts: KeyParts
    source: str
    gguf: GGUFRecord
    load: LoadChoice
    prefix_state: PrefixStateRecord | None
    created_unix: int


def engine_versions() -> EngineVersions:
    try:
        lcp = metadata.version("llama-cpp-python")
    except metadata.PackageNotFoundError:
        lcp = "unknown"
    return {"llmhost": __version__, "llama_cpp_python": lcp}


def environment() -> Environment:
    feats = cpu_features()
    return {
        "cpu_features_sha256": hashlib.sha256(" ".join(feats).encode()).hexdigest(),
        "engine": engine_versions(),
    }


def read_info(directory: Path) -> ArtifactInfo | None:
    """artifact.json, or None when there is none or it is not one (a value of another type than
    written)."""
    try:
        data = json.loads((directory / ARTIFACT_JSON).read_text())
    except (OSError, ValueError):
        return None
    try:
        return TypeAdapter(ArtifactInfo).validate_python(data)
    except ValidationError:
        return None


def gguf_matches(directory: Path, info: ArtifactInfo) -> bool:
    """The GGUF is the one recorded: size + mtime when untouched, else its sha256."""
    rec = info.get("gguf", {})
    path = directory / MODEL_GGUF
    try:
        st = path.stat()
    except OSError:
        return False
    if st.st_size != rec.get("size"):
        return False
    if st.st_mtime_ns == rec.get("mtime_ns"):
        return True
    return bool(sha256_file(path) == rec.get("sha256"))


def serving_settings(directory: str | Path) -> dict[str, JSONValue]:
    """The `serving:` section of an artifact's recipe.yaml; {} when there is none."""
    try:
        doc = yamltext.load((Path(directory) / RECIPE_YAML).read_text())
    except (OSError, yaml.YAMLError):
        return {}
    serving = doc.get("serving") if isinstance(doc, dict) else None
    return {k: serving[k] for k in SERVING_KEYS if k in serving} if isinstance(serving, dict) else {}


@dataclass(slots=True, frozen=True)
class ServeHints:
    load_mode: str = "auto"
    repack: bool = True
    prefix_state_path: str = ""
    reason: str = ""  # why no state is used, when none is
    serving: dict[str, JSONValue] = field(default_factory=dict)  # recipe.yaml's (SERVING_KEYS)

    def engine_overrides(self, explicit: set[str]) -> dict[str, JSONValue]:
        """The recipe's serving settings (speculative, draft_tokens, ngram_size) not given as flags."""
        return {k: v for k, v in self.serving.items() if k not in explicit}


def serving_hints(directory: str | Path, flash_attn: bool) -> ServeHints | None:
    """What `llmhost serve DIR` takes from an artifact; None when DIR is not an artifact."""
    d = Path(directory)
    info = read_info(d)
    if info is None:
        return None
    load_mode = str(info.get("load", {}).get("best", "auto"))
    repack = bool(info.get("load", {}).get("repack", True))
    if load_mode not in ("auto", "mmap", "read"):
        load_mode = "auto"
    serving = serving_settings(d)

    def without(reason: str) -> ServeHints:
        return ServeHints(load_mode=load_mode, repack=repack, reason=reason, serving=serving)

    state = info.get("prefix_state")
    if not state:
        return without("the artifact has no saved system-prompt state")
    if info.get("key_parts", {}).get("engine") != engine_versions():
        return without("it was made by another engine version")
    env = environment()
    if info.get("key_parts", {}).get("cpu_features_sha256") != env["cpu_features_sha256"]:
        return without("it was made on a CPU with other features")
    if bool(state.get("flash_attn")) != flash_attn:
        return without(f"it was saved for flash_attn={state.get('flash_attn')}, serving with {flash_attn}")
    if not gguf_matches(d, info):
        return without(f"{MODEL_GGUF} is not the file the state was made from")
    path = d / str(state.get("file", STATE_BIN))
    if not path.is_file() or sha256_file(path) != state.get("sha256"):
        return without(f"{path.name} is missing or altered")
    return ServeHints(load_mode=load_mode, repack=repack, prefix_state_path=str(path), serving=serving)


def is_artifact(directory: str | Path) -> bool:
    return os.path.isfile(os.path.join(directory, ARTIFACT_JSON))

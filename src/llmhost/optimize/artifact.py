"""Ahead-of-time artifacts: an optimized GGUF with what it took to make it, keyed for reuse.

A directory holds `model.gguf`, `recipe.yaml` (what was applied), `quality.json`, `artifact.json`
(the key, the measured load settings, file digests) and optionally `state.bin`, the KV state of a
configured system prompt (`engine.kv.prefix_state` format). The key is the sha256 of: the source
model's sha256, the recipe, this CPU's feature flags and the engine versions (llmhost,
llama-cpp-python). A matching key is reused; anything else is rebuilt. At serve time the state is
restored only when the GGUF, the CPU and the engine are exactly those it was made with.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml
from typing_extensions import TypedDict

from llmhost.errors import ModelError
from llmhost.optimize.merge_step import MergeInput, MergeStep
from llmhost.shared import yamltext
from llmhost.store.artifact import (
    ARTIFACT_JSON,
    MODEL_GGUF,
    QUALITY_JSON,
    RECIPE_YAML,
    SERVING_KEYS,
    STATE_BIN,
    ArtifactInfo,
    Environment,
    GGUFRecord,
    LoadChoice,
    PrefixStateRecord,
    environment,
    gguf_matches,
    read_info,
    sha256_file,
)

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
_SENTINEL = "\x00LLMHOST_USER_TURN\x00"
# the merged, not yet quantized model while an artifact is built (the quality step's base)
MERGED_GGUF = "merged.gguf"

Say = Callable[[str], None]


class ArtifactError(ModelError, ValueError):
    """The artifact cannot be built as asked."""


@dataclass(slots=True)
class Recipe:
    """What is applied to the source model, in order."""

    quantize: str | None = None  # a type of `optimize.quantize.QUANT_TYPES`
    allow_requantize: bool = False
    system_prompt: str | None = None
    # "chat": the system prompt as the model's chat template writes it before the first user turn;
    # "raw": the text itself, tokenized with BOS
    system_prompt_mode: str = "chat"
    chat_template: str | None = None  # jinja text serving will use (`serve --chat-template`); None: GGUF's
    flash_attn: bool = True  # the serving setting the saved KV state is laid out for
    # LoRA adapters merged into the model before quantizing (`merge_step.merge_inputs`), in order
    merge_lora: list[MergeInput] = field(default_factory=list)
    merge_type: str = "f16"  # the merged weights' type (`lora_merge.MERGED_TYPES`)

    def __post_init__(self) -> None:
        if self.merge_type not in ("f16", "f32"):
            raise ArtifactError(f"merge_type must be f16 or f32, got {self.merge_type!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Recipe:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)

    def digest(self) -> str:
        parts = self.to_dict()
        if not self.merge_lora:  # a recipe without a merge keys as before merging existed
            del parts["merge_lora"], parts["merge_type"]
        return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def artifact_key(model_sha256: str, recipe: Recipe, env: Environment | None = None) -> str:
    parts = {"model_sha256": model_sha256, "recipe": recipe.digest(), **(env or environment())}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


@dataclass(slots=True)
class Artifact:
    directory: Path
    key: str
    reused: bool
    info: ArtifactInfo = field(default_factory=lambda: ArtifactInfo())

    @property
    def gguf(self) -> Path:
        return self.directory / MODEL_GGUF


def _complete(directory: Path, info: ArtifactInfo) -> bool:
    files = [MODEL_GGUF, RECIPE_YAML, QUALITY_JSON]
    if info.get("prefix_state"):
        files.append(STATE_BIN)
    return all((directory / f).is_file() for f in files) and gguf_matches(directory, info)


# -- building ------------------------------------------------------------------------------------------
def build_or_reuse(
    model: str | Path,
    out_dir: str | Path,
    recipe: Recipe,
    say: Say | None = None,
    threads: int = 0,
    eval_max_tokens: int = 0,
) -> Artifact:
    """Reuse `out_dir` when its key matches `model` + `recipe` + this CPU + this engine; else rebuild."""
    say = say or (lambda _msg: None)
    src = Path(model)
    if not src.is_file():
        raise ArtifactError(f"model {src} does not exist")
    if recipe.system_prompt_mode not in ("chat", "raw"):
        raise ArtifactError(f"system_prompt_mode must be chat or raw, got {recipe.system_prompt_mode!r}")
    out = Path(out_dir)
    say(f"hashing {src}")
    model_sha = sha256_file(src)
    env = environment()
    key = artifact_key(model_sha, recipe, env)
    old = read_info(out)
    if old is not None and old.get("key") == key and _complete(out, old):
        say(f"artifact {out} matches key {key[:12]}: reused")
        return Artifact(out, key, True, old)
    if old is not None:
        say(f"artifact {out} has key {str(old.get('key'))[:12]}, want {key[:12]}: rebuilding")
    return _build(src, out, recipe, key, model_sha, env, say, threads, eval_max_tokens)


def _clear(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name in (ARTIFACT_JSON, MODEL_GGUF, RECIPE_YAML, QUALITY_JSON, STATE_BIN, MERGED_GGUF):
        (out / name).unlink(missing_ok=True)


def _build(
    src: Path,
    out: Path,
    recipe: Recipe,
    key: str,
    model_sha: str,
    env: Environment,
    say: Say,
    threads: int,
    eval_max_tokens: int,
) -> Artifact:
    from llmhost.optimize.quality import evaluate, write_quality

    # artifact.json is removed first and written last: an interrupted build never looks complete
    _clear(out)
    gguf = out / MODEL_GGUF
    base = _transform(src, out, recipe, say)
    say("evaluating quality")
    write_quality(evaluate(gguf, base, max_tokens=eval_max_tokens, threads=threads), out / QUALITY_JSON)
    (out / MERGED_GGUF).unlink(missing_ok=True)
    say("measuring load settings")
    load = measure_load(gguf, threads)
    prefix_state: PrefixStateRecord | None = None
    if recipe.system_prompt:
        say("prefilling the system prompt")
        prefix_state = save_system_prompt_state(gguf, recipe, out / STATE_BIN, load["best"], threads)
    info: ArtifactInfo = {
        "format": FORMAT_VERSION,
        "key": key,
        "key_parts": {"model_sha256": model_sha, "recipe_sha256": recipe.digest(), **env},
        "source": str(src),
        "gguf": _gguf_facts(gguf),
        "load": load,
        "prefix_state": prefix_state,
        "created_unix": int(time.time()),
    }
    (out / ARTIFACT_JSON).write_text(json.dumps(info, indent=2) + "\n")
    say(f"artifact {out} built with key {key[:12]}")
    return Artifact(out, key, False, info)


# a step of recipe.yaml: the quantization done, from which type, in how long
QuantizeStep = TypedDict("QuantizeStep", {"quantize": str, "from": str, "seconds": float})


def _transform(src: Path, out: Path, recipe: Recipe, say: Say) -> Path | None:
    """The artifact's model file: `src` with the recipe's adapters merged in, quantized as it asks, or
    copied; recipe.yaml says how. Returns the model quantized from, the quality step's base (None
    without quantization)."""
    steps: list[QuantizeStep | MergeStep] = []
    model = src
    if recipe.merge_lora:
        from llmhost.optimize.merge_step import merge_step

        if recipe.quantize and not recipe.allow_requantize:
            _check_float_base(src)
        model = out / (MERGED_GGUF if recipe.quantize else MODEL_GGUF)
        steps.append(merge_step(src, model, recipe.merge_lora, recipe.merge_type, say))
    if recipe.quantize:
        from llmhost.optimize.quantize import quantize

        say(f"quantizing {model} to {recipe.quantize}")
        q = quantize(model, out / MODEL_GGUF, recipe.quantize, allow_requantize=recipe.allow_requantize)
        steps.append({"quantize": recipe.quantize, "from": q.source_type, "seconds": round(q.seconds, 3)})
    elif not recipe.merge_lora:
        shutil.copyfile(src, out / MODEL_GGUF)
    (out / RECIPE_YAML).write_text(
        yaml.safe_dump({"source": str(src), "steps": steps, "recipe": recipe.to_dict()}, sort_keys=False)
    )
    return model if recipe.quantize else None


def _check_float_base(src: Path) -> None:
    """Before merging: a merge keeps the weights no adapter touches as they are, so quantizing the
    merge of a quantized base re-quantizes those."""
    from llmhost.optimize.quantize import file_type, type_name

    ftype, quantized = file_type(src)
    if quantized:
        raise ArtifactError(
            f"the base {src} is quantized ({type_name(ftype, quantized)}): the merged model keeps its "
            "unadapted weights so, and quantizing it re-quantizes them (loses quality). Merge into an "
            "F16/F32 base, or allow re-quantization (--allow-requantize)"
        )


def _gguf_facts(gguf: Path) -> GGUFRecord:
    """What identifies the built model file: a reuse checks it still is the one built."""
    st = gguf.stat()
    return {"file": MODEL_GGUF, "size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha256_file(gguf)}


def _small_config(n_tokens: int, flash_attn: bool, load_mode: str, threads: int, repack: bool = True) -> Any:
    from llmhost.engine.config import EngineConfig

    total = max(64, n_tokens + 1)
    return EngineConfig(
        max_concurrent=1,
        max_input_tokens=total - 1,
        max_total_tokens=total,
        max_batch_tokens=512,
        prefix_cache_seqs=0,
        n_threads=threads,
        flash_attn=flash_attn,
        load_mode=load_mode,
        repack=repack,
    )


# start-up times this close to the fastest count as equal
LOAD_TIE_TOLERANCE = 0.03


def measure_load(gguf: Path, threads: int = 0, repeats: int = 3) -> LoadChoice:
    """Time start-up (model + context creation, then a 32-token prefill) with mmap and with plain reads
    (no mlock), each with and without llama.cpp's weight repacking; the fastest wins.

    The file is read once first so every setting starts from a warm page cache, and settings alternate.
    """
    from llmhost.engine.llamacpp.model import LlamaModel

    with gguf.open("rb") as f:
        while f.read(1 << 24):
            pass
    settings = {
        f"{mode}{'+repack' if repack else ''}": (mode, repack)
        for mode in ("mmap", "read")
        for repack in (True, False)
    }
    times: dict[str, list[float]] = {name: [] for name in settings}
    for _ in range(repeats):
        for name, (mode, repack) in settings.items():
            t0 = time.perf_counter()
            model = LlamaModel(gguf, _small_config(64, True, mode, threads, repack))
            model.decode(
                [(model.tokenize("The quick brown fox jumps over the lazy dog. " * 3)[:32], 0, 0, 1)]
            )
            model.close()
            times[name].append(time.perf_counter() - t0)
    best = {name: min(ts) for name, ts in times.items()}
    # within noise of the fastest, keep llama.cpp's defaults (the order of `settings`: mmap, repack)
    fastest = min(best.values())
    winner = next(name for name in settings if best[name] <= fastest * (1 + LOAD_TIE_TOLERANCE))
    mode, repack = settings[winner]
    return {"best": mode, "repack": repack, "seconds": {n: round(s, 4) for n, s in best.items()}}


def system_prompt_tokens(model: Any, recipe: Recipe) -> list[int]:
    """The tokens a request carrying the system prompt starts with."""
    from llmhost.server.serving.chat_template import ChatTemplate, TemplateMessage

    assert recipe.system_prompt is not None
    info = model.info
    if recipe.system_prompt_mode == "raw":
        tokens: list[int] = model.tokenize(recipe.system_prompt, add_special=True)
        return tokens
    source = recipe.chat_template or info.chat_template
    if not source:
        raise ArtifactError(
            "the model has no chat template: give the one serving will use (--chat-template FILE), "
            "or save the system prompt as raw text (--system-prompt-mode raw)"
        )
    template = ChatTemplate(source, info.bos_token, info.eos_token)
    messages: list[TemplateMessage] = [
        {"role": "system", "content": recipe.system_prompt},
        {"role": "user", "content": _SENTINEL},
    ]
    text = template.render(messages, add_generation_prompt=False)
    if _SENTINEL not in text:
        raise ArtifactError("the chat template does not write the user message verbatim")
    prefix = text.split(_SENTINEL)[0]
    has_bos = bool(info.bos_token) and prefix.startswith(info.bos_token)
    tokens = model.tokenize(prefix, add_special=not has_bos)
    return tokens


def save_system_prompt_state(
    gguf: Path, recipe: Recipe, path: Path, load_mode: str, threads: int
) -> PrefixStateRecord:
    from llmhost.engine.kv.prefix_state import save_prefix_state
    from llmhost.engine.llamacpp.model import LlamaModel

    probe = LlamaModel(gguf, _small_config(64, recipe.flash_attn, load_mode, threads))
    try:
        tokens = system_prompt_tokens(probe, recipe)
    finally:
        probe.close()
    model = LlamaModel(gguf, _small_config(len(tokens), recipe.flash_attn, load_mode, threads))
    try:
        for off in range(0, len(tokens), model.n_batch):
            model.decode([(tokens[off : off + model.n_batch], off, 0, 0)])
        state = model.state_seq_save(0)
    finally:
        model.close()
    save_prefix_state(path, tokens, state)
    return {
        "file": STATE_BIN,
        "tokens": len(tokens),
        "mode": recipe.system_prompt_mode,
        "flash_attn": recipe.flash_attn,
        "sha256": sha256_file(path),
    }


# -- serving -------------------------------------------------------------------------------------------
def write_serving_settings(directory: str | Path, settings: dict[str, Any]) -> None:
    """Record serving settings (SERVING_KEYS) in the artifact's recipe.yaml, replacing earlier ones."""
    path = Path(directory) / RECIPE_YAML
    doc = yamltext.load(path.read_text()) or {}
    doc["serving"] = {k: settings[k] for k in SERVING_KEYS if k in settings}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))

"""What `llmhost serve` runs with, built from its options: the one implementation of that mapping,
used by `llmhost serve` itself and by a copy of an endpoint on Ray (which runs the same server app
in-process), so that both get the same engine from the same inputs.

The options themselves are declared in `llmhost.settings.serve`; this module maps them to the server's
settings (llama.cpp loads only inside `build`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmhost.engine.config import EngineConfig
from llmhost.settings.serve import (
    MIB,
    SERVE_SPEC,
    AsyncOptions,
    BatchTransformSettings,
    CaptureSettings,
    ChatSettings,
    ConsoleOptions,
    EngineSettings,
    JobsOptions,
    ListenSettings,
    TraceOptions,
)
from llmhost.web.auth import ApiKeys

if TYPE_CHECKING:
    from llmhost.engine.llamacpp.model_kind import ModelPurpose
    from llmhost.engine.lora import AdapterSpec
    from llmhost.server import ServerSettings
    from llmhost.store import ResolvedModel
    from llmhost.store.artifact import ServeHints


@dataclass(frozen=True, kw_only=True)
class ServeOptions(
    ListenSettings,
    EngineSettings,
    ChatSettings,
    BatchTransformSettings,
    ConsoleOptions,
    JobsOptions,
    AsyncOptions,
    CaptureSettings,
    TraceOptions,
):
    """`llmhost serve`'s options as `build` takes them: every setting of the spec but the serving
    process's own, each a typed field (`opts.max_queue: int`); API keys come loaded, the chat template as
    its text. A 0 or "" limit is unset: taken from its variable, else its default."""

    # None: $SM_MODEL_DIR, /opt/ml/model, else the bundled model
    model: str | None = field(default=None, kw_only=False)
    chat_template: str | None = None  # type: ignore[assignment]  # the template's text, not its file
    api_keys: ApiKeys = field(default_factory=ApiKeys)
    # options given rather than defaulted: an optimize artifact's recipe does not override them
    explicit: frozenset[str] = frozenset()

    @property
    def values(self) -> dict[str, Any]:
        """Every setting by name."""
        return {s.name: getattr(self, s.name) for s in SERVE_SPEC.built()}

    def resolved(self, name: str, env: Mapping[str, str], fallback: Any = None) -> Any:
        """The setting in effect: the option, else its variable, else its default."""
        return SERVE_SPEC[name].resolve(getattr(self, name), env, fallback)


@dataclass(frozen=True)
class Built:
    settings: ServerSettings
    notes: list[str]  # what the caller tells the user (an artifact's settings used, or why not)


def _artifact(
    opts: ServeOptions, resolved: ResolvedModel
) -> tuple[ServeHints | None, dict[str, Any], list[str]]:
    """An `llmhost optimize artifact` directory's measured load mode and saved system-prompt state, and
    its recipe's serving settings (speculative decoding) not given as options. The model's directory
    is where they are, whatever the reference's form (a directory, an s3:// prefix or archive,
    $SM_MODEL_DIR)."""
    from llmhost.store.artifact import serving_hints

    model_dir = resolved.model_dir
    hints = serving_hints(model_dir, opts.flash_attn) if model_dir is not None else None
    if hints is None:
        return None, {}, []
    notes = [f"artifact's saved system-prompt state not used: {hints.reason}"] if hints.reason else []
    recipe = hints.engine_overrides(set(opts.explicit))
    if recipe:
        notes.append(f"serving settings from the artifact's recipe: {recipe}")
    return hints, recipe, notes


def adapter_specs(opts: ServeOptions) -> tuple[AdapterSpec, ...]:
    """The --lora adapters, each path resolved as a model reference (an s3:// one downloaded)."""
    from llmhost.engine.lora import AdapterSpec, parse_lora
    from llmhost.store import ModelNotFoundError, resolve

    specs = []
    for text in opts.lora or []:
        name, ref, scale = parse_lora(text)
        try:
            path = resolve(ref).gguf
        except ModelNotFoundError as exc:
            raise ModelNotFoundError(f"--lora {name}: {exc}") from exc
        specs.append(AdapterSpec(name, str(path), scale))
    return tuple(specs)


def _found_mmproj(found: tuple[str, ...]) -> str:
    """The projector found with the model (none given by --mmproj): its one mmproj, absolute; several
    are an error naming them, never a guess."""
    from llmhost.store.model import AmbiguousModelError

    if len(found) > 1:
        raise AmbiguousModelError(
            f"the model comes with {len(found)} multimodal projectors ({', '.join(found)}): name the one to "
            "load with --mmproj, or serve text only with --no-mmproj"
        )
    return str(Path(found[0]).absolute()) if found else ""  # a hub snapshot's name, not its blob's


def _mmproj(ref: str) -> str:
    """--mmproj's file, resolved as a model reference is (an hf:// or s3:// one downloaded into its
    cache); a ModelNotFoundError naming --mmproj where it names no one projector."""
    from llmhost.store import ModelNotFoundError
    from llmhost.store.projector import resolve_projector

    try:
        return str(resolve_projector(ref))
    except ModelNotFoundError as exc:
        raise type(exc)(f"--mmproj {exc}") from None


def as_loaded(
    engine: EngineConfig,
    opts: ServeOptions,
    env: Mapping[str, str],
    draft_path: str,
    hints: ServeHints | None,
    recipe: dict[str, Any],
    mmproj_path: str = "",
) -> EngineConfig:
    """The settings' engine (`SERVE_SPEC.engine_config`) as it loads: the artifact's recipe (settings not
    given as options) and its measured load mode, the draft model and the adapters at their resolved
    paths; EngineConfig's checks run again on what changed."""
    # swa_full as given: the settings' speculation may have turned it on where the recipe's turns it off
    changes: dict[str, Any] = {"swa_full": opts.resolved("swa_full", env), **recipe}
    if draft_path:
        changes["speculative"] = "draft"
    return replace(
        engine,
        **changes,
        draft_model=draft_path,
        mmproj=mmproj_path,
        load_mode=hints.load_mode if hints else "auto",
        repack=hints.repack if hints else True,
        prefix_state_path=hints.prefix_state_path if hints else "",
        adapters=adapter_specs(opts),
    )


def _purposed(opts: ServeOptions, gguf: Path) -> tuple[ServeOptions, ModelPurpose]:
    """The options as the model decides them: an embedding model or a reranker serves embeddings or
    scores without --embeddings (a file that is no GGUF is left for the loader to refuse, naming why)."""
    from llmhost.engine.llamacpp.gguf_check import GGUFError
    from llmhost.engine.llamacpp.model_kind import ModelKind, ModelPurpose, model_purpose

    try:
        purpose = model_purpose(gguf)
    except GGUFError:
        return opts, ModelPurpose(ModelKind.GENERATE, "", 0)
    if purpose.kind is not ModelKind.GENERATE and not opts.embeddings:
        opts = replace(opts, embeddings=True)
    return opts, purpose


def build(opts: ServeOptions, env: Mapping[str, str] | None = None) -> Built:
    """The server's settings: the settings checked together (ValueError naming those that do not go
    together) before anything is resolved or loaded, then the model and draft model resolved (an s3://
    one downloaded). Raises ModelNotFoundError (a FileNotFoundError) for a model that is not there."""
    from llmhost.engine.embedder import EmbedderConfig
    from llmhost.server import ServerSettings
    from llmhost.server.custom_code import find_script
    from llmhost.store import resolve

    env = os.environ if env is None else env
    SERVE_SPEC.engine_config(opts.values, env)  # settings that do not go together: before any download
    if opts.mmproj and opts.no_mmproj:
        raise ValueError("--mmproj and --no-mmproj do not go together: give one")
    if opts.media_path and not Path(opts.media_path).expanduser().is_dir():
        raise ValueError(f"--media-path {opts.media_path}: no such folder")
    resolved = resolve(opts.model, projector=not (opts.mmproj or opts.no_mmproj))
    opts, purpose = _purposed(opts, resolved.gguf)
    engine = SERVE_SPEC.engine_config(opts.values, env, purpose.n_ctx_train)
    draft_path = str(resolve(opts.draft_model).gguf) if opts.draft_model else ""
    mmproj_path = _mmproj(opts.mmproj) if opts.mmproj else _found_mmproj(resolved.mmproj)
    hints, recipe, notes = _artifact(opts, resolved)
    engine = as_loaded(engine, opts, env, draft_path, hints, recipe, mmproj_path)
    settings = ServerSettings(
        model_path=resolved.gguf,
        engine=engine,
        api_keys=opts.api_keys,
        **{s.server: opts.resolved(s.name, env) for s in SERVE_SPEC if s.server},
        embeddings=EmbedderConfig.from_engine(engine, opts.pooling) if opts.embeddings else None,
        max_body_bytes=opts.resolved("max_payload_mb", env) * MIB,
        inference_script=find_script(resolved.model_dir),
    )
    return Built(settings, notes)

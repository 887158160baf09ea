"""What `llmhost serve` runs with, built from its options: the one implementation of that mapping,
used by `llmhost serve` itself and by a copy of an endpoint on Ray (which runs the same server app
in-process), so that both get the same engine from the same inputs.

Light on purpose (llama.cpp loads only inside `build`): the Ray ingress sizes its copies' request
limits with `max_concurrent` and must not load a model.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from llmhost.auth import ApiKeys

if TYPE_CHECKING:
    from llmhost.engine import EngineConfig
    from llmhost.server import ServerSettings
    from llmhost.store import ResolvedModel
    from llmhost.store.artifact import ServeHints

# the variables that size the engine when an option leaves a limit unset (SageMaker's and TGI's names)
LIMIT_ENV = ("MAX_CONCURRENT_REQUESTS", "MAX_INPUT_LENGTH", "MAX_TOTAL_TOKENS", "MAX_BATCH_TOTAL_TOKENS")
DEFAULT_MAX_CONCURRENT = 8
DEFAULT_MAX_QUEUE = 64
DEFAULT_MAX_BATCH_TOKENS = 512
LOG_LEVELS = ("debug", "info", "warning", "error")


def env_int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ValueError(f"environment variable {name}={raw!r} is not an integer") from exc


@dataclass(frozen=True)
class ServeOptions:
    """`llmhost serve`'s options; a 0 or "" limit is unset: taken from LIMIT_ENV, else the default."""

    model: str | None = None  # None: $SM_MODEL_DIR, /opt/ml/model, else the bundled model
    host: str = "0.0.0.0"
    port: int = 0  # 0: $SAGEMAKER_BIND_TO_PORT, else 8080
    threads: int = 0
    max_concurrent: int = 0
    max_queue: int = DEFAULT_MAX_QUEUE
    max_input_tokens: int = 0
    max_total_tokens: int = 0
    max_batch_tokens: int = 0
    prefix_cache_tokens: int = 4096
    flash_attn: bool = True
    speculative: str = ""
    draft_tokens: int = 12
    draft_model: str = ""
    ngram_size: int = 3
    chat_template: str | None = None  # the template's text
    served_model_name: str = ""
    tool_parser: str = "auto"
    queue_timeout_s: float = 0.0
    request_timeout_s: float = 0.0
    embeddings: bool = False
    pooling: str = "auto"
    api_keys: ApiKeys = field(default_factory=ApiKeys)
    # options given rather than defaulted: an optimize artifact's recipe does not override them
    explicit: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Built:
    settings: ServerSettings
    notes: list[str]  # what the caller tells the user (an artifact's settings used, or why not)


def max_concurrent(option: int, env: Mapping[str, str]) -> int:
    """Sequences decoding together: the option, else $MAX_CONCURRENT_REQUESTS, else the default."""
    return option or env_int(env, "MAX_CONCURRENT_REQUESTS", DEFAULT_MAX_CONCURRENT)


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


def engine_config(opts: ServeOptions, env: Mapping[str, str], draft_path: str,
                  hints: ServeHints | None, recipe: dict[str, Any]) -> EngineConfig:  # fmt: skip
    from llmhost.engine import EngineConfig

    # embeddings: llama-server's limit (its 512-token physical batch); a decode holds a whole input
    max_input = 512 if opts.embeddings else 2048
    return EngineConfig(
        max_concurrent=max_concurrent(opts.max_concurrent, env),
        max_queue=opts.max_queue,
        max_input_tokens=opts.max_input_tokens or env_int(env, "MAX_INPUT_LENGTH", max_input),
        max_total_tokens=opts.max_total_tokens or env_int(env, "MAX_TOTAL_TOKENS", 4096),
        max_batch_tokens=opts.max_batch_tokens
        or env_int(env, "MAX_BATCH_TOTAL_TOKENS", DEFAULT_MAX_BATCH_TOKENS),
        prefix_cache_tokens=opts.prefix_cache_tokens,
        n_threads=opts.threads or env_int(env, "LLMHOST_THREADS", 0),
        flash_attn=opts.flash_attn,
        speculative="draft" if draft_path else recipe.get("speculative", opts.speculative),
        draft_model=draft_path,
        draft_tokens=recipe.get("draft_tokens", opts.draft_tokens),
        ngram_size=recipe.get("ngram_size", opts.ngram_size),
        load_mode=hints.load_mode if hints else "auto",
        repack=hints.repack if hints else True,
        prefix_state_path=hints.prefix_state_path if hints else "",
        queue_timeout_s=opts.queue_timeout_s,
        request_timeout_s=opts.request_timeout_s,
    )


def build(opts: ServeOptions, env: Mapping[str, str] | None = None) -> Built:
    """The server's settings: the model and draft model resolved (an s3:// one downloaded) here.
    Raises ModelNotFoundError (a FileNotFoundError) for a model that is not there, ValueError for
    options that do not go together."""
    from llmhost.engine.embedder import EmbedderConfig
    from llmhost.server import ServerSettings
    from llmhost.server.custom_code import find_script
    from llmhost.server.settings import DEFAULT_PORT
    from llmhost.store import resolve

    env = os.environ if env is None else env
    resolved = resolve(opts.model)
    draft_path = str(resolve(opts.draft_model).gguf) if opts.draft_model else ""
    if opts.pooling != "auto" and not opts.embeddings:
        raise ValueError("--pooling applies to --embeddings only")
    hints, recipe, notes = _artifact(opts, resolved)
    engine = engine_config(opts, env, draft_path, hints, recipe)
    settings = ServerSettings(
        model_path=resolved.gguf, engine=engine, host=opts.host,
        port=opts.port or env_int(env, "SAGEMAKER_BIND_TO_PORT", DEFAULT_PORT),
        served_model_name=opts.served_model_name, chat_template=opts.chat_template,
        tool_parser=opts.tool_parser, api_keys=opts.api_keys,
        embeddings=EmbedderConfig.from_engine(engine, opts.pooling) if opts.embeddings else None,
        inference_script=find_script(resolved.model_dir),
    )  # fmt: skip
    return Built(settings, notes)

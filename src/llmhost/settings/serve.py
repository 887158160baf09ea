"""`llmhost serve`'s settings, each declared once, as typed fields of a few groups.

Each group is a frozen dataclass (vLLM's `EngineArgs` pattern): a field's type and default are the
setting's, and its `setting(...)` metadata the rest: help, bounds, the environment variable read when it
is left unset, whether an endpoint file's `engine:` may set it, the EngineConfig or ServerSettings field
it fills. From these fields, and only from them, come `llmhost serve`'s options (cli.py), the typed
options `build` takes (settings.build.ServeOptions: every group but the process's), the endpoint file's
`engine:` keys and their bounds (endpoint/spec.py), the command line an endpoint copy, a Ray copy, a
sweep and the tuner run, and the docs' table of serve options (docs/reference/cli.md). The rules between
settings are checked by `SettingsSpec.engine_config` (and EngineConfig's own checks) on the values in
effect, before any model loads. The engine's limits default to `EngineConfig`'s own defaults.

Light on purpose (no llama.cpp, no server): the router, bench and the tuner read defaults here.
"""

from __future__ import annotations

import os
import sys
import typing
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal

from llmhost.engine.config import EMBED_MAX_INPUT_TOKENS, CacheType, EngineConfig, SchedulePolicy
from llmhost.settings.setting import Setting, SettingsSpec, required, setting, type_of

__all__ = ["Setting", "SettingsSpec", "required", "setting", "type_of"]  # re-exported: their readers' home

_ENGINE: dict[str, Any] = {f.name: f.default for f in fields(EngineConfig)}
_DEFAULT = EngineConfig()  # the engine's own defaults, typed
DEFAULT_PORT = 8080
LogLevel = Literal["debug", "info", "warning", "error"]
LOG_LEVELS: tuple[str, ...] = typing.get_args(LogLevel)
Speculative = Literal["ngram", "draft"]
ToolParser = Literal["auto", "hermes", "llama3", "mistral", "granite", "harmony"]
ToolFormat = Literal["auto", "none"]
ReasoningFormat = Literal["auto", "none", "deepseek", "magistral", "seed", "harmony"]
Pooling = Literal["auto", "mean", "cls", "last", "rank"]
BatchStrategy = Literal["MULTI_RECORD", "SINGLE_RECORD"]
BATCH_STRATEGIES: tuple[str, ...] = typing.get_args(BatchStrategy)
MIB = 1024 * 1024
# SageMaker's request payload limit (real-time endpoints, and Batch Transform's default MaxPayloadInMB)
DEFAULT_PAYLOAD_MB = 6
# the largest medium of a chat request: bytes once decoded, an image's pixels, a clip's seconds
DEFAULT_MAX_MEDIA_BYTES = 4 * MIB
DEFAULT_MAX_IMAGE_PIXELS = 4096 * 4096
DEFAULT_MAX_AUDIO_SECONDS = 600.0


class ServeSettingsSpec(SettingsSpec):
    """`llmhost serve`'s settings, and the engine they make."""

    def engine_config(
        self, values: Mapping[str, Any], env: Mapping[str, str], n_ctx_train: int = 0
    ) -> EngineConfig:
        """The EngineConfig these settings (by name; a missing one at its default) make, each in effect
        (value, variable or fallback; `n_ctx_train`: the model's trained context, where known): raises
        ValueError naming the settings that do not go together, before anything loads. A draft model
        turns speculation to "draft"."""
        check_together(values)
        fb = engine_fallbacks(values, n_ctx_train)
        engine = {
            s.engine: s.resolve(values.get(s.name, s.default), env, fb.get(s.name))
            for s in self.settings
            if s.engine
        }
        inputs = self["max_input_tokens"]
        if (
            not inputs.given(values.get(inputs.name), env)
            and engine["max_input_tokens"] >= engine["max_total_tokens"]
        ):
            # TGI's rule for a total given alone: prompts may take all of it but one new token
            engine["max_input_tokens"] = engine["max_total_tokens"] - 1
        draft = str(values.get("draft_model") or "")
        if draft:
            engine["speculative"] = "draft"
        return EngineConfig(**engine, draft_model=draft)


def engine_fallbacks(values: Mapping[str, Any], n_ctx_train: int = 0) -> dict[str, Any]:
    """The values of limits left unset (nor variable) other than EngineConfig's defaults: an embeddings
    server's input limit is the embedder's (llama-server's: a decode holds a whole input); a model
    trained on a shorter context than the defaults gets its trained context (halved for the input)
    rather than a refusal to start. Each is the model's trained context at most."""
    trained = n_ctx_train if n_ctx_train > 0 else sys.maxsize
    if values.get("embeddings"):
        return {"max_input_tokens": min(EMBED_MAX_INPUT_TOKENS, trained)}
    if trained >= _DEFAULT.max_total_tokens:
        return {}
    return {"max_total_tokens": trained, "max_input_tokens": min(_DEFAULT.max_input_tokens, trained // 2)}


def check_together(values: Mapping[str, Any]) -> None:
    """The rules between settings that are not the engine's own (EngineConfig checks those): a draft
    model and the speculation it implies, what applies to embeddings only or to text generation only.
    Raises ValueError naming the settings."""
    speculative, draft = values.get("speculative"), values.get("draft_model")
    if speculative == "draft" and not draft:
        raise ValueError("speculative: draft needs a draft_model")
    if draft and speculative == "ngram":  # else the draft model would silently turn ngram off
        raise ValueError("draft_model is for speculative: draft, not ngram")
    if not values.get("embeddings"):
        if values.get("pooling", "auto") not in ("auto", None):
            raise ValueError("--pooling applies to --embeddings only")
        return
    for name in ("lora", "max_loras", "ubatch_size"):
        if values.get(name):
            raise ValueError(f"--{name.replace('_', '-')} applies to text generation, not --embeddings")


def _limit(help: str, env: str, default: str, **kw: Any) -> Any:
    """An engine limit: 0 leaves it to `env`, else EngineConfig's default (of the field `default`)."""
    return setting(
        0,
        help,
        env=env,
        fallback=_ENGINE[default],
        endpoint=True,
        engine=default,
        metavar="N",
        **{"ge": 1, **kw},
    )


@dataclass(frozen=True, kw_only=True)
class ListenSettings:
    """Where the server listens."""

    host: str = setting("0.0.0.0", "Address to bind.", server="host", metavar="H")
    port: int = setting(
        0,
        "Port; env SAGEMAKER_BIND_TO_PORT.",
        env="SAGEMAKER_BIND_TO_PORT",
        fallback=DEFAULT_PORT,
        server="port",
        metavar="P",
    )


@dataclass(frozen=True, kw_only=True)
class EngineSettings:
    """The engine's: its threads, limits, caches, speculation, adapters and mode (EngineConfig's fields)."""

    threads: int = setting(
        0,
        "Engine threads; 0: the CPUs this process may run on.",
        env="LLMHOST_THREADS",
        engine="n_threads",
        label="t",
        metavar="N",
    )
    max_concurrent: int = _limit(
        "Sequences decoding together; env MAX_CONCURRENT_REQUESTS.",
        "MAX_CONCURRENT_REQUESTS",
        "max_concurrent",
        label="mc",
    )
    max_queue: int = setting(
        _DEFAULT.max_queue,
        "Requests that may wait beyond those; more get 429.",
        ge=0,
        endpoint=True,
        engine="max_queue",
        metavar="N",
    )
    max_input_tokens: int = _limit(
        "Prompt token limit; unset, at most the total - 1; env MAX_INPUT_LENGTH.",
        "MAX_INPUT_LENGTH",
        "max_input_tokens",
    )
    max_total_tokens: int = _limit(
        "Prompt + new tokens limit; env MAX_TOTAL_TOKENS.", "MAX_TOTAL_TOKENS", "max_total_tokens", ge=2
    )
    max_batch_tokens: int = _limit(
        "Tokens per decode step; env MAX_BATCH_TOTAL_TOKENS.",
        "MAX_BATCH_TOTAL_TOKENS",
        "max_batch_tokens",
        label="b",
    )
    ubatch_size: int = setting(
        _DEFAULT.ubatch_size,
        "Tokens llama.cpp computes at once within a decode step (its physical batch, llama-server's "
        "--ubatch-size); at most the step's tokens. 0: llama.cpp's 512, at most --max-batch-tokens.",
        ge=1,
        endpoint=True,
        engine="ubatch_size",
        label="ub",
        metavar="N",
    )
    schedule_policy: SchedulePolicy = setting(
        _DEFAULT.schedule_policy,
        "Which waiting request gets a free sequence first: fewest-left (fewest prompt tokens left to "
        "compute: a conversation's next turn before cold prompts), arrival (earliest), cached-first "
        "(most prompt tokens cached: conversations under way before new ones).",
        endpoint=True,
        engine="schedule_policy",
        label="sp",
        metavar="POLICY",
    )
    interactive_slots: int = setting(
        _DEFAULT.interactive_slots,
        "Sequences batch work (batch jobs, async invocations: requests of priority > 0) leaves free for "
        "interactive requests; at most --max-concurrent - 1.",
        ge=0,
        endpoint=True,
        engine="interactive_slots",
        metavar="N",
    )
    prefix_cache_seqs: int = setting(
        _DEFAULT.prefix_cache_seqs,
        "KV streams of --max-total-tokens cells beyond the running sequences' that only keep finished "
        "requests' KV for prefix reuse (a finished request's KV stays in its own stream until another "
        "request needs it in any case); 0: none.",
        ge=0,
        endpoint=True,
        engine="prefix_cache_seqs",
        metavar="N",
    )
    prefix_caching: bool = setting(
        _DEFAULT.prefix_caching,
        "Reuse the KV of a prompt's prefix already computed (kept in a finished request's stream, in a "
        "running sequence or in host memory); off: every prompt is computed whole.",
        endpoint=True,
        engine="prefix_caching",
    )
    prompt_cache_mb: int = setting(
        _DEFAULT.prompt_cache_mb,
        "MiB of host memory keeping the KV state of sequences that left the context, restored for "
        "prompts that extend them; -1: a quarter of the memory available at start (at most 8192), "
        "0: off.",
        ge=-1,
        endpoint=True,
        engine="prompt_cache_mb",
        metavar="MB",
    )
    memory_mb: int = setting(
        _DEFAULT.memory_mb,
        "MiB this server is meant to fit in (an endpoint copy gets its resources' memory_mb): the "
        "weights, the running sequences' KV cache, the process and a --mmproj projector's share (its "
        "weights, encoder and media embeddings cache) must fit (else the load is refused "
        "naming each part), extra cached streams are as many of --prefix-cache-seqs as fit beside "
        "them, and --prompt-cache-mb -1 takes at most what is left. 0: no bound.",
        engine="memory_mb",
        metavar="MB",
    )
    flash_attn: bool = setting(True, "llama.cpp flash attention.", engine="flash_attn")
    isolate_prompts: bool = setting(
        _DEFAULT.isolate_prompts,
        "Decode each prompt chunk in a llama.cpp call of its own, not beside other requests' tokens: "
        "a prompt's logits (a greedy answer's start) are then those of the request alone, at the cost "
        "of a decode call per prompt in a step.",
        engine="isolate_prompts",
        switch=True,
    )
    cache_type_k: CacheType = setting(
        _DEFAULT.cache_type_k,
        "KV cache type of K (llama.cpp's names): q8_0 takes 53% of f16's memory, q4_0 28%.",
        endpoint=True,
        engine="cache_type_k",
        label="ctk",
        metavar="TYPE",
    )
    cache_type_v: CacheType = setting(
        _DEFAULT.cache_type_v,
        "KV cache type of V; a quantized V needs --flash-attn.",
        endpoint=True,
        engine="cache_type_v",
        label="ctv",
        metavar="TYPE",
    )
    swa_full: bool = setting(
        _DEFAULT.swa_full,
        "Sliding-window layers (Gemma 3, gpt-oss, Mistral-SWA, Cohere) keep every position instead of "
        "their window (Gemma 3 270M, 16 x 4,096 tokens: 1,152 instead of 432 MiB of f16 KV). Windowed "
        "(the default, llama.cpp's), a prompt sharing a shorter prefix of a cached sequence is served "
        "from an SWA checkpoint (--swa-checkpoints). Speculative decoding turns it on.",
        endpoint=True,
        engine="swa_full",
    )
    swa_checkpoints: int = setting(
        _DEFAULT.swa_checkpoints,
        "SWA checkpoints a sequence keeps (llama-server's --swa-checkpoints): its sliding-window cells "
        "saved in host memory at prompt chunk starts, so a prompt sharing a shorter prefix reuses it "
        "under windowed sliding-window layers. All sequences' checkpoints share one byte budget: the "
        "running sequences' at their largest (memory_mb counts it once). 0: none (such a prompt is "
        "prefilled from scratch).",
        endpoint=True,
        engine="swa_checkpoints",
        ge=0,
        metavar="N",
    )
    speculative: str = setting(
        _DEFAULT.speculative,
        "Speculative decoding of greedy requests: 'ngram' (prompt lookup), 'draft' (a draft model: "
        "--draft-model, which sets it) or '' (off).",
        choices=typing.get_args(Speculative),
        endpoint=True,
        engine="speculative",
        metavar="ngram|draft",
    )
    draft_tokens: int = setting(
        _DEFAULT.draft_tokens,
        "Speculative tokens verified per step.",
        ge=1,
        endpoint=True,
        engine="draft_tokens",
        metavar="N",
    )
    adaptive_draft: bool = setting(
        _DEFAULT.adaptive_draft,
        "With --speculative ngram: each sequence's draft length follows its recent acceptance "
        "(none while guesses keep failing); off: always --draft-tokens.",
        endpoint=True,
        engine="adaptive_draft",
    )
    draft_model: str = setting(
        "",
        "Draft GGUF sharing the model's vocabulary (implies --speculative draft).",
        endpoint=True,
        metavar="SMALL.gguf",
    )
    mmproj: str = setting(
        "",
        "Multimodal projector GGUF (llama.cpp's mmproj) made for the model, named as a model is: a file, "
        "a folder holding one, s3://BUCKET/KEY.gguf, hf://OWNER/REPO/FILE.gguf or hf://OWNER/REPO (its one "
        "mmproj); chat requests may then hold images and audio, as the projector takes them.",
        endpoint=True,
        metavar="MMPROJ",
    )
    no_mmproj: bool = setting(
        False,
        "Serve the model's text only: no multimodal projector found with it (the one mmproj GGUF beside "
        "the model in a directory given, or in its hf:// repository) is loaded or downloaded.",
        endpoint=True,
    )
    ngram_size: int = setting(
        _DEFAULT.ngram_size,
        "Longest n-gram looked up for drafts.",
        ge=2,
        endpoint=True,
        engine="ngram_size",
        metavar="N",
    )
    lora: list[str] | None = setting(
        None,
        "LoRA adapter NAME=PATH[:SCALE] (repeatable; PATH a model reference: a file, s3://...) loaded "
        "beside the model; a request's `model` naming it, TGI's adapter_id or a `lora` list selects "
        "it.",
        metavar="NAME=PATH[:SCALE]",
    )
    max_loras: int = setting(
        _DEFAULT.max_loras,
        "Most LoRA adapters kept loaded: idle ones beyond it are freed, least recently used first, and "
        "loaded again (in milliseconds) when a request selects one; adapters running requests use are "
        "never freed. 0: all stay loaded.",
        ge=0,
        engine="max_loras",
        metavar="N",
    )
    queue_timeout_s: float = setting(
        0.0,
        "Seconds a request may wait for a sequence slot; then 503. 0: no limit.",
        ge=0,
        endpoint=True,
        engine="queue_timeout_s",
        metavar="S",
    )
    request_timeout_s: float = setting(
        0.0,
        "Seconds a request may take in all; then 503 / an error event. 0: no limit.",
        ge=0,
        endpoint=True,
        engine="request_timeout_s",
        metavar="S",
    )
    embeddings: bool = setting(
        False,
        "Load the model for embeddings only (no text generation); inputs up to --max-input-tokens "
        "(default 512 here). A GGUF that declares a pooling type (an embedding model or a reranker) "
        "or is a bidirectional encoder is served this way without it.",
        switch=True,
    )
    pooling: Pooling = setting(
        "auto",
        "With --embeddings: auto (the model's own, mean if it has none), mean, cls, last, or rank (a "
        "reranker's classification head: /v1/rerank and /score).",
        endpoint=True,
        metavar="auto|mean|cls|last|rank",
    )


@dataclass(frozen=True, kw_only=True)
class ChatSettings:
    """How the server reads and writes chat: its template, tool calls, thoughts, the model's name."""

    chat_template: Path | None = setting(
        None,
        "Jinja chat template file overriding the GGUF's.",
        endpoint=True,
        server="chat_template",
        metavar="FILE",
    )
    served_model_name: str = setting(
        "", "Model name in API responses.", server="served_model_name", metavar="NAME"
    )
    strict_model_names: bool = setting(
        False,
        "OpenAI, Anthropic and Responses requests whose `model` is not this server's (its served name, "
        "its file's stem, default, a loaded LoRA adapter's name) get a 404, as Ollama's routes always "
        "do; off: any name is the served model.",
        server="strict_model_names",
    )
    chat_embeddings: bool = setting(
        True,
        "Without --embeddings: answer /v1/embeddings, Ollama's /api/embed and TEI's /embed from the "
        "model, through a second context loaded on the first such request (its weights' pages shared); "
        "off: those are a 400.",
        server="chat_embeddings",
    )
    tool_parser: ToolParser = setting(
        "auto",
        "Format of tool calls in chat output: auto (from the template), hermes, llama3, mistral, "
        "granite, harmony (gpt-oss). A template that shows no tools gets the generic format and its "
        "JSON calls instead (--tool-format).",
        endpoint=True,
        server="tool_parser",
        metavar="auto|hermes|llama3|mistral|granite|harmony",
    )
    tool_format: ToolFormat = setting(
        "auto",
        "How tools reach a model whose chat template has no tool section: auto (a system message "
        "listing them, calls read back as JSON objects; templates with one render their own), none "
        "(a request with tools is a 400 naming tools).",
        endpoint=True,
        server="tool_format",
        metavar="auto|none",
    )
    reasoning_format: ReasoningFormat = setting(
        "auto",
        "How a thinking model's thought is told from its answer: auto (the chat template's tags), none "
        "(all is content), deepseek (<think>), magistral ([THINK]), seed (<seed:think>), harmony "
        "(gpt-oss's analysis and final channels).",
        endpoint=True,
        server="reasoning_format",
        metavar="auto|none|deepseek|magistral|seed|harmony",
    )
    reasoning_budget: int = setting(
        -1,
        "Most thought tokens of a thinking model's answer, then its end tag is forced (-1: no limit; 0: "
        "thinking off). A request's reasoning_budget overrides it.",
        ge=-1,
        endpoint=True,
        server="reasoning_budget",
        metavar="N",
    )
    reasoning_budget_max: int = setting(
        -1,
        "Most thought tokens a request may ask (reasoning_budget, Anthropic's thinking.budget_tokens): "
        "more is a 400 naming the field and this limit; a thought with no budget stops here too. -1: "
        "no cap.",
        ge=-1,
        endpoint=True,
        server="reasoning_budget_max",
        metavar="N",
    )
    chat_template_kwargs: str = setting(
        "",
        "JSON object of variables every chat request passes to the chat template (e.g. "
        '{"enable_thinking": false}); a request\'s chat_template_kwargs override them.',
        endpoint=True,
        server="chat_template_kwargs",
        metavar="JSON",
    )
    max_media_bytes: int = setting(
        DEFAULT_MAX_MEDIA_BYTES,
        "Largest image or audio clip of a chat request, in bytes once its base64 is decoded (larger: a "
        "400 naming the part). The request body's limit (--max-payload-mb) bounds them too.",
        ge=1,
        endpoint=True,
        server="max_media_bytes",
        metavar="BYTES",
    )
    allowed_media_domains: str = setting(
        "",
        "Comma-separated hosts whose http(s) image URLs chat requests may name (vLLM's option): the "
        "server fetches them, at most --max-media-bytes, within 10 s, following redirects only to "
        "listed hosts. Any other remote URL is a 400 naming the part. Empty: none fetched.",
        endpoint=True,
        server="allowed_media_domains",
        metavar="HOST[,HOST...]",
    )
    media_path: str = setting(
        "",
        "Folder whose files chat requests may name as file:// image URLs, relative to it "
        "(llama-server's --media-path); a path leading outside it, by .. or a symlink, is a 400 naming "
        "the part. Empty: file:// URLs refused.",
        endpoint=True,
        server="media_path",
        metavar="DIR",
    )
    max_image_pixels: int = setting(
        DEFAULT_MAX_IMAGE_PIXELS,
        "Most pixels (width x height) of an image in a chat request, once decoded (more: a 400 naming "
        "the part).",
        ge=1,
        endpoint=True,
        server="max_image_pixels",
        metavar="N",
    )
    max_audio_seconds: float = setting(
        DEFAULT_MAX_AUDIO_SECONDS,
        "Longest audio clip in a chat request, in seconds once decoded (longer: a 400 naming the part).",
        ge=0.001,
        endpoint=True,
        server="max_audio_seconds",
        metavar="S",
    )


@dataclass(frozen=True, kw_only=True)
class BatchTransformSettings:
    """SageMaker Batch Transform's contract: what GET /execution-parameters reports and /invocations
    enforces. SageMaker sets the variables (with SAGEMAKER_BATCH=true) on a batch transform's container
    only, so a real-time endpoint's server keeps the defaults."""

    max_payload_mb: int = setting(
        0,
        "Largest request body in MiB (larger: 413), reported as MaxPayloadInMB by "
        "/execution-parameters; env SAGEMAKER_MAX_PAYLOAD_IN_MB.",
        env="SAGEMAKER_MAX_PAYLOAD_IN_MB",
        fallback=DEFAULT_PAYLOAD_MB,
        metavar="MB",
    )
    batch_strategy: str = setting(
        "",
        "BatchStrategy /execution-parameters reports: MULTI_RECORD (an application/jsonlines "
        "/invocations body holds several records) or SINGLE_RECORD (one record a body); env "
        "SAGEMAKER_BATCH_STRATEGY.",
        env="SAGEMAKER_BATCH_STRATEGY",
        fallback="MULTI_RECORD",
        choices=BATCH_STRATEGIES,
        server="batch_strategy",
        metavar="MULTI_RECORD|SINGLE_RECORD",
    )
    max_concurrent_transforms: int = setting(
        0,
        "MaxConcurrentTransforms /execution-parameters reports, and the most records of one "
        "application/jsonlines body run at once; 0: --max-concurrent; env "
        "SAGEMAKER_MAX_CONCURRENT_TRANSFORMS.",
        env="SAGEMAKER_MAX_CONCURRENT_TRANSFORMS",
        server="max_concurrent_transforms",
        metavar="N",
    )


@dataclass(frozen=True, kw_only=True)
class ConsoleOptions:
    """The console (GET /console): its reports folder and its points' period."""

    reports: str = setting(
        "",
        "A folder of `llmhost bench` / `llmhost tune` results, listed in the console (GET /console).",
        server="reports",
        metavar="DIR",
    )
    console_period: float = setting(
        5.0,
        "Seconds between the console's points (15 minutes are kept).",
        server="console_period_s",
        metavar="S",
    )


@dataclass(frozen=True, kw_only=True)
class JobsOptions:
    """Batch jobs (/v1/files, /v1/batches): where they are kept and how much they may take."""

    jobs_dir: str = setting(
        "",
        "Folder of uploaded files, batches and their answers (SQLite), kept across restarts; one server "
        "per folder. Default: $XDG_DATA_HOME/llmhost/jobs/serve-PORT (~/.local/share/llmhost/...).",
        env="LLMHOST_JOBS_DIR",
        server="jobs_dir",
        metavar="DIR",
    )
    jobs_max_file_mb: int = setting(
        200,
        "Largest file /v1/files takes, in MiB (OpenAI's bound).",
        ge=1,
        server="jobs_max_file_mb",
        metavar="MB",
    )
    batch_concurrency: int = setting(
        0,
        "A batch's requests in flight at once, and async invocations run at once (they queue behind "
        "interactive ones); 0: --max-concurrent.",
        ge=0,
        server="batch_concurrency",
        metavar="N",
    )


@dataclass(frozen=True, kw_only=True)
class AsyncOptions:
    """SageMaker Asynchronous Inference (POST /endpoints/{name}/async-invocations): where answers go."""

    async_output: str = setting(
        "",
        "S3 prefix (s3://bucket/prefix/) where async invocations' answers are written, "
        '<inference-id>.out; "": async invocations are refused. Queued in --jobs-dir.',
        server="async_output",
        metavar="S3URI",
    )
    async_failure: str = setting(
        "",
        "S3 prefix where failed async invocations' errors are written, <inference-id>-error.out; "
        '"": --async-output.',
        server="async_failure",
        metavar="S3URI",
    )


@dataclass(frozen=True, kw_only=True)
class CaptureSettings:
    """Data capture (SageMaker's DataCaptureConfig): inference requests and answers, sampled, written
    as SageMaker's JSON Lines to a folder or an S3 prefix."""

    capture_dir: str = setting(
        "",
        "Folder or S3 prefix (s3://bucket/prefix/) where sampled inference requests and their answers "
        "are written as SageMaker's data capture JSON Lines, under ENDPOINT/VARIANT/yyyy/mm/dd/hh/; "
        '"": no capture.',
        server="capture_dir",
        endpoint=True,
        metavar="DIR|S3URI",
    )
    capture_percent: int = setting(
        100,
        "Percent of inference requests captured (SageMaker's InitialSamplingPercentage), 0 to 100.",
        ge=0,
        server="capture_percent",
        endpoint=True,
        metavar="N",
    )
    capture_mode: str = setting(
        "input,output",
        "What is captured of each request (SageMaker's CaptureOptions): input, output or input,output.",
        server="capture_mode",
        endpoint=True,
        metavar="input,output",
    )
    capture_endpoint: str = setting(
        "",
        'The endpoint name in the captured files\' paths; "": --served-model-name (else the model '
        "file's stem).",
        server="capture_endpoint",
        metavar="NAME",
    )
    capture_variant: str = setting(
        "AllTraffic",
        "The variant name in the captured files' paths (SageMaker's production variant).",
        server="capture_variant",
        endpoint=True,
        metavar="NAME",
    )
    capture_interval_s: float = setting(
        30.0,
        "With an S3 --capture-dir: seconds between uploads, an object each (a folder's files are "
        "appended as lines come).",
        ge=0.1,
        server="capture_interval_s",
        endpoint=True,
        metavar="S",
    )


@dataclass(frozen=True, kw_only=True)
class TraceOptions:
    """Where the process sends a span per request (OpenTelemetry, OTLP over HTTP)."""

    otlp_traces_endpoint: str = setting(
        "",
        "Send a span per inference request to this OTLP/HTTP traces URL (http://collector:4318/v1/traces), "
        'batched off the request path; needs llmhost\'s `otel` extra. "": no traces.',
        env="OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        server="otlp_traces_endpoint",
        metavar="URL",
    )


@dataclass(frozen=True, kw_only=True)
class AuthOptions:
    """Who may call the server: its API keys."""

    api_key: list[str] | None = setting(
        None,
        "Require this API key (repeatable; also $LLMHOST_API_KEYS or $LLMHOST_API_KEY, "
        "comma-separated); /ping and /health stay open.",
        metavar="KEY",
    )
    api_key_file: Path | None = setting(
        None,
        "File of API keys: one per line, or a YAML list of {key, name, requests_per_minute, "
        "tokens_per_minute} (quotas per key); read again on SIGHUP.",
        metavar="FILE",
    )


@dataclass(frozen=True, kw_only=True)
class LogOptions:
    """How the process logs."""

    log_level: LogLevel = setting("info", "debug, info, warning, error.", metavar="LEVEL")

    def __post_init__(self) -> None:
        if self.log_level.lower() not in LOG_LEVELS:
            raise ValueError(f"--log-level must be one of {', '.join(LOG_LEVELS)}, got {self.log_level!r}")


@dataclass(frozen=True, kw_only=True)
class ProcessSettings(AuthOptions, LogOptions):
    """The serving process's own: who may call it, how it logs, how long it drains."""

    shutdown_grace_s: float = setting(
        25.0, "On SIGTERM, seconds requests in flight get to finish before exit.", metavar="S"
    )


# the groups of the server `llmhost serve` builds (build.ServeOptions has their fields)
SERVE_GROUPS: tuple[type[Any], ...] = (
    ListenSettings,
    EngineSettings,
    ChatSettings,
    BatchTransformSettings,
    ConsoleOptions,
    JobsOptions,
    AsyncOptions,
    CaptureSettings,
    TraceOptions,
)
SERVE_SPEC = ServeSettingsSpec.of(SERVE_GROUPS, process=(ProcessSettings,))

# the variables that size the engine when an option leaves a limit unset (SageMaker's and TGI's names)
LIMIT_ENV = tuple(s.env for s in SERVE_SPEC if s.name.startswith("max_") and s.env)


def default_value(name: str, env: Mapping[str, str] | None = None) -> Any:
    """What `llmhost serve` runs with when `name` is not given: its variable where set, else its default."""
    s = SERVE_SPEC[name]
    return s.resolve(s.default, os.environ if env is None else env)

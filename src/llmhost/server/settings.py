"""Server configuration: flags, with SageMaker/TGI environment variables as defaults."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmhost.console.api import ConsoleSettings
from llmhost.engine.config import EngineConfig
from llmhost.engine.embedder import EmbedderConfig
from llmhost.jobs.settings import DEFAULT_MAX_FILE_MB, JobsSettings, default_jobs_dir
from llmhost.settings.serve import (
    BATCH_STRATEGIES,
    DEFAULT_MAX_AUDIO_SECONDS,
    DEFAULT_MAX_IMAGE_PIXELS,
    DEFAULT_MAX_MEDIA_BYTES,
    DEFAULT_PAYLOAD_MB,
    DEFAULT_PORT,
    MIB,
    SERVE_SPEC,
)
from llmhost.store.ggufnames import model_stem
from llmhost.web.auth import ApiKeys
from llmhost.web.capture.config import DEFAULT_VARIANT, CaptureConfig, parse_modes

__all__ = ["DEFAULT_PORT", "MAX_BODY_BYTES", "ServerSettings"]

# data capture's settings beside --capture-dir, which mean nothing without it
CAPTURE_OPTIONS = (
    "capture_percent",
    "capture_mode",
    "capture_endpoint",
    "capture_variant",
    "capture_interval_s",
)
# SageMaker's request payload limit (--max-payload-mb's default)
MAX_BODY_BYTES = DEFAULT_PAYLOAD_MB * MIB
TOOL_PARSERS = SERVE_SPEC["tool_parser"].choices
TOOL_FORMATS = SERVE_SPEC["tool_format"].choices
REASONING_FORMATS = SERVE_SPEC["reasoning_format"].choices


@dataclass(slots=True, frozen=True)
class ServerSettings:
    model_path: Path
    engine: EngineConfig
    host: str = "0.0.0.0"
    port: int = DEFAULT_PORT
    served_model_name: str = ""
    chat_template: str | None = None  # jinja text overriding the GGUF's template
    max_body_bytes: int = MAX_BODY_BYTES  # the body limit enforced (--max-payload-mb, in bytes)
    batch_strategy: str = "MULTI_RECORD"  # SageMaker Batch Transform's: a jsonlines body's records
    max_concurrent_transforms: int = 0  # records of one jsonlines body run at once; 0: max_concurrent
    default_max_new_tokens: int = 100  # TGI bodies without max_new_tokens
    tool_parser: str = "auto"  # how tool calls are read from chat output: auto or a name in tools.PARSERS
    tool_format: str = "auto"  # tools for a template without a tool section: auto (generic) or none (400)
    strict_model_names: bool = False  # an OpenAI-style request naming another model: 404
    reasoning_format: str = "auto"  # how a thought is told from the answer: auto, none, or a tag family
    reasoning_budget: int = -1  # most thought tokens of an answer (-1: no limit, 0: thinking off)
    reasoning_budget_max: int = -1  # most thought tokens a request may ask (-1: no cap)
    chat_template_kwargs: str = ""  # a JSON object of chat template variables every request passes
    # the largest medium (image, audio) of a chat request: decoded bytes, pixels, seconds
    max_media_bytes: int = DEFAULT_MAX_MEDIA_BYTES
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS
    allowed_media_domains: str = ""  # hosts whose http(s) media URLs are fetched, comma-separated
    media_path: str = ""  # the folder file:// media URLs are read under; "": refused
    max_audio_seconds: float = DEFAULT_MAX_AUDIO_SECONDS
    # --embeddings: the model is loaded for /v1/embeddings only, no generation engine (llama-server's mode)
    embeddings: EmbedderConfig | None = None
    # a generation server's /v1/embeddings, /api/embed and /embed, from a second context of its model
    chat_embeddings: bool = True
    api_keys: ApiKeys = field(default_factory=ApiKeys)  # none: no authentication
    # the model directory's code/inference.py (SageMaker inference toolkit hooks for /invocations)
    inference_script: Path | None = None
    reports: str = ""  # the console's reports folder (bench / tune results); "": none
    console_period_s: float = 5.0  # seconds between the console's points
    jobs_dir: str = ""  # batch jobs' folder; "": the user's data directory
    jobs_max_file_mb: int = DEFAULT_MAX_FILE_MB
    batch_concurrency: int = 0  # a batch's requests in flight; 0: the engine's max_concurrent
    async_output: str = ""  # SageMaker async invocations' answers (an s3:// prefix); "": refused
    async_failure: str = ""  # their errors' s3:// prefix; "": async_output
    capture_dir: str = ""  # data capture's folder or s3:// prefix; "": no capture
    capture_percent: int = 100  # requests captured
    capture_mode: str = "input,output"  # what of each: input, output or both
    capture_endpoint: str = ""  # the endpoint's name in the captured paths; "": model_name
    capture_variant: str = DEFAULT_VARIANT
    capture_interval_s: float = 30.0  # seconds between S3 uploads
    otlp_traces_endpoint: str = ""  # where spans go (OTLP over HTTP); "": no traces

    def console(self) -> ConsoleSettings:
        reports = Path(self.reports) if self.reports else None
        return ConsoleSettings(period_s=self.console_period_s, reports_dir=reports)

    def jobs(self) -> JobsSettings:
        return JobsSettings(
            # one folder per port: servers side by side keep theirs apart, one restarted resumes its own
            root=Path(self.jobs_dir) if self.jobs_dir else default_jobs_dir() / f"serve-{self.port}",
            max_file_bytes=self.jobs_max_file_mb * MIB,
            concurrency=self.batch_concurrency or self.engine.max_concurrent,
            async_output=self.async_output,
            async_failure=self.async_failure,
        )

    def capture(self) -> CaptureConfig | None:
        """Data capture's settings; None without --capture-dir (ValueError naming those given without it)."""
        if not self.capture_dir:
            given = [SERVE_SPEC[n].flag for n in CAPTURE_OPTIONS if getattr(self, n) != SERVE_SPEC[n].default]
            if given:
                raise ValueError(f"{', '.join(given)} given without --capture-dir")
            return None
        return CaptureConfig(
            destination=self.capture_dir,
            endpoint=self.capture_endpoint or self.model_name,
            percent=self.capture_percent,
            modes=parse_modes(self.capture_mode),
            variant=self.capture_variant,
            interval_s=self.capture_interval_s,
        )

    def __post_init__(self) -> None:
        self.jobs()  # its own checks
        self.capture()  # its own checks
        self.console()  # its own checks: the period's range, the reports folder
        if not 0 < self.port < 65536:
            raise ValueError(f"port must be in 1..65535, got {self.port}")
        if self.tool_parser not in TOOL_PARSERS:
            known = ", ".join(TOOL_PARSERS)
            raise ValueError(f"tool_parser must be one of {known}, got {self.tool_parser!r}")
        if self.reasoning_format not in REASONING_FORMATS:
            known = ", ".join(REASONING_FORMATS)
            raise ValueError(f"reasoning_format must be one of {known}, got {self.reasoning_format!r}")
        if self.tool_format not in TOOL_FORMATS:
            known = ", ".join(TOOL_FORMATS)
            raise ValueError(f"tool_format must be one of {known}, got {self.tool_format!r}")
        self._check_budgets()
        if self.embeddings is not None and not self.chat_embeddings:
            raise ValueError("--no-chat-embeddings applies to a generation server, not --embeddings")
        self.template_kwargs()  # a JSON object, or a ValueError saying what it is instead
        if self.max_body_bytes < 1:
            limit = "--max-payload-mb, SAGEMAKER_MAX_PAYLOAD_IN_MB"
            raise ValueError(f"max_body_bytes must be >= 1 ({limit}), got {self.max_body_bytes}")
        if self.batch_strategy not in BATCH_STRATEGIES:
            known = ", ".join(BATCH_STRATEGIES)
            raise ValueError(f"batch_strategy must be one of {known}, got {self.batch_strategy!r}")
        if self.max_concurrent_transforms < 0:
            raise ValueError(f"max_concurrent_transforms must be >= 0, got {self.max_concurrent_transforms}")

    def _check_budgets(self) -> None:
        if self.reasoning_budget < -1:
            raise ValueError(f"reasoning_budget must be -1 (no limit) or more, got {self.reasoning_budget}")
        if self.reasoning_budget_max < -1:
            raise ValueError(
                f"reasoning_budget_max must be -1 (no cap) or more, got {self.reasoning_budget_max}"
            )
        if self.reasoning_budget_max >= 0 and self.reasoning_budget > self.reasoning_budget_max:
            raise ValueError(
                f"--reasoning-budget {self.reasoning_budget} is over --reasoning-budget-max "
                f"{self.reasoning_budget_max}"
            )

    def template_kwargs(self) -> dict[str, Any]:
        """--chat-template-kwargs as a dict."""
        if not self.chat_template_kwargs:
            return {}
        try:
            value = json.loads(self.chat_template_kwargs)
        except ValueError as exc:
            raise ValueError(f"chat_template_kwargs is not JSON: {exc}") from exc
        if not isinstance(value, dict):
            raise ValueError(f"chat_template_kwargs must be a JSON object, got {self.chat_template_kwargs!r}")
        return value

    @property
    def max_payload_mb(self) -> int:
        """The body limit in whole MiB, as SageMaker's MaxPayloadInMB counts it (never above the limit)."""
        return self.max_body_bytes // MIB

    @property
    def concurrent_transforms(self) -> int:
        """The most records of one jsonlines body run at once: as set, else the engine's sequences."""
        return self.max_concurrent_transforms or self.engine.max_concurrent

    @property
    def model_name(self) -> str:
        return self.served_model_name or model_stem(self.model_path.name)

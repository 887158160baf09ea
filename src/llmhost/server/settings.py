"""Server configuration: flags, with SageMaker/TGI environment variables as defaults."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from llmhost.auth import ApiKeys
from llmhost.console.api import ConsoleSettings
from llmhost.engine.config import EngineConfig
from llmhost.engine.embedder import EmbedderConfig
from llmhost.serve_spec import DEFAULT_PORT, SERVE_SPEC
from llmhost.store.ggufnames import model_stem

__all__ = ["DEFAULT_PORT", "MAX_BODY_BYTES", "ServerSettings"]

# SageMaker's request payload limit for real-time endpoints
MAX_BODY_BYTES = 6 * 1024 * 1024
TOOL_PARSERS = SERVE_SPEC["tool_parser"].choices


@dataclass(slots=True, frozen=True)
class ServerSettings:
    model_path: Path
    engine: EngineConfig
    host: str = "0.0.0.0"
    port: int = DEFAULT_PORT
    served_model_name: str = ""
    chat_template: str | None = None  # jinja text overriding the GGUF's template
    max_body_bytes: int = MAX_BODY_BYTES
    default_max_new_tokens: int = 100  # TGI bodies without max_new_tokens
    tool_parser: str = "auto"  # how tool calls are read from chat output: auto or a name in tools.PARSERS
    # --embeddings: the model is loaded for /v1/embeddings only, no generation engine (llama-server's mode)
    embeddings: EmbedderConfig | None = None
    api_keys: ApiKeys = field(default_factory=ApiKeys)  # none: no authentication
    # the model directory's code/inference.py (SageMaker inference toolkit hooks for /invocations)
    inference_script: Path | None = None
    reports: str = ""  # the console's reports folder (bench / tune results); "": none
    console_period_s: float = 5.0  # seconds between the console's points

    def console(self) -> ConsoleSettings:
        reports = Path(self.reports) if self.reports else None
        return ConsoleSettings(period_s=self.console_period_s, reports_dir=reports)

    def __post_init__(self) -> None:
        self.console()  # its own checks: the period's range, the reports folder
        if not 0 < self.port < 65536:
            raise ValueError(f"port must be in 1..65535, got {self.port}")
        if self.tool_parser not in TOOL_PARSERS:
            known = ", ".join(TOOL_PARSERS)
            raise ValueError(f"tool_parser must be one of {known}, got {self.tool_parser!r}")
        if self.max_body_bytes < 1:
            raise ValueError(f"max_body_bytes must be >= 1, got {self.max_body_bytes}")

    @property
    def model_name(self) -> str:
        return self.served_model_name or model_stem(self.model_path.name)

"""`llmhost serve`'s settings, each declared once.

A `Setting` is one field: its type, default, bounds, help, the environment variable read when it is
left unset, and whether an endpoint file's `engine:` may set it. From `SERVE_SPEC`, and only from it,
come `llmhost serve`'s options (cli.py), the endpoint file's `engine:` keys and their validation
(endpoint/spec.py), the command line an endpoint copy, a Ray copy, a sweep and the tuner run, and the
docs' table of serve options (docs/reference/cli.md). The engine's limits default to `EngineConfig`'s
own defaults.

Light on purpose (no llama.cpp, no server): the router, bench and the tuner read defaults here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from llmhost.engine.config import CACHE_TYPES, SCHEDULE_POLICIES, EngineConfig

_ENGINE = {f.name: f.default for f in fields(EngineConfig)}
DEFAULT_PORT = 8080
LOG_LEVELS = ("debug", "info", "warning", "error")


@dataclass(frozen=True)
class Setting:
    """One serving setting. With `env`, a 0 or "" value is unset: the variable is read, else `fallback`."""

    name: str  # the option is --name-with-dashes, the endpoint file's key the name itself
    type: type[Any]  # int, float, bool, str or Path (a file whose text is the value)
    default: Any  # what `llmhost serve` shows and takes when the option is not given
    help: str
    env: str = ""  # read when the option is left unset
    fallback: Any = None  # the value with neither option nor variable; None: `default`
    ge: float | None = None  # the least value an endpoint file may set
    choices: tuple[str, ...] = ()  # the values an endpoint file may set (`llmhost serve` checks later)
    endpoint: bool = False  # an endpoint file's `engine:` may set it
    engine: str = ""  # the EngineConfig field it sets
    server: str = ""  # the ServerSettings field it sets
    label: str = ""  # its short name in a sweep's configuration names (`t2-mc4`)
    switch: bool = False  # a flag given alone (`--embeddings`), not `--x/--no-x`
    repeatable: bool = False  # a list: the option given once per value
    # a setting of the serving process itself (keys, logs, shutdown), not of the server it builds
    process: bool = False
    metavar: str = ""  # its value in the docs' table

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def resolve(self, value: Any, env: Mapping[str, str], fallback: Any = None) -> Any:
        """The value in effect: the option, else the variable, else the fallback."""
        if not self.env or value:
            return value
        fb = fallback if fallback is not None else self.default if self.fallback is None else self.fallback
        raw = env.get(self.env)
        if raw is None or raw == "":
            return fb
        try:
            return self.type(raw)
        except ValueError as exc:
            kind = "an integer" if self.type is int else f"a {self.type.__name__}"
            raise ValueError(f"environment variable {self.env}={raw!r} is not {kind}") from exc

    def argv(self, value: Any) -> list[str]:
        """The command-line arguments giving it `value`."""
        if self.repeatable:
            return [a for v in value for a in (self.flag, str(v))]
        if self.type is bool:
            if self.switch:
                return [self.flag] if value else []
            return [self.flag if value else f"--no-{self.flag[2:]}"]
        return [self.flag, str(value)]

    @property
    def shown_default(self) -> str:
        """Its default as the docs' table shows it."""
        if self.env:
            fb = self.default if self.fallback is None else self.fallback
            return f"{fb} (`{self.env}`)" if fb not in ("", None) else f"`{self.env}`"
        if self.type is bool:
            return "on" if self.default else "off"
        return "" if self.default in ("", None) else str(self.default)


@dataclass(frozen=True)
class SettingsSpec:
    settings: tuple[Setting, ...]

    def __post_init__(self) -> None:
        names = [s.name for s in self.settings]
        if len(set(names)) != len(names):
            raise ValueError(f"a setting is declared twice: {names}")

    def __iter__(self) -> Iterator[Setting]:
        return iter(self.settings)

    def __getitem__(self, name: str) -> Setting:
        for s in self.settings:
            if s.name == name:
                return s
        raise KeyError(name)

    def names(self) -> list[str]:
        return [s.name for s in self.settings]

    def built(self) -> list[Setting]:
        """The settings of the server `llmhost serve` builds (all but the process's own)."""
        return [s for s in self.settings if not s.process]

    def engine_config(self, values: Mapping[str, Any], env: Mapping[str, str]) -> EngineConfig:
        """The EngineConfig these settings (by name; a missing one at its default) make, each in effect
        (value, variable or fallback): raises ValueError naming the settings that do not go together,
        before anything loads. A draft model turns speculation to "draft"."""
        engine = {s.engine: s.resolve(values.get(s.name, s.default), env) for s in self.settings if s.engine}
        draft = str(values.get("draft_model") or "")
        if draft:
            engine["speculative"] = "draft"
        return EngineConfig(**engine, draft_model=draft)

    def endpoint_settings(self) -> list[Setting]:
        return [s for s in self.settings if s.endpoint]

    def argv(self, values: Mapping[str, Any]) -> list[str]:
        """The `llmhost serve` arguments giving these settings (None: left out), in the spec's order."""
        unknown = set(values) - set(self.names())
        if unknown:
            raise ValueError(f"not a serve setting: {', '.join(sorted(unknown))}")
        return [a for s in self.settings if values.get(s.name) is not None for a in s.argv(values[s.name])]

    def with_setting(self, setting: Setting) -> SettingsSpec:
        """A copy with one more setting (tests; a new setting is one more entry in SERVE_SETTINGS)."""
        return replace(self, settings=(*self.settings, setting))

    def table(self) -> str:
        """The docs' table of serve options (docs/reference/cli.md)."""
        rows = ["| option | default | endpoint `engine:` | meaning |", "|---|---|---|---|"]
        for s in self.settings:
            option = f"{s.flag}/--no-{s.flag[2:]}" if s.type is bool and not s.switch else s.flag
            value = f" {s.metavar}" if s.metavar else ""
            endpoint = "yes" if s.endpoint else ""
            cells = (f"`{option}{value}`", s.shown_default, endpoint, s.help)
            rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        return "\n".join(rows)


def _limit(name: str, help: str, env: str, **kw: Any) -> Setting:
    """An engine limit: 0 leaves it to `env`, else EngineConfig's default."""
    return Setting(name, int, 0, help, env=env, fallback=_ENGINE[name], endpoint=True, engine=name,
                   metavar="N", **{"ge": 1, **kw})  # fmt: skip


SERVE_SETTINGS: tuple[Setting, ...] = (
    Setting("host", str, "0.0.0.0", "Address to bind.", server="host", metavar="H"),
    Setting("port", int, 0, "Port; env SAGEMAKER_BIND_TO_PORT.", env="SAGEMAKER_BIND_TO_PORT",
            fallback=DEFAULT_PORT, server="port", metavar="P"),
    Setting("threads", int, 0, "Engine threads; 0: the CPUs this process may run on.",
            env="LLMHOST_THREADS", engine="n_threads", label="t", metavar="N"),
    _limit("max_concurrent", "Sequences decoding together; env MAX_CONCURRENT_REQUESTS.",
           "MAX_CONCURRENT_REQUESTS", label="mc"),
    Setting("max_queue", int, _ENGINE["max_queue"], "Requests that may wait beyond those; more get 429.",
            ge=0, endpoint=True, engine="max_queue", metavar="N"),
    _limit("max_input_tokens", "Prompt token limit; env MAX_INPUT_LENGTH.", "MAX_INPUT_LENGTH"),
    _limit("max_total_tokens", "Prompt + new tokens limit; env MAX_TOTAL_TOKENS.", "MAX_TOTAL_TOKENS",
           ge=2),
    _limit("max_batch_tokens", "Tokens per decode step; env MAX_BATCH_TOTAL_TOKENS.",
           "MAX_BATCH_TOTAL_TOKENS", label="b"),
    Setting("schedule_policy", str, _ENGINE["schedule_policy"],
            "Which waiting request gets a free sequence first: fewest-left (fewest prompt tokens left to "
            "compute: a conversation's next turn before cold prompts), arrival (earliest), cached-first "
            "(most prompt tokens cached: conversations under way before new ones).",
            choices=SCHEDULE_POLICIES, endpoint=True, engine="schedule_policy", label="sp",
            metavar="POLICY"),
    Setting("prefix_cache_seqs", int, _ENGINE["prefix_cache_seqs"],
            "Idle cached prefixes (finished requests' KV) kept in the context, each in a KV stream of "
            "--max-total-tokens cells beside the running sequences'; 0: none.",
            ge=0, endpoint=True, engine="prefix_cache_seqs", metavar="N"),
    Setting("prompt_cache_mb", int, _ENGINE["prompt_cache_mb"],
            "MiB of host memory keeping the KV state of sequences that left the context, restored for "
            "prompts that extend them; -1: a quarter of the memory available at start (at most 8192), "
            "0: off.", ge=-1, endpoint=True, engine="prompt_cache_mb", metavar="MB"),
    Setting("memory_mb", int, _ENGINE["memory_mb"],
            "MiB this server is meant to fit in (an endpoint copy gets its resources' memory_mb): the "
            "weights, the running sequences' KV cache and the process must fit (else the load is refused "
            "naming each part), idle cached sequences are as many of --prefix-cache-seqs as fit beside "
            "them, and --prompt-cache-mb -1 takes at most what is left. 0: no bound.",
            engine="memory_mb", metavar="MB"),
    Setting("flash_attn", bool, True, "llama.cpp flash attention.", engine="flash_attn"),
    Setting("cache_type_k", str, _ENGINE["cache_type_k"],
            "KV cache type of K (llama.cpp's names): q8_0 takes 53% of f16's memory, q4_0 28%.",
            choices=CACHE_TYPES, endpoint=True, engine="cache_type_k", label="ctk", metavar="TYPE"),
    Setting("cache_type_v", str, _ENGINE["cache_type_v"],
            "KV cache type of V; a quantized V needs --flash-attn.", choices=CACHE_TYPES, endpoint=True,
            engine="cache_type_v", label="ctv", metavar="TYPE"),
    Setting("swa_full", bool, _ENGINE["swa_full"],
            "Sliding-window layers (Gemma 3, gpt-oss, Mistral-SWA) keep every position, so a cached "
            "sequence serves any prefix of it (a shared system prompt); --no-swa-full keeps only their "
            "window (Gemma 3 270M, 16 x 4,096 tokens: 432 instead of 1,152 MiB of f16 KV): a cached "
            "conversation still serves its own next turn, not a shorter shared prefix. Speculative "
            "decoding needs it on.", endpoint=True, engine="swa_full"),
    Setting("speculative", str, _ENGINE["speculative"],
            "Speculative decoding of greedy requests: 'ngram' (prompt lookup), 'draft' (a draft model: "
            "--draft-model, which sets it) or '' (off).",
            choices=("ngram", "draft"), endpoint=True, engine="speculative", metavar="ngram|draft"),
    Setting("draft_tokens", int, _ENGINE["draft_tokens"], "Speculative tokens verified per step.", ge=1,
            endpoint=True, engine="draft_tokens", metavar="N"),
    Setting("adaptive_draft", bool, _ENGINE["adaptive_draft"],
            "With --speculative ngram: each sequence's draft length follows its recent acceptance "
            "(none while guesses keep failing); off: always --draft-tokens.", endpoint=True,
            engine="adaptive_draft"),
    Setting("draft_model", str, "",
            "Draft GGUF sharing the model's vocabulary (implies --speculative draft).", endpoint=True,
            metavar="SMALL.gguf"),
    Setting("ngram_size", int, _ENGINE["ngram_size"], "Longest n-gram looked up for drafts.", ge=2,
            endpoint=True, engine="ngram_size", metavar="N"),
    Setting("lora", str, None,
            "LoRA adapter NAME=PATH[:SCALE] (repeatable; PATH a model reference: a file, s3://...) loaded "
            "beside the model; a request's `model` naming it, TGI's adapter_id or a `lora` list selects "
            "it.", repeatable=True, metavar="NAME=PATH[:SCALE]"),
    Setting("max_loras", int, _ENGINE["max_loras"],
            "Most LoRA adapters kept loaded: idle ones beyond it are freed, least recently used first, and "
            "loaded again (in milliseconds) when a request selects one; adapters running requests use are "
            "never freed. 0: all stay loaded.", ge=0, endpoint=True, engine="max_loras", metavar="N"),
    Setting("chat_template", Path, None, "Jinja chat template file overriding the GGUF's.", endpoint=True,
            server="chat_template", metavar="FILE"),
    Setting("served_model_name", str, "", "Model name in API responses.", server="served_model_name",
            metavar="NAME"),
    Setting("tool_parser", str, "auto",
            "Format of tool calls in chat output: auto (from the template), hermes, llama3, mistral, "
            "granite, harmony (gpt-oss).",
            choices=("auto", "hermes", "llama3", "mistral", "granite", "harmony"), endpoint=True,
            server="tool_parser", metavar="auto|hermes|llama3|mistral|granite|harmony"),
    Setting("reasoning_format", str, "auto",
            "How a thinking model's thought is told from its answer: auto (the chat template's tags), none "
            "(all is content), deepseek (<think>), magistral ([THINK]), seed (<seed:think>), harmony "
            "(gpt-oss's analysis and final channels).",
            choices=("auto", "none", "deepseek", "magistral", "seed", "harmony"), endpoint=True,
            server="reasoning_format", metavar="auto|none|deepseek|magistral|seed|harmony"),
    Setting("reasoning_budget", int, -1,
            "Most thought tokens of a thinking model's answer, then its end tag is forced (-1: no limit; 0: "
            "thinking off). A request's reasoning_budget overrides it.", ge=-1, endpoint=True,
            server="reasoning_budget", metavar="N"),
    Setting("chat_template_kwargs", str, "",
            "JSON object of variables every chat request passes to the chat template (e.g. "
            '{"enable_thinking": false}); a request\'s chat_template_kwargs override them.', endpoint=True,
            server="chat_template_kwargs", metavar="JSON"),
    Setting("api_key", str, None,
            "Require this API key (repeatable; also $LLMHOST_API_KEYS or $LLMHOST_API_KEY, "
            "comma-separated); /ping and /health stay open.", repeatable=True, process=True, metavar="KEY"),
    Setting("api_key_file", Path, None, "File of API keys, one per line.", process=True, metavar="FILE"),
    Setting("queue_timeout_s", float, 0.0,
            "Seconds a request may wait for a sequence slot; then 503. 0: no limit.", ge=0, endpoint=True,
            engine="queue_timeout_s", metavar="S"),
    Setting("request_timeout_s", float, 0.0,
            "Seconds a request may take in all; then 503 / an error event. 0: no limit.", ge=0,
            endpoint=True, engine="request_timeout_s", metavar="S"),
    Setting("shutdown_grace_s", float, 25.0,
            "On SIGTERM, seconds requests in flight get to finish before exit.", process=True, metavar="S"),
    Setting("embeddings", bool, False,
            "Load the model for OpenAI /v1/embeddings only (no text generation); inputs up to "
            "--max-input-tokens (default 512 here).", switch=True),
    Setting("pooling", str, "auto",
            "With --embeddings: auto (the model's own, mean if it has none), mean, cls, last.",
            choices=("auto", "mean", "cls", "last"), endpoint=True, metavar="auto|mean|cls|last"),
    Setting("log_level", str, "info", "debug, info, warning, error.", choices=LOG_LEVELS, process=True,
            metavar="LEVEL"),
    Setting("reports", str, "", "A folder of `llmhost bench` / `llmhost tune` results, listed in the console "
            "(GET /console).", server="reports", metavar="DIR"),
    Setting("console_period", float, 5.0, "Seconds between the console's points (15 minutes are kept).",
            server="console_period_s", metavar="S"),
)  # fmt: skip

SERVE_SPEC = SettingsSpec(SERVE_SETTINGS)

# the variables that size the engine when an option leaves a limit unset (SageMaker's and TGI's names)
LIMIT_ENV = tuple(s.env for s in SERVE_SPEC if s.name.startswith("max_") and s.env)


def default_value(name: str, env: Mapping[str, str] | None = None) -> Any:
    """What `llmhost serve` runs with when `name` is not given: its variable where set, else its default."""
    s = SERVE_SPEC[name]
    return s.resolve(s.default, os.environ if env is None else env)

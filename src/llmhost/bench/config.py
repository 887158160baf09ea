"""What measuring one target means: its URL and API, the load levels, the workload, the stops and the
prices. Defaults are those of ``llmhost bench run``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from llmhost.bench.figures.saturation import SaturationRule
from llmhost.bench.figures.slo import HELP as GOODPUT_HELP
from llmhost.bench.figures.slo import GoodputSLO, parse_goodput
from llmhost.bench.load.arrivals import Arrivals
from llmhost.bench.load.conversations import ConversationSettings, parse_think_time
from llmhost.bench.load.http import Endpoint
from llmhost.bench.load.images import DEFAULT_SIZE, ImageSettings, parse_image_size
from llmhost.bench.load.loadgen import LoadSettings
from llmhost.bench.load.retrieval import KINDS as RETRIEVAL
from llmhost.bench.load.retrieval import RetrievalSettings
from llmhost.bench.load.slostop import SloStop, stop_rule
from llmhost.bench.load.targets import APIS, IMAGE_APIS, Target

AS_FIELD: Any = object()  # a RunOption shows the field's own default


@dataclass(frozen=True)
class RunOption:
    """A BenchConfig field as an ``llmhost bench run`` option."""

    help: str
    flag: str = ""  # the option's name (--flag); "": the field's
    kind: Any = None  # its type on the command line; None: the field's
    shown: Any = AS_FIELD  # its default on the command line
    parse: Callable[[Any], Any] | None = None  # command line → field (a ValueError names the option)


def opt(help: str, **kw: Any) -> dict[str, RunOption]:
    return {"run_option": RunOption(help, **kw)}


def parse_numbers(flag: str) -> Callable[[str | None], list[float] | None]:
    def parse(text: str | None) -> list[float] | None:
        if text is None or not text.strip():
            return None
        try:
            return [float(x) for x in text.replace(" ", "").split(",") if x]
        except ValueError as exc:
            raise ValueError(f"{flag}: a comma-separated list of numbers, got {text!r}") from exc

    return parse


def _levels(text: str) -> list[int]:
    return [int(c) for c in parse_numbers("--concurrency")(text) or [1.0]]


def _headers(items: list[str] | None) -> dict[str, str]:
    headers: dict[str, str] = {}
    for h in items or []:
        k, sep, v = h.partition(":")
        if not sep:
            raise ValueError(f"header {h!r}: expected 'Name: value'")
        headers[k.strip()] = v.strip()
    return headers


WORKLOADS = ("prompts", "conversations", *RETRIEVAL)
CONVERSATIONS = ConversationSettings()  # the conversation options' defaults
RETRIEVAL_DEFAULTS = RetrievalSettings("embed")  # the retrieval options' defaults


def _goodput(items: list[str] | None) -> dict[str, float] | None:
    if not items:
        return None
    try:
        return parse_goodput(items)
    except ValueError as exc:
        raise ValueError(f"--goodput: {exc}") from exc


@dataclass
class BenchConfig:
    """Everything about measuring one target. Defaults are those of ``llmhost bench run``, whose options
    are these fields' (``run_options``)."""

    url: str = field(metadata=opt("Server base URL, e.g. http://127.0.0.1:8080."))
    api: str = field(default="openai", metadata=opt(f"API to drive: {', '.join(APIS)}."))
    # closed-loop levels
    concurrency: list[int] = field(
        default_factory=lambda: [1],
        metadata=opt("Closed-loop levels: concurrent users, e.g. 1,4,8.", kind=str, shown="1", parse=_levels),
    )
    # open-loop levels (req/s); replaces concurrency
    rates: list[float] | None = field(
        default=None,
        metadata=opt(
            "Open-loop levels instead: request rates (req/s), e.g. 1,2,4.",
            flag="rate",
            kind=str | None,
            parse=parse_numbers("--rate"),
        ),
    )
    # open loop: gamma shape of inter-arrival gaps (1.0: Poisson), as vLLM
    burstiness: float = field(
        default=1.0,
        metadata=opt(
            "Open loop: gamma shape of the gaps between arrivals, as vLLM's --burstiness (1: Poisson; below "
            "1: burstier; above 1: more even). Mean rate unchanged."
        ),
    )
    # per level; with neither this nor requests: 30 s
    duration_s: float | None = field(
        default=None, metadata=opt("Seconds per level (default 30 without --requests).", flag="duration")
    )
    requests: int | None = field(default=None, metadata=opt("Requests per level."))  # per level
    prompt_tokens: int = field(default=128, metadata=opt("Synthetic prompt length in tokens."))
    max_new_tokens: int = field(default=64, metadata=opt("Tokens to generate per request (EOS ignored)."))
    price_per_hour: float | None = field(default=None, metadata=opt("Instance price, USD per hour."))
    discount: float = field(default=0.0, metadata=opt("Discount rate for the blended price, 0..1."))
    # requests per level, excluded
    warmup: int = field(default=0, metadata=opt("Warm-up requests per level, excluded."))
    timeout_s: float = field(default=120.0, metadata=opt("Per-request timeout, seconds.", flag="timeout"))
    max_error_rate: float | None = field(
        default=0.5,
        metadata=opt(
            "Stop when the error fraction passes this (1: never).",
            kind=float,
            parse=lambda v: None if v >= 1 else v,
        ),
    )
    prompts_file: str | None = field(
        default=None,
        metadata=opt(
            'JSONL of prompts ({"prompt": ...} per line).',
            kind=Path | None,
            parse=lambda p: str(p) if p else None,
        ),
    )
    builtin_prompts: bool = field(default=False, metadata=opt("Use the built-in realistic prompts."))
    workload: str = field(
        default="prompts",
        metadata=opt(
            "prompts: independent requests; conversations: each user (the --concurrency levels count users) "
            "holds a conversation of --turns turns with think time, the whole conversation resent each turn "
            "(openai and chat APIs); embed: POST /v1/embeddings of --documents inputs; rerank: POST "
            "/v1/rerank of a query and --documents documents (embed and rerank ignore --api)."
        ),
    )
    documents: int = field(
        default=RETRIEVAL_DEFAULTS.documents,
        metadata=opt("embed / rerank: inputs (embed) or documents (rerank) per request."),
    )
    document_words: int = field(
        default=RETRIEVAL_DEFAULTS.words,
        metadata=opt("embed / rerank: words of each input or document (cut from the built-in prompts)."),
    )
    conversations_file: str | None = field(
        default=None,
        metadata=opt(
            'Conversations: JSONL of conversations ({"system"?, "turns": [...], "think_s"?, "max_tokens"?} '
            "per line) instead of generated ones.",
            kind=Path | None,
            parse=lambda p: str(p) if p else None,
        ),
    )
    turns: int = field(default=CONVERSATIONS.turns, metadata=opt("Conversations: turns per user."))
    system_prompts: int = field(
        default=CONVERSATIONS.system_prompts,
        metadata=opt(
            "Conversations: distinct system prompts, shared by groups of users (user u has u mod N)."
        ),
    )
    system_prompt_tokens: int = field(
        default=CONVERSATIONS.system_prompt_tokens,
        metadata=opt("Conversations: approximate tokens of each system prompt (0: none)."),
    )
    user_tokens: int = field(
        default=CONVERSATIONS.user_tokens,
        metadata=opt("Conversations: approximate tokens of each user message."),
    )
    think_time_s: tuple[float, float] = field(
        default=CONVERSATIONS.think_time_s,
        metadata=opt(
            "Conversations: think time before each turn, uniform in MIN,MAX seconds.",
            flag="think_time",
            kind=str,
            shown=",".join(f"{v:g}" for v in CONVERSATIONS.think_time_s),
            parse=parse_think_time,
        ),
    )
    images: int = field(
        default=0,
        metadata=opt(
            "Prompts workload: images each request carries before its text (generated PNGs of --image-size, "
            f"distinct per prompt unless --repeat-images), for a server with a projector; APIs: "
            f"{', '.join(IMAGE_APIS)}."
        ),
    )
    image_size: tuple[int, int] = field(
        default=DEFAULT_SIZE,
        metadata=opt(
            "--images: WIDTHxHEIGHT of each image in pixels.",
            kind=str,
            shown="x".join(map(str, DEFAULT_SIZE)),
            parse=parse_image_size,
        ),
    )
    repeat_images: bool = field(
        default=False,
        metadata=opt(
            "--images: every request carries the same images (after the first, the server's media and "
            "prefix caches hold them) instead of distinct ones."
        ),
    )
    num_prompts: int = field(
        default=32, metadata=opt("Distinct synthetic prompts (embed / rerank: distinct requests).")
    )
    # SageMaker inference component header
    component: str | None = field(
        default=None,
        metadata=opt(
            "SageMaker inference component (header); several, comma-separated (adapter components of an "
            "endpoint): requests spread over them in turn, with figures per component."
        ),
    )
    # OpenAI "model"; default: the first of GET /v1/models, else "default"
    model: str | None = field(
        default=None,
        metadata=opt(
            "OpenAI 'model' field (default: first of /v1/models); several, comma-separated (a server's LoRA "
            "adapters, an endpoint's components): requests spread over them in turn, with figures per model."
        ),
    )
    name: str = field(default="run", metadata=opt("Name of this configuration in the results."))
    headers: dict[str, str] = field(
        default_factory=dict,
        metadata=opt(
            "Extra request header 'Name: value' (repeatable).",
            flag="header",
            kind=list[str] | None,
            shown=None,
            parse=_headers,
        ),
    )
    # use the target's /tokenize for exact lengths when it has one
    tokenize: bool = field(default=True, metadata=opt("Use the target's /tokenize for exact prompt lengths."))
    ignore_eos: bool = field(default=True, metadata=opt("Ask the server to ignore EOS (OpenAI APIs)."))
    # None: the server's default
    temperature: float | None = field(
        default=None, metadata=opt("Sampling temperature sent with each request (0: greedy).")
    )
    slo_ms_per_token: float | None = field(default=None, metadata=opt("SLO: p50 ms per token."))
    slo_ttft_ms: float | None = field(default=None, metadata=opt("SLO: p50 TTFT in ms."))
    # per-request SLO in ms: ttft, tpot, itl, e2e
    goodput: dict[str, float] | None = field(
        default=None, metadata=opt(GOODPUT_HELP, kind=list[str] | None, parse=_goodput)
    )
    # percentile: stop a level that can no longer meet goodput's ttft/tpot
    slo_stop: float | None = field(
        default=None,
        metadata=opt(
            "Percentile P: stop a level (and raise the load no further) as soon as its P-th percentile TTFT "
            "or TPOT can no longer meet the --goodput ttft/tpot bounds, or fewer than P% of its requests can "
            "succeed. Needs --requests."
        ),
    )
    # stop raising load below this throughput gain; None: never (`bench run --no-stop-at-saturation`)
    saturation_gain: float | None = field(
        default=0.05, metadata=opt("Saturation threshold, a fraction.", kind=float)
    )
    # scrape the target's /metrics around and during each level
    server_metrics: bool = field(
        default=True, metadata=opt("Scrape the target's Prometheus /metrics around and during each level.")
    )
    # scrapes during a level (0: before and after only)
    metrics_interval_s: float = field(
        default=1.0,
        metadata=opt(
            "Seconds between /metrics scrapes during a level (0: before/after only).", flag="metrics_interval"
        ),
    )
    seed: int = field(default=0, metadata=opt("Seed of the open-loop arrivals and generated conversations."))
    max_in_flight: int = 1024
    at_concurrency: float | None = None  # recommendations: load for "most cost-effective"

    @classmethod
    def run_options(cls) -> list[tuple[str, RunOption, Any]]:
        """Each field's option: the field's name, its RunOption, and the default the option shows."""
        out = []
        for f in fields(cls):
            option = f.metadata.get("run_option")
            if option is None:
                continue
            default = f.default_factory() if f.default_factory is not MISSING else f.default
            out.append((f.name, option, default if option.shown is AS_FIELD else option.shown))
        return out

    @classmethod
    def from_run_options(cls, given: dict[str, Any]) -> BenchConfig:
        """The configuration `llmhost bench run`'s options give, by option name; ValueError names the
        option that is wrong."""
        values = {}
        for name, option, _ in cls.run_options():
            raw = given[option.flag or name]
            values[name] = option.parse(raw) if option.parse is not None else raw
        return cls(**values)

    @property
    def holds_conversations(self) -> bool:
        return self.workload == "conversations"

    @property
    def retrieves(self) -> bool:
        """An embed or rerank workload: one JSON answer per request, nothing generated."""
        return self.workload in RETRIEVAL

    def image_settings(self) -> ImageSettings:
        return ImageSettings(
            self.images, (self.image_size[0], self.image_size[1]), self.repeat_images, self.seed
        )

    def retrieval_settings(self) -> RetrievalSettings:
        return RetrievalSettings(self.workload, self.documents, self.document_words, self.num_prompts)

    def conversation_settings(self) -> ConversationSettings:
        return ConversationSettings(
            turns=self.turns,
            system_prompts=self.system_prompts,
            system_prompt_tokens=self.system_prompt_tokens,
            user_tokens=self.user_tokens,
            think_time_s=(self.think_time_s[0], self.think_time_s[1]),
            file=self.conversations_file,
            seed=self.seed,
        )

    def load_settings(self, requests: int | None = None) -> LoadSettings:
        """A level's settings; ``requests``: its request count where the workload fixes it (a level of
        conversations sends every turn of its users', unless --duration ends it first)."""
        requests = self.requests if requests is None else requests
        duration = self.duration_s
        if duration is None and requests is None:
            duration = 30.0
        return LoadSettings(
            duration_s=duration,
            requests=requests,
            warmup=self.warmup,
            timeout_s=self.timeout_s,
            max_error_rate=self.max_error_rate,
            max_in_flight=self.max_in_flight,
            seed=self.seed,
            burstiness=self.burstiness,
            slo_stop=self.slo_stop_rule(),
        )

    def slo_stop_rule(self) -> SloStop | None:
        """The SLO a level is stopped on (``slo_stop``: its percentile over goodput's ttft/tpot)."""
        return None if self.slo_stop is None else stop_rule(self.slo(), self.slo_stop, self.requests)

    def slo(self) -> GoodputSLO | None:
        return GoodputSLO.from_mapping(self.goodput) if self.goodput else None

    def saturation(self) -> SaturationRule | None:
        return SaturationRule(self.saturation_gain) if self.saturation_gain is not None else None

    def levels(self) -> list[tuple[str, int | None, float | None]]:
        if self.rates:
            return [(f"rate={r:g}", None, float(r)) for r in self.rates]
        unit = "users" if self.holds_conversations else "c"
        return [(f"{unit}={c}", int(c), None) for c in self.concurrency]

    def _validate_conversations(self) -> None:
        if self.workload not in WORKLOADS:
            raise ValueError(f"--workload: one of {', '.join(WORKLOADS)}, got {self.workload!r}")
        if not self.holds_conversations:
            return
        self.conversation_settings()  # checks its values
        if self.api not in ("openai", "chat"):
            raise ValueError("--workload conversations drives the openai and chat APIs")
        for flag, given in (
            ("--rate", self.rates),
            ("--requests", self.requests),
            ("--warmup", self.warmup),
            ("--slo-stop", self.slo_stop),
            ("--prompts-file", self.prompts_file),
            ("--builtin-prompts", self.builtin_prompts),
        ):
            if given:
                raise ValueError(
                    f"{flag} applies to the prompts workload: a level of conversations is "
                    "its users (--concurrency), each holding --turns turns"
                )

    def _validate_retrieval(self) -> None:
        if not self.retrieves:
            return
        self.retrieval_settings()  # checks its values
        for flag, given in (
            ("--prompts-file", self.prompts_file),
            ("--builtin-prompts", self.builtin_prompts),
            ("--slo-stop", self.slo_stop),
            ("--component", self.component),
        ):
            if given:
                raise ValueError(
                    f"{flag} does not apply to --workload {self.workload}: its requests are "
                    "--documents texts of --document-words words"
                )

    def _validate_mix(self) -> None:
        header = self.api == "sagemaker"  # /invocations names its component in a header, no model
        for flag, given, used in (
            ("--model", self.model, self.api not in ("sagemaker", "tgi")),
            ("--component", self.component, header),
        ):
            names = (given or "").split(",")
            if len(names) > 1 and not used:
                raise ValueError(f"{flag} with several names does not apply to --api {self.api}")
            if len(names) > 1 and not all(n.strip() for n in names):
                raise ValueError(f"{flag}: comma-separated names, none empty, got {given!r}")
            if len(names) > 1 and self.workload != "prompts":
                raise ValueError(f"{flag} with several names applies to the prompts workload")

    def _validate_images(self) -> None:
        self.image_settings()  # checks its values
        if not self.images:
            return
        if self.workload != "prompts":
            raise ValueError(f"--images applies to the prompts workload, not --workload {self.workload}")
        if self.api not in IMAGE_APIS:
            raise ValueError(
                f"--images: the {self.api} API takes no images (OpenAI's /v1/completions has no image "
                f"parts); use --api {' or '.join(IMAGE_APIS)}"
            )

    def validate(self) -> None:
        Target(self.api)  # checks the api name
        self._validate_mix()
        self._validate_images()
        Endpoint.parse(self.url)
        self._validate_conversations()
        self._validate_retrieval()
        self.load_settings(self.turns if self.holds_conversations else None)
        if not self.rates and (not self.concurrency or min(self.concurrency) < 1):
            raise ValueError("concurrency levels must be at least 1")
        for rate in self.rates or []:
            Arrivals(rate, self.burstiness)  # checks the rate and the burstiness
        self.slo()
        self.saturation()
        if self.metrics_interval_s < 0:
            raise ValueError("the metrics interval must be >= 0")
        if not 0.0 <= self.discount < 1.0:
            raise ValueError("discount is a rate in [0, 1)")
        if self.max_new_tokens < 1:
            raise ValueError("max_new_tokens must be at least 1")
        if self.temperature is not None and self.temperature < 0:
            raise ValueError("temperature must be >= 0")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

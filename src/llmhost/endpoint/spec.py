"""The endpoint file: an endpoint, its instance and its inference components.

Every model forbids unknown keys, so a typo is an error naming the key's path, not a silent default.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ModelWrapValidatorHandler, ValidationError, model_validator

from llmhost.endpoint.adapters.spec import (
    AdapterEntry,
    AdapterRef,
    check_adapter_component,
    check_names,
    fold,
)
from llmhost.endpoint.spec_errors import format_errors
from llmhost.engine.config import CacheType, SchedulePolicy
from llmhost.errors import BadRequestError
from llmhost.jobs.settings import JobsSettings, default_jobs_dir
from llmhost.settings.serve import (
    SERVE_SPEC,
    Pooling,
    ReasoningFormat,
    SettingsSpec,
    Speculative,
    ToolFormat,
    ToolParser,
    type_of,
)
from llmhost.shared import yamltext
from llmhost.web.capture.config import DEFAULT_VARIANT, CaptureConfig, parse_modes

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"


class SpecError(BadRequestError, ValueError):
    """The endpoint file is unreadable or invalid; the message names the key path."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class InstanceSpec(_Strict):
    type: str = "local"  # the host's instance type, shown in reports (e.g. c7g.8xlarge)
    price_per_hour: float = Field(default=0.0, ge=0)  # for cost reports


class ResourcesSpec(_Strict):
    # CPUs dedicated to each copy: a fraction below 1 shares one core with other fractional copies,
    # 1 or more must be whole and gets that many CPUs to itself
    num_cpus: float = Field(default=1.0, gt=0)
    # memory reserved per copy against the host's available memory, and its hard limit unless
    # max_memory_mb is set; the copy's default prompt cache takes at most what its weights, KV cache and
    # process leave of it (`llmhost serve --memory-mb`)
    memory_mb: int = Field(default=1024, ge=1)
    # hard limit per copy (a cgroup's memory.max / memory.limit_in_bytes, or a watch of its RSS less its
    # mapped files' pages); None: the limit is memory_mb itself, so that a packed host never overcommits
    # what it reserved
    max_memory_mb: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _check(self) -> ResourcesSpec:
        if self.num_cpus > 1 and not float(self.num_cpus).is_integer():
            raise ValueError(
                f"num_cpus above 1 must be a whole number, got {self.num_cpus} "
                "(fractions below 1 share a core)"
            )
        if self.max_memory_mb is not None and self.max_memory_mb < self.memory_mb:
            raise ValueError(f"max_memory_mb ({self.max_memory_mb}) is below memory_mb ({self.memory_mb})")
        return self

    @property
    def threads(self) -> int:
        return max(1, math.floor(self.num_cpus))

    @property
    def limit_mb(self) -> int:
        """The hard limit a copy runs under: max_memory_mb when given, else its reservation."""
        return self.max_memory_mb if self.max_memory_mb is not None else self.memory_mb

    @property
    def limit_setting(self) -> str:
        return "max_memory_mb" if self.max_memory_mb is not None else "memory_mb"


def _key(name: str) -> Any:
    """An `engine:` key: unset (None) unless the file sets it, bounded as its setting declares."""
    s = SERVE_SPEC[name]
    return Field(default=None, ge=s.ge, description=s.help)


class EngineSpec(_Strict):
    """An endpoint file's `engine:` section: a component's copies' `llmhost serve` settings, each one
    the settings spec marks `endpoint=True` (checked at import: `_check_keys`), typed as its field and
    bounded as it declares; unset ones are left to serve's defaults and variables. The rules between
    them are the settings' own, checked by the component (`ComponentSpec`) as `llmhost serve` checks
    them."""

    max_concurrent: int | None = _key("max_concurrent")
    max_queue: int | None = _key("max_queue")
    max_input_tokens: int | None = _key("max_input_tokens")
    max_total_tokens: int | None = _key("max_total_tokens")
    max_batch_tokens: int | None = _key("max_batch_tokens")
    ubatch_size: int | None = _key("ubatch_size")
    schedule_policy: SchedulePolicy | None = _key("schedule_policy")
    interactive_slots: int | None = _key("interactive_slots")
    prefix_cache_seqs: int | None = _key("prefix_cache_seqs")
    prefix_caching: bool | None = _key("prefix_caching")
    prompt_cache_mb: int | None = _key("prompt_cache_mb")
    cache_type_k: CacheType | None = _key("cache_type_k")
    cache_type_v: CacheType | None = _key("cache_type_v")
    swa_full: bool | None = _key("swa_full")
    swa_checkpoints: int | None = _key("swa_checkpoints")
    speculative: Speculative | None = _key("speculative")
    draft_tokens: int | None = _key("draft_tokens")
    adaptive_draft: bool | None = _key("adaptive_draft")
    draft_model: str | None = _key("draft_model")
    mmproj: str | None = _key("mmproj")
    no_mmproj: bool | None = _key("no_mmproj")
    ngram_size: int | None = _key("ngram_size")
    queue_timeout_s: float | None = _key("queue_timeout_s")
    request_timeout_s: float | None = _key("request_timeout_s")
    pooling: Pooling | None = _key("pooling")
    chat_template: str | None = _key("chat_template")  # the template file's path
    tool_parser: ToolParser | None = _key("tool_parser")
    tool_format: ToolFormat | None = _key("tool_format")
    reasoning_format: ReasoningFormat | None = _key("reasoning_format")
    reasoning_budget: int | None = _key("reasoning_budget")
    reasoning_budget_max: int | None = _key("reasoning_budget_max")
    chat_template_kwargs: str | None = _key("chat_template_kwargs")
    max_media_bytes: int | None = _key("max_media_bytes")
    max_image_pixels: int | None = _key("max_image_pixels")
    max_audio_seconds: float | None = _key("max_audio_seconds")
    allowed_media_domains: str | None = _key("allowed_media_domains")
    media_path: str | None = _key("media_path")
    capture_dir: str | None = _key("capture_dir")
    capture_percent: int | None = _key("capture_percent")
    capture_mode: str | None = _key("capture_mode")
    capture_variant: str | None = _key("capture_variant")
    capture_interval_s: float | None = _key("capture_interval_s")

    def serve_options(self) -> dict[str, Any]:
        """The `llmhost serve` options the file sets, by name (every field is one; unset ones are
        left to serve's defaults and variables)."""
        return {name: value for name, value in self.model_dump().items() if value is not None}

    def serve_args(self) -> list[str]:
        return SERVE_SPEC.argv(self.serve_options())

    def capture(self, endpoint: str) -> CaptureConfig | None:
        """The copies' data capture, as their `llmhost serve` builds it, filed under `endpoint` (the name
        they serve); None: no capture keys (a ValueError says what is wrong with those given)."""
        given = {k: v for k, v in self.serve_options().items() if k.startswith("capture_")}
        if not given:
            return None
        config = CaptureConfig(
            destination=given.get("capture_dir", "") or "unset",
            endpoint=endpoint,
            percent=given.get("capture_percent", 100),
            modes=parse_modes(given.get("capture_mode", "input,output")),
            variant=given.get("capture_variant", DEFAULT_VARIANT),
            interval_s=given.get("capture_interval_s", 30.0),
        )
        if not given.get("capture_dir"):
            raise ValueError(f"{', '.join(sorted(given))} given without capture_dir")
        return config


def _check_keys(model: type[BaseModel], settings: SettingsSpec) -> None:
    """The `engine:` keys are the settings an endpoint file may set, each of its setting's type."""
    want = {s.name: (s.type if s.type is not Path else str, s.choices) for s in settings.endpoint_settings()}
    have = {}
    for name, f in model.model_fields.items():
        kind, choices, _ = type_of(f.annotation)
        have[name] = (kind, choices)
    if have != want:
        wrong = sorted(k for k in set(have) | set(want) if have.get(k) != want.get(k))
        raise TypeError(f"EngineSpec's keys differ from the endpoint settings of settings/serve.py: {wrong}")


_check_keys(EngineSpec, SERVE_SPEC)


class AutoscalingSpec(_Strict):
    min_copies: int = Field(default=1, ge=0)  # 0: scale to zero; the first request waits for a copy
    max_copies: int = Field(default=1, ge=1)  # the most copies target tracking starts
    # target tracking: concurrent requests (running + waiting at the router) per copy
    target_concurrent_per_copy: float = Field(default=4.0, gt=0)
    # scale in only after the load stayed low this long and as long since the last scaling
    scale_in_cooldown_s: float = Field(default=60.0, ge=0)
    # scale out again at most this often
    scale_out_cooldown_s: float = Field(default=0.0, ge=0)

    @model_validator(mode="after")
    def _check(self) -> AutoscalingSpec:
        if self.min_copies > self.max_copies:
            raise ValueError(f"min_copies ({self.min_copies}) exceeds max_copies ({self.max_copies})")
        return self


class OnDemandSpec(_Strict):
    """A component loaded when a request names it, unloaded when idle or when another needs the room:
    at most one copy, reserved only while loaded (from the room declared components leave)."""

    # seconds an idle model stays loaded after its last request: -1 never, 0 right after the request
    keep_alive: float = Field(default=300.0, ge=-1)
    # never unloaded when idle nor to make room (`llmhost endpoint unload` still unloads it)
    pinned: bool = False

    @model_validator(mode="after")
    def _check(self) -> OnDemandSpec:
        if -1 < self.keep_alive < 0:
            raise ValueError(f"keep_alive must be -1 (never unload) or >= 0 seconds, got {self.keep_alive}")
        return self


class RoutingSpec(_Strict):
    """How the router picks one of a component's copies (`llmhost.endpoint.affinity`)."""

    # least_outstanding: the copy with the fewest requests in flight; prefix: the copy most likely to
    # hold the prompt's prefix (a conversation's earlier turns, a shared system prompt), within a load bound
    policy: Literal["least_outstanding", "prefix"] = "least_outstanding"
    # prefix: the prompt is hashed in blocks of this many characters (a prompt shorter than one block is
    # routed by load alone)
    block_chars: int = Field(default=256, ge=16)
    # prefix: a copy is skipped while its outstanding requests exceed (1 + load_factor) × the mean + 1
    load_factor: float = Field(default=0.25, ge=0)


MAX_WEIGHT = 1e6  # a variant's weight at most: the weights' sum stays a finite number


class VariantSpec(_Strict):
    """A production variant of a component (SageMaker's ProductionVariant): copies of their own, which get
    a share of the component's requests by weight, or, as a shadow, a copy of some of them whose answers
    are compared with the primary's and never returned. The keys it leaves out are the component's."""

    # what X-Amzn-SageMaker-Target-Variant names and X-Amzn-Invoked-Production-Variant answers
    name: str = Field(pattern=NAME_PATTERN)
    # its share of the component's requests: weight / the production variants' weights together
    weight: float = Field(default=1.0, ge=0, le=MAX_WEIGHT, allow_inf_nan=False)
    # a shadow variant: this percent of the component's requests is copied to it in the background (its
    # answers are dropped, their latency and agreement with the primary's reported); null: production
    shadow: float | None = Field(default=None, ge=0, le=100, allow_inf_nan=False)
    model: str | None = None  # null: the component's
    copies: int | None = Field(default=None, ge=0)  # null: the component's
    resources: ResourcesSpec | None = None  # null: the component's (a section given replaces it whole)
    engine: EngineSpec | None = None  # null: the component's (a section given replaces it whole)
    autoscaling: AutoscalingSpec | None = None  # null: the component's

    @model_validator(mode="after")
    def _check(self) -> VariantSpec:
        if self.shadow is not None and "weight" in self.model_fields_set:
            raise ValueError(
                f"variant {self.name!r} is a shadow: its `shadow` percent is its share, `weight` does "
                "not apply"
            )
        return self

    @property
    def overrides(self) -> dict[str, Any]:
        """The component keys it gives, as the file gave them."""
        own = self.model_fields_set - {"name", "weight", "shadow"}
        return self.model_dump(include=own, exclude_unset=True)


# the keys of a component with variants that cannot apply to its variants' copies
VARIANT_EXCLUDES = ("on_demand", "adapters", "base", "adapter")
# between a component's name and its variant's in the variant's copies (`chat:b-0`): never in a name
VARIANT_SEP = ":"


def check_variants(variants: list[VariantSpec]) -> None:
    """Names unique; at least one production variant, and not every one weighted 0."""
    seen: set[str] = set()
    for v in variants:
        if v.name in seen:
            raise ValueError(f"variants: name {v.name!r} appears twice")
        seen.add(v.name)
    production = [v for v in variants if v.shadow is None]
    if not production:
        raise ValueError("variants: at least one must be a production variant (without `shadow`)")
    if not any(v.weight > 0 for v in production):
        raise ValueError("variants: the production variants' weights are all 0; at least one must be > 0")


class ComponentSpec(_Strict):
    # what requests name: the OpenAI `model`, X-Amzn-SageMaker-Inference-Component
    name: str = Field(pattern=NAME_PATTERN)
    # default | ./model.gguf | a directory holding one | s3://bucket/prefix/ | s3://bucket/model.tar.gz |
    # hf://OWNER/REPO/FILE.gguf | hf://OWNER/REPO:QUANT
    # a relative path is read from the directory `endpoint up` runs in, not the file's
    model: str = "default"
    copies: int | None = Field(default=None, ge=0)  # None: autoscaling.min_copies, else 1
    resources: ResourcesSpec = ResourcesSpec()  # each copy's CPUs and memory
    engine: EngineSpec = EngineSpec()  # each copy's `llmhost serve` settings
    # copies serve OpenAI /v1/embeddings only (`llmhost serve --embeddings`), no text generation
    embeddings: bool = False
    adapters: list[AdapterEntry] = []  # LoRA adapters every copy loads; a request's `model` names one
    autoscaling: AutoscalingSpec | None = None  # None: a fixed number of copies
    routing: RoutingSpec = RoutingSpec()  # how the router picks a copy
    # seconds a starting copy has to answer /ping with 200 before it is restarted
    startup_health_check_timeout_s: float = Field(default=600.0, gt=0)
    # how long a request waits for a ready copy while the component has copies (one may be restarting);
    # with none (scaled to zero) it waits for the first to start, up to startup_health_check_timeout_s
    max_wait_s: float = Field(default=30.0, gt=0)
    # loaded on demand (see OnDemandSpec); None: the copies above, reserved from the start
    on_demand: OnDemandSpec | None = None
    # an adapter inference component: the component whose copies it lives on, and its LoRA adapter
    base: str | None = Field(default=None, pattern=NAME_PATTERN)
    adapter: AdapterRef | None = None
    # production and shadow variants: each its own copies, its keys over the component's; requests
    # for the component are split over the production ones by weight. []: the component's own copies
    variants: list[VariantSpec] = []

    @model_validator(mode="after")
    def _check(self) -> ComponentSpec:
        check_adapter_component(self.name, self.base, self.adapter, self.model_fields_set)
        if self.variants:
            self.variant_specs()  # each variant, whole, checked as a component is
        if self.on_demand is not None and (self.copies is not None or self.autoscaling is not None):
            raise ValueError("on_demand loads one copy when asked: copies and autoscaling do not apply")
        a = self.autoscaling
        if a is not None and self.copies is not None and not a.min_copies <= self.copies <= a.max_copies:
            raise ValueError(
                f"copies ({self.copies}) must lie between autoscaling.min_copies ({a.min_copies}) "
                f"and autoscaling.max_copies ({a.max_copies})"
            )
        if a is None and self.copies == 0:
            raise ValueError("copies: 0 needs autoscaling (min_copies: 0) to ever start a copy")
        if self.engine.mmproj and self.engine.no_mmproj:
            raise ValueError("engine.mmproj and engine.no_mmproj do not go together: give one")
        if self.engine.pooling not in (None, "auto") and not self.embeddings:
            raise ValueError("engine.pooling applies to embeddings: true only")
        try:  # the settings together, as its copies' `llmhost serve` checks them before loading
            given = {**self.serve_options(), "embeddings": self.embeddings}
            SERVE_SPEC.engine_config(given, os.environ)
        except ValueError as exc:
            raise ValueError(f"engine: {exc}") from exc
        _check_capture(self.name, self.engine)
        cache_mb = self.engine.prompt_cache_mb
        if cache_mb is not None and cache_mb >= self.resources.memory_mb:
            raise ValueError(
                f"engine.prompt_cache_mb ({cache_mb}) must be below resources.memory_mb "
                f"({self.resources.memory_mb}): a copy's cache alone would take the memory reserved for it"
            )
        return self

    def variant_specs(self) -> list[ComponentSpec]:
        """Each variant as a component of its own, named `COMPONENT:VARIANT`: the component's keys, the
        variant's over them; a ValueError names the variant and what is wrong."""
        check_variants(self.variants)
        given = [k for k in VARIANT_EXCLUDES if k in self.model_fields_set]
        if given:
            raise ValueError(f"a component with variants cannot have {', '.join(given)}")
        base = self.model_dump(exclude={"variants", "name"}, exclude_unset=True)
        out = []
        for i, v in enumerate(self.variants):
            merged = {**base, **v.overrides, "name": self.name}
            try:
                spec = ComponentSpec.model_validate(merged)
            except ValidationError as exc:
                why = format_errors(exc, merged).replace("(top level): ", "")
                raise ValueError(f"variants[{i}]({v.name}): {why}") from None
            engine = spec.engine
            if engine.capture_dir and engine.capture_variant is None:
                # SageMaker files a production variant's captured data under the variant's name
                engine = engine.model_copy(update={"capture_variant": v.name})
            name = f"{self.name}{VARIANT_SEP}{v.name}"
            out.append(spec.model_copy(update={"name": name, "engine": engine}))
        return out

    @property
    def concurrent_per_copy(self) -> int:
        """The sequences each copy runs at once: engine.max_concurrent, else what its `llmhost serve`
        takes (MAX_CONCURRENT_REQUESTS, else the engine's default)."""
        return int(SERVE_SPEC["max_concurrent"].resolve(self.engine.max_concurrent or 0, os.environ))

    def serve_options(self) -> dict[str, Any]:
        """The `llmhost serve` options of its copies the file sets: the engine's, then the adapters."""
        lora = {"lora": [a.lora_option for a in self.adapters]} if self.adapters else {}
        return {**self.engine.serve_options(), **lora}

    @property
    def initial_copies(self) -> int:
        if self.variants:  # its variants have the copies
            return 0
        if self.on_demand is not None:
            return 0
        if self.copies is not None:
            return self.copies
        return self.autoscaling.min_copies if self.autoscaling else 1


def _check_capture(name: str, engine: EngineSpec) -> None:
    """The capture keys together, as the copies' `llmhost serve` checks them (the folder's first name is
    the component's)."""
    try:
        engine.capture(name)
    except ValueError as exc:
        raise ValueError(f"engine: {exc}") from None


def _unique_names(components: list[ComponentSpec]) -> None:
    seen: set[str] = set()
    for c in components:
        if c.name in seen:
            raise ValueError(f"component name {c.name!r} appears twice")
        seen.add(c.name)
    check_names(components)
    fronts = {c.name for c in components if c.variants}
    for c in components:
        if c.base in fronts:
            raise ValueError(
                f"adapter component {c.name!r}: its base {c.base!r} has variants, whose copies load no "
                "LoRA adapters"
            )


class RouterSpec(_Strict):
    # CPUs kept for the router alone: the last ones this process may use; copies are never placed
    # there and the router runs only there. 0: the router floats over every CPU, the copies' too
    # (its cost — a few ms of CPU per streamed request — is then taken from them)
    num_cpus: int = Field(default=0, ge=0)


# who may set a request's `keep_alive` (Ollama's body field): nobody (a 400 naming the field), a value
# no longer than the model's own, or any value
ClientKeepAlive = Literal["none", "shorten", "any"]


class OnDemandPolicy(_Strict):
    """The room on-demand components share (what declared components leave of the host's CPUs and memory,
    within these limits), who may set keep_alive per request, and what loads at start."""

    max_loaded: int | None = Field(default=None, ge=1)  # on-demand models loaded at once; None: no limit
    memory_budget_mb: int | None = Field(default=None, ge=1)  # their memory_mb together; None: the host's
    client_keep_alive: ClientKeepAlive = "none"
    preload: list[str] = []  # on-demand models loaded at start


class ModelsDirSpec(_Strict):
    """A folder of models, one on-demand component each: NAME.gguf, or a model directory NAME/; a
    NAME.yaml beside one gives its component settings (an endpoint file's component keys but name,
    model, copies and autoscaling), over `defaults`."""

    path: str  # relative to the endpoint file's directory
    defaults: dict[str, Any] = {}

    @model_validator(mode="after")
    def _check(self) -> ModelsDirSpec:
        for key in ("name", "model", "copies", "autoscaling", "base", "adapter"):
            if key in self.defaults:
                raise ValueError(f"defaults.{key}: not a setting of a folder's model")
        try:  # checked now, as the component every model of the folder starts from
            ComponentSpec.model_validate({**self.defaults, "name": "defaults", "on_demand": {}})
        except ValidationError as exc:
            raise ValueError(f"defaults: {format_errors(exc, self.defaults)}") from None
        return self


class AsyncInferenceSpec(_Strict):
    """Where SageMaker async invocations' answers and errors are written (InvokeEndpointAsync)."""

    output: str  # an S3 prefix: each answer at <output>/<InferenceId>.out
    failure: str | None = None  # an S3 prefix for the errors; None: beside the answers


class EndpointSpec(_Strict):
    name: str = Field(pattern=NAME_PATTERN)  # the endpoint's name (logs, status, reports)
    instance: InstanceSpec = InstanceSpec()  # the host it runs on, for cost reports
    router: RouterSpec = RouterSpec()  # the router's own CPUs
    components: list[ComponentSpec] = []  # the models served, each its copies (none: a models_dir only)
    models_dir: ModelsDirSpec | None = None  # a folder of models, each an on-demand component
    on_demand: OnDemandPolicy = OnDemandPolicy()  # how the folder's models are loaded and unloaded
    # the router's batch jobs (/v1/files, /v1/batches): their folder (relative to the file; None: the
    # user's data directory) and lines in flight (None: every declared copy's sequences together)
    jobs_dir: str | None = None
    batch_concurrency: int | None = Field(default=None, ge=1)
    # InvokeEndpointAsync's S3 prefixes; None: the router takes no async invocations
    async_inference: AsyncInferenceSpec | None = None

    @model_validator(mode="after")
    def _check(self) -> EndpointSpec:
        if not self.components and self.models_dir is None:
            raise ValueError("components: List should have at least 1 item (or give models_dir)")
        _unique_names(self.components)
        return self

    def jobs(self, port: int | None = None) -> JobsSettings:
        """Where the router keeps its batch jobs (`jobs_dir`, else a folder of the user's data directory
        named after the endpoint and the `port` it listens on, where it has one of its own), and how many
        lines it keeps in flight."""
        here = f"endpoint-{self.name}" + (f"-{port}" if port is not None else "")
        root = Path(self.jobs_dir).expanduser() if self.jobs_dir else default_jobs_dir() / here
        a = self.async_inference
        return JobsSettings(
            root=root,
            concurrency=self.batch_lines(),
            async_output=a.output if a else "",
            async_failure=(a.failure or "") if a else "",
        )

    def batch_lines(self) -> int:
        """A batch's lines in flight: `batch_concurrency`, else every declared copy's sequences together
        (an autoscaled component's max_copies: a batch's load scales it out)."""
        if self.batch_concurrency is not None:
            return self.batch_concurrency
        total = 0
        for c in (v for s in self.components for v in (s.variant_specs() if s.variants else [s])):
            copies = c.autoscaling.max_copies if c.autoscaling else (1 if c.copies is None else c.copies)
            total += copies * (c.engine.max_concurrent or int(SERVE_SPEC["max_concurrent"].default))
        return max(1, total)

    @model_validator(mode="wrap")
    @classmethod
    def _fold(cls, data: Any, handler: ModelWrapValidatorHandler[EndpointSpec]) -> EndpointSpec:
        """Adapter components live on their bases' copies: `components` holds those with copies."""
        spec = handler(data)
        return spec.model_copy(update={"components": fold(spec.components)})


class ComponentList(_Strict):
    """What `endpoint add` accepts: an endpoint file's components (name and instance ignored)."""

    name: str | None = None
    instance: InstanceSpec | None = None
    components: list[ComponentSpec] = Field(min_length=1)

    @model_validator(mode="after")
    def _check(self) -> ComponentList:
        _unique_names(self.components)
        return self


def parse_endpoint(data: Any, source: str = "endpoint file") -> EndpointSpec:
    if not isinstance(data, dict):
        raise SpecError(f"{source}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        return EndpointSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(f"{source}: {format_errors(exc, data)}") from None


def parse_components(data: Any, source: str = "component file", strict: bool = False) -> list[ComponentSpec]:
    """A file with `components: [...]`, or one component mapping. `strict`: JSON's types as they are
    (the admin API's body, as the other APIs' request models), so `false` is no number and "2" none."""
    if not isinstance(data, dict):
        raise SpecError(f"{source}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        if "components" in data:
            return list(ComponentList.model_validate(data, strict=strict).components)
        return [ComponentSpec.model_validate(data, strict=strict)]
    except ValidationError as exc:
        raise SpecError(f"{source}: {format_errors(exc, data)}") from None


def read_yaml(path: Path) -> Any:
    try:
        return yamltext.load(path.read_text())
    except OSError as exc:
        raise SpecError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise SpecError(f"{path}: not valid YAML: {exc}") from None


def load_endpoint(path: Path) -> EndpointSpec:
    spec = parse_endpoint(read_yaml(path), str(path))
    folder = spec.models_dir
    if folder is not None and not Path(folder.path).expanduser().is_absolute():  # relative to the file
        models_dir = folder.model_copy(update={"path": str(path.parent / Path(folder.path).expanduser())})
        spec = spec.model_copy(update={"models_dir": models_dir})
    if spec.jobs_dir is not None and not Path(spec.jobs_dir).expanduser().is_absolute():
        spec = spec.model_copy(update={"jobs_dir": str(path.parent / Path(spec.jobs_dir).expanduser())})
    return spec

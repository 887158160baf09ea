"""The endpoint file in Ray Serve's terms: one deployment per component, an ingress, and the application
config that Ray Serve's REST API deploys. Pure data, no Ray: what is mapped to what lives here.

The application is deployed declaratively (`PUT /api/serve/applications/`, what `serve deploy` does), so
that `endpoint scale` is a config change Ray applies in place: a `serve.run` would give every
deployment a new version and restart every copy.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from llmhost.endpoint.spec import ComponentSpec, EndpointSpec
from llmhost.settings.serve import SERVE_SPEC
from llmhost.shared.jsontypes import JSONObject

IMPORT_PATH = "llmhost.endpoint.rayserve.app:build"
# a component with prefix-aware routing: its deployment's request router (imported by Ray, in the ingress)
PREFIX_ROUTER = "llmhost.endpoint.rayserve.prefixroute:PrefixRequestRouter"
INGRESS = "ingress"  # the ingress deployment's name; a component may not take it
# Ray's own resource on the head node: the ingress runs beside the HTTP proxy and the dashboard
HEAD_NODE_RESOURCE = "node:__internal_head__"


@dataclass(frozen=True)
class RayTiming:
    # a copy's health check (`--health-interval`, `--health-timeout`)
    health_check_period_s: float = 2.0
    health_check_timeout_s: float = 5.0
    # a stopping copy waits this long for its requests (`--drain-timeout`)
    drain_timeout_s: float = 120.0
    # autoscaling: how often load is reported (`--autoscale-interval`) and the window averaged
    # (`--autoscale-window`: Ray Serve's look_back_period_s)
    metrics_interval_s: float = 1.0
    look_back_period_s: float = 30.0
    # how long `up`/`scale` wait for a copy Ray cannot place for lack of room (`--placement-timeout`);
    # one that fits on no node at all is refused as soon as Ray reports it
    placement_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not value > 0:
                raise ValueError(f"{name} must be > 0, got {value}")


@dataclass(frozen=True)
class AppArgs:
    """What the application builder gets: Ray Serve hashes it into the code version, so it is fixed
    for the application's life (scaling changes the config's deployment overrides instead)."""

    endpoint: JSONObject  # the EndpointSpec, models made absolute
    chat_templates: dict[str, str]  # component → template text, read where `up` ran
    timing: dict[str, float]
    dashboard_url: str  # Ray Serve's REST API, for the ingress's admin routes
    keys: list[str]  # API key digests the ingress accepts; none: no authentication
    # the `MAX_*` variables set where `up` ran: the copies size their engines with them, as a
    # single-host endpoint's copies inherit them (and the ingress their request limits); the `OTEL_*`
    # ones: the ingress and the copies send their spans where `up` was told to
    env: dict[str, str]
    log_level: str  # `--log-level`: llmhost's and Ray Serve's loggers in the ingress and the copies
    console_period_s: float = 5.0  # `--console-period`: a console point every period, in the ingress
    reports_dir: str | None = None  # `--reports DIR` (absolute, as seen on the head node): the console's


# how often a copy sends its /metrics and process figures to the ingress at most (a handle cannot
# address one copy, so copies push); twice per console period when that is shorter, so that each of the
# console's points has a fresh reading of every copy
METRICS_PUSH_S = 5.0


def push_period_s(console_period_s: float) -> float:
    return min(METRICS_PUSH_S, console_period_s / 2)


def copies_options(spec: ComponentSpec, timing: RayTiming) -> JSONObject:
    """`copies` → num_replicas; `autoscaling` → Ray Serve's autoscaling_config."""
    a = spec.autoscaling
    if a is None:
        return {"num_replicas": spec.initial_copies, "autoscaling_config": None}
    return {
        "num_replicas": None,
        "autoscaling_config": {
            "min_replicas": a.min_copies,
            "max_replicas": a.max_copies,
            "initial_replicas": spec.initial_copies,
            "target_ongoing_requests": a.target_concurrent_per_copy,
            "upscale_delay_s": a.scale_out_cooldown_s,
            "downscale_delay_s": a.scale_in_cooldown_s,
            "metrics_interval_s": timing.metrics_interval_s,
            "look_back_period_s": timing.look_back_period_s,
        },
    }


def logging_config(log_level: str) -> JSONObject:
    """Ray Serve's own logs in a replica follow `--log-level` as llmhost's do."""
    return {"log_level": log_level.upper()}


def component_options(
    spec: ComponentSpec, timing: RayTiming, env: dict[str, str], log_level: str
) -> JSONObject:
    engine = spec.engine
    # what the copy's engine admits (the same function sizes it there, with the same variables)
    concurrent = SERVE_SPEC["max_concurrent"].resolve(engine.max_concurrent or 0, env)
    queue = SERVE_SPEC["max_queue"].default if engine.max_queue is None else engine.max_queue
    return {
        "name": spec.name,
        **copies_options(spec, timing),
        # placement is Ray's: CPUs and memory are reserved on whichever node has them
        "ray_actor_options": {
            "num_cpus": spec.resources.num_cpus,
            "memory": spec.resources.memory_mb * 2**20,
        },
        # the copy's own engine queues and refuses (429) beyond its limits, as with `llmhost serve`
        "max_ongoing_requests": concurrent + queue,
        "health_check_period_s": timing.health_check_period_s,
        "health_check_timeout_s": timing.health_check_timeout_s,
        "graceful_shutdown_timeout_s": timing.drain_timeout_s,
        "graceful_shutdown_wait_loop_s": 1.0,
        "logging_config": logging_config(log_level),
        **router_options(spec),
    }


def router_options(spec: ComponentSpec) -> JSONObject:
    """Prefix-aware routing: Ray's handles route the component's requests with llmhost's request router;
    least outstanding: Ray Serve's own (power of two choices over queue lengths)."""
    r = spec.routing
    if r.policy != "prefix":
        return {}
    kwargs: JSONObject = {"component": spec.name, "block_chars": r.block_chars, "load_factor": r.load_factor}
    return {"request_router_config": {"request_router_class": PREFIX_ROUTER, "request_router_kwargs": kwargs}}


def ingress_options(timing: RayTiming, log_level: str, router_cpus: int = 0) -> JSONObject:
    """The ingress: on the head node, with the endpoint file's router.num_cpus reserved for it (Ray's
    logical CPUs: no copy is placed on them; nothing is pinned)."""
    return {
        "name": INGRESS,
        "num_replicas": 1,
        "ray_actor_options": {"num_cpus": router_cpus, "resources": {HEAD_NODE_RESOURCE: 0.001}},
        "max_ongoing_requests": 10_000,  # it only relays; the copies bound the work
        "graceful_shutdown_timeout_s": timing.drain_timeout_s,
        "graceful_shutdown_wait_loop_s": 1.0,
        "logging_config": logging_config(log_level),
    }


def scale_override(spec: ComponentSpec, copies: int) -> JSONObject:
    """`endpoint scale` on Ray: a fixed number of copies, replacing the component's autoscaling."""
    return {"name": spec.name, "num_replicas": copies, "autoscaling_config": None}


def app_config(spec: EndpointSpec, args: AppArgs, overrides: list[JSONObject]) -> JSONObject:
    """One application of Ray Serve's deploy config (`ServeApplicationSchema`)."""
    return {
        "name": spec.name,
        "route_prefix": "/",
        "import_path": IMPORT_PATH,
        "args": asdict(args),
        "deployments": [*overrides],
    }


def check_names(spec: EndpointSpec) -> None:
    for c in spec.components:
        if c.name == INGRESS:
            raise ValueError(f"component name {INGRESS!r} is taken by the Ray endpoint's ingress")

"""`llmhost endpoint up`: its option groups and how it starts an endpoint on this host or on Ray.

The options shared with `llmhost serve` (the address, API keys, the log level, the console) are the
settings groups of `llmhost.settings.serve`; those of `up` alone are the groups here. Heavy modules (the
manager, uvicorn, Ray) are imported where they run.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from llmhost.settings.serve import (
    SERVE_SPEC,
    AuthOptions,
    ConsoleOptions,
    ListenSettings,
    LogOptions,
    TraceOptions,
)
from llmhost.settings.setting import setting
from llmhost.store.options import use_s3_endpoint

if TYPE_CHECKING:
    from llmhost.console.api import ConsoleSettings
    from llmhost.endpoint.control.manager import EndpointManager
    from llmhost.endpoint.spec import EndpointSpec
    from llmhost.web.auth import ApiKeys

DEFAULT_PORT = 8080
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


@dataclass(frozen=True, kw_only=True)
class EndpointListen(ListenSettings):
    """Where the endpoint's router listens: the port given, else 8080."""

    port: int = setting(DEFAULT_PORT, "The endpoint's port.", metavar="P")


@dataclass(frozen=True, kw_only=True)
class FileOptions:
    """What the command line sets over the endpoint file (or alone): a folder of on-demand models, its
    policy, the routing."""

    models_dir: Path | None = setting(
        None,
        "A folder of models (NAME.gguf, model directories NAME/, NAME.yaml beside one for its "
        "settings): one on-demand model each, loaded when asked.",
    )
    max_loaded: int | None = setting(None, "On-demand models loaded at once (on_demand.max_loaded).")
    memory_budget_mb: int | None = setting(
        None,
        "Memory on-demand models may reserve together, MB (on_demand.memory_budget_mb; default: "
        "what declared components leave).",
    )
    keep_alive: float | None = setting(
        None,
        "Seconds a folder's idle model stays loaded (-1 never, 0 unload after each request; default 300).",
    )
    client_keep_alive: str | None = setting(
        None, "Who may set keep_alive per request: none, shorten, any (on_demand.client_keep_alive)."
    )
    preload: list[str] | None = setting(None, "On-demand model loaded at start (repeatable).")
    jobs_dir: Path | None = setting(
        None, "Folder of the router's batch jobs (jobs_dir:); default: the user's data directory."
    )
    routing: str | None = setting(
        None,
        "How requests pick a copy, for every component (overrides the file's routing.policy): "
        "least_outstanding, or prefix (the copy holding the prompt's prefix, within a load bound).",
    )


@dataclass(frozen=True, kw_only=True)
class CopyTiming:
    """How a single-host endpoint watches, scales and drains its copies."""

    log_dir: Path | None = setting(
        None, "Copies' logs; default a new temporary folder. Not with --ray (Ray keeps the logs)."
    )
    autoscale_interval: float = setting(1.0, "Seconds between autoscaling decisions.")
    drain_timeout: float = setting(
        120.0,
        "Seconds requests in flight get to finish on SIGTERM, and a stopping copy waits for its requests.",
    )
    health_interval: float = setting(2.0, "Seconds between /ping checks of a ready copy.")
    health_timeout: float = setting(5.0, "Seconds a copy has to answer /ping.")
    health_misses: int = setting(
        3,
        "Missed /ping answers in a row after which a copy is hung: restarted. Not with --ray (one "
        "failed health check does).",
    )


@dataclass(frozen=True, kw_only=True)
class RayOptions:
    """Running the file on a Ray cluster instead."""

    ray: bool = setting(
        False,
        "Run the file as a Ray Serve application across the hosts of a Ray cluster (needs `pip "
        "install 'llmhost[ray]'`).",
        switch=True,
    )
    ray_address: str | None = setting(
        None,
        "With --ray: the cluster to deploy onto (auto, HOST:PORT, ray://HOST:PORT); unset: start a "
        "local Ray.",
    )
    ray_dashboard: str | None = setting(
        None,
        "With --ray: the Ray dashboard's URL (Ray Serve's REST API) as this host reaches it; unset: "
        "the cluster's own (for ray://HOST:PORT, on HOST).",
    )
    autoscale_window: float = setting(
        30.0,
        "With --ray: seconds of load averaged per autoscaling decision (Ray Serve's look_back_period_s).",
    )
    placement_timeout: float = setting(
        60.0,
        "With --ray: seconds `up` and `scale` wait for a copy Ray cannot place for lack of room (one "
        "that fits on no node is refused at once).",
    )


# options that apply in one mode only: given (other than at their default) in the other, they are refused
SINGLE_HOST_ONLY = ("log_dir", "health_misses")
RAY_ONLY = ("ray_address", "ray_dashboard", "autoscale_window", "placement_timeout")


@dataclass(frozen=True, kw_only=True)
class Up:
    """Everything `endpoint up` was given."""

    file: Path | None
    s3_endpoint_url: str
    listen: EndpointListen
    overrides: FileOptions
    timing: CopyTiming
    ray: RayOptions
    auth: AuthOptions
    log: LogOptions
    console: ConsoleOptions
    trace: TraceOptions


def _usage(message: object) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(2)


def start(ctx: typer.Context, up: Up) -> None:
    """Start the endpoint: the file and the options checked together, then its copies on this host or
    on Ray. A usage error exits 2, an endpoint that cannot start 1."""
    from llmhost.console.api import ConsoleSettings
    from llmhost.endpoint.spec import SpecError
    from llmhost.web.auth import load_keys

    _refuse_other_mode(ctx, up.ray.ray)
    logging.basicConfig(level=up.log.log_level.upper(), format=LOG_FORMAT)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per proxied request otherwise
    try:
        spec = with_routing(endpoint_spec(up.file, dataclasses.asdict(up.overrides)), up.overrides.routing)
        # the router does not tokenize: a tokens_per_minute is refused rather than left uncounted
        keys = load_keys(up.auth.api_key or [], up.auth.api_key_file, count_tokens=False)
    except (SpecError, ValueError, OSError) as exc:
        raise _usage(exc) from None
    _refuse_for_ray(spec, up, keys)
    use_s3_endpoint(up.s3_endpoint_url)
    traces = use_traces_endpoint(up.trace)
    try:
        reports = Path(up.console.reports) if up.console.reports else None
        console = ConsoleSettings(period_s=up.console.console_period, reports_dir=reports)
    except ValueError as exc:
        raise _usage(exc) from None
    if up.ray.ray:
        _up_ray(spec, up, keys, console)
    else:
        _up_single(spec, up, keys, console, traces)


def use_traces_endpoint(trace: TraceOptions) -> str:
    """The OTLP traces URL in effect (--otlp-traces-endpoint, else its variable), put in this process's
    environment: the copies read it there, as they inherit it (a Ray endpoint's, from the app's args)."""
    setting = SERVE_SPEC["otlp_traces_endpoint"]
    endpoint = str(setting.resolve(trace.otlp_traces_endpoint, os.environ))
    if endpoint:
        os.environ[setting.env] = endpoint
    return endpoint


def _refuse_for_ray(spec: EndpointSpec, up: Up, keys: ApiKeys) -> None:
    if up.ray.ray and keys.limited:
        # each Ray ingress replica would count apart, and none reloads on SIGHUP
        raise _usage(
            "per-key quotas (requests_per_minute in --api-key-file) apply to a single-host endpoint "
            "and `llmhost serve`, not with --ray (see docs/guides/operations.md)"
        )
    if up.ray.ray and any(c.variants for c in spec.components):
        raise _usage(
            "production and shadow variants (variants:) run on a single-host endpoint only, not with --ray "
            "(see docs/guides/operations.md)"
        )
    if up.ray.ray and (spec.models_dir is not None or any(c.on_demand for c in spec.components)):
        raise _usage(
            "on-demand models (--models-dir, models_dir:, on_demand:) run on a single-host "
            "endpoint only, not with --ray (see docs/guides/models-on-demand.md)"
        )
    if up.ray.ray and up.s3_endpoint_url:
        # the nodes resolve the models themselves: a setting of this process would not reach them
        raise _usage(
            "--s3-endpoint-url applies to a single-host endpoint; with --ray set "
            "LLMHOST_S3_ENDPOINT_URL on every node"
        )


def endpoint_spec(file: Path | None, options: dict[str, Any]) -> EndpointSpec:
    """The endpoint file with the command line's on-demand options over it (or those alone)."""
    from llmhost.endpoint.spec import SpecError, load_endpoint, parse_endpoint

    data: dict[str, Any] = {"name": "models"}
    if file is not None:
        data = load_endpoint(file).model_dump(exclude_unset=True)
    elif options["models_dir"] is None:
        raise SpecError("give an endpoint file, or --models-dir DIR")
    if options["models_dir"] is not None:
        data["models_dir"] = {**data.get("models_dir", {}), "path": str(options["models_dir"])}
    if options["keep_alive"] is not None:
        if "models_dir" not in data:
            raise SpecError("--keep-alive sets the keep_alive of a models_dir's models: give --models-dir")
        folder = data["models_dir"]
        defaults = folder.setdefault("defaults", {})
        defaults["on_demand"] = {**defaults.get("on_demand", {}), "keep_alive": options["keep_alive"]}
    policy = dict(data.get("on_demand", {}))
    for key in ("max_loaded", "memory_budget_mb", "client_keep_alive", "preload"):
        if options[key] is not None:
            policy[key] = options[key]
    data["on_demand"] = policy
    if options["jobs_dir"] is not None:
        data["jobs_dir"] = str(options["jobs_dir"])
    return parse_endpoint(data, str(file) if file is not None else "command line")


def with_routing(spec: EndpointSpec, policy: str | None) -> EndpointSpec:
    """`spec` with every component's routing policy set to `policy` (None: as the file says)."""
    from llmhost.endpoint.spec import SpecError

    if policy is None:
        return spec
    if policy not in ("least_outstanding", "prefix"):
        raise SpecError(f"--routing: least_outstanding or prefix, got {policy!r}")
    comps = [
        c.model_copy(update={"routing": c.routing.model_copy(update={"policy": policy})})
        for c in spec.components
    ]
    return spec.model_copy(update={"components": comps})


def _refuse_other_mode(ctx: typer.Context, ray: bool) -> None:
    """An option of the other mode, given other than at its default, would be silently ignored."""
    names = SINGLE_HOST_ONLY if ray else RAY_ONLY
    for param in ctx.command.params:
        if param.name in names and ctx.params.get(param.name) != param.default:
            flag = param.opts[0]
            why = "does not apply to a Ray endpoint" if ray else "applies with --ray only"
            typer.echo(f"error: {flag} {why}", err=True)
            raise typer.Exit(2)


def _up_single(spec: EndpointSpec, up: Up, keys: ApiKeys, console: ConsoleSettings, traces: str) -> None:
    import uvicorn

    from llmhost.endpoint.app import create_app
    from llmhost.endpoint.control.manager import EndpointManager, ManagerTiming
    from llmhost.endpoint.control.replica import ReplicaTiming
    from llmhost.process.lifecycle import GracefulServer, Lifecycle
    from llmhost.web.traces import TracingUnavailableError, open_tracer

    try:
        tracer = open_tracer(traces, "llmhost-endpoint")
    except TracingUnavailableError as exc:
        raise _usage(exc) from None
    t, host, port = up.timing, up.listen.host, up.listen.port
    replica_timing = ReplicaTiming(
        ping_interval_s=t.health_interval, ping_timeout_s=t.health_timeout, ping_misses=t.health_misses
    )
    timing = ManagerTiming(
        autoscale_interval_s=t.autoscale_interval, drain_timeout_s=t.drain_timeout, replica=replica_timing
    )
    if t.log_dir is not None:
        t.log_dir.mkdir(parents=True, exist_ok=True)
    manager = _checked_manager(EndpointManager(spec, log_dir=t.log_dir, timing=timing))
    folder = ""
    if spec.models_dir is not None:
        folder = f" and {len(manager.folder)} on-demand model(s) of {spec.models_dir.path}"
    typer.echo(
        f"llmhost endpoint {spec.name}: {len(spec.components)} component(s){folder} on {host}:{port}; "
        f"CPUs {','.join(map(str, manager.ledger.cpus))}, {manager.ledger.memory_mb} MB available; "
        f"copy logs in {manager.log_dir}"
    )
    lifecycle = Lifecycle(grace_s=t.drain_timeout)
    asgi_app = create_app(manager, lifecycle=lifecycle, keys=keys, console=console, port=port, tracer=tracer)
    config = uvicorn.Config(
        asgi_app, host=host, port=port, log_level=up.log.log_level.lower(), timeout_graceful_shutdown=5
    )
    GracefulServer(config, lifecycle).run()
    if lifecycle.exit_code:
        raise typer.Exit(lifecycle.exit_code)


def _checked_manager(manager: EndpointManager) -> EndpointManager:
    """Models resolved (each once: the copies reuse it) and capacity checked before anything starts. A
    model reference naming nothing is a usage error (2), as for `llmhost serve`; no room is 1."""
    from llmhost.endpoint.control.placement import InsufficientCapacityError
    from llmhost.endpoint.control_errors import ComponentError, ModelRefError
    from llmhost.endpoint.spec import SpecError

    try:
        manager.check()
    except (ModelRefError, SpecError) as exc:
        typer.echo(f"error: endpoint {manager.spec.name!r} refused: {exc}", err=True)
        raise typer.Exit(2) from None
    except (InsufficientCapacityError, ComponentError) as exc:
        typer.echo(f"error: endpoint {manager.spec.name!r} refused: {exc}", err=True)
        raise typer.Exit(1) from None
    return manager


def _up_ray(spec: EndpointSpec, up: Up, keys: ApiKeys, console: ConsoleSettings) -> None:
    import importlib.util

    from llmhost.endpoint.spec import SpecError

    if importlib.util.find_spec("ray") is None:
        typer.echo("error: --ray needs Ray Serve: pip install 'llmhost[ray]'", err=True)
        raise typer.Exit(2)
    from llmhost.endpoint.rayserve.options import RayTiming
    from llmhost.endpoint.rayserve.serveapi import ServeApiError
    from llmhost.endpoint.rayserve.up import RayEndpointError, RayUp, run

    r, t = up.ray, up.timing
    try:
        timing = RayTiming(
            health_check_period_s=t.health_interval,
            health_check_timeout_s=t.health_timeout,
            drain_timeout_s=t.drain_timeout,
            metrics_interval_s=t.autoscale_interval,
            look_back_period_s=r.autoscale_window,
            placement_timeout_s=r.placement_timeout,
        )
        ray_up = RayUp(
            timing=timing,
            keys=keys,
            log_level=up.log.log_level,
            console=console,
            address=r.ray_address or None,
            dashboard=r.ray_dashboard or None,
            host=up.listen.host,
            port=up.listen.port,
        )
    except ValueError as exc:
        raise _usage(exc) from None
    for c in spec.components:
        if c.resources.max_memory_mb is not None:  # placement and limits are Ray's
            typer.echo(
                f"warning: component {c.name!r}: max_memory_mb is not enforced on Ray (Ray's memory "
                "monitor kills workers when a node runs low on memory)",
                err=True,
            )
    place = f"the Ray cluster at {ray_up.address}" if ray_up.address else "a local Ray instance"
    typer.echo(
        f"llmhost endpoint {spec.name}: {len(spec.components)} component(s) on {place}, "
        f"{ray_up.host}:{ray_up.port}"
    )
    try:
        why = run(spec, ray_up)
    except SpecError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    except (RayEndpointError, ServeApiError, ValueError, OSError) as exc:
        typer.echo(f"error: endpoint {spec.name!r} refused: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"llmhost endpoint {spec.name}: stopped ({why})")

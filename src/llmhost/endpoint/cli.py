"""`llmhost endpoint`: run an endpoint from a file, and operate a running one."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import httpx
import typer

from llmhost.auth import ENV_KEY, ENV_KEYS
from llmhost.store.options import S3EndpointOpt, use_s3_endpoint

if TYPE_CHECKING:
    from llmhost.auth import ApiKeys
    from llmhost.console.api import ConsoleSettings
    from llmhost.endpoint.manager import EndpointManager
    from llmhost.endpoint.spec import EndpointSpec

app = typer.Typer(help="Endpoints: several models and copies behind one port, with autoscaling.",
                  no_args_is_help=True)  # fmt: skip

DEFAULT_PORT = 8080
PortOpt = Annotated[int, typer.Option(help="The endpoint's port.")]
ApiKeyOpt = Annotated[
    list[str] | None,
    typer.Option(help="Require this API key (repeatable; also $LLMHOST_API_KEYS or $LLMHOST_API_KEY, "
                 "comma-separated).",
                 show_default=False),
]
ApiKeyFileOpt = Annotated[Path | None, typer.Option(help="File of API keys, one per line.")]
# the key the admin commands (status, scale, ...) send to an endpoint that requires one; without it, the
# first of $LLMHOST_API_KEYS (the server's variable: one shell that started the endpoint can operate it)
CLIENT_KEY_ENV = ENV_KEY
HostOpt = Annotated[str, typer.Option(help="The endpoint's address (the admin API answers local clients).")]


# options that apply in one mode only: given (other than at their default) in the other, they are refused
SINGLE_HOST_ONLY = ("log_dir", "health_misses")
RAY_ONLY = ("ray_address", "ray_dashboard", "autoscale_window", "placement_timeout")


@app.command()
def up(
    ctx: typer.Context,
    file: Annotated[
        Path | None,
        typer.Argument(help="Endpoint file (YAML; docs/reference/endpoint-file.md); optional with "
                       "--models-dir."),
    ] = None,
    models_dir: Annotated[
        Path | None, typer.Option(help="A folder of models (NAME.gguf, model directories NAME/, NAME.yaml "
                                  "beside one for its settings): one on-demand model each, loaded when "
                                  "asked.")
    ] = None,
    max_loaded: Annotated[
        int | None, typer.Option(help="On-demand models loaded at once (on_demand.max_loaded).")
    ] = None,
    memory_budget_mb: Annotated[
        int | None, typer.Option(help="Memory on-demand models may reserve together, MB "
                                 "(on_demand.memory_budget_mb; default: what declared components leave).")
    ] = None,
    keep_alive: Annotated[
        float | None, typer.Option(help="Seconds a folder's idle model stays loaded (-1 never, 0 unload "
                                   "after each request; default 300).")
    ] = None,
    client_keep_alive: Annotated[
        str | None, typer.Option(help="Who may set keep_alive per request: none, shorten, any "
                                 "(on_demand.client_keep_alive).")
    ] = None,
    preload: Annotated[
        list[str] | None,
        typer.Option(help="On-demand model loaded at start (repeatable).", show_default=False),
    ] = None,
    port: PortOpt = DEFAULT_PORT,
    host: Annotated[str, typer.Option(help="Address to bind.")] = "0.0.0.0",
    log_dir: Annotated[
        Path | None, typer.Option(help="Copies' logs; default a new temporary folder. Not with --ray "
                                  "(Ray keeps the logs).")
    ] = None,
    autoscale_interval: Annotated[float, typer.Option(help="Seconds between autoscaling decisions.")] = 1.0,
    drain_timeout: Annotated[
        float, typer.Option(help="Seconds requests in flight get to finish on SIGTERM, and a stopping copy "
                            "waits for its requests.")
    ] = 120.0,
    health_interval: Annotated[
        float, typer.Option(help="Seconds between /ping checks of a ready copy.")
    ] = 2.0,
    health_timeout: Annotated[float, typer.Option(help="Seconds a copy has to answer /ping.")] = 5.0,
    health_misses: Annotated[
        int, typer.Option(help="Missed /ping answers in a row after which a copy is hung: restarted. Not "
                          "with --ray (one failed health check does).")
    ] = 3,
    log_level: Annotated[str, typer.Option(help="debug, info, warning, error (with --ray: in the ingress "
                                           "and the copies too).")] = "info",
    api_key: ApiKeyOpt = None,
    api_key_file: ApiKeyFileOpt = None,
    ray: Annotated[
        bool, typer.Option("--ray", help="Run the file as a Ray Serve application across the hosts of a Ray "
                           "cluster (needs `pip install 'llmhost[ray]'`).")
    ] = False,
    ray_address: Annotated[
        str | None, typer.Option(help="With --ray: the cluster to deploy onto (auto, HOST:PORT, "
                                 "ray://HOST:PORT); unset: start a local Ray.")
    ] = None,
    ray_dashboard: Annotated[
        str | None, typer.Option(help="With --ray: the Ray dashboard's URL (Ray Serve's REST API) as this "
                                 "host reaches it; unset: the cluster's own (for ray://HOST:PORT, on HOST).")
    ] = None,
    autoscale_window: Annotated[
        float, typer.Option(help="With --ray: seconds of load averaged per autoscaling decision "
                            "(Ray Serve's look_back_period_s).")
    ] = 30.0,
    placement_timeout: Annotated[
        float, typer.Option(help="With --ray: seconds `up` and `scale` wait for a copy Ray cannot place "
                            "for lack of room (one that fits on no node is refused at once).")
    ] = 60.0,
    routing: Annotated[
        str | None, typer.Option(help="How requests pick a copy, for every component (overrides the file's "
                                 "routing.policy): least_outstanding, or prefix (the copy holding the "
                                 "prompt's prefix, within a load bound).")
    ] = None,
    s3_endpoint_url: S3EndpointOpt = "",
    reports: Annotated[
        Path | None, typer.Option(help="A folder of `llmhost bench` / `llmhost tune` results, listed and "
                                  "opened in the console (GET /console); with --ray, read on the head node.")
    ] = None,
    console_period: Annotated[
        float, typer.Option(help="Seconds between the console's points (15 minutes are kept).")
    ] = 5.0,
) -> None:
    """Start an endpoint: place every component, start its copies, route on PORT. SIGTERM drains. The
    console is at http://HOST:PORT/console."""
    from llmhost.auth import load_keys
    from llmhost.console.api import ConsoleSettings
    from llmhost.endpoint.spec import SpecError
    from llmhost.serve_spec import LOG_LEVELS

    _refuse_other_mode(ctx, ray)
    if log_level.lower() not in LOG_LEVELS:
        typer.echo(f"error: --log-level must be one of {', '.join(LOG_LEVELS)}, got {log_level!r}", err=True)
        raise typer.Exit(2)
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per proxied request otherwise
    folder_options = dict(models_dir=models_dir, max_loaded=max_loaded, memory_budget_mb=memory_budget_mb,
                          keep_alive=keep_alive, client_keep_alive=client_keep_alive, preload=preload)
    try:
        spec = with_routing(endpoint_spec(file, folder_options), routing)
        keys = load_keys(api_key or [], api_key_file)
    except (SpecError, ValueError, OSError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if ray and (spec.models_dir is not None or any(c.on_demand for c in spec.components)):
        typer.echo("error: on-demand models (--models-dir, models_dir:, on_demand:) run on a single-host "
                   "endpoint only, not with --ray (see docs/guides/models-on-demand.md)",
                   err=True)  # fmt: skip
        raise typer.Exit(2)
    if ray and s3_endpoint_url:
        # the nodes resolve the models themselves: a setting of this process would not reach them
        typer.echo("error: --s3-endpoint-url applies to a single-host endpoint; with --ray set "
                   "LLMHOST_S3_ENDPOINT_URL on every node", err=True)  # fmt: skip
        raise typer.Exit(2)
    use_s3_endpoint(s3_endpoint_url)
    try:
        console = ConsoleSettings(period_s=console_period, reports_dir=reports)
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if ray:
        ray_timing = dict(health_check_period_s=health_interval, health_check_timeout_s=health_timeout,
                          drain_timeout_s=drain_timeout, metrics_interval_s=autoscale_interval,
                          look_back_period_s=autoscale_window,
                          placement_timeout_s=placement_timeout)  # fmt: skip
        where = dict(address=ray_address or None, dashboard=ray_dashboard or None, host=host, port=port)
        _up_ray(spec, where, ray_timing, keys, log_level, console)
        return
    _up_single(spec, host, port, log_dir, autoscale_interval, drain_timeout,
               (health_interval, health_timeout, health_misses), log_level, keys, console)  # fmt: skip


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
    return parse_endpoint(data, str(file) if file is not None else "command line")


def with_routing(spec: EndpointSpec, policy: str | None) -> EndpointSpec:
    """`spec` with every component's routing policy set to `policy` (None: as the file says)."""
    from llmhost.endpoint.spec import SpecError

    if policy is None:
        return spec
    if policy not in ("least_outstanding", "prefix"):
        raise SpecError(f"--routing: least_outstanding or prefix, got {policy!r}")
    comps = [c.model_copy(update={"routing": c.routing.model_copy(update={"policy": policy})})
             for c in spec.components]  # fmt: skip
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


def _up_single(spec: EndpointSpec, host: str, port: int, log_dir: Path | None, autoscale_interval: float,
               drain_timeout: float, health: tuple[float, float, int], log_level: str,
               keys: ApiKeys, console: ConsoleSettings) -> None:  # fmt: skip
    import uvicorn

    from llmhost.endpoint.app import create_app
    from llmhost.endpoint.manager import EndpointManager, ManagerTiming
    from llmhost.endpoint.replica import ReplicaTiming
    from llmhost.lifecycle import GracefulServer, Lifecycle

    interval, timeout, misses = health
    replica_timing = ReplicaTiming(ping_interval_s=interval, ping_timeout_s=timeout, ping_misses=misses)
    timing = ManagerTiming(autoscale_interval_s=autoscale_interval, drain_timeout_s=drain_timeout,
                           replica=replica_timing)  # fmt: skip
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
    manager = _checked_manager(EndpointManager(spec, log_dir=log_dir, timing=timing))
    folder = ""
    if spec.models_dir is not None:
        folder = f" and {len(manager.folder)} on-demand model(s) of {spec.models_dir.path}"
    typer.echo(
        f"llmhost endpoint {spec.name}: {len(spec.components)} component(s){folder} on {host}:{port}; "
        f"CPUs {','.join(map(str, manager.ledger.cpus))}, {manager.ledger.memory_mb} MB available; "
        f"copy logs in {manager.log_dir}"
    )
    lifecycle = Lifecycle(grace_s=drain_timeout)
    asgi_app = create_app(manager, lifecycle=lifecycle, keys=keys, console=console)
    config = uvicorn.Config(asgi_app, host=host, port=port, log_level=log_level.lower(),
                            timeout_graceful_shutdown=5)  # fmt: skip
    GracefulServer(config, lifecycle).run()
    if lifecycle.exit_code:
        raise typer.Exit(lifecycle.exit_code)


def _checked_manager(manager: EndpointManager) -> EndpointManager:
    """Models resolved (each once: the copies reuse it) and capacity checked before anything starts. A
    model reference naming nothing is a usage error (2), as for `llmhost serve`; no room is 1."""
    from llmhost.endpoint.control_errors import ComponentError, ModelRefError
    from llmhost.endpoint.placement import InsufficientCapacityError
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


def _up_ray(spec: EndpointSpec, where: dict[str, Any], timing: dict[str, float], keys: ApiKeys,
            log_level: str, console: ConsoleSettings) -> None:  # fmt: skip
    import importlib.util

    from llmhost.endpoint.spec import SpecError

    if importlib.util.find_spec("ray") is None:
        typer.echo("error: --ray needs Ray Serve: pip install 'llmhost[ray]'", err=True)
        raise typer.Exit(2)
    from llmhost.endpoint.rayserve.options import RayTiming
    from llmhost.endpoint.rayserve.serveapi import ServeApiError
    from llmhost.endpoint.rayserve.up import RayEndpointError, RayUp, run

    try:
        up = RayUp(timing=RayTiming(**timing), keys=keys, log_level=log_level, console=console, **where)
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    for c in spec.components:
        if c.resources.max_memory_mb is not None:  # placement and limits are Ray's
            typer.echo(f"warning: component {c.name!r}: max_memory_mb is not enforced on Ray (Ray's memory "
                       "monitor kills workers when a node runs low on memory)", err=True)  # fmt: skip
    place = f"the Ray cluster at {up.address}" if up.address else "a local Ray instance"
    typer.echo(f"llmhost endpoint {spec.name}: {len(spec.components)} component(s) on {place}, "
               f"{up.host}:{up.port}")  # fmt: skip
    try:
        why = run(spec, up)
    except SpecError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    except (RayEndpointError, ServeApiError, ValueError, OSError) as exc:
        typer.echo(f"error: endpoint {spec.name!r} refused: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"llmhost endpoint {spec.name}: stopped ({why})")


def client_key(environ: dict[str, str]) -> str:
    """The key an admin command sends: $LLMHOST_API_KEY, else the first of $LLMHOST_API_KEYS."""
    for raw in (environ.get(CLIENT_KEY_ENV, ""), environ.get(ENV_KEYS, "")):
        keys = [k.strip() for k in raw.split(",") if k.strip()]
        if keys:
            return keys[0]
    return ""


def _client(host: str, port: int) -> httpx.Client:
    key = client_key(dict(os.environ))
    headers = {"Authorization": f"Bearer {key}"} if key else None
    return httpx.Client(base_url=f"http://{host}:{port}", timeout=httpx.Timeout(10.0, read=None),
                        headers=headers)  # fmt: skip


def _call(host: str, port: int, method: str, path: str, **kw: Any) -> Any:
    try:
        with _client(host, port) as c:
            resp = c.request(method, path, **kw)
    except httpx.TransportError as exc:
        typer.echo(f"error: no endpoint answers on {host}:{port}: {exc}", err=True)
        raise typer.Exit(1) from None
    try:
        data = resp.json()
    except ValueError:
        data = {"error": {"message": resp.text}}
    if resp.status_code >= 400:
        msg = data.get("error", {}).get("message", resp.text) if isinstance(data, dict) else resp.text
        typer.echo(f"error: {msg}", err=True)
        raise typer.Exit(1)
    return data


@app.command()
def status(
    port: PortOpt = DEFAULT_PORT,
    host: HostOpt = "127.0.0.1",
    json_out: Annotated[bool, typer.Option("--json", help="Print the raw JSON.")] = False,
) -> None:
    """Components, copies, their state, CPUs, memory and load."""
    import json

    from rich.console import Console
    from rich.table import Table

    data = _call(host, port, "GET", "/admin/status")
    if json_out:
        typer.echo(json.dumps(data, indent=2))
        return
    if data.get("backend") == "ray":
        Console(width=max(Console().width, 160)).print(_ray_table(data))
        return
    cpus = ",".join(map(str, data["cpus"]))
    reserved = f"{data['memory_reserved_mb']}/{data['memory_mb']} MB reserved"
    table = Table(title=f"endpoint {data['name']} ({reserved}, CPUs {cpus})")
    for col in ("component", "copy", "state", "pid", "CPUs", "threads", "memory MB (rss/resv/max)",
                "load", "served", "restarts", "last reason"):  # fmt: skip
        table.add_column(col)
    for comp in data["components"]:
        if not comp["replicas"]:
            what = f"{comp['on_demand']['state']}" if comp.get("on_demand") else "no copies"
            table.add_row(comp["name"], "-", what, "", "", "", "", str(comp["in_flight"]), "", "", "")
        for r in comp["replicas"]:
            cpus = ",".join(map(str, r["cpus"])) + (f" ({r['cpu_share']:g})" if r["cpu_share"] < 1 else "")
            mem = f"{r['rss_mb'] or '-'}/{r['memory_mb']}/{r['max_memory_mb'] or '-'}"
            table.add_row(comp["name"], r["copy"], r["state"], str(r["pid"] or "-"), cpus, str(r["threads"]),
                          mem, str(r["outstanding"]), str(r["served"]), str(r["restarts"]),
                          r["last_reason"] or "")  # fmt: skip
    console = Console(width=max(Console().width, 160))
    console.print(table)
    if any(c.get("on_demand") for c in data["components"]):
        console.print(_on_demand_table(data))


def _on_demand_table(data: dict[str, Any]) -> Any:
    from rich.table import Table

    policy = data["on_demand"]
    limits = ", ".join(f"{k}={policy[k]}" for k in ("max_loaded", "memory_budget_mb")
                       if policy[k] is not None)  # fmt: skip
    table = Table(title=f"on-demand models{f' ({limits})' if limits else ''}")
    for col in ("model", "state", "pinned", "keep_alive s", "idle s", "CPUs", "memory MB", "loads",
                "load s (last/total)", "unloads", "evictions"):  # fmt: skip
        table.add_column(col)
    for c in data["components"]:
        d = c.get("on_demand")
        if not d:
            continue
        last = f"{d['last_load_s']:.2f}" if d["last_load_s"] is not None else "-"
        table.add_row(c["name"], d["state"], "yes" if d["pinned"] else "", f"{d['keep_alive']:g}",
                      f"{d['idle_s']:g}", f"{c['num_cpus']:g}", str(c["memory_mb"]), str(d["loads"]),
                      f"{last}/{d['load_seconds']:.2f}", _counts(d["unloads"]),
                      _counts(d["evictions"]))  # fmt: skip
    return table


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "-"


def _ray_table(data: dict[str, Any]) -> Any:
    from rich.table import Table

    says = f"{data['status']}: {data['message']}" if data["message"] else data["status"]
    table = Table(title=f"endpoint {data['name']} on Ray Serve ({says})")
    for col in ("component", "copy", "state", "node", "pid", "CPUs", "memory MB", "copies (ready/target)",
                "in flight", "Ray says"):  # fmt: skip
        table.add_column(col)
    for c in data["components"]:
        common = (str(c["num_cpus"]), str(c["memory_mb"]), f"{c['ready']}/{c['copies']}", str(c["in_flight"]))
        if not c["replicas"]:
            table.add_row(c["name"], "-", "no copies", "", "", *common, c["message"])
        for r in c["replicas"]:
            node = f"{r['node_ip']} {r['node_id'][:8]}"
            table.add_row(c["name"], r["copy"], r["state"], node, str(r["pid"] or "-"), *common, c["message"])
    return table


@app.command()
def scale(
    component: Annotated[str, typer.Argument(help="Component name.")],
    copies: Annotated[int, typer.Argument(help="Copies wanted.")],
    port: PortOpt = DEFAULT_PORT,
    host: HostOpt = "127.0.0.1",
    wait: Annotated[bool, typer.Option(help="Return once new copies are ready / old ones drained.")] = True,
) -> None:
    """Set a component's copies; stopping copies drain their requests first. On a Ray endpoint this pins
    the component to COPIES: its autoscaling is off (`status` shows the pinned copies) until the file
    is deployed again with `up --ray`."""
    data = _call(
        host, port, "POST", "/admin/scale", json={"component": component, "copies": copies, "wait": wait}
    )
    if wait:
        typer.echo(f"{component}: {data['ready']} ready of {data['copies']} copies")
    else:
        typer.echo(f"{component}: scaling to {copies} copies")


@app.command()
def add(
    file: Annotated[Path, typer.Argument(help="YAML: one component, or `components: [...]`.")],
    port: PortOpt = DEFAULT_PORT,
    host: HostOpt = "127.0.0.1",
) -> None:
    """Add components to a running endpoint (refused if they do not fit)."""
    from llmhost.endpoint.spec import SpecError, parse_components, read_yaml

    try:
        raw = read_yaml(file)
        parse_components(raw, str(file))
    except SpecError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    data = _call(host, port, "POST", "/admin/components", json=raw)
    typer.echo(f"added {', '.join(data['added'])}")


@app.command()
def remove(
    component: Annotated[str, typer.Argument(help="Component name.")],
    port: PortOpt = DEFAULT_PORT,
    host: HostOpt = "127.0.0.1",
) -> None:
    """Remove a component: new requests are refused, those in flight finish, its copies stop."""
    _call(host, port, "DELETE", f"/admin/components/{component}")
    typer.echo(f"removed {component}")


@app.command()
def load(
    model: Annotated[str, typer.Argument(help="On-demand model name.")],
    port: PortOpt = DEFAULT_PORT,
    host: HostOpt = "127.0.0.1",
    wait: Annotated[bool, typer.Option(help="Return once it is loaded.")] = True,
) -> None:
    """Load an on-demand model now, unloading least recently used idle ones if it needs the room."""
    data = _call(host, port, "POST", "/admin/models/load", json={"model": model, "wait": wait})
    if wait:
        d = data["on_demand"]
        took = f" (loaded in {d['last_load_s']:.2f} s)" if d["last_load_s"] is not None else ""
        typer.echo(f"{model}: {d['state']}{took}")
    else:
        typer.echo(f"{model}: loading")


@app.command()
def unload(
    model: Annotated[str, typer.Argument(help="On-demand model name.")],
    port: PortOpt = DEFAULT_PORT,
    host: HostOpt = "127.0.0.1",
) -> None:
    """Unload an on-demand model (pinned ones too): its requests in flight finish, then its copy stops."""
    data = _call(host, port, "POST", "/admin/models/unload", json={"model": model})
    typer.echo(f"{model}: unloaded" if data["unloaded"] else f"{model}: was not loaded ({data['state']})")


@app.command()
def reload(port: PortOpt = DEFAULT_PORT, host: HostOpt = "127.0.0.1") -> None:
    """Scan the endpoint's models_dir again: new models appear, removed ones are drained and go."""
    data = _call(host, port, "POST", "/admin/models/reload")
    for key in ("added", "removed", "changed"):
        typer.echo(f"{key}: {', '.join(data[key]) or '-'}")


@app.command()
def down(port: PortOpt = DEFAULT_PORT, host: HostOpt = "127.0.0.1") -> None:
    """Stop the endpoint: it drains in-flight requests, stops every copy and exits."""
    data = _call(host, port, "POST", "/admin/down")
    typer.echo(f"endpoint {data['stopping']} is draining and stopping")

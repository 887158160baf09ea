"""`llmhost endpoint`: run an endpoint from a file, and operate a running one."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

from llmhost.endpoint import launch
from llmhost.endpoint.launch import (  # noqa: F401  # endpoint_spec and the modes' options: their old home
    DEFAULT_PORT,
    RAY_ONLY,
    SINGLE_HOST_ONLY,
    CopyTiming,
    EndpointListen,
    FileOptions,
    RayOptions,
    endpoint_spec,
)
from llmhost.settings.cli import grouped
from llmhost.settings.serve import AuthOptions, ConsoleOptions, LogOptions, TraceOptions
from llmhost.store.options import S3EndpointOpt
from llmhost.web.auth import ENV_KEY, ENV_KEYS

app = typer.Typer(
    help="Endpoints: several models and copies behind one port, with autoscaling.", no_args_is_help=True
)

PortOpt = Annotated[int, typer.Option(help="The endpoint's port.")]
# the key the admin commands (status, scale, ...) send to an endpoint that requires one; without it, the
# first of $LLMHOST_API_KEYS (the server's variable: one shell that started the endpoint can operate it)
CLIENT_KEY_ENV = ENV_KEY
HostOpt = Annotated[str, typer.Option(help="The endpoint's address (the admin API answers local clients).")]


@app.command()
@grouped(
    listen=EndpointListen,
    overrides=FileOptions,
    timing=CopyTiming,
    ray=RayOptions,
    auth=AuthOptions,
    log=LogOptions,
    console=ConsoleOptions,
    trace=TraceOptions,
)
def up(
    ctx: typer.Context,
    file: Annotated[
        Path | None,
        typer.Argument(
            help="Endpoint file (YAML; docs/reference/endpoint-file.md); optional with --models-dir."
        ),
    ] = None,
    *,
    listen: EndpointListen,
    overrides: FileOptions,
    timing: CopyTiming,
    ray: RayOptions,
    auth: AuthOptions,
    log: LogOptions,
    console: ConsoleOptions,
    trace: TraceOptions,
    s3_endpoint_url: S3EndpointOpt = "",
) -> None:
    """Start an endpoint: place every component, start its copies, route on PORT. SIGTERM drains. The
    console is at http://HOST:PORT/console."""
    given = launch.Up(
        file=file,
        s3_endpoint_url=s3_endpoint_url,
        listen=listen,
        overrides=overrides,
        timing=timing,
        ray=ray,
        auth=auth,
        log=log,
        console=console,
        trace=trace,
    )
    launch.start(ctx, given)


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
    return httpx.Client(
        base_url=f"http://{host}:{port}", timeout=httpx.Timeout(10.0, read=None), headers=headers
    )


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
        _print_adapters(data)
        return
    cpus = ",".join(map(str, data["cpus"]))
    reserved = f"{data['memory_reserved_mb']}/{data['memory_mb']} MB reserved"
    table = Table(title=f"endpoint {data['name']} ({reserved}, CPUs {cpus})")
    for col in (
        "component",
        "copy",
        "state",
        "pid",
        "CPUs",
        "threads",
        "memory MB (rss/resv/max)",
        "load",
        "served",
        "restarts",
        "last reason",
    ):
        table.add_column(col)
    for comp in data["components"]:
        if not comp["replicas"]:
            what = f"{comp['on_demand']['state']}" if comp.get("on_demand") else "no copies"
            table.add_row(comp["name"], "-", what, "", "", "", "", str(comp["in_flight"]), "", "", "")
        for r in comp["replicas"]:
            cpus = ",".join(map(str, r["cpus"])) + (f" ({r['cpu_share']:g})" if r["cpu_share"] < 1 else "")
            mem = f"{r['rss_mb'] or '-'}/{r['memory_mb']}/{r['max_memory_mb'] or '-'}"
            mem += f" ({r['memory_limit']})" if r["memory_limit"] else ""
            table.add_row(
                comp["name"],
                r["copy"],
                r["state"],
                str(r["pid"] or "-"),
                cpus,
                str(r["threads"]),
                mem,
                str(r["outstanding"]),
                str(r["served"]),
                str(r["restarts"]),
                r["last_reason"] or "",
            )
    console = Console(width=max(Console().width, 160))
    console.print(table)
    if any(c.get("on_demand") for c in data["components"]):
        console.print(_on_demand_table(data))
    if any(c.get("variants") for c in data["components"]):
        console.print(_variant_table(data))
    _print_adapters(data)


def _variant_table(data: dict[str, Any]) -> Any:
    """Each component's production variants (weight, share, requests) and shadow variants (percent,
    copies sent and dropped, latency, agreement with the primary at temperature 0)."""
    from rich.table import Table

    table = Table(title="variants")
    for col in (
        "component",
        "variant",
        "weight",
        "share / shadow",
        "requests",
        "copies (ready)",
        "mean latency s",
        "shadow sent/failed/dropped",
        "agreement (compared)",
    ):
        table.add_column(col)
    for c in data["components"]:
        for v in c.get("variants") or []:
            s = v["shadow"]
            latency = s["mean_latency_s"] if s else v["mean_latency_s"]
            table.add_row(
                c["name"],
                v["name"],
                f"{v['weight']:g}" if v["weight"] is not None else "-",
                f"shadow {s['percent']:g}%" if s else f"{100 * (v['share'] or 0):.1f}%",
                str(v["routed"]) if not s else "-",
                f"{v['copies']} ({v['ready']})",
                f"{latency:.3f}" if latency is not None else "-",
                f"{s['sent']}/{s['failed']}/{s['dropped']}" if s else "",
                _agreement(s),
            )
    return table


def _agreement(shadow: dict[str, Any] | None) -> str:
    if not shadow:
        return ""
    rate = shadow["agreement"]
    return (f"{100 * rate:.1f}%" if rate is not None else "-") + f" ({shadow['compared']})"


def _print_adapters(data: dict[str, Any]) -> None:
    from rich.console import Console

    if any(c.get("adapters") for c in data["components"]):
        Console(width=max(Console().width, 160)).print(
            _adapter_table(
                [{**a, "component": c["name"]} for c in data["components"] for a in c.get("adapters", [])]
            )
        )


def _adapter_table(rows: list[dict[str, Any]]) -> Any:
    """LoRA adapters by the component whose copies load them; adapter inference components marked."""
    from rich.table import Table

    table = Table(title="LoRA adapters")
    for col in (
        "adapter",
        "kind",
        "base component",
        "scale",
        "path",
        *(["copies", "requests"] if rows and "copies" in rows[0] else []),
    ):
        table.add_column(col)
    for a in rows:
        kind = "inference component" if a["inference_component"] else "adapter"
        counts = [str(a["copies"]), str(a["requests"])] if "copies" in a else []
        table.add_row(a["name"], kind, a["component"], f"{a['scale']:g}", a["path"], *counts)
    return table


def _on_demand_table(data: dict[str, Any]) -> Any:
    from rich.table import Table

    policy = data["on_demand"]
    limits = ", ".join(
        f"{k}={policy[k]}" for k in ("max_loaded", "memory_budget_mb") if policy[k] is not None
    )
    table = Table(title=f"on-demand models{f' ({limits})' if limits else ''}")
    for col in (
        "model",
        "state",
        "pinned",
        "keep_alive s",
        "idle s",
        "CPUs",
        "memory MB",
        "loads",
        "load s (last/total)",
        "unloads",
        "evictions",
    ):
        table.add_column(col)
    for c in data["components"]:
        d = c.get("on_demand")
        if not d:
            continue
        last = f"{d['last_load_s']:.2f}" if d["last_load_s"] is not None else "-"
        table.add_row(
            c["name"],
            d["state"],
            "yes" if d["pinned"] else "",
            f"{d['keep_alive']:g}",
            f"{d['idle_s']:g}",
            f"{c['num_cpus']:g}",
            str(c["memory_mb"]),
            str(d["loads"]),
            f"{last}/{d['load_seconds']:.2f}",
            _counts(d["unloads"]),
            _counts(d["evictions"]),
        )
    return table


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "-"


def _ray_table(data: dict[str, Any]) -> Any:
    from rich.table import Table

    says = f"{data['status']}: {data['message']}" if data["message"] else data["status"]
    table = Table(title=f"endpoint {data['name']} on Ray Serve ({says})")
    for col in (
        "component",
        "copy",
        "state",
        "node",
        "pid",
        "CPUs",
        "memory MB",
        "copies (ready/target)",
        "in flight",
        "Ray says",
    ):
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
def weights(
    component: Annotated[str, typer.Argument(help="The component with variants.")],
    weights: Annotated[
        list[str], typer.Argument(help="VARIANT=WEIGHT ... (a shadow variant's: the percent copied to it).")
    ],
    port: PortOpt = DEFAULT_PORT,
    host: HostOpt = "127.0.0.1",
) -> None:
    """Set the weights of a component's variants at run time (SageMaker's
    UpdateEndpointWeightsAndCapacities): requests from now on split by them."""
    parsed: dict[str, float] = {}
    for item in weights:
        name, sep, value = item.partition("=")
        try:
            parsed[name] = float(value)
        except ValueError:
            sep = ""
        if not sep or not name:
            typer.echo(f"error: {item!r}: expected VARIANT=WEIGHT, e.g. a=3", err=True)
            raise typer.Exit(2) from None
    data = _call(host, port, "POST", "/admin/weights", json={"component": component, "weights": parsed})
    shown = ", ".join(
        f"{v['name']} {v['weight']:g} ({100 * (v['share'] or 0):.1f}%)"
        if v["shadow"] is None
        else f"{v['name']} shadow {v['shadow']['percent']:g}%"
        for v in data["variants"]
    )
    typer.echo(f"{component}: {shown}")


@app.command()
def down(port: PortOpt = DEFAULT_PORT, host: HostOpt = "127.0.0.1") -> None:
    """Stop the endpoint: it drains in-flight requests, stops every copy and exits."""
    data = _call(host, port, "POST", "/admin/down")
    typer.echo(f"endpoint {data['stopping']} is draining and stopping")


adapters = typer.Typer(
    help="LoRA adapters on a component's copies: list, load, unload (all copies at once).",
    no_args_is_help=True,
)
app.add_typer(adapters, name="adapters")


@adapters.command("list")
def adapters_list(
    component: Annotated[str | None, typer.Option(help="One component's adapters.")] = None,
    port: PortOpt = DEFAULT_PORT,
    host: HostOpt = "127.0.0.1",
) -> None:
    """Each component's adapters, with the ready copies that have each loaded and the requests using it."""
    from rich.console import Console

    data = _call(host, port, "GET", "/admin/adapters", params={"component": component} if component else None)
    Console(width=max(Console().width, 140)).print(_adapter_table(data["data"]))


@adapters.command("load")
def adapters_load(
    component: Annotated[str, typer.Argument(help="The component whose copies load it.")],
    name: Annotated[str, typer.Argument(help="What requests name in `model`.")],
    path: Annotated[str, typer.Argument(help="A LoRA GGUF: a file, s3://..., hf://OWNER/REPO/FILE.gguf.")],
    scale: Annotated[float, typer.Option(help="What a request naming the adapter gets.")] = 1.0,
    port: PortOpt = DEFAULT_PORT,
    host: HostOpt = "127.0.0.1",
) -> None:
    """Load a LoRA adapter on every copy of a component (and on the copies it starts later)."""
    body = {"component": component, "name": name, "path": path, "scale": scale}
    data = _call(host, port, "POST", "/admin/adapters/load", json=body)
    [row] = [r for r in data["data"] if r["name"] == name]
    typer.echo(f"{name}: loaded on {row['copies']} cop{'y' if row['copies'] == 1 else 'ies'} of {component}")


@adapters.command("unload")
def adapters_unload(
    component: Annotated[str, typer.Argument(help="The component whose copies load it.")],
    name: Annotated[str, typer.Argument(help="The adapter's name.")],
    port: PortOpt = DEFAULT_PORT,
    host: HostOpt = "127.0.0.1",
) -> None:
    """Unload a LoRA adapter from every copy of a component (refused while requests use it)."""
    _call(host, port, "POST", "/admin/adapters/unload", json={"component": component, "name": name})
    typer.echo(f"{name}: unloaded from {component}")

"""Dependencies point one way (docs/explanations/how-it-works.md): a module imports its own layer and
those below, never one above; bench and endpoint never import each other; llama.cpp and Ray are imported
only where they are used. Every import counts, those inside functions and under TYPE_CHECKING too."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

# top to bottom; each entry is one layer, its packages and modules
LAYERS: list[tuple[str, ...]] = [
    ("llmhost.cli",),
    ("llmhost.tune",),
    # transforms a model; runs a batch file to its end (a local server started for it, over HTTP)
    ("llmhost.optimize", "llmhost.offline"),
    ("llmhost.bench", "llmhost.endpoint"),
    # the server, and what `llmhost serve` builds it from (settings.build makes its ServerSettings); the
    # jobs (files, batches) a server and the endpoint router both serve, read with the server's parsers
    ("llmhost.server", "llmhost.settings.build", "llmhost.jobs"),
    # the console's API and page, which the server and the endpoint serve
    ("llmhost.console",),
    # what every front end shares: ASGI middleware, auth, each API's error bodies, the OpenAPI helpers
    ("llmhost.web", "llmhost.inference"),
    # a process's life: serving and draining, Ctrl-C, children that end with it
    ("llmhost.process",),
    # the settings declared once, and as command-line options (no llama.cpp, no server)
    ("llmhost.settings",),
    ("llmhost.engine", "llmhost.store", "llmhost.shared", "llmhost"),
]
# layers whose parts never import one another
APART = [("llmhost.bench", "llmhost.endpoint")]
# third-party modules only these parts may import
ONLY_IN = {
    # the engine's llama.cpp calls, in one package (and optimize's quantizer)
    "llama_cpp": ("llmhost.engine.llamacpp", "llmhost.optimize"),
    "ray": ("llmhost.endpoint.rayserve",),
    # the `otel` extra, behind --otlp-traces-endpoint
    "opentelemetry": ("llmhost.web.otel",),
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in (SRC / "llmhost").rglob("*.py")}


def imports(name: str, path: Path) -> Iterator[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            yield base
            # `from llmhost.web import eventstream` imports the module llmhost.web.eventstream
            yield from (f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES)


def part_of(name: str, parts: tuple[str, ...]) -> str | None:
    """The longest of `parts` that `name` is or lies inside."""
    hits = [p for p in parts if name == p or name.startswith(p + ".")]
    return max(hits, key=len) if hits else None


def layer_of(name: str) -> int:
    every = tuple(p for layer in LAYERS for p in layer)
    part = part_of(name, every)
    assert part is not None, f"{name} is in no layer: add it to LAYERS"
    return next(i for i, layer in enumerate(LAYERS) if part in layer)


def test_every_module_has_a_layer() -> None:
    for name in MODULES:
        layer_of(name)


def test_no_module_imports_a_higher_layer() -> None:
    upward = []
    for name, path in MODULES.items():
        for target in imports(name, path):
            if target.split(".")[0] == "llmhost" and layer_of(target) < layer_of(name):
                upward.append(f"{name} -> {target}")
    assert upward == [], "imports pointing up:\n" + "\n".join(upward)


def test_siblings_stay_apart() -> None:
    crossing = []
    for name, path in MODULES.items():
        for pair in APART:
            mine = part_of(name, pair)
            for target in imports(name, path) if mine else ():
                theirs = part_of(target, pair)
                if theirs is not None and theirs != mine:
                    crossing.append(f"{name} -> {target}")
    assert crossing == []


def test_heavy_libraries_are_imported_only_where_used() -> None:
    stray = []
    for name, path in MODULES.items():
        for target in imports(name, path):
            allowed = ONLY_IN.get(target.split(".")[0])
            if allowed is not None and part_of(name, allowed) is None:
                stray.append(f"{name} -> {target}")
    assert stray == []


def test_the_checker_sees_an_upward_import(tmp_path: Path) -> None:
    path = tmp_path / "engine_mod.py"
    path.write_text("def f():\n    from llmhost.server import app\n    from .. import cli\n")
    found = list(imports("llmhost.engine.engine_mod", path))
    assert "llmhost.server" in found and any(layer_of(t) < layer_of("llmhost.engine") for t in found)


def test_no_import_cycles_between_modules() -> None:
    """Package `__init__` re-exports aside: a cycle (store's resolve -> s3 -> download -> s3client ->
    resolve was one) means two modules share something that belongs in a third."""
    packages = {name for name, path in MODULES.items() if path.name == "__init__.py"}
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        if name in packages:
            continue
        targets = set()
        for target in imports(name, path):
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target and target != name and target not in packages:
                targets.add(target)
        graph[name] = targets
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> None:
        if node in path:
            raise AssertionError("import cycle: " + " -> ".join([*path[path.index(node) :], node]))
        if node in done:
            return
        for nxt in sorted(graph.get(node, ())):
            visit(nxt, [*path, node])
        done.add(node)

    for name in sorted(graph):
        visit(name, [])

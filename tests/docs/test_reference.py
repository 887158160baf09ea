"""The generated reference says what the code has, no more, no less: every CLI command and flag, every
endpoint-file key, every operation of the OpenAPI document, every /metrics series and every environment
variable read is on its page, and each page lists nothing the code lacks. Each command's --help names
its docs page, which exists with that title."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from typer.testing import CliRunner

from docsgen import cli_ref, env_ref, http_ref, metrics_ref
from docsgen.hooks import expand
from llmhost.cli import DOCS_PAGES, app, docs_line
from llmhost.endpoint.spec import EndpointSpec
from llmhost.settings.serve import SERVE_SPEC
from tests.docs.runner import ROOT

DOCS = ROOT / "docs"
OPTION = re.compile(r"(?<![\w-])(--?[a-z][\w-]*)")


def page(name: str) -> str:
    return expand((DOCS / "reference" / name).read_text())


def sections(markdown: str, level: str = "## ") -> dict[str, str]:
    """A page's sections by their heading's code (## `llmhost serve` -> "llmhost serve")."""
    out: dict[str, str] = {}
    for part in re.split(rf"^{level}", markdown, flags=re.M)[1:]:
        title, _, body = part.partition("\n")
        out[title.strip().strip("`")] = body
    return out


def table_keys(markdown: str) -> list[str]:
    """The code of each first cell of a page's table rows (the header row excluded)."""
    cells = [line.split(" | ")[0][2:] for line in markdown.splitlines() if line.startswith("| `")]
    return [c.strip("`") for c in cells]


def test_every_command_and_flag_is_in_the_cli_reference_and_nothing_else() -> None:
    docs = sections(page("cli.md"))
    code = {" ".join(path): cmd for path, cmd in cli_ref.commands()}
    assert set(code) <= set(docs), f"commands missing from the reference: {set(code) - set(docs)}"
    extra = set(docs) - set(code) - {"serve` (the container's executable)"}
    assert not extra, f"the reference has commands the CLI lacks: {extra}"
    for name, cmd in code.items():
        want = set(cli_ref.flags(cmd))
        rows = [line for line in docs[name].splitlines() if line.startswith("| `")]
        documented = {o for row in rows for o in OPTION.findall(row.split(" | ")[0])}
        assert want == documented, f"{name}: missing {want - documented}, extra {documented - want}"


def test_the_serve_options_table_is_the_settings_spec() -> None:
    text = sections(page("cli.md"))["llmhost serve"]
    table = re.search(r"<!-- serve-options:start -->\n(.*?)\n<!-- serve-options:end -->", text, re.S)
    assert table is not None
    assert table.group(1) == SERVE_SPEC.table()
    for s in SERVE_SPEC:
        assert f"`{s.flag}" in table.group(1), s.name


def _schema_paths(schema: dict[str, Any], defs: dict[str, Any], prefix: str = "") -> set[str]:
    """Key paths of a JSON schema (pydantic's), `$ref`s and nullable/list wrappers followed."""
    out: set[str] = set()
    for name, prop in schema.get("properties", {}).items():
        path = f"{prefix}{name}"
        out.add(path)
        for sub, suffix in _objects(prop, defs):
            out |= _schema_paths(sub, defs, f"{path}{suffix}.")
    return out


Schema = dict[str, Any]


def _objects(prop: Schema, defs: Schema, suffix: str = "") -> list[tuple[Schema, str]]:
    if "$ref" in prop:
        return [(defs[prop["$ref"].rsplit("/", 1)[-1]], suffix)]
    if prop.get("type") == "array":
        return _objects(prop.get("items", {}), defs, suffix + "[]")
    return [o for alt in prop.get("anyOf", []) for o in _objects(alt, defs, suffix)]


def test_every_endpoint_file_key_is_in_the_reference_and_nothing_else() -> None:
    schema = EndpointSpec.model_json_schema()
    want = _schema_paths(schema, schema.get("$defs", {}))
    documented = set(table_keys(page("endpoint-file.md")))
    assert want == documented, f"missing {want - documented}, extra {documented - want}"
    assert {"components[].engine.chat_template", "components[].autoscaling.max_copies"} <= documented


def test_every_openapi_operation_is_in_the_http_reference_and_nothing_else() -> None:
    doc = http_ref.openapi()
    want = {f"{m.upper()} {p}" for p, item in doc["paths"].items() for m in item if m in http_ref.METHODS}
    documented = set(sections(page("http-api.md"), "### "))
    assert want == documented, f"missing {want - documented}, extra {documented - want}"
    assert {"POST /invocations", "GET /ping", "POST /v1/chat/completions"} <= documented


def test_every_metrics_series_is_in_the_reference_and_nothing_else() -> None:
    text = page("metrics.md")
    documented = set(re.findall(r"`(llmhost_\w+)`", text))
    want = metrics_ref.names()
    assert want == documented, f"missing {want - documented}, extra {documented - want}"
    assert "llmhost_requests_total" in documented


def test_every_environment_variable_read_is_in_the_reference_and_nothing_else() -> None:
    documented = set(table_keys(page("environment.md")))
    want = env_ref.read_in_source() | {s.env for s in SERVE_SPEC if s.env}
    assert want == documented, f"missing {want - documented}, extra {documented - want}"
    assert {"SM_MODEL_DIR", "LLMHOST_API_KEYS", "MAX_INPUT_LENGTH"} <= documented
    undescribed = [k for k, v in env_ref.variables().items() if not v]
    assert not undescribed, f"variables without a meaning in docsgen/env_ref.py: {undescribed}"


def test_the_errors_page_has_each_api_shape() -> None:
    text = page("errors.md")
    for shape in ("OpenAI shape", "TGI shape", "Anthropic shape", "SageMaker Runtime shape"):
        assert f"{shape}, status" in text
    assert "Retry-After" in text


@pytest.mark.parametrize("path", sorted(DOCS_PAGES), ids=" ".join)
def test_each_docs_page_of_the_help_exists_with_its_title(path: tuple[str, ...]) -> None:
    name, title = DOCS_PAGES[path]
    first = (DOCS / name).read_text().splitlines()[0]
    assert first == f"# {title}", f"docs/{name} starts {first!r}"


@pytest.mark.parametrize("path", [p for p, _ in cli_ref.commands()], ids=" ".join)
def test_each_command_help_ends_with_its_docs_page(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(app, [*path[1:], "--help"], env={"COLUMNS": "400", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    line = docs_line(path)
    assert " ".join(line.split()) in " ".join(result.output.split())
    page_path = re.search(r"docs/(\S+\.md)", line)
    assert page_path is not None and (DOCS / page_path.group(1)).is_file()


def test_the_container_serve_help_names_its_page() -> None:
    result = CliRunner().invoke(cli_sagemaker(), ["--help"], env={"COLUMNS": "400"})
    assert result.exit_code == 0
    assert "docs/guides/sagemaker.md" in result.output


def cli_sagemaker() -> typer.Typer:
    from llmhost.cli import sagemaker_app

    return sagemaker_app()


def test_every_reference_page_is_generated() -> None:
    for name in ("cli", "endpoint-file", "environment", "errors", "http-api", "metrics"):
        assert f"<!-- gen: {name} -->" in (DOCS / "reference" / f"{name}.md").read_text()
    assert "<!-- gen: performance -->" in (DOCS / "explanations" / "performance.md").read_text()
    assert yaml.safe_load(Path(ROOT / "mkdocs.yml").read_text())["hooks"] == ["docsgen/hooks.py"]


def test_every_benchmark_result_is_on_the_performance_page_with_its_charts() -> None:
    from docsgen import perf

    text = expand((DOCS / "explanations" / "performance.md").read_text())
    results = sorted(perf.RESULTS.glob("*.json"))
    assert results
    for path in results:
        assert f"### `{path.stem}`" in text, path.name
    for charts in perf.CHARTS.values():
        for title, _, _ in charts:
            assert f'aria-label="{title}"' in text.replace("&#x27;", "'"), title

"""docs/guides/supported-models.md cannot drift from the tests: every row of its tables names at least
one test, and every test it names exists (its file, its function, and its parameter among the
function's parametrize values)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
PAGE = ROOT / "docs" / "guides" / "supported-models.md"
TEST_ID = re.compile(r"`(tests/[\w/]+\.py)::(\w+)(?:\[([^\]`]+)\])?`")


def table_rows(text: str) -> list[str]:
    """The body rows of the page's tables (not their header and separator lines)."""
    rows: list[str] = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("|") or set(line) <= set("|-: "):
            continue
        header = i + 1 < len(lines) and set(lines[i + 1]) <= set("|-: ") and lines[i + 1].startswith("|")
        if not header:
            rows.append(line)
    return rows


def parametrized_ids(function: object) -> set[str]:
    ids: set[str] = set()
    for mark in getattr(function, "pytestmark", []):
        if mark.name == "parametrize":
            ids.update(str(v) for v in mark.args[1])
    return ids


def test_every_row_names_a_test() -> None:
    rows = table_rows(PAGE.read_text())
    assert len(rows) >= 20
    for row in rows:
        assert TEST_ID.search(row), f"a row names no test: {row[:100]}"


@pytest.mark.parametrize("test_id", sorted({m.group(0) for m in TEST_ID.finditer(PAGE.read_text())}))
def test_each_named_test_exists(test_id: str) -> None:
    match = TEST_ID.fullmatch(test_id)
    assert match is not None
    path, name, param = match.groups()
    assert (ROOT / path).is_file(), f"{path} does not exist"
    module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
    function = getattr(module, name, None)
    assert callable(function), f"{path} has no {name}"
    if param is not None:
        assert param in parametrized_ids(function), f"{name} is not parametrized with {param!r}"

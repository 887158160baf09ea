"""A batch file's lines checked before anything runs: each error names its line."""

from __future__ import annotations

import json
from pathlib import Path

from llmhost.jobs import lines

CHAT = "/v1/chat/completions"


def line(custom_id: str, url: str = CHAT, **extra: object) -> str:
    return json.dumps(
        {"custom_id": custom_id, "method": "POST", "url": url, "body": {"messages": []}, **extra}
    )


def check(tmp_path: Path, *rows: str) -> tuple[int, list[tuple[str, int | None, str | None]]]:
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(rows) + "\n")
    total, errors = lines.validate(path, CHAT)
    return total, [(e.code, e.line, e.param) for e in errors]


def test_a_good_file_counts_its_requests_and_blank_lines_are_skipped(tmp_path: Path) -> None:
    assert check(tmp_path, line("a"), "", line("b")) == (2, [])
    items = list(lines.read(tmp_path / "in.jsonl"))
    assert [(i.line, i.custom_id) for i in items if isinstance(i, lines.BatchLine)] == [(1, "a"), (3, "b")]


def test_each_wrong_line_is_named_with_what_is_wrong(tmp_path: Path) -> None:
    rows = [
        "{not json",
        "[1, 2]",
        json.dumps({"custom_id": "x", "method": "POST", "url": CHAT}),
        line("y", extra_key=1),
        line(""),
        line("z", method="GET"),
        line("w", url="/v1/completions"),
        line("v", body={"stream": True}),
        line("u"),
        line("u"),
    ]
    total, errors = check(tmp_path, *rows)
    assert total == 10
    assert errors == [
        ("invalid_json_line", 1, None),
        ("invalid_json_line", 2, None),
        ("missing_required_parameter", 3, "body"),
        ("invalid_request", 4, "extra_key"),
        ("invalid_custom_id", 5, "custom_id"),
        ("invalid_method", 6, "method"),
        ("mismatched_endpoint", 7, "url"),
        ("invalid_body", 8, "body.stream"),
        ("duplicate_custom_id", 10, "custom_id"),
    ]


def test_an_empty_file_and_errors_past_the_listed_ones(tmp_path: Path) -> None:
    assert check(tmp_path, "", "") == (0, [("empty_file", None, None)])
    path = tmp_path / "many.jsonl"
    path.write_text("x\n" * (lines.MAX_LISTED_ERRORS + 5))
    total, errors = lines.validate(path, CHAT)
    assert total == lines.MAX_LISTED_ERRORS + 5 and len(errors) == lines.MAX_LISTED_ERRORS
    assert errors[-1].message.endswith("(5 more lines have errors)")

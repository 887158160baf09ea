"""A batch input file, read a line at a time (never whole): each line one request, OpenAI's format
`{"custom_id", "method": "POST", "url", "body"}`, checked before anything runs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from llmhost.jobs.protocol import BatchError
from llmhost.shared.jsontypes import JSONObject

# OpenAI's bound on a batch's requests
MAX_BATCH_LINES = 50_000
# errors listed on a batch that failed validation (the rest are counted in the last message)
MAX_LISTED_ERRORS = 100
LINE_KEYS = ("custom_id", "method", "url", "body")


@dataclass(frozen=True, slots=True)
class BatchLine:
    """A request of the file: `line` counts the file's lines from 1, blank ones included."""

    line: int
    custom_id: str
    url: str
    body: JSONObject


def read(path: Path) -> Iterator[BatchLine | BatchError]:
    """Each non-blank line of the file, as a request or the error that makes it none."""
    with path.open("rb") as f:
        for number, raw in enumerate(f, start=1):
            if raw.strip():
                yield _parse(number, raw)


def _parse(number: int, raw: bytes) -> BatchLine | BatchError:
    try:
        obj = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return BatchError(code="invalid_json_line", message=f"line {number} is not JSON: {exc}", line=number)
    if not isinstance(obj, dict):
        return BatchError(
            code="invalid_json_line", message=f"line {number} is not a JSON object", line=number
        )
    for key in obj:
        if key not in LINE_KEYS:
            message = f"line {number}: unknown key {key!r} (a line has {', '.join(LINE_KEYS)})"
            return BatchError(code="invalid_request", message=message, param=key, line=number)
    for key in LINE_KEYS:
        if key not in obj:
            message = f"line {number}: missing required parameter {key!r}"
            return BatchError(code="missing_required_parameter", message=message, param=key, line=number)
    custom_id, method, url, body = obj["custom_id"], obj["method"], obj["url"], obj["body"]
    if not isinstance(custom_id, str) or not custom_id:
        message = f"line {number}: custom_id must be a non-empty string"
        return BatchError(code="invalid_custom_id", message=message, param="custom_id", line=number)
    if method != "POST":
        message = f"line {number}: method must be POST, got {method!r}"
        return BatchError(code="invalid_method", message=message, param="method", line=number)
    if not isinstance(url, str):
        return BatchError(
            code="invalid_url", message=f"line {number}: url must be a string", param="url", line=number
        )
    if not isinstance(body, dict):
        message = f"line {number}: body must be a JSON object"
        return BatchError(code="invalid_body", message=message, param="body", line=number)
    if body.get("stream"):
        message = f"line {number}: body.stream must be false in a batch (an answer is kept whole)"
        return BatchError(code="invalid_body", message=message, param="body.stream", line=number)
    return BatchLine(number, custom_id, url, body)


def validate(path: Path, endpoint: str) -> tuple[int, list[BatchError]]:
    """The file's request count and its errors (at most MAX_LISTED_ERRORS listed): a line that is no
    request, a url other than the batch's `endpoint`, a custom_id seen before, past MAX_BATCH_LINES."""
    seen: set[str] = set()
    errors: list[BatchError] = []
    n_errors = total = 0
    for item in read(path):
        error = item if isinstance(item, BatchError) else _check(item, endpoint, seen)
        total += 1
        if error is not None:
            n_errors += 1
            if len(errors) < MAX_LISTED_ERRORS:
                errors.append(error)
    if n_errors > len(errors):
        errors[-1].message += f" ({n_errors - len(errors)} more lines have errors)"
    if total > MAX_BATCH_LINES:
        message = f"the file has {total} requests; a batch holds at most {MAX_BATCH_LINES}"
        errors.append(BatchError(code="too_many_requests", message=message))
    elif total == 0:
        errors.append(BatchError(code="empty_file", message="the input file holds no request"))
    return total, errors


def _check(item: BatchLine, endpoint: str, seen: set[str]) -> BatchError | None:
    if item.url != endpoint:
        message = f"line {item.line}: url {item.url!r} is not the batch's endpoint {endpoint!r}"
        return BatchError(code="mismatched_endpoint", message=message, param="url", line=item.line)
    if item.custom_id in seen:
        message = f"line {item.line}: custom_id {item.custom_id!r} is used by an earlier line"
        return BatchError(code="duplicate_custom_id", message=message, param="custom_id", line=item.line)
    seen.add(item.custom_id)
    return None

"""SageMaker Batch Transform's wire contract: GET /execution-parameters' answer, and the JSON Lines
bodies /invocations reads with BatchStrategy MULTI_RECORD and SplitType Line (one record a line, each
answered on its own line). A refusal names the record's 1-based line in `line`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel

from llmhost.server.protocol.limits import parse_json
from llmhost.shared.jsontypes import JSONObject
from llmhost.web.errors import APIError

# the media types a JSON Lines body comes in (SageMaker's, and the other names clients use)
JSONLINES = "application/jsonlines"
JSONLINES_TYPES = frozenset({JSONLINES, "application/jsonl", "application/x-jsonlines"})


class ExecutionParameters(BaseModel):
    """What GET /execution-parameters answers: how SageMaker may call /invocations."""

    MaxConcurrentTransforms: int
    BatchStrategy: Literal["MULTI_RECORD", "SINGLE_RECORD"]
    MaxPayloadInMB: int


@dataclass(frozen=True, slots=True)
class Record:
    line: int  # 1-based, counting the empty lines skipped
    body: JSONObject


def is_jsonlines(content_type: str | None) -> bool:
    """Whether a Content-Type (parameters such as charset aside) is one of JSON Lines' names."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media in JSONLINES_TYPES


def on_line(error: APIError, line: int) -> APIError:
    """`error`, met by the record on `line`, as the whole body's refusal: the line in its message and
    `line`, the status, field, headers and format kept."""
    refusal = APIError(
        error.status,
        f"line {line}: {error.message}",
        error.type,
        field=error.field,
        extra={**error.extra, "line": line},
        headers=error.headers,
    )
    refusal.format = error.format
    return refusal


def read_records(raw: bytes) -> list[Record]:
    """The body's records, one JSON object a line; empty lines are skipped (SageMaker's Line split may
    leave a trailing newline). A line that is not a JSON object is a 400 naming it; so is a body with
    no record."""
    records: list[Record] = []
    for line, text in enumerate(raw.split(b"\n"), 1):
        if not text.strip():
            continue
        try:
            data = parse_json(text)
        except APIError as exc:
            raise on_line(exc, line) from exc
        if not isinstance(data, dict):
            raise on_line(APIError(400, "a record must be a JSON object", field="body"), line)
        records.append(Record(line, data))
    if not records:
        raise APIError(400, "request body has no record: every line is empty", field="body")
    return records


def one_record(records: list[Record]) -> None:
    """BatchStrategy SINGLE_RECORD: a body is one record; more is a 400 naming the strategy."""
    if len(records) > 1:
        raise APIError(
            400,
            f"request body has {len(records)} records (lines {records[0].line} and {records[1].line}...) but "
            "BatchStrategy is SINGLE_RECORD: one record a body (--batch-strategy, SAGEMAKER_BATCH_STRATEGY)",
            field="body",
            extra={"batch_strategy": "SINGLE_RECORD", "records": len(records)},
        )

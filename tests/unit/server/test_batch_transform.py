"""SageMaker Batch Transform's JSON Lines bodies as read, and its settings as `llmhost serve` takes them
(from the options or SageMaker's variables)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from starlette.responses import JSONResponse, Response

from llmhost.server.protocol.batch_transform import is_jsonlines, on_line, one_record, read_records
from llmhost.server.serving.batch_transform import BatchTransform
from llmhost.server.settings import ServerSettings
from llmhost.settings.build import ServeOptions, build
from llmhost.shared.jsontypes import JSONObject
from llmhost.store import resolve_model
from llmhost.web.errors import APIError
from llmhost.web.formats import TGI
from tests.unit.engine_fakes import config

MIB = 1024 * 1024


def test_records_are_numbered_by_line_and_empty_lines_skipped() -> None:
    raw = b'{"prompt": "a"}\n\n{"inputs": "b"}\r\n  \n{"messages": []}\n'
    records = read_records(raw)
    assert [(r.line, r.body) for r in records] == [
        (1, {"prompt": "a"}),
        (3, {"inputs": "b"}),
        (5, {"messages": []}),
    ]


@pytest.mark.parametrize(
    ("raw", "line", "message"),
    [
        (b'{"prompt": "a"}\n{"prompt": \n', 2, "line 2: request body is not valid JSON"),
        (b'{"prompt": "a"}\n\n[1, 2]\n', 3, "line 3: a record must be a JSON object"),
        (b'{"prompt": NaN}', 1, "line 1: request body has the number NaN"),
    ],
)
def test_a_bad_line_is_a_400_naming_it(raw: bytes, line: int, message: str) -> None:
    with pytest.raises(APIError) as err:
        read_records(raw)
    assert (err.value.status, err.value.field, err.value.extra["line"]) == (400, "body", line)
    assert err.value.message.startswith(message)


def test_a_body_of_empty_lines_has_no_record() -> None:
    with pytest.raises(APIError, match="no record") as err:
        read_records(b"\n \n")
    assert err.value.status == 400 and err.value.field == "body"


def test_single_record_refuses_a_second_record_naming_the_strategy() -> None:
    one_record(read_records(b'{"prompt": "a"}\n'))
    with pytest.raises(APIError, match="SINGLE_RECORD") as err:
        one_record(read_records(b'{"prompt": "a"}\n{"prompt": "b"}\n'))
    assert err.value.status == 400 and err.value.extra == {"batch_strategy": "SINGLE_RECORD", "records": 2}


def test_a_records_refusal_keeps_its_status_field_and_format() -> None:
    error = APIError(422, "max_tokens: too many", field="max_tokens", extra={"limit": 8}).written_in(TGI)
    refusal = on_line(error, 4)
    assert (refusal.status, refusal.field, refusal.format) == (422, "max_tokens", TGI)
    assert refusal.extra == {"limit": 8, "line": 4} and refusal.message == "line 4: max_tokens: too many"


@pytest.mark.parametrize(
    ("content_type", "expected"),
    [
        ("application/jsonlines", True),
        ("application/jsonl", True),
        ("application/x-jsonlines; charset=utf-8", True),
        ("Application/JSONLines", True),
        ("application/json", False),
        (None, False),
    ],
)
def test_jsonlines_media_types(content_type: str | None, expected: bool) -> None:
    assert is_jsonlines(content_type) is expected


def test_without_sagemakers_variables_the_defaults_hold() -> None:
    s = build(ServeOptions(str(resolve_model()), max_concurrent=3), env={}).settings
    assert (s.max_body_bytes, s.max_payload_mb, s.batch_strategy) == (6 * MIB, 6, "MULTI_RECORD")
    assert s.concurrent_transforms == 3  # the engine's sequences


def test_sagemakers_batch_variables_set_the_limits_and_options_win() -> None:
    env = {
        "SAGEMAKER_BATCH": "true",
        "SAGEMAKER_MAX_PAYLOAD_IN_MB": "2",
        "SAGEMAKER_BATCH_STRATEGY": "SINGLE_RECORD",
        "SAGEMAKER_MAX_CONCURRENT_TRANSFORMS": "5",
    }
    s = build(ServeOptions(str(resolve_model())), env=env).settings
    assert (s.max_body_bytes, s.max_payload_mb, s.batch_strategy) == (2 * MIB, 2, "SINGLE_RECORD")
    assert s.concurrent_transforms == 5
    given = ServeOptions(str(resolve_model()), max_payload_mb=1, max_concurrent_transforms=4)
    s = build(given, env=env).settings
    assert (s.max_body_bytes, s.concurrent_transforms) == (MIB, 4)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"SAGEMAKER_BATCH_STRATEGY": "MULTI"}, "batch_strategy must be one of MULTI_RECORD, SINGLE_RECORD"),
        ({"SAGEMAKER_MAX_PAYLOAD_IN_MB": "six"}, "SAGEMAKER_MAX_PAYLOAD_IN_MB='six' is not an integer"),
        ({"SAGEMAKER_MAX_CONCURRENT_TRANSFORMS": "-1"}, "max_concurrent_transforms must be >= 0"),
        ({"SAGEMAKER_MAX_PAYLOAD_IN_MB": "-1"}, "SAGEMAKER_MAX_PAYLOAD_IN_MB"),
    ],
)
def test_a_bad_variable_is_refused_naming_it(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build(ServeOptions(str(resolve_model())), env=env)


def _batch(**settings: Any) -> BatchTransform:
    return BatchTransform(
        ServerSettings(model_path=Path("m.gguf"), engine=config(max_concurrent=4), **settings)
    )


class Invocations:
    """An /invocations stand-in answering each record after a pause, counting those answered at once."""

    def __init__(self, refuse: int | None = None) -> None:
        self.running = self.most = 0
        self.refuse = refuse
        self.cancelled = 0

    async def __call__(self, body: JSONObject) -> Response:
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            if body["n"] == self.refuse:
                raise APIError(422, "n: refused", field="n")
            await asyncio.sleep(0.05 if body["n"] != 0 else 5)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.running -= 1
        return JSONResponse({"n": body["n"]})


def _body(*ns: int) -> bytes:
    return b"".join(json.dumps({"n": n}).encode() + b"\n" for n in ns)


async def test_records_run_at_once_up_to_max_concurrent_transforms() -> None:
    invoke = Invocations()
    r = await _batch().answer(_body(*range(1, 11)), invoke)
    assert bytes(r.body).splitlines() == [f'{{"n":{n}}}'.encode() for n in range(1, 11)]
    assert invoke.most == 4  # the engine's sequences
    invoke = Invocations()
    await _batch(max_concurrent_transforms=2).answer(_body(*range(1, 11)), invoke)
    assert invoke.most == 2


async def test_a_refused_record_cancels_the_others_and_names_its_line() -> None:
    invoke = Invocations(refuse=2)
    with pytest.raises(APIError) as err:
        await _batch().answer(_body(0, 2, 3), invoke)  # record 0 would take 5 s
    assert (err.value.status, err.value.field, err.value.extra["line"]) == (422, "n", 2)
    assert invoke.cancelled == 2 and invoke.running == 0  # records 0 and 3, still running


async def test_execution_parameters_are_the_settings_in_force() -> None:
    params = _batch(max_body_bytes=3 * MIB, batch_strategy="SINGLE_RECORD").parameters()
    assert params.model_dump() == {
        "MaxConcurrentTransforms": 4,
        "BatchStrategy": "SINGLE_RECORD",
        "MaxPayloadInMB": 3,
    }

"""Error bodies and statuses, produced by the functions the server answers with: each case below is
built by llmhost's own code (the engine's limit check, the server's error mapping, the API-key
middleware run over ASGI), then written in each API's shape by the code that writes it."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import httpx
from starlette.applications import Starlette

from docsgen.md import table
from llmhost.engine.config import EngineConfig
from llmhost.engine.request import EngineError, QueueFullError, check_limits
from llmhost.process.lifecycle import Lifecycle
from llmhost.server.errors import from_engine
from llmhost.web import errors
from llmhost.web.asgi import RequestContextMiddleware
from llmhost.web.auth import ApiKeyMiddleware, load_keys
from llmhost.web.formats import anthropic_error, tgi_error
from llmhost.web.sagemaker_runtime import log_stream, model_error, service_unavailable

RID = "3f2b9c0e5d7a4e1f8a6b2c4d9e0f1a2b"


@dataclass
class Case:
    what: str
    status: int
    body: dict[str, Any]  # OpenAI's shape, as every llmhost route but TGI's and Anthropic's answers
    headers: dict[str, str]
    error: errors.APIError | None  # None: answered before any route (middleware)


def _engine_error() -> EngineError:
    try:
        check_limits(EngineConfig(), 3000, 16)
    except EngineError as exc:
        return exc
    raise AssertionError("a 3000-token prompt passed the default limits")


def _unauthorized() -> tuple[int, dict[str, Any], dict[str, str]]:
    app = RequestContextMiddleware(
        ApiKeyMiddleware(Starlette(), keys=load_keys(["k"], None, env={})), lifecycle=Lifecycle()
    )

    async def call() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://x") as client:
            return await client.post("/v1/completions", headers={"x-request-id": RID})

    r = asyncio.run(call())
    return r.status_code, r.json(), {k: v for k, v in r.headers.items() if k == "www-authenticate"}


def cases() -> list[Case]:
    out = []
    made = [
        (
            "Body not JSON (also NaN, overflow, nesting deeper than 64)",
            errors.invalid_json("Expecting value"),
        ),
        (
            "A body field llmhost does not implement",
            errors.validation_error(
                [
                    {
                        "type": "extra_forbidden",
                        "loc": ("body", "parameters", "watermark"),
                        "msg": "Extra inputs",
                    }
                ]
            ),
        ),
        (
            "A wrong type or value",
            errors.validation_error(
                [
                    {
                        "type": "less_than_equal",
                        "loc": ("body", "top_p"),
                        "msg": "Input should be less than or equal to 1",
                    }
                ]
            ),
        ),
        ("Prompt or prompt + max tokens beyond the limits", from_engine(_engine_error())),
        ("Queue full", from_engine(QueueFullError(72, 72))),
        ("Model loading, draining, engine dead, queue timeout", errors.model_loading("loading")),
    ]
    for what, err in made:
        out.append(Case(what, err.status, err.body(RID), dict(err.headers), err))
    status, body, headers = _unauthorized()
    out.append(Case("Missing or unknown API key", status, body, headers, None))
    return out


def _tgi(case: Case) -> str:
    if case.error is None:
        return f"{case.status} (OpenAI shape)"
    return f"{case.status} `{tgi_error(case.status, case.body)[1]['error_type']}`"


def _anthropic(case: Case) -> str:
    status, body = anthropic_error(case.status, case.body)
    err = body["error"]
    assert isinstance(err, dict)
    return f"{status} `{err['type']}`"


def _runtime(case: Case) -> tuple[int, dict[str, Any]]:
    if case.error is None:  # refused before any route: the same answer on every path
        return case.status, {"__type": f"(OpenAI shape) {case.body['error']['type']}"}
    if case.status in (429, 503):
        r = service_unavailable(case.body["error"]["message"], RID)
    else:
        r = model_error(case.status, json.dumps(case.body), log_stream("my-endpoint", "model", RID), RID)
    return r.status_code, json.loads(bytes(r.body))


def render() -> str:
    rows = []
    for c in cases():
        rstatus, rbody = _runtime(c)
        head = ", ".join(f"`{k}: {v}`" for k, v in c.headers.items())
        rows.append(
            [
                c.what,
                f"{c.status} `{c.body['error']['type']}`",
                _tgi(c),
                _anthropic(c),
                f"{rstatus} `{rbody['__type']}`",
                head,
            ]
        )
    out = [
        table(
            [
                "cause",
                "OpenAI shape (most routes)",
                "TGI routes",
                "Anthropic `/v1/messages`",
                "SageMaker Runtime paths",
                "headers",
            ],
            rows,
        ),
        "",
    ]
    c = cases()[3]
    assert c.error is not None
    status, body = anthropic_error(c.status, c.body)
    rstatus, rbody = _runtime(c)
    out += [f"The same refusal ({c.what.lower()}) in each shape:", ""]
    shapes = [
        ("OpenAI shape", c.status, c.body),
        ("TGI shape", c.status, tgi_error(c.status, c.body)[1]),
        ("Anthropic shape", status, body),
        ("SageMaker Runtime shape", rstatus, rbody),
    ]
    for title, code, shown in shapes:
        out += [f"{title}, status {code}:", "", "```json", json.dumps(shown, indent=2), "```", ""]
    return "\n".join(out)

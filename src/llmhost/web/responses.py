"""Refusals as answers, in the error format of the route that answers (web/formats.py): an ErrorResponse a
route returns, and the exception handlers that answer what a route raised."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from llmhost.web.asgi import request_id
from llmhost.web.errors import APIError, from_pydantic, validation_error
from llmhost.web.formats import ErrorFormat, around_format, route_format

# how an exception a route raised becomes a refusal
Translate = Callable[[Any], APIError]


class ErrorResponse(Response):
    """`error` as the answer, written once routed (the route declares its API's format) with the
    request's id; `status_code` is llmhost's status (what the endpoint counts), whatever the API's.
    `around`: refused around the route (404, 405, a disconnect), where TGI's format stays OpenAI's."""

    media_type = "application/json"

    def __init__(self, error: APIError, around: bool = False) -> None:
        super().__init__(status_code=error.status, headers=error.headers)
        self.error = error
        self.around = around

    def written_as(self, scope: Scope) -> ErrorFormat:
        if self.error.format is not None:
            return self.error.format
        return around_format(scope) if self.around else route_format(scope)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = self.error.body(request_id(scope))
        status, written = self.written_as(scope).convert(self.error.status, body)
        await JSONResponse(written, status_code=status, headers=self.error.headers)(scope, receive, send)


def _answer(translate: Translate) -> Callable[[Request, Exception], Any]:
    async def handle(_: Request, exc: Exception) -> Response:
        return ErrorResponse(translate(exc))

    return handle


async def _gone(_: Request, __: Exception) -> Response:
    # nobody reads this; answering keeps the disconnect out of the error log
    return ErrorResponse(APIError(499, "client disconnected", "client_closed"), around=True)


async def _http(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    error = APIError(exc.status_code, str(exc.detail), "http_error", headers=dict(exc.headers or {}))
    return ErrorResponse(error, around=True)


def _same(exc: APIError) -> APIError:
    return exc


def _request_validation(exc: RequestValidationError) -> APIError:
    return validation_error(list(exc.errors()))


def install(app: FastAPI, more: Mapping[type[Exception], Translate] | None = None) -> None:
    """Answer APIError, validation errors and the exceptions of `more` (each with how it becomes a
    refusal) in the format of the route that raised them; a 404 or 405 and a disconnect likewise."""
    handled: dict[type[Exception], Translate] = {
        APIError: _same,
        RequestValidationError: _request_validation,
        ValidationError: from_pydantic,
        **(more or {}),
    }
    for kind, translate in handled.items():
        app.add_exception_handler(kind, _answer(translate))
    app.add_exception_handler(ClientDisconnect, _gone)
    app.add_exception_handler(StarletteHTTPException, _http)

"""Every refusal is JSON naming what was wrong: OpenAI's error shape, plus `field` and `limit`."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from llmhost.asgi import error_body, retry_after
from llmhost.engine.request import EngineError, InvalidRequestError, QueueFullError, RequestTooLargeError


class APIError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        type_: str = "invalid_request_error",
        field: str | None = None,
        extra: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.field = field
        self.extra = extra or {}
        self.headers = headers or {}

    def body(self, request_id: str = "") -> dict[str, Any]:
        return error_body(self.status, self.message, self.type, field=self.field, request_id=request_id,
                          **self.extra)

    def tgi_body(self, request_id: str = "") -> dict[str, Any]:
        """TGI's error shape, which its clients turn into ValidationError, OverloadedError, ..."""
        if self.status in (429, 503):
            kind = "overloaded"
        elif self.status >= 500:
            kind = "generation"
        else:
            kind = "validation"
        body: dict[str, Any] = {"error": self.message, "error_type": kind}
        if self.field is not None:
            body["field"] = self.field
        body.update(self.extra)
        if request_id:
            body["request_id"] = request_id
        return body

    def response(self, request_id: str = "", style: str = "openai") -> JSONResponse:
        body = self.tgi_body(request_id) if style == "tgi" else self.body(request_id)
        return JSONResponse(body, status_code=self.status, headers=self.headers)


def invalid_json(detail: str) -> APIError:
    return APIError(400, f"request body is not valid JSON: {detail}", field="body")


def model_loading(reason: str) -> APIError:
    return unavailable(f"model not ready: {reason}")


def unavailable(message: str) -> APIError:
    return APIError(503, message, "service_unavailable", headers=retry_after())


def _loc_name(loc: tuple[Any, ...] | list[Any]) -> str:
    parts = [str(p) for p in loc if p not in ("body",)]
    return ".".join(parts) or "body"


def validation_error(errors: list[Any]) -> APIError:
    if any(e.get("type") == "json_invalid" for e in errors):
        return invalid_json(str(errors[0].get("ctx", {}).get("error", errors[0].get("msg"))))
    unknown = [e for e in errors if e.get("type") == "extra_forbidden"]
    if unknown:
        field = _loc_name(unknown[0].get("loc", ()))
        return APIError(400, f"unsupported field '{field}': llmhost does not implement it", field=field)
    first = errors[0]
    field = _loc_name(first.get("loc", ()))
    details = [
        {"field": _loc_name(e.get("loc", ())), "message": e.get("msg", ""), "type": e.get("type", "")}
        for e in errors
    ]
    return APIError(
        422, f"{field}: {first.get('msg', 'invalid value')}", field=field, extra={"details": details}
    )


def from_pydantic(exc: ValidationError) -> APIError:
    return validation_error(list(exc.errors()))


def from_engine(exc: EngineError) -> APIError:
    if isinstance(exc, QueueFullError):
        return APIError(
            429,
            str(exc),
            "rate_limit_error",
            extra={"limit": exc.limit, "in_flight": exc.in_flight},
            headers=retry_after(),
        )
    if isinstance(exc, RequestTooLargeError):
        return APIError(422, str(exc), field=exc.field_name, extra={"value": exc.value, "limit": exc.limit})
    if isinstance(exc, InvalidRequestError):
        extra = {"limit": exc.limit} if exc.limit is not None else {}
        return APIError(422, str(exc), field=exc.field_name, extra=extra)
    return model_loading(str(exc))


def _rid(request: Request) -> str:
    return str(getattr(request.state, "request_id", ""))


TGI_STYLE = "tgi"


def use_tgi_errors(request: Request) -> None:
    """Errors of this request are answered in TGI's shape (its routes call this first)."""
    request.state.error_style = TGI_STYLE


def _respond(request: Request, err: APIError) -> JSONResponse:
    return err.response(_rid(request), getattr(request.state, "error_style", "openai"))


def install(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
        return _respond(request, exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _respond(request, validation_error(list(exc.errors())))

    @app.exception_handler(ValidationError)
    async def _pydantic(request: Request, exc: ValidationError) -> JSONResponse:
        return _respond(request, from_pydantic(exc))

    @app.exception_handler(EngineError)
    async def _engine(request: Request, exc: EngineError) -> JSONResponse:
        return _respond(request, from_engine(exc))

    @app.exception_handler(ClientDisconnect)
    async def _gone(request: Request, _: ClientDisconnect) -> JSONResponse:
        # nobody reads this; answering keeps the disconnect out of the error log
        return APIError(499, "client disconnected", "client_closed").response(_rid(request))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return APIError(
            exc.status_code, str(exc.detail), "http_error", headers=dict(exc.headers or {})
        ).response(_rid(request))

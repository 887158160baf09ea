"""Every refusal is JSON naming what was wrong: OpenAI's error shape, plus `field` and `limit`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from llmhost.errors import LlmhostError, UnavailableError
from llmhost.shared.jsontypes import JSONObject, JSONValue
from llmhost.web.formats import ErrorFormat

# seconds a refused client is told to wait before retrying
RETRY_AFTER_S = 1


def error_body(
    status: int,
    message: str,
    type_: str = "invalid_request_error",
    *,
    field: str | None = None,
    request_id: str = "",
    **extra: JSONValue,
) -> JSONObject:
    """The one OpenAI-style error body of every llmhost refusal: `{"error": {message, type, param, code}}`,
    plus `field` (the parameter at fault), any facts that explain it (`limit`...) and the request id;
    each API's routes write it in their own format (web/formats.py)."""
    body: JSONObject = {"message": message, "type": type_, "param": field, "code": status}
    if field is not None:
        body["field"] = field
    body.update(extra)
    if request_id:
        body["request_id"] = request_id
    return {"error": body}


def retry_after() -> dict[str, str]:
    """The Retry-After header of a 429 or 503."""
    return {"Retry-After": str(RETRY_AFTER_S)}


class APIError(LlmhostError):
    """A refusal: raised by a route (the app's exception handlers answer it) or answered as an
    ErrorResponse, in the format of the route's API."""

    def __init__(
        self,
        status: int,
        message: str,
        type_: str = "invalid_request_error",
        field: str | None = None,
        extra: Mapping[str, JSONValue] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.field = field
        self.extra = dict(extra or {})
        self.headers = headers or {}
        self.format: ErrorFormat | None = None  # None: the format of the route that answers it

    def written_in(self, fmt: ErrorFormat) -> APIError:
        """This refusal in `fmt` whatever the route (/invocations refuses a TGI body in TGI's)."""
        self.format = fmt
        return self

    def body(self, request_id: str = "") -> JSONObject:
        return error_body(
            self.status, self.message, self.type, field=self.field, request_id=request_id, **self.extra
        )


def invalid_json(detail: str) -> APIError:
    return APIError(400, f"request body is not valid JSON: {detail}", field="body")


def model_loading(reason: str) -> APIError:
    return unavailable(f"model not ready: {reason}")


def unavailable(message: str) -> APIError:
    return APIError(UnavailableError.status, message, "service_unavailable", headers=retry_after())


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
    details: list[JSONValue] = [
        {"field": _loc_name(e.get("loc", ())), "message": e.get("msg", ""), "type": e.get("type", "")}
        for e in errors
    ]
    return APIError(
        422, f"{field}: {first.get('msg', 'invalid value')}", field=field, extra={"details": details}
    )


def from_pydantic(exc: ValidationError) -> APIError:
    return validation_error(list(exc.errors()))

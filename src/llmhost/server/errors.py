"""The engine's refusals as API errors, and the exception handlers of a replica's app."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from fastapi import FastAPI
from pydantic import ValidationError

from llmhost.engine.request import EngineError, InvalidRequestError, QueueFullError, RequestTooLargeError
from llmhost.server.limit_fields import COMPLETIONS, LimitFields, too_large
from llmhost.web import responses
from llmhost.web.errors import APIError, from_pydantic, model_loading, retry_after
from llmhost.web.formats import ErrorFormat


def from_engine(exc: EngineError, fields: LimitFields = COMPLETIONS) -> APIError:
    """`fields`: the request's token-limit fields in its API's words."""
    if isinstance(exc, QueueFullError):
        return APIError(
            exc.status,
            str(exc),
            "rate_limit_error",
            extra={"limit": exc.limit, "in_flight": exc.in_flight},
            headers=retry_after(),
        )
    if isinstance(exc, RequestTooLargeError):
        return too_large(exc, fields)
    if isinstance(exc, InvalidRequestError):
        extra = {"limit": exc.limit} if exc.limit is not None else {}
        return APIError(exc.status, str(exc), field=exc.field_name, extra=extra)
    return model_loading(str(exc))


def install(app: FastAPI) -> None:
    """A replica's exception handlers: web's, and the engine's refusals (queue full, over a limit,
    not ready) in the format of the route that met them."""
    responses.install(app, {EngineError: from_engine})


@contextmanager
def refused_in(fmt: ErrorFormat) -> Iterator[None]:
    """What is refused inside is written in `fmt` whatever the route: /invocations answers a TGI body,
    refusals too, in TGI's shapes, as SageMaker's TGI containers do."""
    try:
        yield
    except APIError as exc:
        exc.written_in(fmt)
        raise
    except ValidationError as exc:
        raise from_pydantic(exc).written_in(fmt) from exc
    except EngineError as exc:
        raise from_engine(exc).written_in(fmt) from exc

"""Every llmhost exception descends from `LlmhostError`, through the base that says whose fault it is,
and carries the HTTP status it is answered with where it reaches a client (`status`): the statuses are
written here once, and web/, server/ and endpoint/ read them. A class that callers have always caught by
a builtin keeps that builtin as a second base (`class SpecError(BadRequestError, ValueError)`), so
`except ValueError` goes on catching it.

    LlmhostError       500  the root; what fits no base below (a decode that failed, a relayed refusal)
    BadRequestError    422  the caller's input cannot be used (a parameter, a body, a spec or recipe file)
    NotFoundError      404  what was named is not there (a model reference, a component)
    ConflictError      409  not as things stand (a name taken, in use, no room on this host)
    UnavailableError   503  not now: loading, dead or shutting down; retry later, or elsewhere
    ModelError         422  a model or adapter file that cannot be read, loaded or fitted

A class answered with another status than its base's says so (`QueueFullError.status = 429`); one whose
status is the answer's own (a relayed copy's refusal, `web.errors.APIError`) sets it per instance.
"""

from __future__ import annotations


class LlmhostError(Exception):
    """The root of llmhost's exceptions: `except LlmhostError` catches every one of them."""

    status: int = 500


class BadRequestError(LlmhostError):
    """The caller's input cannot be used: a request field, a body, an endpoint or recipe file. llmhost
    answers a request it could read but not use with 422 (400 where a class or a route says so)."""

    status = 422


class NotFoundError(LlmhostError):
    """What the caller named is not there: a model reference, a component, an adapter."""

    status = 404


class ConflictError(LlmhostError):
    """The change cannot be made as things stand: a name taken, a thing in use, copies that do not fit."""

    status = 409


class UnavailableError(LlmhostError):
    """Not now: loading, failed, overloaded or shutting down; the same request may succeed later."""

    status = 503


class ModelError(LlmhostError):
    """A model or adapter (or what comes with it) that cannot be read, loaded, fitted or built; where a
    request named it, the request is refused as unusable (422)."""

    status = 422


__all__ = [
    "BadRequestError",
    "ConflictError",
    "LlmhostError",
    "ModelError",
    "NotFoundError",
    "UnavailableError",
]

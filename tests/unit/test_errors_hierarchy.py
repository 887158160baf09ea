"""One error hierarchy (llmhost.errors): every exception llmhost defines descends from LlmhostError,
under a name no other has, and the grouped bases carry the HTTP statuses the web layer answers with."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import llmhost
from llmhost import errors
from llmhost.errors import (
    BadRequestError,
    ConflictError,
    LlmhostError,
    ModelError,
    NotFoundError,
    UnavailableError,
)


def _modules() -> list[str]:
    names = []
    for info in pkgutil.walk_packages(llmhost.__path__, "llmhost."):
        try:
            importlib.import_module(info.name)
        except ModuleNotFoundError as exc:  # the optional `ray` extra absent: its modules go unchecked
            if (exc.name or "").split(".")[0] == "ray":
                continue
            raise
        names.append(info.name)
    return names


def exception_classes() -> list[type[BaseException]]:
    """The public exception classes defined in llmhost's modules (private ones steer one module's own
    control flow and never leave it; pydantic models and TypedDicts of error bodies are no exceptions)."""
    found = []
    for name in _modules():
        module = importlib.import_module(name)
        for attr, obj in vars(module).items():
            if (
                inspect.isclass(obj)
                and issubclass(obj, BaseException)
                and obj.__module__ == name
                and not attr.startswith("_")
            ):
                found.append(obj)
    return found


CLASSES = exception_classes()


def test_the_walk_finds_the_exceptions() -> None:
    names = {c.__name__ for c in CLASSES}
    assert {"APIError", "SpecError", "ModelNotFoundError", "QueueFullError", "ComponentLoadError"} <= names
    assert len(CLASSES) > 40


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: f"{c.__module__}.{c.__name__}")
def test_every_exception_descends_from_llmhost_error(cls: type[BaseException]) -> None:
    assert issubclass(cls, LlmhostError)


def test_exception_names_are_unique() -> None:
    by_name: dict[str, list[str]] = {}
    for cls in CLASSES:
        by_name.setdefault(cls.__name__, []).append(cls.__module__)
    assert {n: m for n, m in by_name.items() if len(m) > 1} == {}


@pytest.mark.parametrize(
    ("base", "status"),
    [
        (LlmhostError, 500),
        (BadRequestError, 422),
        (NotFoundError, 404),
        (ConflictError, 409),
        (UnavailableError, 503),
        (ModelError, 422),
    ],
)
def test_each_base_has_its_status(base: type[LlmhostError], status: int) -> None:
    assert base.status == status


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: f"{c.__module__}.{c.__name__}")
def test_every_status_is_an_http_error_status(cls: type[LlmhostError]) -> None:
    assert 400 <= cls.status <= 599


def _named(name: str) -> type[LlmhostError]:
    cls = next(c for c in CLASSES if c.__name__ == name)
    assert issubclass(cls, LlmhostError)
    return cls


@pytest.mark.parametrize(
    ("name", "base", "status"),
    [
        ("QueueFullError", UnavailableError, 429),
        ("EngineUnavailableError", UnavailableError, 503),
        ("InvalidRequestError", BadRequestError, 422),
        ("RequestTooLargeError", BadRequestError, 422),
        ("ParamError", BadRequestError, 422),
        ("ChatTemplateError", BadRequestError, 400),
        ("ChatTemplateBoundError", ModelError, 500),
        ("KeepAliveError", BadRequestError, 400),
        ("BadBody", BadRequestError, 422),
        ("UnknownComponentError", NotFoundError, 404),
        ("ComponentExistsError", ConflictError, 409),
        ("ComponentInUseError", ConflictError, 409),
        ("InsufficientCapacityError", ConflictError, 409),
        ("ComponentLoadError", UnavailableError, 503),
        ("AdapterConflictError", ConflictError, 409),
        ("AdapterInUseError", ConflictError, 409),
        ("ModelNotFoundError", NotFoundError, 404),
        ("ModelLoadError", ModelError, 422),
        ("AdminRefused", LlmhostError, 403),
        ("NotSupported", LlmhostError, 501),
        ("UpstreamError", LlmhostError, 502),
    ],
)
def test_a_class_answered_as_its_site_answers_it(name: str, base: type[LlmhostError], status: int) -> None:
    cls = _named(name)
    assert issubclass(cls, base)
    assert cls.status == status


@pytest.mark.parametrize(
    ("name", "builtin"),
    [
        ("SpecError", ValueError),
        ("ParamError", ValueError),
        ("GGUFError", ValueError),
        ("ChatTemplateError", ValueError),
        ("KeepAliveError", ValueError),
        ("RecipeError", ValueError),
        ("ModelNotFoundError", FileNotFoundError),
        ("S3ModelError", FileNotFoundError),
        ("UnknownComponentError", LookupError),
        ("ModelRefError", LookupError),
        ("EngineError", RuntimeError),
        ("ModelLoadError", RuntimeError),
        ("ComponentLoadError", RuntimeError),
        ("InsufficientCapacityError", RuntimeError),
    ],
)
def test_builtin_bases_callers_catch_are_kept(name: str, builtin: type[Exception]) -> None:
    assert issubclass(_named(name), builtin)


def test_a_model_not_found_is_still_an_os_error_with_its_message() -> None:
    exc = _named("ModelNotFoundError")("no model at /nowhere")
    assert isinstance(exc, OSError)
    assert str(exc) == "no model at /nowhere"


def test_errors_module_imports_nothing_of_llmhost() -> None:
    tree = ast.parse(Path(errors.__file__).read_text())
    imported = {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)} | {
        a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names
    }
    assert {m for m in imported if m.startswith("llmhost") and m != "llmhost.shared.jsontypes"} == set()

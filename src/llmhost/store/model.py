"""What a model reference names on this host, and the error when it names nothing: the types every way of
resolving a reference (local, s3://) shares, kept apart so that those modules import them, not each other."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


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

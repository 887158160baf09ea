"""What a model reference names on this host, and the error when it names nothing: the types every way of
resolving a reference (local, s3://) shares, kept apart so that those modules import them, not each other."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from llmhost.errors import NotFoundError
from llmhost.store.artifact import MODEL_GGUF, is_artifact
from llmhost.store.ggufnames import SPLIT, GgufModel, group_models, is_gguf, is_projector_file, part_name


class ModelNotFoundError(NotFoundError, FileNotFoundError):
    """The reference names nothing we can load."""


class AmbiguousModelError(ModelNotFoundError):
    """The reference names a directory or repository holding several models: the message lists them."""


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
    # the multimodal projectors found with the model when asked for (resolve(..., projector=True)): the
    # mmproj GGUFs beside it in its folder, or in its hub repository's folder (one: downloaded, a local
    # path; several: their hf:// references, not downloaded, for an error to name)
    mmproj: tuple[str, ...] = ()

    @property
    def serve_ref(self) -> str:
        """The local reference that resolves to this same model again without any download: what
        another process (an endpoint's copy) is given."""
        return str(self.model_dir if self.model_dir is not None else self.gguf)


def _models_at(directory: Path, files: list[Path]) -> list[GgufModel]:
    return group_models(p.relative_to(directory).as_posix() for p in files)


def _one_model(directory: Path, models: list[GgufModel]) -> Path:
    if len(models) > 1:
        listed = ", ".join(m.label for m in models)
        raise AmbiguousModelError(
            f"model directory {directory} holds {len(models)} models ({listed}): name "
            "the one to serve by its file's path, or keep one GGUF in the directory"
        )
    model = models[0]
    if model.missing:
        raise ModelNotFoundError(
            f"{directory / model.first}: split model without its parts {', '.join(model.missing)}"
        )
    return directory / model.first


def model_in(directory: Path) -> Path:
    """The GGUF a model directory serves: an optimize artifact's `model.gguf`; else its one model at the
    top (a split model's first part; mmproj files are no models), else its one model at the fewest levels
    down. Several models at that level are an error listing them, never a choice by name. The one rule
    for every kind of model directory (a local one, /opt/ml/model, an s3:// prefix or archive, a
    models_dir folder)."""
    if is_artifact(directory) and (directory / MODEL_GGUF).is_file():
        return directory / MODEL_GGUF
    try:
        ggufs = [p for p in directory.rglob("*") if is_gguf(p.name) and p.is_file()]
    except OSError as exc:  # unreadable (permissions) or gone: say which directory
        raise ModelNotFoundError(f"cannot read model directory {directory}: {exc.strerror or exc}") from None
    by_depth: dict[int, list[Path]] = {}
    for p in ggufs:
        by_depth.setdefault(len(p.relative_to(directory).parts), []).append(p)
    for depth in sorted(by_depth):
        # split parts live in one folder; mmproj files are left out: the shallowest level with a model
        if models := _models_at(directory, by_depth[depth]):
            return _one_model(directory, models)
    raise ModelNotFoundError(f"no *.gguf model file in model directory {directory}")


def model_parts(gguf: Path) -> list[Path]:
    """Every file a model loads: itself, or each part of a split model beside its first part."""
    m = SPLIT.match(gguf.name)
    if m is None:
        return [gguf]
    count = int(m["count"])
    return [gguf.with_name(part_name(m["prefix"], no, count)) for no in range(1, count + 1)]


def first_part(gguf: Path) -> Path:
    """The file to load for any part of a split model (llama.cpp opens a split model from part 1 only)."""
    return model_parts(gguf)[0]


def in_directory(directory: Path) -> ResolvedModel:
    return ResolvedModel(model_in(directory), directory)


def projectors_beside(gguf: Path) -> tuple[str, ...]:
    """The multimodal projector GGUFs in the model's own folder (not below it)."""
    return tuple(str(p) for p in sorted(gguf.parent.iterdir()) if is_projector_file(p.name) and p.is_file())

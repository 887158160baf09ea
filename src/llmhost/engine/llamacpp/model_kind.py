"""What a GGUF is for, read from its metadata before llama.cpp loads it: the model decides whether a
server generates text, embeds or reranks (as Ollama and TEI read it from the model), and how long an
input it was trained on.

Pure Python over gguf_check's reading (no llama.cpp), so the settings are built from it before loading.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path

from gguf.constants import PoolingType

from llmhost.engine.llamacpp.gguf_check import check_file

# the pooling types of an embedding model, by the number a GGUF's `{arch}.pooling_type` stores
_POOLED = {int(t): t.name.lower() for t in (PoolingType.MEAN, PoolingType.CLS, PoolingType.LAST)}


class ModelKind(enum.Enum):
    GENERATE = "generate"  # a decoder without a pooling type: text generation (embeddings beside it)
    EMBED = "embed"  # a pooling type (mean, cls, last) or a bidirectional encoder: embeddings only
    RERANK = "rerank"  # pooling type rank (a classification head): scores of (query, document) pairs


@dataclass(frozen=True, slots=True)
class ModelPurpose:
    kind: ModelKind
    pooling: str  # the pooling the GGUF declares ("" where none)
    n_ctx_train: int  # 0 where the GGUF does not say


def model_purpose(path: str | Path) -> ModelPurpose:
    """The purpose of the GGUF at `path` (a split model's first part holds the metadata); raises
    GGUFError for a file that is no GGUF."""
    meta = check_file(path).metadata
    arch = meta.get("general.architecture")
    pooling = meta.get(f"{arch}.pooling_type")
    ctx = meta.get(f"{arch}.context_length")
    n_ctx_train = ctx if isinstance(ctx, int) else 0
    if pooling == PoolingType.RANK:
        return ModelPurpose(ModelKind.RERANK, "rank", n_ctx_train)
    if isinstance(pooling, int) and pooling in _POOLED:
        return ModelPurpose(ModelKind.EMBED, _POOLED[pooling], n_ctx_train)
    if meta.get(f"{arch}.attention.causal") is False:  # an encoder that names no pooling: mean
        return ModelPurpose(ModelKind.EMBED, "", n_ctx_train)
    return ModelPurpose(ModelKind.GENERATE, "", n_ctx_train)

"""Short names for the models of a sweep's configurations, distinct from one another."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

_SUFFIXES = (".tar.gz", ".tgz", ".gguf")
# SageMaker's fixed artifact name says nothing: the folder above it is named too
_GENERIC = {"model"}
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
S3 = "s3://"
HF = "hf://"


def _segments(ref: str) -> list[str]:
    if ref == "default":
        return ["default"]
    body = ref.split("://", 1)[1] if ref.startswith((S3, HF)) else ref
    parts = [p for p in body.split("/") if p and p != "."]
    if parts:
        last = parts[-1]
        for suffix in _SUFFIXES:
            if last.endswith(suffix) and len(last) > len(suffix):
                parts[-1] = last[: -len(suffix)]
                break
    return [_UNSAFE.sub("_", p) for p in parts] or ["model"]


def model_labels(refs: Iterable[str]) -> dict[str, str]:
    """A label per distinct model reference: its last path segment without .gguf / .tar.gz / .tgz
    (`s3://b/jobs/7/output/model.tar.gz` -> `output-model`, `./gemma-q4.gguf` -> `gemma-q4`), with the
    segments before it added until no two references share one (`s3://a/x/gemma/` and
    `s3://b/y/gemma/` -> `x-gemma`, `y-gemma`); an s3:// reference equal in every segment to a local
    one gets `s3-` in front."""
    segs = {r: _segments(r) for r in dict.fromkeys(refs)}
    depth = {r: 2 if s[-1] in _GENERIC and len(s) > 1 else 1 for r, s in segs.items()}
    while True:
        labels = {r: "-".join(s[-depth[r] :]) for r, s in segs.items()}
        counts = Counter(labels.values())
        grow = [r for r, label in labels.items() if counts[label] > 1 and depth[r] < len(segs[r])]
        if not grow:
            break
        for r in grow:
            depth[r] += 1
    counts = Counter(labels.values())
    return {
        r: f"s3-{label}" if counts[label] > 1 and r.startswith(S3) else label for r, label in labels.items()
    }

"""hf:// model references: `hf://OWNER/REPO/PATH/FILE.gguf` names a file of a Hugging Face Hub repository,
`hf://OWNER/REPO:QUANT` the model whose file name holds that quantization type, `hf://OWNER/REPO` its
Q4_K_M model or its only one. Parsing only: nothing here talks to the Hub."""

from __future__ import annotations

import re
from dataclasses import dataclass

from llmhost.store.model import ModelNotFoundError

HF_SCHEME = "hf://"
_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}"
_REF = re.compile(rf"^(?P<repo>{_NAME}/{_NAME})(?::(?P<quant>[A-Za-z0-9._-]+)|/(?P<file>[^:]+))?$")


class HubModelError(ModelNotFoundError):
    """An hf:// model could not be found or fetched; the message names the repository and file."""


@dataclass(frozen=True, slots=True)
class HubRef:
    repo: str  # OWNER/REPO
    file: str | None = None  # a path inside the repository
    quant: str | None = None  # a quantization type, matched in file names

    @property
    def uri(self) -> str:
        tail = f"/{self.file}" if self.file else f":{self.quant}" if self.quant else ""
        return f"{HF_SCHEME}{self.repo}{tail}"


def is_hub_ref(ref: str) -> bool:
    return ref.startswith(HF_SCHEME)


def parse_hub_ref(uri: str) -> HubRef:
    """Raises HubModelError naming what is wrong with the reference."""
    m = _REF.match(uri.removeprefix(HF_SCHEME))
    if not is_hub_ref(uri) or m is None:
        raise HubModelError(
            f"{uri!r} is not a Hub model reference: write hf://OWNER/REPO/FILE.gguf, "
            "hf://OWNER/REPO:QUANT or hf://OWNER/REPO"
        )
    file = m["file"]
    if file is not None:
        parts = file.split("/")
        if not file.lower().endswith(".gguf") or any(p in ("", ".", "..") for p in parts):
            raise HubModelError(f"{uri}: {file!r} is not the path of a .gguf file in the repository")
    return HubRef(m["repo"], file, m["quant"])

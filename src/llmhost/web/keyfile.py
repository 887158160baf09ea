"""`--api-key-file`: one key per line, or a YAML list of named keys with quotas.

The form is told by the file's first line that is neither blank nor a `#` comment: one that starts with
`- ` (or is `-` alone) makes the file a YAML list, each entry a mapping

    - key: sk-alice-...            # required: the secret, no whitespace
      name: alice                  # required: shown in logs and metrics instead of the key
      requests_per_minute: 60      # optional, > 0; absent: unlimited
      tokens_per_minute: 20000     # optional, > 0; absent: unlimited

any other line starts a plain file, a key per line, `#` comments (those keys are unnamed and unlimited).
A key never contains whitespace, so a plain key cannot be read as a YAML list by mistake. An entry that
is wrong is refused naming its place and its name, never its key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError

from llmhost.errors import BadRequestError
from llmhost.shared import yamltext

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._@-]*$"


@dataclass(frozen=True, slots=True)
class Limits:
    """A key's quotas; None: unlimited."""

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None

    @property
    def any(self) -> bool:
        return self.requests_per_minute is not None or self.tokens_per_minute is not None


@dataclass(frozen=True, slots=True)
class KeyEntry:
    """A key as a file gives it; `name` empty for a plain line."""

    key: str
    name: str = ""
    limits: Limits = Limits()


@dataclass(frozen=True, slots=True)
class KeyIdentity:
    """Who a key is, as requests are counted: its name (empty: a key without one, from a plain line, a
    flag or the environment) and its quotas."""

    name: str = ""
    limits: Limits = Limits()


UNNAMED = KeyIdentity()


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: StrictStr = Field(min_length=1, pattern=r"^\S+$")
    name: StrictStr = Field(pattern=NAME_PATTERN, max_length=64)
    requests_per_minute: Annotated[int, Field(gt=0, strict=True)] | None = None
    tokens_per_minute: Annotated[int, Field(gt=0, strict=True)] | None = None


class KeyFileError(BadRequestError, ValueError):
    """A key file that cannot be used; the message names the file and the entry, never a key."""


def read_key_file(path: Path) -> list[KeyEntry]:
    text = path.read_text()
    if is_yaml(text):
        return _yaml_entries(path, text)
    lines = (line.strip() for line in text.splitlines())
    return [KeyEntry(line) for line in lines if line and not line.startswith("#")]


def is_yaml(text: str) -> bool:
    """Whether the first line that is neither blank nor a comment starts a YAML list item."""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            return stripped == "-" or stripped.startswith(("- ", "-\t"))
    return False


def _yaml_entries(path: Path, text: str) -> list[KeyEntry]:
    try:
        data = yamltext.load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise KeyFileError(f"--api-key-file {path}: not valid YAML{where}") from None
    if not isinstance(data, list):
        raise KeyFileError(f"--api-key-file {path}: a YAML key file is a list of entries")
    entries = [_entry(path, i, raw) for i, raw in enumerate(data, start=1)]
    _check_unique(path, entries)
    return entries


def _entry(path: Path, number: int, raw: Any) -> KeyEntry:
    name = raw.get("name") if isinstance(raw, dict) else None
    which = f"entry {number}" + (f" (name {name!r})" if isinstance(name, str) else "")
    if not isinstance(raw, dict):
        raise KeyFileError(
            f"--api-key-file {path}: {which} is not a mapping of key, name, requests_per_minute, "
            "tokens_per_minute"
        )
    try:
        entry = _Entry.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "entry"
        # pydantic's message only: its input value would be the secret when the key is at fault
        raise KeyFileError(f"--api-key-file {path}: {which}: {field}: {_message(first)}") from None
    return KeyEntry(entry.key, entry.name, Limits(entry.requests_per_minute, entry.tokens_per_minute))


def _message(error: Any) -> str:
    if error["type"] == "string_pattern_mismatch" and error["loc"] == ("name",):
        return "letters, digits and . _ @ - only, starting with a letter or digit"
    if error["type"] == "string_pattern_mismatch":
        return "must not contain whitespace"
    if error["type"] == "extra_forbidden":
        return "unknown field (an entry has key, name, requests_per_minute, tokens_per_minute)"
    message = str(error["msg"])
    return re.sub(r"\s+", " ", message)


def _check_unique(path: Path, entries: list[KeyEntry]) -> None:
    names: set[str] = set()
    keys: dict[str, str] = {}
    for entry in entries:
        if entry.name in names:
            raise KeyFileError(f"--api-key-file {path}: the name {entry.name!r} is given twice")
        names.add(entry.name)
        if entry.key in keys:
            raise KeyFileError(
                f"--api-key-file {path}: entries {keys[entry.key]!r} and {entry.name!r} have the same key"
            )
        keys[entry.key] = entry.name

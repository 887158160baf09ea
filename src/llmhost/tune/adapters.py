"""LoRA adapters a tuning run serves: every candidate's server loads them (`--lora`, as `llmhost serve`
reads it), the endpoint file lists them under its component (`adapters:`), and the load may name them in
turn (`--model-mix`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from llmhost.endpoint.adapters.spec import AdapterEntry
from llmhost.engine.lora import AdapterSpec, check_unique, parse_lora
from llmhost.shared.jsontypes import JSONObject

# What requests name the base model by where adapters are served: the name of the endpoint file's
# component (an endpoint routes a request by it), which single-copy candidates are served under too
# (`--served-model-name`), so that one mix reaches every candidate alike.
SERVED_NAME = "model"


def _reference(name: str, ref: str) -> str:
    """A local adapter as an absolute path (the servers and the endpoint file read it from anywhere); a
    remote one (s3://, hf://) as given: each server fetches it as `llmhost serve` does."""
    if "://" in ref:
        return ref
    path = Path(ref)
    if not path.is_file():
        raise ValueError(f"--lora {name}: no such file {ref}")
    return str(path.resolve())


@dataclass(frozen=True)
class Adapters:
    """The adapters given with `--lora NAME=PATH[:SCALE]`, checked as an endpoint file checks them."""

    entries: tuple[AdapterEntry, ...] = ()

    @classmethod
    def parse(cls, texts: list[str]) -> Adapters:
        """Each `--lora` value read by `llmhost serve`'s parser; a ValueError names the option."""
        entries = []
        for text in texts:
            name, ref, scale = parse_lora(text)
            AdapterSpec(name, ref, scale)  # the engine's checks of a name and a scale
            try:
                entries.append(AdapterEntry(name=name, path=_reference(name, ref), scale=scale))
            except ValidationError as exc:
                raise ValueError(f"--lora {text!r}: {exc.errors()[0]['msg']}") from None
        check_unique(tuple(AdapterSpec(e.name, e.path, e.scale) for e in entries))
        return cls(tuple(entries))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(e.name for e in self.entries)

    def lora_options(self) -> list[str]:
        """The candidates' `--lora` values."""
        return [e.lora_option for e in self.entries]

    def endpoint_entries(self) -> list[JSONObject]:
        """The endpoint file component's `adapters:`."""
        return [{"name": e.name, "path": e.path, "scale": e.scale} for e in self.entries]

    def check_mix(self, mix: tuple[str, ...]) -> None:
        """Every model a mix names is served: the base model (by `SERVED_NAME`) or an adapter."""
        known = (SERVED_NAME, *self.names)
        for name in mix:
            if name not in known:
                adapters = ", ".join(self.names) or "none given"
                raise ValueError(
                    f"--model-mix {name!r}: neither the served model's name {SERVED_NAME!r} "
                    f"nor an adapter (--lora: {adapters})"
                )

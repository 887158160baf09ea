"""LoRA adapters declared under a component: each copy loads them (`llmhost serve --lora`), and a
request naming one in its `model` is routed to that component, whose copy applies it.

An adapter inference component (SageMaker's, made with `BaseInferenceComponentName`) is a component
with `base:` and `adapter:` and nothing else: it has no copies of its own, it lives on its base's copies
as one more adapter, and requests name it as they name a component (InferenceComponentName, `model`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Protocol, Self, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

ADAPTER_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"


def _finite(value: float) -> float:
    if not math.isfinite(value):
        raise ValueError("scale must be a finite number")
    return value


# an adapter's scale, however it is given (file, admin body): any finite number
Scale = Annotated[float, AfterValidator(_finite)]


class AdapterEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # what requests name in `model` (OpenAI, Anthropic, Responses, Ollama) or TGI's adapter_id
    name: str = Field(pattern=ADAPTER_NAME)
    # a LoRA GGUF for the component's model: a file, s3://..., hf://OWNER/REPO/FILE.gguf; a relative path
    # is read from the directory `endpoint up` runs in, as the component's model is
    path: str = Field(min_length=1)
    scale: Scale = 1.0  # what a request naming the adapter gets
    # an adapter inference component (a component with `base:` becomes one of its base's adapters so):
    # DELETE /admin/components/NAME removes it, and status lists it as a component
    inference_component: bool = False

    @property
    def lora_option(self) -> str:
        """The copy's `--lora` value."""
        return f"{self.name}={self.path}:{self.scale!r}"


class WithAdapters(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def adapters(self) -> list[AdapterEntry]: ...


def check_names(components: Iterable[WithAdapters]) -> None:
    """Every adapter's name names one adapter of the endpoint and no component: a request's `model`
    routes to exactly one place."""
    comps = list(components)
    owner: dict[str, str] = {c.name: c.name for c in comps}
    for c in comps:
        for a in c.adapters:
            if a.name in owner:
                taken = "a component" if owner[a.name] == a.name else f"an adapter of {owner[a.name]!r}"
                raise ValueError(f"adapter {a.name!r} of component {c.name!r}: the name of {taken}")
            owner[a.name] = c.name


class AdapterRef(BaseModel):
    """An adapter inference component's adapter (SageMaker's Container.ArtifactUrl)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # a LoRA GGUF for the base's model: a file, s3://..., hf://OWNER/REPO/FILE.gguf
    path: str = Field(min_length=1)
    scale: Scale = 1.0  # what requests for the adapter component get


# the keys an adapter component has: everything else is its base's
ADAPTER_COMPONENT_KEYS = frozenset({"name", "base", "adapter"})


def check_adapter_component(name: str, base: str | None, adapter: AdapterRef | None, given: set[str]) -> None:
    """An adapter component gives its base and its adapter, and nothing its base decides."""
    if (base is None) != (adapter is None):
        raise ValueError("an adapter component gives both `base` (the component it adapts) and `adapter`")
    other = sorted(given - ADAPTER_COMPONENT_KEYS)
    if base is not None and other:
        raise ValueError(
            f"adapter component {name!r} lives on the copies of its base {base!r}: "
            f"{', '.join(other)} cannot be set (they are the base's)"
        )


class Foldable(Protocol):
    """A component of the endpoint file (`spec.ComponentSpec`), as `fold` reads it."""

    @property
    def name(self) -> str: ...

    @property
    def base(self) -> str | None: ...

    @property
    def adapter(self) -> AdapterRef | None: ...

    @property
    def embeddings(self) -> bool: ...

    @property
    def adapters(self) -> list[AdapterEntry]: ...

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self: ...


F = TypeVar("F", bound=Foldable)


def as_entry(spec: Foldable) -> AdapterEntry:
    """The adapter component as an adapter of its base's copies."""
    assert spec.adapter is not None
    return AdapterEntry(
        name=spec.name, path=spec.adapter.path, scale=spec.adapter.scale, inference_component=True
    )


def base_problem(name: str, base: str, bases: Mapping[str, Foldable], adapters: set[str]) -> str | None:
    """Why `base` cannot carry adapter component `name` (it must be a component serving text)."""
    if base in adapters:
        return f"adapter component {name!r}: its base {base!r} is an adapter component itself"
    found = bases.get(base)
    if found is None:
        known = ", ".join(sorted(bases)) or "(none)"
        return f"adapter component {name!r}: no component named {base!r} (components: {known})"
    if found.embeddings:
        return f"adapter component {name!r}: its base {base!r} serves embeddings; LoRA adapters apply to text"
    return None


def fold(components: list[F]) -> list[F]:
    """The components with copies, each adapter component added to its base's adapters (what the copies
    load with `--lora`); a ValueError names an adapter component whose base is not one."""
    bases = {c.name: c for c in components if c.base is None}
    adapters = {c.name for c in components if c.base is not None}
    extra: dict[str, list[AdapterEntry]] = {}
    for c in components:
        if c.base is not None:
            problem = base_problem(c.name, c.base, bases, adapters)
            if problem is not None:
                raise ValueError(problem)
            extra.setdefault(c.base, []).append(as_entry(c))
    return [
        b.model_copy(update={"adapters": [*b.adapters, *extra[b.name]]}) if b.name in extra else b
        for b in bases.values()
    ]

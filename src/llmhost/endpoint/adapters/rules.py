"""What an endpoint checks before it changes a component's LoRA adapters, and how it reports them: the
rules the single-host endpoint (`adapter_ops`) and a Ray endpoint (`rayserve.adapters`) share, over
their own views of a component (its name, its adapters, whether it serves embeddings).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Any, Protocol, TypeVar

from llmhost.endpoint.adapters.spec import AdapterEntry
from llmhost.endpoint.bodies import AdapterState
from llmhost.endpoint.control_errors import (
    ComponentExistsError,
    ComponentInUseError,
    CopyRefusal,
    UnknownComponentError,
)
from llmhost.endpoint.spec import ComponentSpec


class Carrier(Protocol):
    """A component whose copies load LoRA adapters (`component.Component`, `rayserve.relay.RayComponent`)."""

    @property
    def name(self) -> str: ...

    @property
    def spec(self) -> ComponentSpec: ...

    @property
    def removing(self) -> bool: ...

    @property
    def adapter_entries(self) -> Mapping[str, AdapterEntry]: ...


C = TypeVar("C", bound=Carrier)


class AdapterHealth(StrEnum):
    # on every ready copy (a copy starting loads it with `--lora`, or once it is ready)
    LOADED = "loaded"
    # a copy refused it after it was accepted (a copy catching up, or loading it back after an unload
    # another copy refused): taken off every copy and never given to a copy starting later; requests
    # naming it fail until it is unloaded or deleted. `adapter_failures` holds the copy's reason
    FAILED = "failed"


def adapter_components(comp: Carrier) -> list[str]:
    """The adapter components living on its copies."""
    return [a.name for a in comp.adapter_entries.values() if a.inference_component]


def owner(components: Mapping[str, C], name: str) -> C | None:
    """The component whose copies load the adapter `name`."""
    return next((c for c in components.values() if name in c.adapter_entries), None)


def base_of(components: Mapping[str, C], name: str) -> C:
    """The component `name`, which must serve text to carry adapters."""
    comp = components.get(name)
    if comp is None or comp.removing:
        known = ", ".join(sorted(components)) or "(none)"
        what = "an adapter component, not a base" if owner(components, name) is not None else "unknown"
        raise UnknownComponentError(f"base inference component {name!r}: {what}; components: {known}")
    if comp.spec.embeddings:
        raise ValueError(f"component {name!r} serves embeddings: LoRA adapters apply to text generation")
    if comp.spec.variants:
        raise ValueError(f"component {name!r} has variants, whose copies load no LoRA adapters")
    return comp


def check_new(
    components: Mapping[str, Carrier], name: str, base: str, bases: frozenset[str] = frozenset()
) -> None:
    """A new adapter `name` on `base` (a component now, or among `bases` being added with it)."""
    if name in components or name in bases:
        raise ComponentExistsError(f"component {name!r} already exists")
    taken = owner(components, name)
    if taken is not None:
        raise ComponentExistsError(f"{name!r} is already an adapter of component {taken.name!r}")
    if base not in bases:
        base_of(components, base)


def check_components(components: Mapping[str, Carrier], specs: list[ComponentSpec]) -> None:
    """The adapter components among `specs` can be added (their bases exist or come with them)."""
    bases = frozenset(s.name for s in specs if s.base is None)
    for s in specs:
        if s.base is not None:
            if s.base not in bases and s.base in {x.name for x in specs}:
                raise ValueError(f"adapter component {s.name!r}: its base {s.base!r} is one too")
            check_new(components, s.name, s.base, bases)


def removal(components: Mapping[str, C], name: str) -> C | None:
    """The base of adapter component `name`, which deleting it unloads from; None when `name` is a
    component or unknown. A component with adapter components is refused naming them, as SageMaker
    refuses it."""
    comp = components.get(name)
    if comp is not None:
        users = adapter_components(comp)
        if users:
            raise ComponentInUseError(
                f"component {name!r} is the base of adapter component(s) "
                f"{', '.join(users)}: delete them first"
            )
        return None
    found = owner(components, name)
    return found if found is not None and name in adapter_components(found) else None


def check_unload(comp: Carrier, name: str) -> AdapterEntry:
    """The adapter `name` the admin API may unload from `comp` (an adapter component is deleted instead)."""
    if name in adapter_components(comp):
        raise ComponentInUseError(
            f"{name!r} is an adapter inference component: delete it (DELETE "
            f"/admin/components/{name}, `llmhost endpoint remove {name}`)"
        )
    return unloadable(comp, name)


def unloadable(comp: Carrier, name: str) -> AdapterEntry:
    entry = comp.adapter_entries.get(name)
    if entry is None:
        raise UnknownComponentError(
            f"component {comp.name!r} has no adapter {name!r}; its adapters: "
            f"{', '.join(comp.adapter_entries) or '(none)'}"
        )
    return entry


def adapter_state(a: AdapterEntry, failure: str | None = None) -> AdapterState:
    """`failure`: why a copy refused it after it was accepted (then it is failed, else loaded)."""
    return {
        "name": a.name,
        "path": a.path,
        "scale": a.scale,
        "inference_component": a.inference_component,
        "state": (AdapterHealth.FAILED if failure is not None else AdapterHealth.LOADED).value,
        "reason": failure,
    }


def load_body(entry: AdapterEntry) -> dict[str, Any]:
    """A copy's `POST /admin/adapters/load` body (both backends send it)."""
    return {"name": entry.name, "path": entry.path, "scale": entry.scale}


def listing_rows(
    component: str,
    entries: Iterable[AdapterEntry],
    answers: Iterable[list[dict[str, Any]]],
    failures: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Each adapter of `component`, with the copies that have it loaded and the requests using it;
    `answers`: each ready copy's `GET /admin/adapters` data; `failures`: why a copy refused an adapter
    after it was accepted, by adapter."""
    failed = failures or {}
    rows: dict[str, dict[str, Any]] = {
        a.name: {**adapter_state(a, failed.get(a.name)), "component": component, "copies": 0, "requests": 0}
        for a in entries
    }
    for answer in answers:
        for item in answer:
            row = rows.get(str(item.get("name")))
            if row is not None:
                row["copies"] += 1
                row["requests"] += int(item.get("requests", 0))
    return list(rows.values())


def copy_refusal(copy: str, status: int, text: str, retry_after: str | None, prefix: str) -> CopyRefusal:
    """A copy's refusal, relayed: its status, its message (naming the copy), its field under `prefix`."""
    try:
        error = json.loads(text)["error"]
        message, param = str(error["message"]), error.get("param")
    except (ValueError, KeyError, TypeError):
        message, param = text[:500], None
    field = f"{prefix}{param}" if param else None
    return CopyRefusal(status, f"copy {copy}: {message}", field, retry_after)

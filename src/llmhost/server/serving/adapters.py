"""Which LoRA adapters (--lora, or loaded at run time) a request runs with, from the fields that select
them: a `model` naming an adapter (vLLM's way), TGI's `adapter_id`, llama-server's `lora` list."""

from __future__ import annotations

from typing import Any

from llmhost.engine.lora import AdapterSet, AdapterSpec, adapter_set
from llmhost.server.protocol.openai import LoraRef
from llmhost.web.errors import APIError


class AdapterChoice:
    """The server's adapters, in --lora order then load order (a `lora` entry's `id` is its place in
    that list, as `GET /admin/adapters` shows it)."""

    def __init__(self, specs: tuple[AdapterSpec, ...]) -> None:
        self.specs = specs
        self._by_name = {s.name: s for s in specs}

    def add(self, spec: AdapterSpec) -> None:
        """One more adapter (loaded in the engine at run time)."""
        if spec.name not in self._by_name:
            self.specs = (*self.specs, spec)
            self._by_name[spec.name] = spec

    def remove(self, name: str) -> None:
        self.specs = tuple(s for s in self.specs if s.name != name)
        self._by_name.pop(name, None)

    def knows(self, name: str) -> bool:
        return name in self._by_name

    def names(self) -> str:
        return ", ".join(self._by_name) or "none (start the server with --lora NAME=PATH)"

    def by_model(self, model: str | None, lora: list[LoraRef] | None = None) -> AdapterSet:
        """A `lora` list decides (adapters it leaves out are off, as in llama-server); else a `model`
        naming an adapter selects it at its --lora scale; any other `model` is the base model."""
        if lora is not None:
            return self.from_list(lora)
        spec = self._by_name.get(model or "")
        return adapter_set([(spec.name, spec.scale)]) if spec is not None else ()

    def by_id(self, adapter_id: str | None) -> AdapterSet:
        """TGI's `adapter_id`: an adapter's name (null: the base model)."""
        if adapter_id is None:
            return ()
        spec = self._by_name.get(adapter_id)
        if spec is None:
            raise APIError(
                422, f"no LoRA adapter {adapter_id!r}; loaded: {self.names()}", field="parameters.adapter_id"
            )
        return adapter_set([(spec.name, spec.scale)])

    def from_list(self, lora: list[LoraRef]) -> AdapterSet:
        pairs: list[tuple[str, float]] = []
        for i, ref in enumerate(lora):
            name = self._entry_name(i, ref)
            if any(name == seen for seen, _ in pairs):
                raise APIError(422, f"adapter {name!r} is listed twice", field=f"lora[{i}]")
            pairs.append((name, ref.scale))
        return adapter_set(pairs)

    def _entry_name(self, i: int, ref: LoraRef) -> str:
        if (ref.id is None) == (ref.name is None):
            raise APIError(422, "give an adapter's id or its name (one of them)", field=f"lora[{i}]")
        if ref.id is not None:
            if ref.id >= len(self.specs):
                raise APIError(
                    422,
                    f"no adapter with id {ref.id}; {len(self.specs)} loaded: {self.names()}",
                    field=f"lora[{i}].id",
                )
            return self.specs[ref.id].name
        if ref.name not in self._by_name:
            raise APIError(
                422, f"no LoRA adapter {ref.name!r}; loaded: {self.names()}", field=f"lora[{i}].name"
            )
        return str(ref.name)


# SageMaker names an adapter inference component to the container in this header (and the endpoint's
# router names an adapter so to the base's copy)
ADAPTER_HEADER = "X-Amzn-SageMaker-Adapter-Identifier"


def header_selects(choice: AdapterChoice, adapter: str | None, body: Any, served: str) -> Any:
    """The body as it selects the adapter the header names: TGI's `parameters.adapter_id`, else `model`.
    A body selecting another adapter is refused naming its field: one request, one choice."""
    if not adapter or not isinstance(body, dict):
        return body
    if not choice.knows(adapter):
        raise APIError(422, f"no LoRA adapter {adapter!r}; loaded: {choice.names()}", field=ADAPTER_HEADER)
    conflict = f"the {ADAPTER_HEADER} header selects adapter {adapter!r}"
    if "inputs" in body:  # TGI
        params = body.get("parameters")
        params = params if isinstance(params, dict) else {}
        if params.get("adapter_id") not in (None, adapter):
            field = "parameters.adapter_id"
            raise APIError(422, f"{conflict}; {field} names another", field=field)
        return {**body, "parameters": {**params, "adapter_id": adapter}}
    if body.get("lora") is not None:
        raise APIError(422, f"{conflict}; leave out the `lora` list", field="lora")
    if body.get("model") not in (None, "", served, adapter):
        raise APIError(422, f"{conflict}; `model` names {body['model']!r}", field="model")
    return {**body, "model": adapter}

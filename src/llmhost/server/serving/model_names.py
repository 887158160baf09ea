"""The `model` names a single server answers to: its served name, its file's stem, `default`, and the
LoRA adapters it has loaded, each with or without Ollama's `:latest` tag.

Ollama's routes refuse any other name with Ollama's own 404 (`ollama pull`-minded tools act on it); the
OpenAI-style routes take any name (the one model answers) unless --strict-model-names, where an unknown
name is a 404 in the route's format, as an endpoint's router answers a name none of its components has.
"""

from __future__ import annotations

from llmhost.server.serving.adapters import AdapterChoice
from llmhost.server.settings import ServerSettings
from llmhost.server.tracing import requested
from llmhost.store.ggufnames import model_stem
from llmhost.web.errors import APIError

# what TGI's clients put in `model` when the user named none (huggingface_hub with a base_url: "dummy";
# TGI's messages API: "tgi"): an endpoint's router routes by its header or its only component, a server
# serves its model
UNNAMED = frozenset({"tgi", "dummy"})
DEFAULT_NAME = "default"


def ollama_not_found(model: str) -> APIError:
    """Ollama's answer to a model it does not have, word for word (its clients match on it)."""
    return APIError(404, f'model "{model}" not found, try pulling it first', "not_found_error", field="model")


class ModelNames:
    def __init__(self, settings: ServerSettings, adapters: AdapterChoice) -> None:
        self.adapters = adapters  # shared: adapters loaded at run time are known as they load
        self.strict = settings.strict_model_names
        self.model_name = settings.model_name
        stem = model_stem(settings.model_path.name)
        self.served = frozenset({settings.model_name, stem, settings.served_model_name, DEFAULT_NAME} - {""})

    def knows(self, model: str) -> bool:
        name = model.removesuffix(":latest")
        return name in self.served or self.adapters.knows(name)

    def listed(self) -> str:
        return ", ".join(sorted(self.served) + [s.name for s in self.adapters.specs])

    def check_ollama(self, model: str) -> None:
        """An Ollama route's `model`: a name of this server's, else Ollama's 404."""
        requested(model, self.model_name)
        if not self.knows(model):
            raise ollama_not_found(model)

    def check(self, model: str | None, field: str = "model") -> None:
        """An OpenAI-style route's `model` (Anthropic's, Responses' too): any name, unless strict."""
        requested(model, self.model_name)
        if not self.strict or not model or model in UNNAMED or self.knows(model):
            return
        raise APIError(
            404,
            f"The model {model!r} does not exist on this server (--strict-model-names); it serves: "
            f"{self.listed()}",
            "not_found_error",
            field=field,
        )

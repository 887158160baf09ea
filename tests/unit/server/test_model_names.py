"""The `model` names a single server answers to, and the 404s for others (Ollama's always, the
OpenAI-style routes' under --strict-model-names)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmhost.engine.config import EngineConfig
from llmhost.engine.lora import AdapterSpec
from llmhost.server.serving.adapters import AdapterChoice
from llmhost.server.serving.model_names import ModelNames
from llmhost.server.settings import ServerSettings
from llmhost.web.errors import APIError
from llmhost.web.formats import ollama_error

MODEL = Path("/models/SmolLM2-135M-Instruct.Q4_1.gguf")


def names(strict: bool = False, served: str = "smol") -> ModelNames:
    settings = ServerSettings(
        model_path=MODEL, engine=EngineConfig(), served_model_name=served, strict_model_names=strict
    )
    return ModelNames(settings, AdapterChoice((AdapterSpec("pirate", "/a/pirate.gguf", 1.0),)))


@pytest.mark.parametrize(
    "model", ["smol", "smol:latest", "SmolLM2-135M-Instruct.Q4_1", "default", "default:latest", "pirate"]
)
def test_the_servers_names_with_or_without_latest(model: str) -> None:
    names().check_ollama(model)
    names(strict=True).check(model)


def test_ollama_refuses_another_name_with_its_own_404_body() -> None:
    with pytest.raises(APIError) as err:
        names().check_ollama("no-such-model")
    status, body = ollama_error(err.value.status, err.value.body())
    assert status == 404
    assert body == {"error": 'model "no-such-model" not found, try pulling it first', "field": "model"}


def test_openai_routes_take_any_name_unless_strict() -> None:
    names().check("no-such-model")
    names(strict=True).check(None)  # no model named: the served one
    names(strict=True).check("tgi")  # TGI's clients' name for "none"
    with pytest.raises(APIError) as err:
        names(strict=True).check("no-such-model")
    assert err.value.status == 404 and err.value.field == "model"
    assert "smol" in err.value.message and "pirate" in err.value.message


def test_an_adapter_loaded_at_run_time_is_known_as_it_loads() -> None:
    n = names()
    n.adapters.add(AdapterSpec("late", "/a/late.gguf", 0.5))
    n.check_ollama("late:latest")


def test_a_server_budget_over_its_max_is_refused_at_start() -> None:
    with pytest.raises(ValueError, match="over --reasoning-budget-max"):
        ServerSettings(model_path=MODEL, engine=EngineConfig(), reasoning_budget=64, reasoning_budget_max=32)

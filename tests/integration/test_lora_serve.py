"""`llmhost serve --lora`: adapters selected over HTTP by `model` (OpenAI completions and chat, with
the official client), TGI's `adapter_id` and llama-server's `lora` list; `/v1/models` lists them with
their base; an unknown adapter is a 422 naming the field; an adapter for another model stops the start
with a message naming it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from llmhost.store import resolve_model
from tests.integration.conftest import CHAT_TEMPLATE, Server, start_server, stop_server
from tests.integration.lora_helpers import write_adapter

N = 6
PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def adapter_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("lora_files")
    base = Path(resolve_model())
    return {
        "sql": write_adapter(tmp / "sql.gguf", base, seed=1, std=0.15),
        "poet": write_adapter(tmp / "poet.gguf", base, seed=2, std=0.15),
        "bad": write_adapter(tmp / "bad.gguf", base, seed=3, shape_off_by=3),
    }


@pytest.fixture(scope="module")
def lora_server(tmp_path_factory: pytest.TempPathFactory, adapter_files: dict[str, Path]) -> Iterator[Server]:
    srv = start_server(
        tmp_path_factory.mktemp("lora_serve"),
        "--max-concurrent", "4", "--max-input-tokens", "64", "--max-total-tokens", "128",
        "--max-batch-tokens", "128", "--chat-template", str(CHAT_TEMPLATE), "--served-model-name", "gemma",
        "--lora", f"sql={adapter_files['sql']}", "--lora", f"poet={adapter_files['poet']}:0.5",
    )  # fmt: skip
    yield srv
    stop_server(srv)


def complete(srv: Server, **body: Any) -> Any:
    payload = {"prompt": PROMPT, "max_tokens": N, "temperature": 0, "ignore_eos": True, **body}
    return srv.client().post("/v1/completions", json=payload)


def text_of(resp: Any) -> str:
    assert resp.status_code == 200, resp.text
    return str(resp.json()["choices"][0]["text"])


def test_models_lists_the_adapters_with_their_base(lora_server: Server) -> None:
    cards = {m.id: m for m in openai.OpenAI(base_url=f"{lora_server.url}/v1", api_key="x").models.list().data}
    assert set(cards) == {"gemma", "sql", "poet"}
    assert cards["sql"].parent == "gemma" and cards["poet"].parent == "gemma"
    assert cards["gemma"].parent is None


def test_each_way_of_selecting_an_adapter_gives_its_output(lora_server: Server) -> None:
    base = text_of(complete(lora_server, model="gemma"))
    by_model = text_of(complete(lora_server, model="sql"))
    assert by_model != base
    assert text_of(complete(lora_server, lora=[{"name": "sql", "scale": 1.0}])) == by_model
    assert text_of(complete(lora_server, lora=[{"id": 0, "scale": 1.0}])) == by_model
    # the --lora scale is the one `model` selects with; the list's scale is its own
    assert text_of(complete(lora_server, model="poet")) == text_of(
        complete(lora_server, lora=[{"id": 1, "scale": 0.5}])
    )
    # two adapters apply together: another answer than either alone (both at these scales)
    poet = text_of(complete(lora_server, lora=[{"id": 1, "scale": 1.0}]))
    both = text_of(
        complete(lora_server, lora=[{"name": "sql", "scale": 1.0}, {"name": "poet", "scale": 1.0}])
    )
    assert both not in (by_model, poet, base)
    # an empty list is the base model, whatever `model` says
    assert text_of(complete(lora_server, model="sql", lora=[])) == base
    tgi = lora_server.client().post(
        "/generate", json={"inputs": PROMPT, "parameters": {"max_new_tokens": N, "adapter_id": "sql"}}
    )
    assert tgi.status_code == 200, tgi.text
    assert tgi.json()["generated_text"] == by_model
    ollama = lora_server.client().post("/api/generate", json={
        "model": "sql:latest", "prompt": PROMPT, "raw": True, "stream": False,
        "options": {"num_predict": N, "temperature": 0, "repeat_penalty": 1.0}})  # fmt: skip
    assert ollama.status_code == 200, ollama.text
    assert ollama.json()["response"] == by_model


def test_chat_selects_an_adapter_by_model_with_the_openai_client(lora_server: Server) -> None:
    client = openai.OpenAI(base_url=f"{lora_server.url}/v1", api_key="x")
    messages: list[Any] = [{"role": "user", "content": "Name a colour."}]

    def chat(**kw: Any) -> str:
        out = client.chat.completions.create(messages=messages, max_tokens=N, temperature=0, **kw)
        return str(out.choices[0].message.content)

    sql = chat(model="sql")
    assert sql == chat(model="gemma", extra_body={"lora": [{"name": "sql", "scale": 1.0}]})
    assert sql != chat(model="gemma")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"lora": [{"name": "nope", "scale": 1.0}]}, "lora[0].name"),
        ({"lora": [{"id": 7, "scale": 1.0}]}, "lora[0].id"),
        ({"lora": [{"scale": 1.0}]}, "lora[0]"),
        ({"lora": [{"id": 0}, {"name": "sql"}]}, "lora[1]"),
    ],
)
def test_an_unknown_adapter_is_a_422_naming_the_field(
    lora_server: Server, body: dict[str, Any], field: str
) -> None:
    resp = complete(lora_server, **body)
    assert resp.status_code == 422, resp.text
    assert resp.json()["error"]["param"] == field


def test_tgi_unknown_adapter_id_is_a_422(lora_server: Server) -> None:
    resp = lora_server.client().post(
        "/generate", json={"inputs": PROMPT, "parameters": {"adapter_id": "nope"}}
    )
    assert resp.status_code == 422, resp.text
    assert "nope" in resp.text and "sql, poet" in resp.text


def test_an_adapter_for_another_model_stops_the_start_naming_it(
    tmp_path: Path, adapter_files: dict[str, Path]
) -> None:
    with pytest.raises(RuntimeError, match=r"--lora bad: llama\.cpp could not load the LoRA adapter"):
        start_server(tmp_path, "--max-concurrent", "1", "--lora", f"bad={adapter_files['bad']}")

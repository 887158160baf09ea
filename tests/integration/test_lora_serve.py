"""`llmhost serve --lora`: adapters selected over HTTP by `model` (OpenAI completions and chat, with
the official client), TGI's `adapter_id` and llama-server's `lora` list; `/v1/models` lists them with
their base; an unknown adapter is a 422 naming the field; an adapter for another model stops the start
with a message naming it. The server keeps one adapter loaded (`--max-loras 1`): every test that
alternates adapters also loads them again on demand. Adapters are loaded and unloaded at run time
(`/admin/adapters`) while other requests run. Ollama lists them as models of their base; bench drives a
mix of them. (Adapters on an endpoint: test_lora_components.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ollama
import openai
import pytest

from llmhost.store import resolve_model
from tests.integration.conftest import CHAT_TEMPLATE, Server, start_server, stop_server
from tests.integration.lora_helpers import sample_adapters

N = 6
PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def adapter_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return sample_adapters(tmp_path_factory.mktemp("lora_files"), Path(resolve_model()), extra=True)


@pytest.fixture(scope="module")
def lora_server(tmp_path_factory: pytest.TempPathFactory, adapter_files: dict[str, Path]) -> Iterator[Server]:
    srv = start_server(
        tmp_path_factory.mktemp("lora_serve"),
        "--max-concurrent",
        "4",
        "--max-input-tokens",
        "64",
        "--max-total-tokens",
        "128",
        "--max-batch-tokens",
        "128",
        "--chat-template",
        str(CHAT_TEMPLATE),
        "--served-model-name",
        "gemma",
        "--lora",
        f"sql={adapter_files['sql']}",
        "--lora",
        f"poet={adapter_files['poet']}:0.5",
        "--max-loras",
        "1",
    )
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


def test_ollama_lists_the_adapters_as_models_of_their_base(lora_server: Server) -> None:
    client = ollama.Client(host=lora_server.url, timeout=120)
    tags = {m.model: m for m in client.list().models}
    assert set(tags) == {"gemma:latest", "sql:latest", "poet:latest"}
    assert tags["sql:latest"].details and tags["sql:latest"].details.parent_model == "gemma:latest"
    assert tags["gemma:latest"].details and not tags["gemma:latest"].details.parent_model
    assert {m.model for m in client.ps().models} == set(tags)
    show = client.show("poet")
    assert show.details and show.details.parent_model == "gemma:latest"
    assert "ADAPTER" in str(show.modelfile) and "scale 0.5" in str(show.modelfile)
    assert "ADAPTER" not in str(client.show("gemma").modelfile)


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
    ollama = lora_server.client().post(
        "/api/generate",
        json={
            "model": "sql:latest",
            "prompt": PROMPT,
            "raw": True,
            "stream": False,
            "options": {"num_predict": N, "temperature": 0, "repeat_penalty": 1.0},
        },
    )
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
    with pytest.raises(RuntimeError, match=r"--lora bad: adapter \S+bad\.gguf: .* do not fit the base's"):
        start_server(tmp_path, "--max-concurrent", "1", "--lora", f"bad={adapter_files['bad']}")


def admin(srv: Server, action: str, **body: Any) -> Any:
    return srv.client().post(f"/admin/adapters/{action}", json=body)


def test_the_adapter_list_shows_the_budget_and_what_is_loaded(lora_server: Server) -> None:
    text_of(complete(lora_server, model="poet"))  # poet used last: the one kept loaded
    listing = lora_server.client().get("/admin/adapters").json()
    assert listing["max_loras"] == 1
    rows = {a["name"]: a for a in listing["data"]}
    assert set(rows) == {"sql", "poet"} and rows["poet"]["scale"] == 0.5
    assert rows["poet"]["loaded"] and not rows["sql"]["loaded"]
    assert rows["sql"]["requests"] == rows["poet"]["requests"] == 0


def test_an_adapter_loaded_at_run_time_answers_as_one_given_at_start(
    lora_server: Server, adapter_files: dict[str, Path]
) -> None:
    with (
        lora_server.client() as client,
        client.stream(
            "POST",
            "/v1/completions",
            json={
                "prompt": PROMPT,
                "max_tokens": 48,
                "temperature": 0,
                "ignore_eos": True,
                "stream": True,
            },
        ) as running,
    ):
        lines = running.iter_lines()
        assert next(line for line in lines if line.startswith("data: "))  # the stream is under way
        loaded = admin(lora_server, "load", name="sql-again", path=str(adapter_files["sql"]))
        assert loaded.status_code == 200, loaded.text
        rest = [line for line in lines if line.startswith("data: ")]
    assert rest[-1] == "data: [DONE]" and len(rest) > 2  # the running stream went on to its end
    try:
        # a prompt no other test sends: each answer is a fresh prefill (under an adapter, llama.cpp's
        # logits depend on how a prompt is split into decodes, so a cached prefix may answer otherwise)
        again = text_of(complete(lora_server, model="sql-again", prompt="Adapters loaded at run time"))
        assert again == text_of(complete(lora_server, model="sql", prompt="Adapters loaded at run time"))
        cards = {m["id"]: m for m in lora_server.client().get("/v1/models").json()["data"]}
        assert cards["sql-again"]["parent"] == "gemma"
    finally:
        assert admin(lora_server, "unload", name="sql-again").status_code == 200


def test_another_file_under_an_unloaded_name_is_never_served_the_old_ones_cache(
    lora_server: Server, adapter_files: dict[str, Path]
) -> None:
    prompt = "One name, two files"  # sent by no other test: no cached prefix of it but this test's
    poet = text_of(complete(lora_server, lora=[{"name": "poet", "scale": 1.0}], prompt=prompt))
    third = admin(lora_server, "load", name="x", path=str(adapter_files["third"]))
    assert third.status_code == 200, third.text
    first = text_of(complete(lora_server, model="x", prompt=prompt))
    assert admin(lora_server, "unload", name="x").status_code == 200
    assert admin(lora_server, "load", name="x", path=str(adapter_files["poet"])).status_code == 200
    try:
        # the same prompt under the same name: the new file's answer, not the cached KV of the old
        assert text_of(complete(lora_server, model="x", prompt=prompt)) == poet != first
    finally:
        assert admin(lora_server, "unload", name="x").status_code == 200


def test_unloading_an_adapter_in_use_is_a_409_and_after_it_the_name_is_unknown(
    lora_server: Server, adapter_files: dict[str, Path]
) -> None:
    assert admin(lora_server, "load", name="busy", path=str(adapter_files["third"])).status_code == 200
    with (
        lora_server.client() as client,
        client.stream(
            "POST",
            "/v1/completions",
            json={
                "model": "busy",
                "prompt": PROMPT,
                "max_tokens": 64,
                "ignore_eos": True,
                "stream": True,
            },
        ) as running,
    ):
        lines = running.iter_lines()
        assert next(line for line in lines if line.startswith("data: "))
        refused = admin(lora_server, "unload", name="busy")
        assert refused.status_code == 409, refused.text
        assert "'busy' is in use" in refused.json()["error"]["message"]
        assert refused.headers["retry-after"] == "1"
        assert [line for line in lines if line.startswith("data: ")][-1] == "data: [DONE]"
    assert admin(lora_server, "unload", name="busy").status_code == 200
    gone = lora_server.client().post(
        "/generate", json={"inputs": PROMPT, "parameters": {"max_new_tokens": 2, "adapter_id": "busy"}}
    )
    assert gone.status_code == 422 and "busy" in gone.text


@pytest.mark.parametrize(
    ("action", "body", "status", "field", "words"),
    [
        ("load", {"name": "wrong", "path": "bad"}, 422, "path", "do not fit the base's"),
        ("load", {"name": "gone", "path": "/no/such.gguf"}, 404, "path", "/no/such.gguf"),
        ("load", {"name": "sql", "path": "third"}, 409, "name", "an adapter named 'sql' is loaded"),
        ("load", {"name": "-x", "path": "third"}, 422, "name", "pattern"),
        ("unload", {"name": "nope"}, 404, "name", "no LoRA adapter named 'nope'"),
    ],
)
def test_a_refused_load_or_unload_names_the_field_and_the_server_keeps_serving(
    lora_server: Server,
    adapter_files: dict[str, Path],
    action: str,
    body: dict[str, str],
    status: int,
    field: str,
    words: str,
) -> None:
    if body.get("path") in adapter_files:
        body = {**body, "path": str(adapter_files[body["path"]])}
    resp = admin(lora_server, action, **body)
    assert resp.status_code == status, resp.text
    error = resp.json()["error"]
    assert words in error["message"] and error["param"] == field
    assert text_of(complete(lora_server, model="sql"))


def test_bench_spreads_its_requests_over_a_mix_of_adapters_with_figures_per_model(
    lora_server: Server, tmp_path: Path
) -> None:
    out = tmp_path / "results"
    cmd = [
        sys.executable,
        "-m",
        "llmhost.cli",
        "bench",
        "run",
        "--url",
        lora_server.url,
        "--api",
        "openai",
        "--model",
        "gemma,sql,poet",
        "--concurrency",
        "2",
        "--requests",
        "6",
        "--num-prompts",
        "6",
        "--prompt-tokens",
        "16",
        "--max-new-tokens",
        "4",
        "--out",
        str(out),
        "--no-live",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    [level] = json.loads((out / "summary.json").read_text())["configs"][0]["levels"]
    assert level["successes"] == 6
    assert {m: (f["requests"], f["successes"]) for m, f in level["by_model"].items()} == {
        "gemma": (2, 2),
        "sql": (2, 2),
        "poet": (2, 2),
    }
    sent = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    assert sorted(r["model"] for r in sent if not r["warmup"]) == sorted(["gemma", "sql", "poet"] * 2)
    assert "By model" in done.stdout

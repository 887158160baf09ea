"""Adapter inference components on a real endpoint (`llmhost endpoint up`, Gemma 270M copies): one from
the endpoint file and one created at run time (`POST /admin/components` with `base` and `adapter`, as
SageMaker's CreateInferenceComponent with BaseInferenceComponentName), each invoked through boto3's
`sagemaker-runtime` client by InferenceComponentName and answering as the same adapter selected by
`model`; a copy started later loads them; deleting one in use is a 409, deleting their base is refused
naming them; the endpoint's `/admin/adapters` loads and unloads an adapter on every copy of a component.
One endpoint serves every test: they run in file order."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import ollama
import pytest
from botocore.config import Config

from llmhost.endpoint.dataplane.routing import COMPONENT_HEADER
from llmhost.store import resolve_model
from tests.integration.endpoint_helpers import Endpoint, copy_headers, start_endpoint, stop_endpoint
from tests.integration.lora_helpers import sample_adapters, write_adapter

PROMPT = "The capital of France is"
JSON = "application/json"
ASK = {"prompt": PROMPT, "max_tokens": 6, "temperature": 0, "ignore_eos": True}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return sample_adapters(tmp_path_factory.mktemp("lora_component_files"), Path(resolve_model()))


@pytest.fixture(scope="module")
def ep(tmp_path_factory: pytest.TempPathFactory, files: dict[str, Path]) -> Iterator[Endpoint]:
    # no cached prefixes: every answer is a fresh prefill (under an adapter, llama.cpp's logits depend on
    # how a prompt is split into decodes)
    endpoint = start_endpoint(
        tmp_path_factory.mktemp("lora_components"),
        f"""
name: adapters
components:
  - name: base
    copies: 1
    resources: {{num_cpus: 0.5, memory_mb: 1024}}
    engine: {{max_concurrent: 2, max_input_tokens: 64, max_total_tokens: 128, max_batch_tokens: 128,
              prefix_cache_seqs: 0, prompt_cache_mb: 0}}
    adapters:
      - {{name: poet, path: {files["poet"]}, scale: 0.5}}
  - name: sql
    base: base
    adapter: {{path: {files["sql"]}}}
""",
    )
    yield endpoint
    stop_endpoint(endpoint)


def client(ep: Endpoint) -> httpx.Client:
    return httpx.Client(base_url=ep.url, timeout=120)


def runtime(ep: Endpoint) -> Any:
    return boto3.client(
        "sagemaker-runtime",
        endpoint_url=ep.url,
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="y",
        config=Config(read_timeout=120),
    )


def invoke(ep: Endpoint, component: str, body: dict[str, Any]) -> Any:
    r = runtime(ep).invoke_endpoint(
        EndpointName="adapters", Body=json.dumps(body), ContentType=JSON, InferenceComponentName=component
    )
    return json.loads(r["Body"].read())


def by_model(ep: Endpoint, model: str) -> str:
    resp = client(ep).post("/v1/completions", json={**ASK, "model": model})
    assert resp.status_code == 200, resp.text
    return str(resp.json()["choices"][0]["text"])


def test_an_adapter_component_of_the_file_answers_by_its_name_as_sagemaker_invokes_it(ep: Endpoint) -> None:
    sql = by_model(ep, "sql")
    assert sql != by_model(ep, "base")
    assert invoke(ep, "sql", ASK)["choices"][0]["text"] == sql
    tgi = invoke(ep, "sql", {"inputs": PROMPT, "parameters": {"max_new_tokens": 6}})
    assert tgi[0]["generated_text"] == sql
    # the header naming a component's adapter (`adapters:`) routes so too
    poet = by_model(ep, "poet")
    assert invoke(ep, "poet", ASK)["choices"][0]["text"] == poet != sql
    # the adapters as the base's copy numbers them: the file's `adapters:`, then adapter components
    lora = [{"id": 0, "scale": 0.5}]
    listed = client(ep).post("/v1/completions", json={**ASK, "model": "base", "lora": lora})
    assert listed.json()["choices"][0]["text"] == poet
    tgi_body = {"inputs": PROMPT, "parameters": {"max_new_tokens": 6, "adapter_id": "sql"}}
    named = client(ep).post("/generate", headers={COMPONENT_HEADER: "base"}, json=tgi_body)
    assert named.status_code == 200 and named.json()["generated_text"] == sql
    # an OpenAI body naming no model gets the header's adapter
    no_model = client(ep).post("/v1/completions", headers={COMPONENT_HEADER: "sql"}, json=ASK)
    assert no_model.json()["choices"][0]["text"] == sql
    cards = {m["id"]: m for m in client(ep).get("/v1/models").json()["data"]}
    assert cards["sql"]["parent"] == cards["poet"]["parent"] == "base" and "parent" not in cards["base"]
    status = ep.status()
    assert status["adapter_components"] == [{"name": "sql", "base": "base"}]
    [base] = status["components"]
    assert {a["name"]: a["inference_component"] for a in base["adapters"]} == {"poet": False, "sql": True}
    oll = ollama.Client(host=ep.url, timeout=120)  # Ollama's clients pick models from /api/tags
    tags = {m.model: m for m in oll.list().models}
    assert set(tags) == {"base:latest", "poet:latest", "sql:latest"}
    assert tags["sql:latest"].details and tags["sql:latest"].details.parent_model == "base:latest"
    assert {m.model for m in oll.ps().models} == set(tags)
    show = oll.show("sql")
    assert show.details and show.details.parent_model == "base:latest" and "ADAPTER" in str(show.modelfile)
    shown = ep.cli("status")
    assert shown.returncode == 0 and "inference component" in shown.stdout, shown.stderr


def test_the_copy_refuses_a_body_choosing_another_adapter_than_the_header(ep: Endpoint) -> None:
    with pytest.raises(runtime(ep).exceptions.ModelError) as caught:
        invoke(ep, "sql", {**ASK, "model": "poet"})
    assert caught.value.response["OriginalStatusCode"] == 422
    assert "X-Amzn-SageMaker-Adapter-Identifier" in caught.value.response["Error"]["Message"]


def test_an_adapter_component_created_at_run_time_serves_and_a_later_copy_loads_it(
    ep: Endpoint, files: dict[str, Path]
) -> None:
    body = {"name": "sql2", "base": "base", "adapter": {"path": str(files["sql"])}}
    added = client(ep).post("/admin/components", json=body)
    assert added.status_code == 201, added.text
    assert invoke(ep, "sql2", ASK)["choices"][0]["text"] == by_model(ep, "sql2") == by_model(ep, "sql")
    scaled = client(ep).post("/admin/scale", json={"component": "base", "copies": 2})
    assert scaled.status_code == 200, scaled.text
    rows = {r["name"]: r for r in client(ep).get("/admin/adapters").json()["data"]}
    assert rows["sql2"]["copies"] == rows["sql"]["copies"] == rows["poet"]["copies"] == 2
    assert rows["sql2"]["inference_component"] and rows["sql2"]["component"] == "base"
    wrong = {**body, "name": "wrong", "adapter": {"path": str(files["bad"])}}
    bad = client(ep).post("/admin/components", json=wrong)
    assert bad.status_code == 422 and bad.json()["error"]["param"] == "adapter.path", bad.text
    assert str(files["bad"]) in bad.text and "do not fit the base's" in bad.json()["error"]["message"]
    again = client(ep).post("/admin/components", json=body)
    assert again.status_code == 409, again.text
    assert client(ep).post("/admin/scale", json={"component": "base", "copies": 1}).status_code == 200


def test_deleting_an_adapter_component_in_use_is_a_409_and_its_base_is_refused(ep: Endpoint) -> None:
    refused = client(ep).delete("/admin/components/base")
    assert refused.status_code == 409, refused.text
    assert "sql, sql2" in refused.json()["error"]["message"]
    with (
        client(ep) as c,
        c.stream(
            "POST", "/v1/completions", json={**ASK, "model": "sql2", "max_tokens": 64, "stream": True}
        ) as running,
    ):
        lines = running.iter_lines()
        assert next(line for line in lines if line.startswith("data: "))
        busy = client(ep).delete("/admin/components/sql2")
        assert busy.status_code == 409, busy.text
        assert busy.headers["retry-after"] == "1" and "in use" in busy.text
        assert [line for line in lines if line.startswith("data: ")][-1] == "data: [DONE]"
    assert client(ep).delete("/admin/components/sql2").status_code == 200
    with pytest.raises(runtime(ep).exceptions.ValidationError, match="unknown inference component 'sql2'"):
        invoke(ep, "sql2", ASK)


def test_the_endpoint_loads_and_unloads_an_adapter_on_every_copy(
    ep: Endpoint, files: dict[str, Path]
) -> None:
    def admin(action: str, **body: Any) -> httpx.Response:
        return client(ep).post(f"/admin/adapters/{action}", json=body)

    loaded = admin("load", component="base", name="extra", path=str(files["sql"]))
    assert loaded.status_code == 200, loaded.text
    assert {r["name"]: r["copies"] for r in loaded.json()["data"]}["extra"] == 1
    assert by_model(ep, "extra") == by_model(ep, "sql")
    bad = admin("load", component="base", name="worse", path=str(files["bad"]))
    assert bad.status_code == 422 and bad.json()["error"]["param"] == "path", bad.text
    nowhere = admin("load", component="nope", name="x", path=str(files["sql"]))
    assert nowhere.status_code == 404 and "nope" in nowhere.text
    component = admin("unload", component="base", name="sql")
    assert component.status_code == 409 and "DELETE" in component.text
    assert admin("unload", component="base", name="extra").status_code == 200
    gone = client(ep).post("/v1/completions", json={**ASK, "model": "extra"})
    assert gone.status_code == 404, gone.text
    listed = ep.cli("adapters", "list")
    assert listed.returncode == 0 and "poet" in listed.stdout and "extra" not in listed.stdout, listed.stderr


def copy_adapters(replica: dict[str, Any]) -> set[str]:
    """The adapters one copy has loaded, asked of the copy itself."""
    url = f"http://127.0.0.1:{replica['port']}/admin/adapters"
    return {a["name"] for a in httpx.get(url, headers=copy_headers(replica), timeout=30).json()["data"]}


def copy_text(replica: dict[str, Any], model: str) -> str:
    """A completion asked of one copy itself."""
    url = f"http://127.0.0.1:{replica['port']}/v1/completions"
    resp = httpx.post(url, headers=copy_headers(replica), json={**ASK, "model": model}, timeout=120)
    assert resp.status_code == 200, resp.text
    return str(resp.json()["choices"][0]["text"])


def rows(ep: Endpoint) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in client(ep).get("/admin/adapters").json()["data"]}


def test_an_adapter_component_added_while_a_copy_starts_reaches_that_copy(
    ep: Endpoint, files: dict[str, Path]
) -> None:
    """The race `catch_up` closes: the copy was started (its `--lora` list made) before the add landed."""
    scaling = client(ep).post("/admin/scale", json={"component": "base", "copies": 2, "wait": False})
    assert scaling.status_code == 202, scaling.text
    # its pid: its command (and `--lora` list) made, before the add is sent
    ep.wait_for("a second copy", lambda: [bool(r["pid"]) for r in ep.replicas("base")] == [True, True])
    body = {"name": "late", "base": "base", "adapter": {"path": str(files["poet"])}}
    added = client(ep).post("/admin/components", json=body)  # not held up by the copy starting
    assert added.status_code == 201, added.text
    second = ep.replicas("base")[1]
    started = [line for line in Path(second["log"]).read_text().splitlines() if " start: " in line]
    assert "poet=" in started[0] and "late=" not in started[0]  # it started without the new adapter
    ep.wait_for("both copies ready with `late`", lambda: rows(ep)["late"]["copies"] == 2)
    assert all("late" in copy_adapters(r) for r in ep.replicas("base"))
    assert rows(ep)["late"]["state"] == "loaded"
    answers = {copy_text(r, "late") for r in ep.replicas("base")}
    assert len(answers) == 1 and answers != {by_model(ep, "base")}


def test_an_unload_one_copy_refuses_leaves_the_adapter_on_every_copy_or_shows_it_failed(
    ep: Endpoint, files: dict[str, Path], tmp_path: Path
) -> None:
    """Copy 0 unloads it, copy 1 says 409 (a request uses it there): copy 0 loads it back; when it
    cannot (the file is gone), the adapter shows failed with copy 0's reason."""
    first, second = ep.replicas("base")
    for name, path in (("held", files["sql"]), ("gone", tmp_path / "gone.gguf")):
        if name == "gone":
            path.write_bytes(files["sql"].read_bytes())
        load = {"component": "base", "name": name, "path": str(path)}
        loaded = client(ep).post("/admin/adapters/load", json=load)
        assert loaded.status_code == 200, loaded.text
        url = f"http://127.0.0.1:{second['port']}/v1/completions"
        with (
            client(ep) as c,
            c.stream(
                "POST",
                url,
                headers=copy_headers(second),
                json={**ASK, "model": name, "max_tokens": 64, "stream": True},
            ) as running,
        ):
            lines = running.iter_lines()
            assert next(line for line in lines if line.startswith("data: "))
            if name == "gone":
                path.unlink()
            busy = client(ep).post("/admin/adapters/unload", json={"component": "base", "name": name})
            assert busy.status_code == 409 and busy.headers["retry-after"] == "1", busy.text
            assert second["copy"] in busy.json()["error"]["message"]
            row = rows(ep)[name]
            if name == "held":  # back on copy 0: on both
                assert row["copies"] == 2 and row["state"] == "loaded" and row["reason"] is None
                assert name in copy_adapters(first) and name in copy_adapters(second)
            else:  # on copy 1 only, and it says so
                assert row["copies"] == 1 and row["state"] == "failed", row
                assert first["copy"] in row["reason"] and str(path) in row["reason"]
                assert name not in copy_adapters(first) and name in copy_adapters(second)
            assert [line for line in lines if line.startswith("data: ")][-1] == "data: [DONE]"
        done = client(ep).post("/admin/adapters/unload", json={"component": "base", "name": name})
        assert done.status_code == 200 and name not in rows(ep), done.text
        assert name not in copy_adapters(first) | copy_adapters(second)


def test_an_adapter_added_with_no_copy_running_is_checked_against_the_base_file(
    ep: Endpoint, files: dict[str, Path], tmp_path: Path
) -> None:
    """No copy to ask: the endpoint reads both headers. One that a copy still refuses later (the file
    changed) shows failed with the copy's reason, and the copy starts without it."""
    assert client(ep).post("/admin/scale", json={"component": "base", "copies": 0}).status_code == 200
    other = write_adapter(tmp_path / "llama.gguf", Path(resolve_model()), seed=5, arch="llama")
    for path, reason in (
        (files["bad"], "do not fit the base's"),
        (other, "is for 'llama', the base"),
        (Path(resolve_model()), "is not a LoRA adapter"),
    ):
        body = {"name": "refused", "base": "base", "adapter": {"path": str(path)}}
        answer = client(ep).post("/admin/components", json=body)
        assert answer.status_code == 422 and answer.json()["error"]["param"] == "adapter.path", answer.text
        assert str(path) in answer.text and reason in answer.text
    missing = client(ep).post(
        "/admin/adapters/load",
        json={"component": "base", "name": "nowhere", "path": str(tmp_path / "none.gguf")},
    )
    assert missing.status_code == 404 and missing.json()["error"]["param"] == "path", missing.text
    changed = tmp_path / "changed.gguf"
    changed.write_bytes(files["sql"].read_bytes())
    body = {"name": "changed", "base": "base", "adapter": {"path": str(changed)}}
    assert client(ep).post("/admin/components", json=body).status_code == 201
    changed.write_bytes(files["bad"].read_bytes())  # now for another model: the copy refuses it
    client(ep).post("/admin/scale", json={"component": "base", "copies": 1})
    ep.wait_for("a ready copy", lambda: [r["state"] for r in ep.replicas("base")] == ["ready"])
    [state] = [a for a in ep.status()["components"][0]["adapters"] if a["name"] == "changed"]
    assert state["state"] == "failed" and "--lora changed: " in state["reason"], state
    assert "changed" not in copy_adapters(ep.replicas("base")[0])
    assert by_model(ep, "late") and client(ep).delete("/admin/components/changed").status_code == 200

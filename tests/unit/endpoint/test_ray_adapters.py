"""LoRA adapters changed at run time on a Ray endpoint, on the real ingress app with Ray Serve's REST API
faked in-process (no Ray): a change is the deployment's user_config; the copies' reports (what each copy
sends the ingress after Ray hands it the config) decide the answer; a copy's refusal takes the change
back and is relayed as the single-host endpoint relays it. The copies' side (`CopyAdapters`) is pure
logic over its server's admin route, tested here with that route answered in-process."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import asdict
from typing import Any

import httpx
import pytest

from llmhost.endpoint.adapters.spec import AdapterEntry
from llmhost.endpoint.rayserve.copy_adapters import AdapterReport, CopyAdapters, Refusal, entries_of
from llmhost.endpoint.rayserve.ingress import Ingress
from llmhost.endpoint.rayserve.options import AppArgs, RayTiming
from llmhost.endpoint.spec import parse_endpoint
from tests.unit.endpoint.ray_fakes import URL, FakeServe, deployment, replica

ENDPOINT = {
    "name": "e",
    "components": [
        {"name": "a", "copies": 2, "adapters": [{"name": "poet", "path": "/m/poet.gguf", "scale": 0.5}]},
        {"name": "emb", "embeddings": True},
    ],
}
BAD = json.dumps({"error": {"message": "could not load the LoRA adapter", "param": "path"}})
BUSY = json.dumps({"error": {"message": "adapter 'poet' is in use by 1 request(s)", "param": "name"}})


class Copies:
    """The copies of `a` (a-a0, a-a1) as Ray hands them each new user_config: each applies it and
    reports. `refuse`: (copy, adapter, status, answer) refusals."""

    def __init__(self, ingress: Ingress) -> None:
        self.ingress = ingress
        self.refuse: list[tuple[str, str, int, str]] = []

    def __call__(self, body: dict[str, Any]) -> None:
        (app,) = body["applications"]
        for d in app["deployments"]:
            wanted = entries_of(d.get("user_config"))
            if wanted is None:
                continue
            for copy in ("a-a0", "a-a1"):
                refusals = tuple(
                    Refusal(n, code, text, "1" if code == 409 else None)
                    for c, n, code, text in self.refuse
                    if c == copy
                )
                rows = tuple(
                    {"name": e.name, "requests": 0}
                    for e in wanted
                    if e.name not in {r.name for r in refusals}
                )
                self.ingress.report_adapters("a", copy, AdapterReport(wanted, refusals, rows))


@pytest.fixture
def serve() -> FakeServe:
    fake = FakeServe()
    fake.app(
        "e",
        deployments={
            "a": deployment(replica("a0"), replica("a1", "UPDATING")),
            "emb": deployment(replica("m0")),
        },
    )
    return fake


@pytest.fixture
def ingress(serve: FakeServe) -> Ingress:
    spec = parse_endpoint(ENDPOINT)
    args = AppArgs(spec.model_dump(), {}, asdict(RayTiming()), URL, [], {}, "info")
    made = Ingress({c.name: None for c in spec.components}, asdict(args))
    made.api = serve.api()
    return made


@pytest.fixture
def copies(serve: FakeServe, ingress: Ingress) -> Copies:
    serve.on_put = Copies(ingress)
    return serve.on_put


@pytest.fixture
async def admin(ingress: Ingress, copies: Copies) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=ingress.asgi_app(), client=("127.0.0.1", 5000))
    async with httpx.AsyncClient(transport=transport, base_url="http://endpoint") as c:
        yield c


def configured(serve: FakeServe) -> list[str]:
    """The adapters the last deploy gave `a`'s copies."""
    (app,) = serve.puts[-1]["applications"]
    (a,) = [d for d in app["deployments"] if d["name"] == "a"]
    return [e["name"] for e in a["user_config"]["adapters"]]


async def load(admin: httpx.AsyncClient, name: str, path: str) -> httpx.Response:
    return await admin.post("/admin/adapters/load", json={"component": "a", "name": name, "path": path})


async def test_a_loaded_adapter_reaches_every_copy_and_every_listing(
    serve: FakeServe, admin: httpx.AsyncClient
) -> None:
    r = await load(admin, "sql", "/m/sql.gguf")
    assert r.status_code == 200, r.text
    rows = {row["name"]: row for row in r.json()["data"]}
    assert rows["sql"] == {
        "name": "sql",
        "path": "/m/sql.gguf",
        "scale": 1.0,
        "inference_component": False,
        "state": "loaded",
        "reason": None,
        "component": "a",
        "copies": 2,
        "requests": 0,
    }
    assert configured(serve) == ["poet", "sql"]  # the file's adapters stay in the config
    models = {m["id"]: m for m in (await admin.get("/v1/models")).json()["data"]}
    assert models["sql"]["parent"] == "a" and models["poet"]["parent"] == "a"
    tags = {m["name"]: m for m in (await admin.get("/api/tags")).json()["models"]}
    assert tags["sql:latest"]["details"]["parent_model"] == "a:latest"
    assert {m["name"] for m in (await admin.get("/api/ps")).json()["models"]} >= {"sql:latest", "poet:latest"}
    scaled = await admin.post("/admin/scale", json={"component": "a", "copies": 3, "wait": False})
    assert scaled.status_code == 202
    assert configured(serve) == ["poet", "sql"]  # scaling keeps the adapters: copies started later load them
    r = await admin.post("/admin/adapters/unload", json={"component": "a", "name": "poet"})
    assert r.status_code == 200 and [row["name"] for row in r.json()["data"]] == ["sql"]


async def test_one_copys_refusal_takes_the_load_back_and_is_relayed(
    serve: FakeServe, copies: Copies, admin: httpx.AsyncClient
) -> None:
    copies.refuse = [("a-a1", "bad", 422, BAD)]
    r = await load(admin, "bad", "/m/bad.gguf")
    assert r.status_code == 422 and r.json()["error"]["param"] == "path", r.text
    assert r.json()["error"]["message"] == "copy a-a1: could not load the LoRA adapter"
    assert configured(serve) == ["poet"]  # taken back: the copy that took it unloads it
    assert [row["name"] for row in (await admin.get("/admin/adapters")).json()["data"]] == ["poet"]
    body = {"name": "wrong", "base": "a", "adapter": {"path": "/m/bad.gguf"}}
    copies.refuse = [("a-a0", "wrong", 422, BAD)]
    r = await admin.post("/admin/components", json=body)
    assert r.status_code == 422 and r.json()["error"]["param"] == "adapter.path", r.text


async def test_adapter_components_come_and_go_and_one_in_use_stays(
    serve: FakeServe, copies: Copies, admin: httpx.AsyncClient
) -> None:
    body = {"name": "sql", "base": "a", "adapter": {"path": "/m/s.gguf"}}
    r = await admin.post("/admin/components", json=body)
    assert r.status_code == 201 and r.json() == {"added": ["sql"]}, r.text
    status = (await admin.get("/admin/status")).json()
    assert status["adapter_components"] == [{"name": "sql", "base": "a"}]
    assert {a["name"]: a["inference_component"] for a in status["components"][0]["adapters"]} == {
        "poet": False,
        "sql": True,
    }
    rows = {row["name"]: row for row in (await admin.get("/admin/adapters?component=a")).json()["data"]}
    assert rows["sql"]["inference_component"] and rows["sql"]["copies"] == 2
    refused = await admin.delete("/admin/components/a")
    assert refused.status_code == 409 and "adapter component(s) sql" in refused.text
    unload = await admin.post("/admin/adapters/unload", json={"component": "a", "name": "sql"})
    assert unload.status_code == 409 and "DELETE" in unload.text
    copies.refuse = [("a-a0", "sql", 409, BUSY)]
    busy = await admin.delete("/admin/components/sql")
    assert busy.status_code == 409 and busy.headers["retry-after"] == "1", busy.text
    assert configured(serve) == ["poet", "sql"]  # it stays on every copy
    copies.refuse = []
    assert (await admin.delete("/admin/components/sql")).status_code == 200
    assert configured(serve) == ["poet"]
    assert (await admin.delete("/admin/components/sql")).status_code == 404


@pytest.mark.parametrize(
    ("call", "status", "says"),
    [
        (("post", "/admin/components", {"name": "c"}), 501, "change the file"),
        (("delete", "/admin/components/emb", None), 501, "change the file"),
        (("post", "/admin/adapters/load", {"component": "zz", "name": "x", "path": "/x"}), 404, "zz"),
        (
            ("post", "/admin/adapters/load", {"component": "emb", "name": "x", "path": "/x"}),
            422,
            "embeddings",
        ),
        (("post", "/admin/adapters/load", {"component": "a", "name": "poet", "path": "/x"}), 409, "already"),
        (
            ("post", "/admin/adapters/load", {"component": "a", "name": "x", "path": "x.gguf"}),
            422,
            "absolute",
        ),
        (("post", "/admin/adapters/load", {"component": "a", "name": "x"}), 422, "path"),
        (("post", "/admin/adapters/unload", {"component": "a", "name": "nope"}), 404, "its adapters: poet"),
    ],
)
async def test_refusals_are_the_single_host_endpoints(
    serve: FakeServe, admin: httpx.AsyncClient, call: tuple[str, str, Any], status: int, says: str
) -> None:
    method, path, body = call
    r = await admin.request(method.upper(), path, json=body)
    assert r.status_code == status and says in r.json()["error"]["message"], r.text
    assert serve.puts == []  # nothing deployed


async def test_a_copy_brings_its_adapters_to_each_config_and_says_what_it_refused() -> None:
    calls: list[tuple[str, str]] = []

    async def post(action: str, body: dict[str, Any]) -> tuple[int, str, str | None]:
        calls.append((action, body["name"]))
        if body["name"] == "bad":
            return 422, BAD, None
        return (409, BUSY, "1") if action == "unload" and body["name"] == "busy" else (200, "{}", None)

    poet, busy = AdapterEntry(name="poet", path="/p"), AdapterEntry(name="busy", path="/b")
    copy = CopyAdapters(post, {"poet": poet, "busy": busy})
    await copy.apply(None)  # no user_config: the file's adapters stay
    assert calls == [] and copy.applied is None
    sql, bad = AdapterEntry(name="sql", path="/s"), AdapterEntry(name="bad", path="/x")
    await copy.apply({"adapters": [sql.model_dump(), bad.model_dump()]})
    assert calls == [("unload", "poet"), ("unload", "busy"), ("load", "sql"), ("load", "bad")]
    assert set(copy.loaded) == {"busy", "sql"} and [r.name for r in copy.refusals] == ["busy", "bad"]
    assert copy.refusals[0].retry_after == "1" and copy.applied == (sql, bad)

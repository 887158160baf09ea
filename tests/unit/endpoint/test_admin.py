"""The admin API's refusals, without starting copies."""

from __future__ import annotations

from pathlib import Path

import httpx
from fastapi import FastAPI

from llmhost.endpoint.admin import create_admin
from llmhost.endpoint.component import Component
from llmhost.endpoint.manager import EndpointManager
from llmhost.endpoint.placement import Ledger
from llmhost.endpoint.spec import parse_endpoint


def setup(tmp_path: Path) -> tuple[FastAPI, EndpointManager, list[str]]:
    spec = parse_endpoint({"name": "ep", "components": [{"name": "a", "copies": 1}]})
    manager = EndpointManager(spec, ledger=Ledger(cpus=[0], memory_mb=2000), log_dir=tmp_path)
    manager.components["a"] = Component(spec.components[0], tmp_path / "m.gguf")
    calls: list[str] = []
    app = FastAPI()
    app.include_router(create_admin(manager, lambda: calls.append("down")))
    return app, manager, calls


def client(app: FastAPI, host: str = "127.0.0.1") -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=(host, 5000))
    return httpx.AsyncClient(transport=transport, base_url="http://endpoint")


async def test_admin_refusals_and_operations(tmp_path: Path) -> None:
    app, manager, calls = setup(tmp_path)
    async with client(app) as c:
        status = (await c.get("/admin/status")).json()
        assert status["name"] == "ep" and status["components"][0]["name"] == "a"
        r = await c.post("/admin/scale", json={"component": "a", "copies": 3})
        assert r.status_code == 409
        assert "insufficient capacity: component 'a' copy 2 of 3" in r.json()["error"]["message"]
        r = await c.post("/admin/scale", json={"component": "zz", "copies": 1})
        assert r.status_code == 404 and "known components: a" in r.json()["error"]["message"]
        r = await c.post("/admin/scale", json={"component": "a", "copies": -1})
        assert r.status_code == 422 and r.json()["error"]["field"] == "copies"
        r = await c.post("/admin/scale", json={"component": "a", "copies": 1, "wait": "false"})  # no bool
        assert r.status_code == 422 and r.json()["error"]["field"] == "wait"
        r = await c.post("/admin/components", json={"name": "b", "resources": {"gpus": 1}})
        assert r.status_code == 422 and "resources.gpus: unknown key" in r.json()["error"]["message"]
        r = await c.post("/admin/components", json={"name": "a"})
        assert r.status_code == 409 and "already exists" in r.json()["error"]["message"]
        r = await c.post("/admin/components", json={"name": "big", "resources": {"num_cpus": 2}})
        assert r.status_code == 409 and "needs 2 dedicated CPU(s)" in r.json()["error"]["message"]
        assert (await c.delete("/admin/components/a")).json() == {"removed": "a"}
        assert manager.components == {}
        assert (await c.delete("/admin/components/a")).status_code == 404
        assert (await c.post("/admin/down")).status_code == 202
    assert calls == ["down"]
    async with client(app, host="10.1.2.3") as c:
        assert (await c.get("/admin/status")).status_code == 403

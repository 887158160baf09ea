"""The admin API's refusals, without starting copies."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from llmhost.endpoint.admin import LocalAdmin, create_admin
from llmhost.endpoint.control.component import Component
from llmhost.endpoint.control.manager import EndpointManager
from llmhost.endpoint.control.placement import Ledger
from llmhost.endpoint.spec import parse_endpoint
from llmhost.store import ResolvedModel


def setup(tmp_path: Path) -> tuple[FastAPI, EndpointManager, list[str]]:
    spec = parse_endpoint({"name": "ep", "components": [{"name": "a", "copies": 1}]})
    manager = EndpointManager(spec, ledger=Ledger(cpus=[0], memory_mb=2000), log_dir=tmp_path)
    manager.components["a"] = Component(spec.components[0], ResolvedModel(tmp_path / "m.gguf"))
    calls: list[str] = []
    app = FastAPI()
    app.include_router(create_admin(LocalAdmin(manager, lambda: calls.append("down"))))
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
        as_json = {"content-type": "application/json"}
        r = await c.post("/admin/components", content=b'{"name": ', headers=as_json)
        assert r.status_code == 422 and r.json()["error"]["field"] == "body" and "not valid JSON" in r.text
        r = await c.post("/admin/scale", content=b"[", headers=as_json)
        assert r.status_code == 422 and r.json()["error"]["field"] == "body"
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


async def test_a_model_that_resolves_to_nothing_is_a_422_naming_the_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app, manager, _ = setup(tmp_path)
    monkeypatch.setenv("LLMHOST_S3_ENDPOINT_URL", "localhost:9000")  # no scheme: unusable
    async with client(app) as c:
        r = await c.post("/admin/components", json={"name": "b", "model": str(tmp_path / "nope.gguf")})
        assert r.status_code == 422
        err = r.json()["error"]
        assert err["field"] == "model" and "component 'b'" in err["message"] and "nope.gguf" in err["message"]
        listed = {"components": [{"name": "c"}, {"name": "d", "model": "s3://bucket/m/"}]}
        r = await c.post("/admin/components", json=listed)
        assert r.status_code == 422
        err = r.json()["error"]
        assert err["field"] == "components[1].model"
        assert "s3://bucket/m/: S3 endpoint URL 'localhost:9000' is not usable" in err["message"]
    assert set(manager.components) == {"a"}  # nothing of either request was added


async def test_a_component_body_takes_json_types_as_they_are(tmp_path: Path) -> None:
    """Schemathesis's negative_data_rejection: `false` for a number was taken as 0 (pydantic's lax mode)
    and the component added; the admin API's body is strict JSON, as the other APIs' request models."""
    app, manager, _ = setup(tmp_path)
    async with client(app) as c:
        for bad, where in (
            ({"scale_out_cooldown_s": False}, "autoscaling.scale_out_cooldown_s"),
            ({"max_copies": "2"}, "autoscaling.max_copies"),
        ):
            r = await c.post("/admin/components", json={"name": "b", "autoscaling": bad})
            assert r.status_code == 422 and where in r.json()["error"]["message"], r.text
        r = await c.post("/admin/components", json={"components": [{"name": "b", "copies": True}]})
        assert r.status_code == 422 and "copies" in r.json()["error"]["message"], r.text
    assert set(manager.components) == {"a"}


async def test_health_and_the_internal_key(tmp_path: Path) -> None:
    from llmhost.endpoint.app import create_app
    from llmhost.process.lifecycle import Lifecycle

    spec = parse_endpoint({"name": "ep", "components": [{"name": "a", "copies": 1}]})
    manager = EndpointManager(spec, ledger=Ledger(cpus=[0], memory_mb=2000), log_dir=tmp_path)
    manager.components["a"] = Component(spec.components[0], ResolvedModel(tmp_path / "m.gguf"))
    lifecycle = Lifecycle()
    app = create_app(manager, lifecycle=lifecycle)  # its lifespan (starting copies) is not run here
    # copies get the key in their environment only; it never shows in a repr (logs, status)
    key = manager.internal_key
    assert key.env() == {"LLMHOST_API_KEYS": key.value} and len(key.value) >= 32
    assert key.value not in repr(key) and key.value not in str(manager.status())
    async with client(app) as c:
        r = await c.get("/health")  # as /ping: no copy meant yet, none waited for (scaled to zero)
        assert r.status_code == 200
        assert r.json() == {
            "status": "ready",
            "phase": "serving",
            "components": {"a": {"copies": 0, "ready": 0}},
        }
        lifecycle.drain("test")
        r = await c.get("/health")
        assert r.status_code == 503 and r.json()["phase"] == "draining"


async def test_components_from_yaml_as_the_console_sends_them(tmp_path: Path) -> None:
    """The console posts a pasted YAML file as is: parsed as the JSON body would be, refused the same way."""
    app, _, _ = setup(tmp_path)
    as_yaml = {"content-type": "application/yaml"}
    async with client(app) as c:
        r = await c.post("/admin/components", content=b"name: [", headers=as_yaml)
        assert r.status_code == 422 and r.json()["error"]["field"] == "body" and "not valid YAML" in r.text
        r = await c.post("/admin/components", content=b"name: a\ncopies: 1\n", headers=as_yaml)
        assert r.status_code == 409 and "already exists" in r.json()["error"]["message"]
        listed = b"components:\n  - name: b\n    resources: {gpus: 1}\n"
        r = await c.post("/admin/components", content=listed, headers=as_yaml)
        assert r.status_code == 422 and "resources.gpus: unknown key" in r.json()["error"]["message"]

"""The Ray endpoint's admin API on the real ingress app, with Ray Serve's REST API faked in-process (no
Ray needed): status after scale, every refusal with its status and the field it names, down."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import asdict
from typing import Any

import httpx
import pytest

from llmhost.endpoint.affinity import RAY_ROUTERS, Affinity, Decision
from llmhost.endpoint.bodies import modalities
from llmhost.endpoint.rayserve import nodes
from llmhost.endpoint.rayserve.console import ClusterFigures
from llmhost.endpoint.rayserve.ingress import Ingress
from llmhost.endpoint.rayserve.options import AppArgs, RayTiming
from llmhost.endpoint.spec import parse_endpoint
from tests.unit.endpoint.ray_fakes import URL, FakeServe, deployment, replica

ENDPOINT = {
    "name": "e",
    "components": [
        {
            "name": "a",
            "autoscaling": {"min_copies": 1, "max_copies": 3},
            "startup_health_check_timeout_s": 0.3,
        },
        {"name": "b", "copies": 1, "routing": {"policy": "prefix"}},
    ],
}
WAITING = "Deployment 'a' has 1 replicas that have taken more than 3s to be scheduled."


def serving(serve: FakeServe, a: int = 1) -> None:
    serve.app(
        "e",
        deployments={"a": deployment(*(replica(f"a{i}") for i in range(a))), "b": deployment(replica("b0"))},
    )


@pytest.fixture
def serve() -> FakeServe:
    fake = FakeServe()
    serving(fake)
    return fake


def ingress_of(serve: FakeServe) -> Ingress:
    spec = parse_endpoint(ENDPOINT)
    timing = RayTiming(placement_timeout_s=0.3)
    args = AppArgs(spec.model_dump(), {}, asdict(timing), URL, [], {}, "info")
    ingress = Ingress({c.name: None for c in spec.components}, asdict(args))
    ingress.api = serve.api()  # the admin routes reach Ray Serve's REST API through it
    return ingress


def admin_client(
    serve: FakeServe, host: str = "127.0.0.1", ingress: Ingress | None = None
) -> httpx.AsyncClient:
    ingress = ingress_of(serve) if ingress is None else ingress
    transport = httpx.ASGITransport(app=ingress.asgi_app(), client=(host, 5000))
    return httpx.AsyncClient(transport=transport, base_url="http://endpoint")


@pytest.fixture
async def admin(serve: FakeServe) -> AsyncIterator[httpx.AsyncClient]:
    async with admin_client(serve) as c:
        yield c


def component(status: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in status["components"] if c["name"] == name)


async def test_status_shows_the_files_autoscaling_until_scale_pins_the_copies(
    serve: FakeServe, admin: httpx.AsyncClient
) -> None:
    status = (await admin.get("/admin/status")).json()
    assert status["backend"] == "ray" and status["status"] == "RUNNING"
    a = component(status, "a")
    assert a["autoscaling"]["max_copies"] == 3 and a["pinned_copies"] is None and a["ready"] == 1
    r = await admin.post("/admin/scale", json={"component": "a", "copies": 2, "wait": False})
    assert r.status_code == 202 and r.json()["copies"] == 2
    override = {"name": "a", "num_replicas": 2, "autoscaling_config": None}
    assert serve.puts[-1]["applications"][0]["deployments"] == [override]
    status = (await admin.get("/admin/status")).json()
    assert component(status, "a")["autoscaling"] is None and component(status, "a")["pinned_copies"] == 2
    assert component(status, "b")["pinned_copies"] is None  # the other component keeps the file's


async def test_status_shows_the_prefix_routers_decisions(
    admin: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delitem(RAY_ROUTERS, "b", raising=False)  # Ray builds it on the handle's first request
    status = (await admin.get("/admin/status")).json()
    assert component(status, "a")["routing"] == "least_outstanding"
    assert component(status, "a")["routing_decisions"] is None  # Ray Serve's own routing
    assert component(status, "b")["routing"] == "prefix"
    assert component(status, "b")["routing_decisions"] == {"prefix": 0, "spilled": 0, "cold": 0}
    affinity = Affinity()
    monkeypatch.setitem(RAY_ROUTERS, "b", affinity)
    affinity.routed([], "b0", Decision.COLD)
    affinity.routed([], "b0", Decision.PREFIX)
    status = (await admin.get("/admin/status")).json()
    assert component(status, "b")["routing_decisions"] == {"prefix": 1, "spilled": 0, "cold": 1}


async def test_status_says_what_each_model_reads_once_a_copy_pushed_it(serve: FakeServe) -> None:
    """As the single-host status: `modalities` from a copy's /v1/models, here with its metrics' push."""
    ingress = ingress_of(serve)
    ingress.cluster = ClusterFigures  # no Ray cluster: the overview's host figures are empty
    async with admin_client(serve, ingress=ingress) as admin:
        status = (await admin.get("/admin/status")).json()
        assert [c["modalities"] for c in status["components"]] == [None, None]  # no copy pushed yet
        card = {"data": [{"id": "a", "capabilities": ["vision", "audio", "tool_use"]}]}
        ingress.report_metrics("a", "a-a0", "", modalities=modalities(json.dumps(card)))
        ingress.report_metrics("b", "b-b0", "", modalities=modalities('{"data": [{"id": "b"}]}'))
        ingress.report_metrics("b", "b-b0", "")  # a push without them forgets nothing
        status = (await admin.get("/admin/status")).json()
        assert component(status, "a")["modalities"] == ["text", "vision", "audio"]
        assert component(status, "b")["modalities"] == ["text"]
        overview = (await admin.get("/console/api/overview")).json()
        assert [c["modalities"] for c in overview["components"]] == [["text", "vision", "audio"], ["text"]]


@pytest.mark.parametrize("body", ["not json", "[]", '{"data": []}', '{"error": {"message": "no"}}'])
def test_a_copy_answering_no_model_list_says_no_modalities(body: str) -> None:
    assert modalities(body) is None


async def test_scale_waits_for_the_copies(serve: FakeServe, admin: httpx.AsyncClient) -> None:
    serve.on_put = lambda _: serving(serve, a=2)
    r = await admin.post("/admin/scale", json={"component": "a", "copies": 2})
    assert r.status_code == 200 and r.json() == {"component": "a", "copies": 2, "ready": 2}


@pytest.mark.parametrize(
    ("body", "field", "says"),
    [
        ({"component": "a", "copies": 2, "wait": "false"}, "wait", "valid boolean"),
        ({"component": "a", "copies": True}, "copies", "valid integer"),
        ({"component": "a", "copies": -1}, "copies", "greater than or equal to 0"),
        ({"component": "a", "copies": 0}, "copies", "min_copies: 0"),
        ({"copies": 1}, "component", "Field required"),
        ({"component": "a", "copies": 1, "extra": 1}, "extra", "unknown field"),
        (["a", 1], "body", "body must be"),
    ],
)
async def test_a_bad_scale_body_is_a_422_naming_the_field(
    admin: httpx.AsyncClient, body: Any, field: str, says: str
) -> None:
    r = await admin.post("/admin/scale", json=body)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["field"] == field and says in r.json()["error"]["message"]


async def test_a_body_that_is_no_json_is_a_422(admin: httpx.AsyncClient) -> None:
    r = await admin.post("/admin/scale", content=b"{not json")
    assert r.status_code == 422 and r.json()["error"]["field"] == "body" and "not valid JSON" in r.text


async def test_unknown_component_and_undeployed_application_are_404(
    serve: FakeServe, admin: httpx.AsyncClient
) -> None:
    r = await admin.post("/admin/scale", json={"component": "zz", "copies": 1})
    assert r.status_code == 404 and "known components: a, b" in r.json()["error"]["message"]
    serve.details["applications"] = {}
    r = await admin.post("/admin/scale", json={"component": "a", "copies": 1})
    assert r.status_code == 404 and "application 'e' is not deployed" in r.json()["error"]["message"]


async def test_copies_no_node_can_hold_are_a_409(
    serve: FakeServe, admin: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    def waiting(_: Any) -> None:
        waits = deployment(
            replica("a0"), replica("a1", "STARTING"), target=2, message=WAITING, required={"CPU": 4.0}
        )
        serve.details["applications"]["e"]["deployments"] = {"a": waits}

    serve.on_put = waiting
    monkeypatch.setattr(nodes, "resources", lambda: ([{"CPU": 1.0}], {"CPU": 0.0}))
    r = await admin.post("/admin/scale", json={"component": "a", "copies": 2})
    assert r.status_code == 409
    assert "component 'a' does not fit on the Ray cluster: no node" in r.json()["error"]["message"]


async def test_copies_not_running_in_time_are_a_409(serve: FakeServe, admin: httpx.AsyncClient) -> None:
    r = await admin.post("/admin/scale", json={"component": "a", "copies": 2})  # Ray never starts it
    assert r.status_code == 409 and "component 'a' did not reach 2 copies" in r.json()["error"]["message"]


async def test_ray_serves_api_failing_is_a_502(serve: FakeServe, admin: httpx.AsyncClient) -> None:
    serve.refuse = [(503, "GCS down")] * 3
    scale = {"component": "a", "copies": 1}
    calls = (admin.get("/admin/status"), admin.post("/admin/scale", json=scale), admin.post("/admin/down"))
    for call in calls:
        r = await call
        assert r.status_code == 502 and "503 GCS down" in r.json()["error"]["message"], r.text
    assert "deleting application 'e' failed" in r.json()["error"]["message"]
    assert serve.details["applications"]  # nothing was deleted


async def test_down_deletes_before_it_answers(serve: FakeServe, admin: httpx.AsyncClient) -> None:
    serve.app("other")
    r = await admin.post("/admin/down")
    assert r.status_code == 202 and r.json() == {"stopping": "e"}
    assert list(serve.details["applications"]) == ["other"]


async def test_add_and_remove_are_refused(admin: httpx.AsyncClient) -> None:
    added = await admin.post("/admin/components", json={"name": "c"})
    for r in (added, await admin.delete("/admin/components/a")):
        assert r.status_code == 501 and "change the file" in r.json()["error"]["message"]


async def test_only_local_clients_are_answered(serve: FakeServe) -> None:
    async with admin_client(serve, host="10.1.2.3") as c:
        for r in (
            await c.get("/admin/status"),
            await c.post("/admin/scale", json={}),
            await c.post("/admin/down"),
            await c.post("/admin/components", json={}),
        ):
            assert r.status_code == 403 and r.json()["error"]["type"] == "permission_error"
    assert serve.puts == [] and "e" in serve.details["applications"]


async def test_variant_weights_are_refused(admin: httpx.AsyncClient) -> None:
    r = await admin.post("/admin/weights", json={"component": "a", "weights": {"x": 1}})
    assert r.status_code == 501 and "no production variants" in r.json()["error"]["message"]

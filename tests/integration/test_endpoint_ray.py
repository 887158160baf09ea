"""`llmhost endpoint up --ray` on a two-node Ray cluster on this host (two raylets, one CPU each), with
real copies of the default model. The tests run in order: a SIGTERM while an endpoint starts; then the
tests of one endpoint sharing it: routing across nodes, the console, scaling, a copy killed under load,
`endpoint down`; then autoscaling on a second endpoint."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import ollama
import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmhost.bench.report import write_summary
from llmhost.endpoint.dataplane.routing import COMPONENT_HEADER, COPY_HEADER
from llmhost.endpoint.rayserve.serveapi import ServeApi, retrying
from llmhost.store import resolve_model
from tests.integration.conftest import free_port
from tests.integration.console_helpers import WAIT_MS, Watched, artifacts_dir, chromium, needs_chromium
from tests.integration.endpoint_helpers import ENGINE, Endpoint, Outcome, call, stop_endpoint
from tests.integration.lora_helpers import sample_adapters
from tests.integration.ray_helpers import (
    LOOPBACK_ONLY,
    RayCluster,
    component,
    launch_ray_endpoint,
    quiet_port,
    ray_up_command,
    start_cluster,
    start_ray_endpoint,
)
from tests.integration.scoring_helpers import assert_scoring_routes
from tests.integration.test_sagemaker_runtime import TGI, runtime, streamed
from tests.unit.bench.test_report import make_results

os.environ.update(LOOPBACK_ONLY)  # before Ray is imported, here and in the endpoint's process
import ray.serve  # noqa: F401  (`make test` installs the ray extra: missing, these tests fail)

# a module fixture's setup (a Ray cluster, an endpoint loading two copies) counts in its first test
pytestmark = pytest.mark.timeout(600)

# a needs half a CPU, b a whole one: their copies cannot share a node, and a second copy of a fits
# beside the first one (the other half of its node) while a second copy of b fits nowhere; b's
# requests go through llmhost's prefix-aware request router inside the ingress's deployment handle
ENDPOINT = f"""
name: spread
components:
  - name: a
    resources: {{num_cpus: 0.5, memory_mb: 900}}
    engine: {ENGINE}
    startup_health_check_timeout_s: 180
    max_wait_s: 120
  - name: b
    resources: {{num_cpus: 1, memory_mb: 900}}
    engine: {ENGINE}
    routing: {{policy: prefix, block_chars: 64}}
    startup_health_check_timeout_s: 180
    max_wait_s: 120
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[RayCluster]:
    c = start_cluster()
    yield c
    c.shutdown()


@pytest.fixture(scope="module")
def port() -> int:
    """Ray Serve's HTTP port on this cluster: the first endpoint deployed starts its proxy there."""
    return quiet_port()


@pytest.fixture(scope="module")
def ep(cluster: RayCluster, port: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoint]:
    tmp = tmp_path_factory.mktemp("ray-endpoint")
    write_summary(make_results(), tmp / "results" / "bench-run")  # a report for the console to list
    console = ("--console-period", "1", "--reports", str(tmp / "results"))
    endpoint = start_ray_endpoint(tmp, ENDPOINT, cluster.address, *console, port=port)
    yield endpoint
    stop_endpoint(endpoint)


def applications(cluster: RayCluster) -> dict[str, Any]:
    """Ray Serve's applications, as its REST API lists them (asked again while it does not answer: the
    dashboard once took over 30 s to answer a GET while a deploy was under way on a loaded host)."""
    details = retrying(ServeApi(cluster.dashboard_url).details, within_s=120)
    return dict(asyncio.run(details).get("applications", {}))


# three copies of a whole CPU on two nodes of one CPU: they never all run, `up` waits for them
NEVER_READY = f"""
name: starting
components:
  - name: s
    copies: 3
    resources: {{num_cpus: 1, memory_mb: 900}}
    engine: {ENGINE}
"""


def test_sigterm_while_starting_leaves_no_application(cluster: RayCluster, port: int, tmp_path: Path) -> None:
    starting = launch_ray_endpoint(
        tmp_path, NEVER_READY, cluster.address, "--placement-timeout", "600", port=port
    )
    try:
        deadline = time.monotonic() + 120
        while "starting" not in applications(cluster):
            assert starting.process.poll() is None, starting.log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the application was not deployed within 120 s"
            time.sleep(0.2)
        starting.process.send_signal(signal.SIGTERM)
        assert starting.process.wait(timeout=120) == 0, starting.log.read_text()[-3000:]
    finally:
        stop_endpoint(starting)
    assert "stopped (signalled while starting)" in starting.log.read_text()
    assert "starting" not in applications(cluster)


def completion(model: str, tokens: int = 4, stream: bool = False) -> dict[str, object]:
    return {
        "model": model,
        "prompt": "Tell me about",
        "max_tokens": tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": stream,
    }


def test_copies_land_on_different_nodes(ep: Endpoint, cluster: RayCluster) -> None:
    status = ep.status()
    assert status["backend"] == "ray" and status["status"] == "RUNNING", status
    nodes = {}
    for name in ("a", "b"):
        (replica,) = component(status, name)["replicas"]
        assert replica["state"] == "RUNNING", replica
        nodes[name] = replica["node_id"]
    assert nodes["a"] != nodes["b"] and set(nodes.values()) == cluster.node_ids
    shown = ep.cli("status")
    assert shown.returncode == 0 and "Ray Serve" in shown.stdout, shown.stderr


def routed(c: httpx.Client, name: str) -> dict[str, float]:
    """The prefix-aware router's decisions for component `name` in the ingress's /metrics, by kind."""
    families = {f.name: f for f in text_string_to_metric_families(c.get("/metrics").text)}
    return {
        kind: s.value
        for kind in ("prefix", "spilled", "cold")
        for s in families[f"llmhost_endpoint_routed_{kind}"].samples
        if s.name.endswith("_total") and s.labels["component"] == name
    }


# two blocks of b's router's 64 characters: a second request of it finds them on the copy the first went to
LONG_PROMPT = "A prompt long enough to fill two of the router's blocks of 64 characters: " * 2


def test_routing_by_header_and_by_model(ep: Endpoint) -> None:
    with httpx.Client(base_url=ep.url, timeout=120) as c:
        before = routed(c, "b")  # there before the first request: a rate needs its first scrape
        for name in ("a", "b"):
            r = c.post(
                "/invocations",
                headers={COMPONENT_HEADER: name},
                json={"inputs": "Hello", "parameters": {"max_new_tokens": 4}},
            )
            assert r.status_code == 200, r.text
            assert r.headers[COPY_HEADER].startswith(f"{name}-") and r.json()[0]["generated_text"]
            r = c.post("/v1/completions", json=completion(name))
            assert r.status_code == 200, r.text
            assert r.json()["model"] == name and r.json()["usage"]["completion_tokens"] == 4
        assert [m["id"] for m in c.get("/v1/models").json()["data"]] == ["a", "b"]
        r = c.post("/v1/completions", json=completion("nope"))
        assert r.status_code == 404
        assert r.json()["error"]["message"] == "unknown inference component 'nope'; known components: a, b"
        r = c.post("/invocations", headers={COMPONENT_HEADER: "nope"}, json={"inputs": "Hi"})
        assert r.status_code == 404 and "known components: a, b" in r.text
        r = c.post("/invocations", json={"inputs": "Hi"})  # two components, none named
        assert r.status_code == 400 and COMPONENT_HEADER in r.text
        r = c.post(
            "/endpoints/spread/invocations",
            headers={COMPONENT_HEADER: "b"},
            json={"inputs": "Hello", "parameters": {"max_new_tokens": 2}},
        )  # SageMaker Runtime's path
        assert r.status_code == 200 and r.headers[COPY_HEADER].startswith("b-"), r.text
        for _ in range(2):
            r = c.post("/v1/completions", json={**completion("b"), "prompt": LONG_PROMPT})
            assert r.status_code == 200, r.text
        after = routed(c, "b")
        metrics = c.get("/metrics").text
    # b got 5 requests: 3 prompts shorter than a block (routed by load: cold), then the long one twice
    assert {k: v - before.get(k, 0.0) for k, v in after.items()} == {"prefix": 1, "spilled": 0, "cold": 4}, (
        before,
        after,
    )
    assert set(before) == {"prefix", "spilled", "cold"}, before
    assert 'llmhost_endpoint_routing_policy{component="b",policy="prefix"} 1.0' in metrics
    b = component(ep.status(), "b")
    assert b["routing"] == "prefix" and b["routing_decisions"] == {k: int(v) for k, v in after.items()}
    assert component(ep.status(), "a")["routing_decisions"] is None  # Ray Serve's own routing
    assert 'llmhost_endpoint_requests_total{code="200",component="a"}' in metrics
    assert "ray_serve_" in metrics  # Ray's own, from each node's metrics agent

    def copies_metrics() -> bool:  # each copy's llmhost metrics, labelled by component and copy
        text = httpx.get(f"{ep.url}/metrics", timeout=30).text  # the ingress scrapes every node's agent
        families = {f.name: f for f in text_string_to_metric_families(text)}
        running = families.get("llmhost_num_requests_running")
        return running is not None and {s.labels["component"] for s in running.samples} == {"a", "b"}

    ep.wait_for("the copies' metrics", copies_metrics, timeout=60)


def console_sum(c: httpx.Client, component: str, series: str) -> float:
    """A series summed over every point the ingress kept (the console's first reading preceded every
    request: together they are every request answered)."""
    comps = c.get("/console/api/series").json()["components"]
    return sum(v or 0 for v in comps.get(component, {}).get("series", {}).get(series, []))


def answered(c: httpx.Client, component: str) -> float:
    """Requests the ingress answered for `component`, by its own counters in /metrics."""
    families = {f.name: f for f in text_string_to_metric_families(c.get("/metrics").text)}
    return sum(
        s.value
        for s in families["llmhost_endpoint_requests"].samples
        if s.name.endswith("_total") and s.labels["component"] == component
    )


def test_the_console_under_ray_counts_invocations_not_its_own_requests(ep: Endpoint) -> None:
    with httpx.Client(base_url=ep.url, timeout=120) as c:
        page = c.get("/console")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        o = c.get("/console/api/overview").json()
        assert o["backend"] == "ray" and o["console"]["period_s"] == 1 and o["console"]["reports"]
        assert o["host"]["cpus"] == 2 and o["host"]["cpus_reserved"] == 1.5 and len(o["host"]["nodes"]) == 2
        assert o["admin"]["allowed"] and o["admin"]["down"] and o["admin"]["scale"]
        assert not o["admin"]["add_remove"] and not o["admin"]["scale_to_zero"] and o["unknown"]
        for comp in o["components"]:
            (copy,) = comp["replicas"]
            assert copy["state"] == "ready" and copy["ray_state"] == "RUNNING" and copy["restarts"] is None
        # what each model reads, as its copy's /v1/models said with its first push (the admin status's too)
        ep.wait_for(
            "the copies' modalities",
            lambda: (
                [x["modalities"] for x in c.get("/console/api/overview").json()["components"]]
                == [["text"], ["text"]]
            ),
            timeout=30,
        )
        assert component(ep.status(), "a")["modalities"] == ["text"]
        assert [r["name"] for r in c.get("/console/api/reports").json()["reports"]] == ["bench-run"]
        report = c.get("/console/api/reports/bench-run/summary.json")  # read by the ingress, on the head
        assert report.status_code == 200 and report.json()
        before = answered(c, "a")
        for _ in range(3):
            assert c.post("/v1/completions", json=completion("a", 8)).status_code == 200
        for _ in range(10):  # the console's own requests: never invocations
            for path in ("/console", "/console/api/overview", "/console/api/series", "/console/api/metrics"):
                assert c.get(path).status_code == 200
        assert answered(c, "a") == before + 3
        ep.wait_for(
            "the console's Invocations to sum to the ingress's answers",
            lambda: console_sum(c, "a", "Invocations") == answered(c, "a"),
            timeout=30,
        )
        # the copies' pushes: tokens, CPU against the reservation, RSS against the reserved memory
        ep.wait_for(
            "the copy's figures in the console",
            lambda: all(
                console_sum(c, "a", s) > 0
                for s in ("OutputTokensPerSecond", "CPUUtilizationNormalized", "MemoryUtilizationNormalized")
            ),
            timeout=30,
        )
        window = c.get("/console/api/metrics", params={"window": 900}).json()["components"]["a"]["figures"]
        assert window["Invocations"] == answered(c, "a") and window["ModelLatency"] > 0
        assert 'llmhost_console{component="a",name="Invocations",unit="Count"}' in c.get("/metrics").text


@pytest.fixture
def browser() -> Iterator[Any]:
    yield from chromium()


@needs_chromium
def test_the_console_page_under_ray_offers_what_ray_allows(ep: Endpoint, browser: Any) -> None:
    w = Watched(browser, None)
    try:
        p = w.page
        p.goto(f"{ep.url}/console")
        p.wait_for_selector('.comp[data-component="a"] tr[data-state="ready"]', timeout=WAIT_MS)
        facts = p.inner_text("#facts")
        assert "Ray Serve" in facts and "cluster CPUs" in facts and "not known here" in facts
        assert p.is_hidden("#add-box") and p.query_selector(".remove-btn") is None  # the file's components
        assert p.get_attribute('input.scale-input[data-component="a"]', "min") == "1"
        assert p.query_selector("#down-btn") is not None
        row = '.comp[data-component="a"] tr[data-state="ready"]'
        assert " on 127.0.0.1" in p.inner_text(f"{row} td:nth-child(1)")  # its node
        assert p.inner_text(f"{row} td:nth-child(9)") == "–"  # restarts: Ray does not count them
        # what the model reads, as its copy pushed it with its metrics
        assert p.inner_text('.comp[data-component="a"] .modalities', timeout=WAIT_MS) == "takes text"
        p.wait_for_function("() => document.querySelectorAll('.chart canvas').length >= 10", timeout=WAIT_MS)
        p.screenshot(path=str(artifacts_dir() / "ray-1-loaded.png"), full_page=True)
        p.fill('input.scale-input[data-component="a"]', "2")
        p.click('button.scale-btn[data-component="a"]')
        p.wait_for_selector("#confirm[open]")
        assert "to 2 copies" in p.inner_text("#confirm-text")
        p.click("#confirm-ok")
        # the page says what the admin API answered: "scaling a to 2", or the refusal
        p.wait_for_selector("#messages .msg", timeout=WAIT_MS)
        assert p.inner_text("#messages .msg") == "scaling a to 2"
        # Ray places and starts the copy (as long as `endpoint scale` may wait, on a busy machine)
        ep.wait_for("a at 2 copies", lambda: component(ep.status(), "a")["copies"] == 2, timeout=300)
        assert component(ep.status(), "a")["pinned_copies"] == 2
        p.wait_for_selector('.comp[data-component="a"] tr:nth-child(2)', timeout=WAIT_MS)  # the new copy
        p.screenshot(path=str(artifacts_dir() / "ray-2-scaled.png"), full_page=True)
        w.check_clean()
    finally:
        w.close()
    out = ep.cli("scale", "a", "1", timeout=300)
    assert out.returncode == 0 and "1 ready of 1 copies" in out.stdout, out.stderr


def test_scoring_and_tokenizer_routes_pick_their_component(ep: Endpoint) -> None:
    with httpx.Client(base_url=ep.url, timeout=120) as c:
        assert_scoring_routes(c)


def test_streams_pass_through_unbuffered(ep: Endpoint) -> None:
    with (
        httpx.Client(base_url=ep.url, timeout=120) as c,
        c.stream("POST", "/v1/completions", json=completion("b", 8, stream=True)) as r,
    ):
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        assert r.headers[COPY_HEADER].startswith("b-")
        chunks = [chunk for chunk in r.iter_raw() if chunk]
    events = [e for e in b"".join(chunks).decode().split("\n\n") if e.strip()]
    assert events[-1] == "data: [DONE]" and len(events) == 9  # 8 tokens, then [DONE]
    assert len(chunks) > 1  # relayed as generated, not as one buffered body


def test_tgi_routes_and_the_sagemaker_response_stream(ep: Endpoint) -> None:
    header = {COMPONENT_HEADER: "a"}
    with httpx.Client(base_url=ep.url, timeout=120) as c:
        r = c.post("/generate", json=TGI, headers=header)
        assert r.status_code == 200 and r.json()["generated_text"] and r.headers[COPY_HEADER].startswith("a-")
        with c.stream("POST", "/generate_stream", json=TGI, headers=header) as s:
            assert s.status_code == 200 and s.headers["content-type"].startswith("text/event-stream")
            tgi_stream = s.read().decode()
    events = [e for e in tgi_stream.split("\n\n") if e.strip()]
    assert len(events) == TGI["parameters"]["max_new_tokens"]  # type: ignore[index]
    assert all(e.startswith("data:") for e in events) and '"generated_text":"' in events[-1].replace(" ", "")
    # boto3's client through the ingress: AWS event-stream framing relayed whole, the same tokens
    text, r = streamed(runtime(ep.url), TGI, InferenceComponentName="a")
    assert text == tgi_stream and r["InvokedProductionVariant"] == "AllTraffic"


@pytest.fixture(scope="module")
def lora(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return sample_adapters(tmp_path_factory.mktemp("ray-lora"), Path(resolve_model()))


def text_of(c: httpx.Client, model: str) -> str:
    r = c.post("/v1/completions", json=completion(model, 6))
    assert r.status_code == 200, r.text
    return str(r.json()["choices"][0]["text"])


def test_a_batch_on_the_ingress_runs_over_the_copies_of_every_node(ep: Endpoint) -> None:
    done, answers = ep.run_batch([(f"r{i}", completion("ab"[i % 2])) for i in range(6)])
    assert done.status == "completed" and done.request_counts is not None
    assert done.request_counts.completed == 6
    assert [(a["custom_id"], a["response"]["body"]["model"]) for a in answers] == [
        (f"r{i}", "ab"[i % 2]) for i in range(6)
    ], "a's and b's copies (on different nodes) answered their lines, in input order"


def test_adapters_load_at_run_time_on_every_copy(ep: Endpoint, lora: dict[str, Path]) -> None:
    """Through each deployment's user_config: Ray hands it every copy, in place (no copy restarts)."""
    (first,) = component(ep.status(), "a")["replicas"]
    loaded = ep.cli("adapters", "load", "a", "extra", str(lora["sql"]))
    assert loaded.returncode == 0 and "extra: loaded on 1 copy of a" in loaded.stdout, loaded.stderr
    with httpx.Client(base_url=ep.url, timeout=120) as c:
        assert text_of(c, "extra") != text_of(c, "a")
        worse = {"component": "a", "name": "worse", "path": str(lora["bad"])}
        bad = c.post("/admin/adapters/load", json=worse)
        assert bad.status_code == 422 and bad.json()["error"]["param"] == "path", bad.text
        body = {"name": "sql2", "base": "a", "adapter": {"path": str(lora["sql"])}}
        assert c.post("/admin/components", json=body).status_code == 201
        tgi = {"inputs": "Hello", "parameters": {"max_new_tokens": 4}}
        r = c.post("/invocations", headers={COMPONENT_HEADER: "sql2"}, json=tgi)  # as SageMaker invokes it
        assert r.status_code == 200 and r.headers[COPY_HEADER].startswith("a-"), r.text
        cards = {m["id"]: m for m in c.get("/v1/models").json()["data"]}
        assert cards["extra"]["parent"] == cards["sql2"]["parent"] == "a" and "worse" not in cards
        rows = {row["name"]: row for row in c.get("/admin/adapters").json()["data"]}
        assert rows["sql2"]["inference_component"] and rows["extra"]["copies"] == 1
    oll = ollama.Client(host=ep.url, timeout=120)
    tags = {m.model: m for m in oll.list().models}
    assert tags["extra:latest"].details and tags["extra:latest"].details.parent_model == "a:latest"
    assert {"extra:latest", "sql2:latest"} <= {m.model for m in oll.ps().models}
    status = ep.status()
    assert status["adapter_components"] == [{"name": "sql2", "base": "a"}]
    assert component(status, "a")["replicas"][0]["pid"] == first["pid"]  # changed in place


def test_scale_changes_the_deployment_in_place(ep: Endpoint) -> None:
    (first,) = component(ep.status(), "a")["replicas"]
    (other,) = component(ep.status(), "b")["replicas"]
    out = ep.cli("scale", "a", "2", timeout=300)
    assert out.returncode == 0 and "2 ready of 2 copies" in out.stdout, out.stderr
    a = component(ep.status(), "a")
    assert a["pinned_copies"] == 2 and a["autoscaling"] is None
    replicas = a["replicas"]
    assert first["pid"] in {r["pid"] for r in replicas}  # a config change: the first copy kept running
    assert component(ep.status(), "b")["replicas"] == [other]  # and the other component's
    assert len({r["node_id"] for r in replicas}) == 1  # the other node has no half CPU left
    # the new copy started with the adapters loaded at run time
    ep.wait_for(
        "the new copy's adapters",
        lambda: (
            {r["name"]: r["copies"] for r in httpx.get(f"{ep.url}/admin/adapters", timeout=30).json()["data"]}
            == {"extra": 2, "sql2": 2}
        ),
        timeout=60,
    )
    with (
        httpx.Client(base_url=ep.url, timeout=120) as c,
        c.stream("POST", "/v1/completions", json={**completion("sql2", 64), "stream": True}) as running,
    ):
        lines = running.iter_lines()
        assert next(line for line in lines if line.startswith("data: "))
        busy = c.delete("/admin/components/sql2")
        assert busy.status_code == 409 and busy.headers["retry-after"] == "1" and "in use" in busy.text
        assert [line for line in lines if line.startswith("data: ")][-1] == "data: [DONE]"
        assert c.delete("/admin/components/sql2").status_code == 200
        assert c.post("/admin/adapters/unload", json={"component": "a", "name": "extra"}).status_code == 200
        assert c.get("/admin/adapters").json()["data"] == []
    out = ep.cli("scale", "a", "1", timeout=300)
    assert out.returncode == 0 and "1 ready of 1 copies" in out.stdout, out.stderr
    out = ep.cli("scale", "a", "0")
    assert out.returncode == 1 and "min_copies: 0" in out.stderr, out.stderr
    out = ep.cli("remove", "a")
    assert out.returncode == 1 and "change the file" in out.stderr, out.stderr


async def test_a_copy_killed_under_load_comes_back(ep: Endpoint) -> None:
    (victim,) = component(ep.status(), "b")["replicas"]
    async with httpx.AsyncClient(base_url=ep.url, timeout=240) as c:

        async def one(i: int) -> Outcome:
            await asyncio.sleep(0.3 * i)
            return await call(c, "/v1/completions", completion("b", 48, stream=i % 2 == 0))

        load = [asyncio.ensure_future(one(i)) for i in range(8)]
        await asyncio.sleep(2.0)
        os.kill(victim["pid"], signal.SIGKILL)
        outcomes = await asyncio.wait_for(asyncio.gather(*load), 300)  # none hangs
    for o in outcomes:
        assert (o.status == 200 and o.done) or o.explicit_error, (o.status, o.text[-500:])

    def back() -> bool:
        replicas = component(ep.status(), "b")["replicas"]
        return [r["state"] for r in replicas] == ["RUNNING"] and replicas[0]["pid"] != victim["pid"]

    ep.wait_for("Ray to bring the copy back", back, timeout=240)
    r = httpx.post(f"{ep.url}/v1/completions", json=completion("b"), timeout=120)
    assert r.status_code == 200, r.text


def test_a_dead_nodes_copy_is_placed_again_on_a_node_with_room(ep: Endpoint, cluster: RayCluster) -> None:
    status = ep.status()
    head = cluster.cluster.head_node.node_id
    name, (lost,) = next(
        (c["name"], c["replicas"]) for c in status["components"] if c["replicas"][0]["node_id"] != head
    )
    spare = cluster.cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")
    doomed = next(n for n in cluster.cluster.worker_nodes if n.node_id == lost["node_id"])
    cluster.cluster.remove_node(doomed, allow_graceful=False)  # the host is gone, its copies with it

    def moved() -> bool:
        try:
            replicas = component(ep.status(), name)["replicas"]
        except httpx.TimeoutException:
            # /admin/status reads Ray Serve's details from the dashboard, which may take over the
            # status call's 10 s while it digests the lost node (a caches-cleared CI run): not yet
            return False
        return [(r["state"], r["node_id"]) for r in replicas] == [("RUNNING", spare.node_id)]

    ep.wait_for(f"a copy of {name} on the new node", moved, timeout=240)
    r = httpx.post(f"{ep.url}/v1/completions", json=completion(name), timeout=120)
    assert r.status_code == 200, r.text


def test_down_deletes_the_application(ep: Endpoint) -> None:
    out = ep.cli("down")
    assert out.returncode == 0 and "draining and stopping" in out.stdout, out.stderr
    assert ep.process.wait(timeout=120) == 0
    assert "stopped (the application was deleted" in ep.log.read_text()
    with contextlib.suppress(httpx.TransportError):  # Ray's proxy stays: it routes nothing now
        assert httpx.get(f"{ep.url}/ping", timeout=10).status_code != 200


TOO_BIG = f"""
name: big
components:
  - name: big
    resources: {{num_cpus: 2, memory_mb: 600}}
    engine: {ENGINE}
"""


def test_a_component_fitting_no_node_is_refused(ep: Endpoint, cluster: RayCluster, tmp_path: Path) -> None:
    file = tmp_path / "endpoint.yaml"
    file.write_text(TOO_BIG)
    command = ray_up_command(file, ep.port, cluster.address, "--ray-dashboard", cluster.dashboard_url)
    up = subprocess.run(
        command, capture_output=True, text=True, timeout=240, env={**os.environ, **LOOPBACK_ONLY}
    )
    assert up.returncode == 1, up.stderr
    # our word first, then Ray's own report
    assert "component 'big' (2 CPUs, 600 MB per copy) does not fit on the Ray cluster: no node" in up.stderr
    assert "Resources required for each replica" in up.stderr


def test_a_local_model_missing_on_a_node_is_refused_naming_it(cluster: RayCluster, tmp_path: Path) -> None:
    file = tmp_path / "endpoint.yaml"
    file.write_text(
        f"name: m\ncomponents:\n  - {{name: m, model: {tmp_path}/absent.gguf}}\n"
        f"  - {{name: d, engine: {{draft_model: {tmp_path}/no-draft.gguf}}}}\n"
    )
    up = subprocess.run(
        ray_up_command(file, quiet_port(), cluster.address),
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, **LOOPBACK_ONLY},
    )
    assert up.returncode == 1, up.stderr
    assert "a local model must exist on every node" in up.stderr
    assert up.stderr.count(f"component m: model reference '{tmp_path}/absent.gguf'") == 2  # both nodes
    assert up.stderr.count(f"component d's draft_model: model reference '{tmp_path}/no-draft.gguf'") == 2
    assert " (127.0.0.1): " in up.stderr  # each line names its node: id (address)


def test_a_dashboard_up_cannot_reach_is_named(ep: Endpoint, cluster: RayCluster, tmp_path: Path) -> None:
    file = tmp_path / "endpoint.yaml"
    file.write_text("name: d\ncomponents:\n  - {name: d}\n")
    nowhere = f"http://127.0.0.1:{free_port()}"
    command = ray_up_command(file, ep.port, cluster.address, "--ray-dashboard", nowhere)
    up = subprocess.run(
        command, capture_output=True, text=True, timeout=120, env={**os.environ, **LOOPBACK_ONLY}
    )
    assert up.returncode == 1, up.stderr
    assert f"Ray Serve's REST API at {nowhere}: reading the applications failed: ConnectError" in up.stderr


AUTOSCALED = f"""
name: auto
components:
  - name: grow
    resources: {{num_cpus: 0.5, memory_mb: 900}}
    engine: {ENGINE}
    autoscaling: {{min_copies: 1, max_copies: 2, target_concurrent_per_copy: 1, scale_in_cooldown_s: 2}}
    startup_health_check_timeout_s: 180
    max_wait_s: 120
  - name: zero
    resources: {{num_cpus: 0.5, memory_mb: 900}}
    engine: {ENGINE}
    autoscaling: {{min_copies: 0, max_copies: 1, target_concurrent_per_copy: 1, scale_in_cooldown_s: 2}}
    startup_health_check_timeout_s: 180
"""


def test_serve_keeps_one_http_port_per_cluster(ep: Endpoint, cluster: RayCluster, tmp_path: Path) -> None:
    """Joined with `--ray-address auto` (the cluster named by RAY_ADDRESS, as `ray start` sets it up)."""
    file = tmp_path / "endpoint.yaml"
    file.write_text(AUTOSCALED)
    env = {**os.environ, **LOOPBACK_ONLY, "RAY_ADDRESS": cluster.address}
    other = subprocess.run(
        ray_up_command(file, ep.port + 1, "auto"), capture_output=True, text=True, timeout=120, env=env
    )
    assert "on the Ray cluster at auto" in other.stdout, other.stdout
    assert other.returncode == 1 and f"use --port {ep.port}" in other.stderr, other.stderr


@pytest.fixture(scope="module")
def auto(ep: Endpoint, cluster: RayCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoint]:
    """After `spread` is down, on the port Ray Serve's proxy kept."""
    fast = ("--autoscale-interval", "0.5", "--autoscale-window", "2")
    endpoint = start_ray_endpoint(
        tmp_path_factory.mktemp("ray-auto"), AUTOSCALED, cluster.address, *fast, port=ep.port
    )
    yield endpoint
    stop_endpoint(endpoint)


def running(ep: Endpoint, name: str) -> int:
    return sum(1 for r in component(ep.status(), name)["replicas"] if r["state"] == "RUNNING")


def test_from_zero_on_the_first_request(auto: Endpoint) -> None:
    assert component(auto.status(), "zero")["replicas"] == []
    assert httpx.get(f"{auto.url}/ping", timeout=10).status_code == 200  # none meant: serving
    r = httpx.post(f"{auto.url}/v1/completions", json=completion("zero"), timeout=240)
    assert r.status_code == 200, r.text  # waited for the first copy to start
    auto.wait_for("zero back to no copy", lambda: component(auto.status(), "zero")["replicas"] == [], 120)


async def test_out_under_load_and_back_in(auto: Endpoint) -> None:
    seen: list[int] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            seen.append(running(auto, "grow"))
            stop.wait(0.5)

    watcher = threading.Thread(target=watch)
    watcher.start()
    outcomes: list[Outcome] = []
    try:
        async with httpx.AsyncClient(base_url=auto.url, timeout=240) as c:
            for _ in range(20):  # rounds of load until the second copy serves
                load = (call(c, "/v1/completions", completion("grow", 32, stream=True)) for _ in range(6))
                outcomes += await asyncio.wait_for(asyncio.gather(*load), 240)
                if max(seen) == 2:
                    break
    finally:
        stop.set()
        watcher.join()
    assert all(o.status == 200 and o.done for o in outcomes), [o.text[-300:] for o in outcomes if not o.done]
    assert max(seen) == 2, seen  # 6 concurrent / 1 per copy, capped at max_copies
    auto.wait_for(
        "grow back to one copy", lambda: len(component(auto.status(), "grow")["replicas"]) == 1, timeout=120
    )


def test_auto_down(auto: Endpoint) -> None:
    out = auto.cli("down")
    assert out.returncode == 0, out.stderr
    assert auto.process.wait(timeout=120) == 0

"""`llmhost endpoint` with real copies of the default model on 127.0.0.1 (this host has 2 CPUs):
component `a` has two copies sharing CPU 0 (0.5 CPU each), `b` one copy on CPU 1. The tests share
that endpoint and run in order; the last one stops it with SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmhost.endpoint.dataplane.router import COMPONENT_HEADER, COPY_HEADER
from tests.integration.conftest import free_port
from tests.integration.endpoint_helpers import (
    ENGINE,
    Endpoint,
    Outcome,
    call,
    copy_headers,
    start_endpoint,
    stop_endpoint,
    up_command,
)
from tests.integration.scoring_helpers import assert_scoring_routes

ENDPOINT = f"""
name: it
instance: {{type: local, price_per_hour: 0.1}}
components:
  - name: a
    copies: 2
    resources: {{num_cpus: 0.5, memory_mb: 600, max_memory_mb: 4096}}
    engine: {ENGINE}
    startup_health_check_timeout_s: 90
  - name: b
    copies: 1
    resources: {{num_cpus: 1, memory_mb: 600}}
    engine: {ENGINE}
    startup_health_check_timeout_s: 90
"""


@pytest.fixture(scope="module")
def ep(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoint]:
    endpoint = start_endpoint(tmp_path_factory.mktemp("endpoint"), ENDPOINT)
    # /ping answers once one copy is ready; the tests count on all three
    endpoint.wait_for(
        "every copy ready",
        lambda: all(c["ready"] == c["copies"] == len(c["replicas"]) for c in endpoint.status()["components"]),
        timeout=180,
    )
    yield endpoint
    stop_endpoint(endpoint)


def completion(model: str, tokens: int = 8, stream: bool = False) -> dict[str, object]:
    return {
        "model": model,
        "prompt": "Tell me about",
        "max_tokens": tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": stream,
    }


def test_two_components_answer_under_their_own_names(ep: Endpoint) -> None:
    with httpx.Client(base_url=ep.url, timeout=60) as c:
        for name in ("a", "b"):
            r = c.post(
                "/invocations",
                headers={COMPONENT_HEADER: name},
                json={"inputs": "Hello", "parameters": {"max_new_tokens": 4}},
            )
            assert r.status_code == 200, r.text
            assert r.headers[COPY_HEADER].startswith(f"{name}-")
            assert r.json()[0]["generated_text"]
            r = c.post("/v1/completions", json=completion(name, 4))
            assert r.status_code == 200, r.text
            assert r.json()["model"] == name and r.json()["usage"]["completion_tokens"] == 4
            assert r.headers[COPY_HEADER].startswith(f"{name}-")
        assert [m["id"] for m in c.get("/v1/models").json()["data"]] == ["a", "b"]
        r = c.post("/v1/completions", json=completion("nope"))
        assert r.status_code == 404
        assert r.json()["error"]["message"] == "unknown inference component 'nope'; known components: a, b"
        metrics = {f.name: f for f in text_string_to_metric_families(c.get("/metrics").text)}
    running = {s.labels["copy"] for s in metrics["llmhost_num_requests_running"].samples}
    assert {"a-0", "a-1", "b-0"} <= running
    b_ok = {"component": "b", "code": "200"}
    answered = [
        s
        for s in metrics["llmhost_endpoint_requests"].samples
        if s.name == "llmhost_endpoint_requests_total" and s.labels == b_ok
    ]
    assert [s.value for s in answered] == [2.0]


def test_a_batch_on_the_router_fans_out_over_the_copies(ep: Endpoint) -> None:
    served = {r["copy"]: r["served"] for r in ep.replicas("a")}
    done, answers = ep.run_batch([(f"e{i}", completion("a", 4)) for i in range(8)])
    assert done.status == "completed" and done.request_counts is not None
    assert done.request_counts.completed == 8
    assert [a["custom_id"] for a in answers] == [f"e{i}" for i in range(8)]
    assert {a["response"]["body"]["model"] for a in answers} == {"a"}
    after = {r["copy"]: r["served"] for r in ep.replicas("a")}
    assert all(after[c] > served[c] for c in served), f"every copy of a served lines: {served} -> {after}"


def test_scoring_and_tokenizer_routes_pick_their_component(ep: Endpoint) -> None:
    with httpx.Client(base_url=ep.url, timeout=120) as c:
        assert_scoring_routes(c)


def cpus_allowed(pid: int) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split(":", 1)[1].strip()
    raise AssertionError("no Cpus_allowed_list")


def test_copies_get_their_cpus(ep: Endpoint) -> None:
    a0, a1 = ep.replicas("a")
    [b0] = ep.replicas("b")
    a_cpus = {cpus_allowed(a0["pid"]), cpus_allowed(a1["pid"])}
    b_cpus = cpus_allowed(b0["pid"])
    assert len(a_cpus) == 1  # the two halves share one core
    assert a_cpus.isdisjoint({b_cpus})  # the whole CPU is b's alone
    assert {a0["threads"], a1["threads"], b0["threads"]} == {1}
    assert b0["cpus_allowed"] == b_cpus == ",".join(map(str, b0["cpus"]))
    # a kernel limit where the host allows one (this host: a cgroup v1 memory group), else the RSS watch
    assert a0["memory_limit"] in ("cgroup-v2", "cgroup-v1", "rss-watch") and a0["rss_mb"] > 0
    assert a0["max_memory_mb"] == 4096
    # b sets no max_memory_mb: its limit is its reservation, by the same mechanism
    assert (b0["max_memory_mb"], b0["memory_limit"]) == (600, a0["memory_limit"])


def test_over_capacity_file_is_refused_before_anything_starts(tmp_path: Path) -> None:
    cpus = len(os.sched_getaffinity(0))
    file = tmp_path / "big.yaml"
    file.write_text(
        f"name: big\ncomponents:\n  - name: x\n    copies: {cpus + 1}\n"
        "    resources: {num_cpus: 1, memory_mb: 100}\n"
    )
    cmd = up_command(file, free_port(), tmp_path / "copies")
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert (
        f"insufficient capacity: component 'x' copy {cpus + 1} of {cpus + 1} needs 1 dedicated CPU(s)"
        in done.stderr
    )
    assert not (tmp_path / "copies").exists() or not list((tmp_path / "copies").iterdir())
    file.write_text("name: big\ncomponents:\n  - name: x\n    resources: {num_cpu: 1}\n")
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "components[0](x).resources.num_cpu: unknown key" in done.stderr


def test_router_cpus_keep_copies_off_the_routers_cpu(tmp_path: Path) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs two CPUs: one for the router, one for a copy")
    yaml_text = (
        f"name: pinned\nrouter: {{num_cpus: 1}}\ncomponents:\n  - name: x\n"
        f"    resources: {{num_cpus: 1, memory_mb: 600}}\n    engine: {ENGINE}\n"
    )
    pinned = start_endpoint(tmp_path, yaml_text)
    try:
        status = pinned.status()
        assert status["router_cpus"] == cpus[-1:] and cpus[-1] not in status["cpus"]
        assert cpus_allowed(pinned.process.pid) == str(cpus[-1])  # the router runs only there
        [copy] = pinned.replicas("x")
        assert str(cpus[-1]) not in cpus_allowed(copy["pid"]).split(",")
        r = httpx.post(f"{pinned.url}/v1/completions", json=completion("x", 4), timeout=60)
        assert r.status_code == 200, r.text
    finally:
        stop_endpoint(pinned)
    file = tmp_path / "full.yaml"  # every CPU for copies and one for the router: refused up front
    file.write_text(
        f"name: full\nrouter: {{num_cpus: 1}}\ncomponents:\n  - name: x\n"
        f"    copies: {len(cpus)}\n    resources: {{num_cpus: 1, memory_mb: 100}}\n"
    )
    done = subprocess.run(
        up_command(file, free_port(), tmp_path / "c2"), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1 and "insufficient capacity" in done.stderr


async def test_kill_a_copy_under_load(ep: Endpoint) -> None:
    victim = ep.replicas("a")[0]
    async with httpx.AsyncClient(base_url=ep.url, timeout=90) as c:

        async def kill_soon() -> None:
            await asyncio.sleep(1.0)
            os.kill(victim["pid"], signal.SIGKILL)

        async def one(i: int) -> Outcome:
            await asyncio.sleep(0.1 * i)  # some arrive while the copy is dying or gone
            return await call(c, "/v1/completions", completion("a", 16, stream=i % 3 == 0))

        outcomes, _ = await asyncio.gather(asyncio.gather(*(one(i) for i in range(20))), kill_soon())
    for o in outcomes:
        assert o.done or o.explicit_error, (o.status, o.text[-500:])
    assert sum(o.done for o in outcomes) >= 10
    print("kill under load:", [o.status if o.done else f"{o.status} error" for o in outcomes])
    ep.wait_for(
        "the killed copy to come back READY",
        lambda: any(
            r["copy"] == victim["copy"] and r["state"] == "ready" and r["restarts"] >= 1
            for r in ep.replicas("a")
        ),
        timeout=60,
    )
    [back] = [r for r in ep.replicas("a") if r["copy"] == victim["copy"]]
    assert back["last_reason"] == "killed by SIGKILL" and back["pid"] != victim["pid"]
    assert back["cpus"] == victim["cpus"]


def copy_metric(ep: Endpoint, copy: str, name: str) -> float:
    [r] = [r for c in ep.status()["components"] for r in c["replicas"] if r["copy"] == copy]
    text = httpx.get(f"http://127.0.0.1:{r['port']}/metrics", headers=copy_headers(r), timeout=10).text
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name)


async def test_killing_the_only_copy_fails_its_streams_fast_and_replays_none(ep: Endpoint) -> None:
    [victim] = ep.replicas("b")
    served_before = victim["served"]
    async with httpx.AsyncClient(base_url=ep.url, timeout=120) as c:

        async def timed(i: int) -> tuple[Outcome, float]:
            # 200 new tokens fit max_total_tokens (256) and take seconds: the kill lands mid-answer
            body = completion("b", 200, stream=i != 2) | {"prompt": f"Story {i}: once upon a time"}
            outcome = await call(c, "/v1/completions", body)
            return outcome, time.monotonic()

        load = asyncio.gather(*(timed(i) for i in range(3)))
        await asyncio.sleep(2.0)
        os.kill(victim["pid"], signal.SIGKILL)
        killed_at = time.monotonic()
        results = await load
    for outcome, ended in results:
        assert outcome.explicit_error and not outcome.done, outcome.text[-300:]
        # not left waiting for the client's 120 s timeout (the bound is loose: other tests share the CPUs)
        assert ended - killed_at < 45, "a request to the dead copy was left waiting"
    # the new process: until its supervisor notices the death, the dead copy still shows "ready" (pid None)
    ep.wait_for(
        "b back",
        lambda: (
            ep.replicas("b")[0]["state"] == "ready"
            and ep.replicas("b")[0]["pid"] not in (None, victim["pid"])
        ),
        timeout=90,
    )
    r = httpx.post(f"{ep.url}/v1/completions", json=completion("b", 4), timeout=60)
    assert r.status_code == 200, r.text
    [back] = ep.replicas("b")
    # each request went to a copy exactly once; the restarted copy generated only the new one
    comp = next(c for c in ep.status()["components"] if c["name"] == "b")
    assert back["served"] - served_before == 4 + comp["retries"], comp
    assert copy_metric(ep, "b-0", "llmhost_requests_total") == 1


async def test_a_hung_copy_is_detected_and_restarted(ep: Endpoint) -> None:
    [victim] = ep.replicas("b")
    os.kill(victim["pid"], signal.SIGSTOP)
    try:
        ep.wait_for(
            "the hung copy to be restarted",
            lambda: ep.replicas("b")[0]["pid"] not in (None, victim["pid"]),
            timeout=60,
        )
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim["pid"], signal.SIGCONT)
    assert "hung" in (ep.replicas("b")[0]["last_reason"] or "")
    ep.wait_for("b ready again", lambda: ep.replicas("b")[0]["state"] == "ready", timeout=90)
    r = httpx.post(f"{ep.url}/v1/completions", json=completion("b", 4), timeout=60)
    assert r.status_code == 200, r.text


async def test_scale_remove_and_add_drop_no_request(ep: Endpoint, tmp_path: Path) -> None:
    async with httpx.AsyncClient(base_url=ep.url, timeout=90) as c:
        jobs = [call(c, "/v1/completions", completion("a", 32, stream=True)) for _ in range(4)]
        jobs += [call(c, "/v1/completions", completion("b", 32, stream=i == 0)) for i in range(2)]
        load = asyncio.gather(*jobs)
        await asyncio.sleep(0.8)
        scale = asyncio.to_thread(ep.cli, "scale", "a", "1")
        remove = asyncio.to_thread(ep.cli, "remove", "b")
        outcomes, scaled, removed = await asyncio.gather(load, scale, remove)
        assert scaled.returncode == 0, scaled.stderr
        assert removed.returncode == 0, removed.stderr
        for o in outcomes:
            assert o.status == 200 and o.done, o.text[-500:]
        assert len(ep.replicas("a")) == 1 and [x["name"] for x in ep.status()["components"]] == ["a"]
        r = await c.post("/v1/completions", json=completion("b"))
        assert r.status_code == 404 and "known components: a" in r.text
        added = tmp_path / "c.yaml"
        added.write_text(f"name: c\nresources: {{num_cpus: 1, memory_mb: 600}}\nengine: {ENGINE}\n")
        done = await asyncio.to_thread(ep.cli, "add", str(added))
        assert done.returncode == 0, done.stderr
        r = await c.post(
            "/invocations",
            headers={COMPONENT_HEADER: "c"},
            json={"inputs": "Hi", "parameters": {"max_new_tokens": 3}},
        )
        assert r.status_code == 200 and r.headers[COPY_HEADER] == "c-0"
    shown = ep.cli("status")
    assert shown.returncode == 0 and "c-0" in shown.stdout and "ready" in shown.stdout
    # rss/reservation/limit (mechanism): c sets no max_memory_mb, its reservation is its limit
    [c0] = ep.replicas("c")
    assert f"/600/600 ({c0['memory_limit']})" in shown.stdout, shown.stdout


async def test_sigterm_drains_then_exits(ep: Endpoint) -> None:
    pids = [r["pid"] for c in ep.status()["components"] for r in c["replicas"]]
    async with httpx.AsyncClient(base_url=ep.url, timeout=90) as c:
        jobs = [call(c, "/v1/completions", completion("a", 32, stream=i % 2 == 0)) for i in range(3)]
        load = asyncio.gather(*jobs)
        await asyncio.sleep(0.8)
        ep.process.send_signal(signal.SIGTERM)
        await asyncio.sleep(0.3)
        assert (await c.get("/ping")).status_code == 503
        refused = await c.post("/v1/completions", json=completion("a"))
        assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
        outcomes = await load
    for o in outcomes:
        assert o.status == 200 and o.done, o.text[-500:]
    assert await asyncio.to_thread(ep.process.wait, 60) == 0
    assert "every copy stopped" in ep.log.read_text()
    time.sleep(0.2)
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()

"""`llmhost endpoint` with real copies of the default model on 127.0.0.1 (this host has 2 CPUs):
component `a` has two copies sharing CPU 0 (0.5 CPU each), `b` one copy on CPU 1. The tests share
that endpoint and run in order; the last one stops it with SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from llmhost.endpoint.router import COMPONENT_HEADER, COPY_HEADER
from tests.integration.conftest import free_port
from tests.integration.endpoint_helpers import (
    ENGINE,
    Endpoint,
    Outcome,
    call,
    start_endpoint,
    stop_endpoint,
    up_command,
)

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
    yield endpoint
    stop_endpoint(endpoint)


def completion(model: str, tokens: int = 8, stream: bool = False) -> dict[str, object]:
    return {"model": model, "prompt": "Tell me about", "max_tokens": tokens, "temperature": 0,
            "ignore_eos": True, "stream": stream}  # fmt: skip


def test_two_components_answer_under_their_own_names(ep: Endpoint) -> None:
    with httpx.Client(base_url=ep.url, timeout=60) as c:
        for name in ("a", "b"):
            r = c.post("/invocations", headers={COMPONENT_HEADER: name},
                       json={"inputs": "Hello", "parameters": {"max_new_tokens": 4}})  # fmt: skip
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
        metrics = c.get("/metrics").text
    for copy in ("a-0", "a-1"):
        assert f'llmhost_num_requests_running{{component="a",copy="{copy}"}}' in metrics
    assert 'llmhost_endpoint_requests_total{component="b",code="200"} 2' in metrics


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
    assert a0["memory_limit"] in ("cgroup", "watched") and a0["rss_mb"] > 0


def test_over_capacity_file_is_refused_before_anything_starts(tmp_path: Path) -> None:
    cpus = len(os.sched_getaffinity(0))
    file = tmp_path / "big.yaml"
    file.write_text(f"name: big\ncomponents:\n  - name: x\n    copies: {cpus + 1}\n"
                    "    resources: {num_cpus: 1, memory_mb: 100}\n")  # fmt: skip
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
        r = await c.post("/invocations", headers={COMPONENT_HEADER: "c"},
                         json={"inputs": "Hi", "parameters": {"max_new_tokens": 3}})  # fmt: skip
        assert r.status_code == 200 and r.headers[COPY_HEADER] == "c-0"
    shown = ep.cli("status")
    assert shown.returncode == 0 and "c-0" in shown.stdout and "ready" in shown.stdout


async def test_sigterm_drains_then_exits(ep: Endpoint) -> None:
    pids = [r["pid"] for c in ep.status()["components"] for r in c["replicas"]]
    async with httpx.AsyncClient(base_url=ep.url, timeout=90) as c:
        jobs = [call(c, "/v1/completions", completion("a", 32, stream=i % 2 == 0)) for i in range(3)]
        load = asyncio.gather(*jobs)
        await asyncio.sleep(0.8)
        ep.process.send_signal(signal.SIGTERM)
        outcomes = await load
    for o in outcomes:
        assert o.status == 200 and o.done, o.text[-500:]
    # uvicorn re-raises the SIGTERM it handled once shut down: a clean exit reads -15
    assert await asyncio.to_thread(ep.process.wait, 60) in (0, -signal.SIGTERM)
    assert "every copy stopped" in ep.log.read_text()
    time.sleep(0.2)
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()

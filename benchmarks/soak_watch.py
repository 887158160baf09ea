"""Soak of a real `llmhost endpoint` watched for leaks (not a timed test; benchmarks/soak.py measures
faults and overload, this one what a long run leaves behind).

The endpoint: a component `fixed` of two copies of SmolLM2 135M, and a models_dir of three more names
for it, loaded on demand within a budget of 1100 MB that holds two (the third evicts one). For --minutes:
users loop over mixed APIs (OpenAI chat and completions, Anthropic Messages, Responses, TGI through
/invocations), all streamed, a quarter of them disconnecting after their first chunks; on a timeline, a
copy is killed (-9), another stopped (SIGSTOP) then continued, `fixed` scaled to 3 then back to 2; at the
end the endpoint is drained (SIGTERM). Every --sample-s, for the router and each copy: RSS, open fds,
threads, asyncio tasks (`llmhost_asyncio_tasks`, `llmhost_endpoint_asyncio_tasks`), host-cache bytes
and KV cells in use. Prints the JSON it writes to --out.

    python benchmarks/soak_watch.py --minutes 30 --out benchmarks/results/soak_watch.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.integration.conftest import SMOLLM2, free_port  # noqa: E402
from tests.integration.endpoint_helpers import up_command  # noqa: E402

ENGINE = "{max_input_tokens: 256, max_total_tokens: 512, max_batch_tokens: 64, max_concurrent: 4}"
ON_DEMAND = ("smol-a", "smol-b", "smol-c")
PROMPT = "Write a short story about a lighthouse keeper."
# an error event in any API's stream (a Responses object's `"error": null` is none)
ERROR_EVENT = re.compile(r'event: (error|response\.failed)|"error":\s*[{"]')


# per API: path, body, extra headers
def requests_for(model: str) -> list[tuple[str, str, dict[str, Any], dict[str, str]]]:
    msgs = [{"role": "user", "content": PROMPT}]
    return [
        ("openai-chat", "/v1/chat/completions", {"model": model, "messages": msgs, "max_tokens": 24,
                                                 "stream": True}, {}),
        ("openai-completions", "/v1/completions", {"model": model, "prompt": PROMPT, "max_tokens": 24,
                                                   "stream": True}, {}),
        ("anthropic", "/v1/messages", {"model": model, "messages": msgs, "max_tokens": 24,
                                       "stream": True}, {}),
        ("responses", "/v1/responses", {"model": model, "input": PROMPT, "max_output_tokens": 24,
                                        "stream": True}, {}),
        ("tgi", "/invocations", {"inputs": PROMPT, "parameters": {"max_new_tokens": 24}, "stream": True},
         {"X-Amzn-SageMaker-Inference-Component": model}),
    ]  # fmt: skip


def endpoint_yaml(folder: Path) -> str:
    copy = f"resources: {{num_cpus: 0.25, memory_mb: 500}}, engine: {ENGINE}"
    return (f"name: soak-watch\ncomponents:\n  - {{name: fixed, model: {SMOLLM2}, copies: 2, {copy}}}\n"
            f"models_dir:\n  path: {folder}\n  defaults: {{{copy}, on_demand: {{keep_alive: 20}}}}\n")


class Run:
    def __init__(self, tmp: Path) -> None:
        folder = tmp / "models"
        folder.mkdir()
        for name in ON_DEMAND:
            (folder / f"{name}.gguf").symlink_to(SMOLLM2)
        file = tmp / "endpoint.yaml"
        file.write_text(endpoint_yaml(folder))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tmp / "endpoint.log"
        cmd = [*up_command(file, self.port, tmp / "copies"), "--memory-budget-mb", "1100"]
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                         env={**os.environ, "PYTHONUNBUFFERED": "1"})  # fmt: skip
        self.outcomes: Counter[str] = Counter()
        self.faults: list[dict[str, Any]] = []
        self.samples: list[dict[str, Any]] = []
        self.t0 = time.monotonic()

    def status(self) -> dict[str, Any]:
        return dict(httpx.get(f"{self.url}/admin/status", timeout=30).json())

    def copies(self) -> list[dict[str, Any]]:
        return [r for c in self.status()["components"] for r in c["replicas"] if r.get("pid")]

    def wait_ready(self, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"endpoint exited:\n{self.log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/ping", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        raise RuntimeError("endpoint not ready")

    def note(self, what: str, **extra: Any) -> None:
        self.faults.append({"t": round(time.monotonic() - self.t0, 1), "what": what, **extra})
        print(f"[{time.monotonic() - self.t0:6.1f} s] {what} {extra or ''}", flush=True)


async def one_request(run: Run, client: httpx.AsyncClient, rng: random.Random) -> None:
    model = rng.choice(["fixed", "fixed", *ON_DEMAND])
    api, path, body, headers = rng.choice(requests_for(model))
    leave_after = 2 if rng.random() < 0.25 else None
    try:
        async with client.stream("POST", path, json=body, headers=headers) as r:
            if r.status_code != 200:
                run.outcomes[f"{api} {r.status_code}"] += 1
                await r.aread()
                return
            chunks, text = 0, []
            async for chunk in r.aiter_text():
                chunks += 1
                text.append(chunk)
                if leave_after is not None and chunks >= leave_after:
                    run.outcomes[f"{api} disconnected"] += 1
                    return
            joined = "".join(text)
            failed = ERROR_EVENT.search(joined) is not None
            run.outcomes[f"{api} {'error event' if failed else 'ok'}"] += 1
    except httpx.HTTPError as exc:
        run.outcomes[f"{api} {type(exc).__name__}"] += 1


async def users(run: Run, n: int, until: float) -> None:
    async def user(i: int) -> None:
        rng = random.Random(i)
        async with httpx.AsyncClient(base_url=run.url, timeout=300) as client:
            while time.monotonic() < until:
                await one_request(run, client, rng)

    await asyncio.gather(*(user(i) for i in range(n)))


def metric_values(text: str, name: str) -> dict[str, float]:
    """One metric's samples by their labels' text."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            labels, _, value = line.rpartition(" ")
            out[labels[len(name):] or "{}"] = float(value)
    return out


def proc_figures(pid: int) -> dict[str, Any]:
    try:
        p = psutil.Process(pid)
        rss = round(p.memory_info().rss / 2**20, 1)
        return {"rss_mb": rss, "fds": p.num_fds(), "threads": p.num_threads()}
    except psutil.Error:
        return {}


def sample(run: Run) -> None:
    metrics = httpx.get(f"{run.url}/metrics", timeout=30).text
    copies = {r["copy"]: {"pid": r["pid"], "state": r["state"], **proc_figures(int(r["pid"]))}
              for r in run.copies()}  # fmt: skip
    run.samples.append({
        "t": round(time.monotonic() - run.t0, 1),
        "router": {**proc_figures(run.proc.pid),
                   "asyncio_tasks": metric_values(metrics, "llmhost_endpoint_asyncio_tasks").get("{}")},
        "copies": copies,
        "copy_asyncio_tasks": metric_values(metrics, "llmhost_asyncio_tasks"),
        "host_cache_bytes": metric_values(metrics, "llmhost_prompt_cache_bytes"),
        "kv_cells_used": metric_values(metrics, "llmhost_kv_cache_used_tokens"),
    })  # fmt: skip
    s = run.samples[-1]
    per_copy = {k: (v.get("rss_mb"), v.get("fds"), v.get("threads")) for k, v in copies.items()}
    print(f"[{s['t']:6.1f} s] router {s['router']}, copies (rss, fds, threads) {per_copy}", flush=True)


async def sampler(run: Run, every: float, until: float) -> None:
    while time.monotonic() < until:
        await asyncio.to_thread(sample, run)
        await asyncio.sleep(min(every, max(0.0, until - time.monotonic())))


async def faults(run: Run, seconds: float) -> None:
    async def at(fraction: float) -> None:
        await asyncio.sleep(max(0.0, run.t0 + fraction * seconds - time.monotonic()))

    def fixed_pids() -> list[int]:
        return [int(r["pid"]) for r in run.copies() if r["component"] == "fixed" and r["state"] == "ready"]

    await at(0.15)
    if pids := await asyncio.to_thread(fixed_pids):
        os.kill(pids[0], signal.SIGKILL)
        run.note("kill -9 a copy of fixed", pid=pids[0])
    await at(0.3)
    if pids := await asyncio.to_thread(fixed_pids):
        os.kill(pids[-1], signal.SIGSTOP)
        run.note("SIGSTOP a copy of fixed", pid=pids[-1])
        await asyncio.sleep(min(15.0, seconds * 0.1))
        os.kill(pids[-1], signal.SIGCONT)  # it may have been killed as hung meanwhile
        run.note("SIGCONT", pid=pids[-1])
    for fraction, copies in ((0.45, 3), (0.65, 2)):
        await at(fraction)
        r = await asyncio.to_thread(httpx.post, f"{run.url}/admin/scale", timeout=300,
                                    json={"component": "fixed", "copies": copies, "wait": True})  # fmt: skip
        run.note(f"scale fixed to {copies}", status=r.status_code)


def drain(run: Run) -> dict[str, Any]:
    t = time.monotonic()
    run.proc.send_signal(signal.SIGTERM)
    try:
        code = run.proc.wait(180)
    except subprocess.TimeoutExpired:
        run.proc.kill()
        code = None
    return {"exit_code": code, "seconds": round(time.monotonic() - t, 1)}


def growth(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """The router's figures, first sample against last (copies restart: their own series are in samples)."""
    if len(samples) < 2:
        return {}
    first, last = samples[0]["router"], samples[-1]["router"]
    return {k: (first.get(k), last.get(k)) for k in ("rss_mb", "fds", "threads", "asyncio_tasks")}


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="llmhost-soak-watch-") as tmp:
        run = Run(Path(tmp))
        await asyncio.to_thread(run.wait_ready)
        seconds = args.minutes * 60
        run.t0 = time.monotonic()
        until = run.t0 + seconds
        await asyncio.gather(users(run, args.users, until), sampler(run, args.sample_s, until),
                             faults(run, seconds))  # fmt: skip
        sample(run)
        log_tail = run.log.read_text()
        drained = drain(run)
        run.note("drained", **drained)
        errors = [line for line in log_tail.splitlines() if " ERROR " in line or "Traceback" in line]
        return {"minutes": args.minutes, "users": args.users, "sample_s": args.sample_s,
                "outcomes": dict(sorted(run.outcomes.items())), "faults": run.faults, "drain": drained,
                "router_first_last": growth(run.samples), "error_log_lines": errors[:50],
                "samples": run.samples}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--sample-s", type=float, default=30.0, help="seconds between samples")
    ap.add_argument("--users", type=int, default=4, help="concurrent streaming clients")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "soak_watch.json")
    args = ap.parse_args()
    result = asyncio.run(main_async(args))
    text = json.dumps(result, indent=1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    summary = {k: v for k, v in result.items() if k != "samples"}
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()

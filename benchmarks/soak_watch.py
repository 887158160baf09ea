"""Soak of a real `llmhost endpoint` watched for leaks (not a timed test; benchmarks/soak.py measures
faults and overload, this one what a long run leaves behind).

The endpoint: a component `fixed` of two copies of SmolLM2 135M, and a models_dir of three more names
for it, loaded on demand within a budget of 1100 MB that holds two (the third evicts one). For --minutes:
users loop over mixed APIs (OpenAI chat and completions, Anthropic Messages, Responses, TGI through
/invocations), all streamed, a quarter of them disconnecting after their first chunks; on a timeline, a
copy is killed (-9), another stopped (SIGSTOP) then continued, `fixed` scaled to 3 then back to 2; at the
end the endpoint is drained (SIGTERM). Every --sample-s, for the router and each copy: RSS, open fds,
threads, asyncio tasks (`llmhost_asyncio_tasks`, `llmhost_endpoint_asyncio_tasks`), host-cache bytes
and KV cells in use. The summary: per process, the growth of RSS, fds, threads and tasks after the
--warmup-s (a copy started later: after its own); requests without an answer or an explicit error
(UNANSWERED, with examples); the loads, evictions, copy failures, kills and disconnects the run went
through; every ERROR line of the router's and the copies' logs, and those naming no request id or
component. Prints the JSON it writes to --out (the samples too).

    python benchmarks/soak_watch.py --minutes 30 --out benchmarks/results/soak_watch.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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

from benchmarks.soak_growth import WARMUP_S, WATCHED, growth  # noqa: E402
from tests.integration.conftest import SMOLLM2, free_port  # noqa: E402
from tests.integration.endpoint_helpers import up_command  # noqa: E402

ENGINE = "{max_input_tokens: 256, max_total_tokens: 512, max_batch_tokens: 64, max_concurrent: 4}"
ON_DEMAND = ("smol-a", "smol-b", "smol-c")
PROMPT = "Write a short story about a lighthouse keeper."
# an error event in any API's stream (a Responses object's `"error": null` is none)
ERROR_EVENT = re.compile(r'event: (error|response\.failed)|"error":\s*[{"]')
# each API's last event of a whole answer: a stream that ends without it (and without an error event),
# or a connection that fails, is a request left without an answer
ANSWERED = {
    "openai-chat": re.compile(r"data: \[DONE\]\s*$"),
    "openai-completions": re.compile(r"data: \[DONE\]\s*$"),
    "anthropic": re.compile(r"event: message_stop"),
    "responses": re.compile(r"event: response\.(completed|incomplete)"),
    "tgi": re.compile(r'"generated_text":\s*"'),
}
# a copy's figures from the endpoint's /metrics (each copy's families relabelled with `copy`)
COPY_METRICS = {
    "llmhost_asyncio_tasks": "asyncio_tasks",
    "llmhost_prompt_cache_bytes": "host_cache_bytes",
    "llmhost_kv_cache_used_tokens": "kv_cells_used",
}


# per API: path, body, extra headers
def requests_for(model: str) -> list[tuple[str, str, dict[str, Any], dict[str, str]]]:
    msgs = [{"role": "user", "content": PROMPT}]
    return [
        (
            "openai-chat",
            "/v1/chat/completions",
            {"model": model, "messages": msgs, "max_tokens": 24, "stream": True},
            {},
        ),
        (
            "openai-completions",
            "/v1/completions",
            {"model": model, "prompt": PROMPT, "max_tokens": 24, "stream": True},
            {},
        ),
        (
            "anthropic",
            "/v1/messages",
            {"model": model, "messages": msgs, "max_tokens": 24, "stream": True},
            {},
        ),
        (
            "responses",
            "/v1/responses",
            {"model": model, "input": PROMPT, "max_output_tokens": 24, "stream": True},
            {},
        ),
        (
            "tgi",
            "/invocations",
            {"inputs": PROMPT, "parameters": {"max_new_tokens": 24}, "stream": True},
            {"X-Amzn-SageMaker-Inference-Component": model},
        ),
    ]


def endpoint_yaml(folder: Path) -> str:
    copy = f"resources: {{num_cpus: 0.25, memory_mb: 500}}, engine: {ENGINE}"
    return (
        f"name: soak-watch\ncomponents:\n  - {{name: fixed, model: {SMOLLM2}, copies: 2, {copy}}}\n"
        f"models_dir:\n  path: {folder}\n  defaults: {{{copy}, on_demand: {{keep_alive: 20}}}}\n"
    )


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
            self.proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"}
            )
        self.outcomes: Counter[str] = Counter()
        self.faults: list[dict[str, Any]] = []
        self.samples: list[dict[str, Any]] = []
        self.unanswered: list[dict[str, Any]] = []
        self.copy_logs = tmp / "copies"
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


def verdict(api: str, status: int, text: str) -> str:
    """How a request ended: ok, an explicit error (a status with the API's error body, an error event),
    or UNANSWERED (neither an answer nor an error)."""
    if status != 200:
        return f"{status}" if '"error"' in text else f"UNANSWERED: {status} without an error body"
    if ERROR_EVENT.search(text) is not None:
        return "error event"
    return "ok" if ANSWERED[api].search(text) is not None else "UNANSWERED: ended without its last event"


async def one_request(run: Run, client: httpx.AsyncClient, rng: random.Random) -> None:
    model = rng.choice(["fixed", "fixed", *ON_DEMAND])
    api, path, body, headers = rng.choice(requests_for(model))
    leave_after = 2 if rng.random() < 0.25 else None
    text: list[str] = []
    detail = ""
    try:
        async with client.stream("POST", path, json=body, headers=headers) as r:
            status = r.status_code
            async for chunk in r.aiter_text():
                text.append(chunk)
                if status == 200 and leave_after is not None and len(text) >= leave_after:
                    run.outcomes[f"{api} disconnected"] += 1
                    return
        outcome = verdict(api, status, "".join(text))
    except httpx.HTTPError as exc:
        outcome, detail = f"UNANSWERED: {type(exc).__name__}", str(exc)
    run.outcomes[f"{api} {outcome}"] += 1
    if outcome.startswith("UNANSWERED"):
        run.unanswered.append(
            {"api": api, "model": model, "why": outcome, "detail": detail, "tail": "".join(text)[-300:]}
        )


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
            out[labels[len(name) :] or "{}"] = float(value)
    return out


def proc_figures(pid: int) -> dict[str, Any]:
    try:
        p = psutil.Process(pid)
        rss = round(p.memory_info().rss / 2**20, 1)
        return {"rss_mb": rss, "fds": p.num_fds(), "threads": p.num_threads()}
    except psutil.Error:
        return {}


def by_copy(values: dict[str, float]) -> dict[str, float]:
    """A relabelled copy metric's samples by the copy they came from (summed over other labels)."""
    out: dict[str, float] = {}
    for labels, value in values.items():
        if found := re.search(r'copy="([^"]+)"', labels):
            out[found[1]] = out.get(found[1], 0.0) + value
    return out


def sample(run: Run) -> None:
    metrics = httpx.get(f"{run.url}/metrics", timeout=30).text
    per_copy = {name: by_copy(metric_values(metrics, name)) for name in COPY_METRICS}
    copies = {}
    for r in run.copies():
        figures = {key: per_copy[name].get(r["copy"]) for name, key in COPY_METRICS.items()}
        copies[r["copy"]] = {"pid": r["pid"], "state": r["state"], **proc_figures(int(r["pid"])), **figures}
    run.samples.append(
        {
            "t": round(time.monotonic() - run.t0, 1),
            "router": {
                **proc_figures(run.proc.pid),
                "asyncio_tasks": metric_values(metrics, "llmhost_endpoint_asyncio_tasks").get("{}"),
            },
            "copies": copies,
        }
    )
    s = run.samples[-1]
    shown = {k: tuple(v.get(key) for key in WATCHED) for k, v in copies.items()}
    print(f"[{s['t']:6.1f} s] router {s['router']}, copies (rss, fds, threads, tasks) {shown}", flush=True)


async def sampler(run: Run, every: float, until: float) -> None:
    while time.monotonic() < until:
        try:
            await asyncio.to_thread(sample, run)
        except httpx.HTTPError as exc:  # the endpoint slow to answer: a gap in the series, noted
            run.note("sample failed", error=f"{type(exc).__name__}: {exc}")
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
        with contextlib.suppress(ProcessLookupError):  # it may have been killed as hung meanwhile
            os.kill(pids[-1], signal.SIGCONT)
        run.note("SIGCONT", pid=pids[-1])
    for fraction, copies in ((0.45, 3), (0.65, 2)):
        await at(fraction)
        try:
            body = {"component": "fixed", "copies": copies, "wait": True}
            r = await asyncio.to_thread(httpx.post, f"{run.url}/admin/scale", timeout=300, json=body)
            run.note(f"scale fixed to {copies}", status=r.status_code)
        except httpx.HTTPError as exc:
            run.note(f"scale fixed to {copies} failed", error=f"{type(exc).__name__}: {exc}")


def drain(run: Run) -> dict[str, Any]:
    t = time.monotonic()
    run.proc.send_signal(signal.SIGTERM)
    try:
        code = run.proc.wait(180)
    except subprocess.TimeoutExpired:
        run.proc.kill()
        code = None
    return {"exit_code": code, "seconds": round(time.monotonic() - t, 1)}


def final_counts(run: Run, log_text: str) -> dict[str, Any]:
    """What the run went through: on-demand loads, evictions and unloads (the endpoint's counters), copy
    failures (the supervisor's `-> failed`, each restarted) and the kills this script made, and the
    streams it left on purpose."""
    try:
        metrics = httpx.get(f"{run.url}/metrics", timeout=60).text
    except httpx.HTTPError as exc:  # the counters are lost, not the run
        run.note("final metrics failed", error=f"{type(exc).__name__}: {exc}")
        metrics = ""

    def total(name: str) -> int:
        return int(sum(metric_values(metrics, name).values()))

    return {
        "loads": total("llmhost_endpoint_model_loads_total"),
        "evictions": total("llmhost_endpoint_model_evictions_total"),
        "unloads": total("llmhost_endpoint_model_unloads_total"),
        "copy_failures": sum(" -> failed" in line for line in log_text.splitlines()),
        "restarting_reasons": [line for line in log_text.splitlines() if "; restarting in " in line],
        "kills_injected": sum(f["what"].startswith("kill -9") for f in run.faults),
        "stream_errors": total("llmhost_endpoint_stream_errors_total"),
        "disconnects": sum(n for k, n in run.outcomes.items() if k.endswith(" disconnected")),
    }


def error_lines(run: Run) -> list[dict[str, Any]]:
    """Every ERROR line (and traceback) of the router's log and the copies' logs, each with whether it
    names a request id or a component/copy."""
    out = []
    logs = [run.log, *sorted(run.copy_logs.glob("*.log"))]
    names = {"fixed", *ON_DEMAND}
    for path in logs:
        for line in path.read_text(errors="replace").splitlines():
            if " ERROR " not in line and "Traceback" not in line:
                continue
            named = re.search(r"request[ _]id|req[-_][0-9a-f]|\b[0-9a-f]{32}\b", line) is not None
            named = named or any(re.search(rf"\b{n}(-\d+)?\b", line) for n in names)
            out.append({"log": path.name, "line": line[:400], "names_request_or_component": named})
    return out


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="llmhost-soak-watch-") as tmp:
        run = Run(Path(tmp))
        await asyncio.to_thread(run.wait_ready)
        seconds = args.minutes * 60
        run.t0 = time.monotonic()
        until = run.t0 + seconds
        await asyncio.gather(
            users(run, args.users, until), sampler(run, args.sample_s, until), faults(run, seconds)
        )
        with contextlib.suppress(httpx.HTTPError):
            sample(run)
        counts = final_counts(run, run.log.read_text())
        drained = drain(run)
        run.note("drained", **drained)
        counts["restarting_reasons"] = counts["restarting_reasons"][:20]
        errors = error_lines(run)
        unanswered = sum(n for k, n in run.outcomes.items() if "UNANSWERED" in k)
        return {
            "minutes": args.minutes,
            "users": args.users,
            "sample_s": args.sample_s,
            "requests": sum(run.outcomes.values()),
            "unanswered": unanswered,
            "outcomes": dict(sorted(run.outcomes.items())),
            "unanswered_examples": run.unanswered[:10],
            "counts": counts,
            "faults": run.faults,
            "drain": drained,
            "growth": growth(run.samples, args.warmup_s, args.growth_limit_pct),
            "error_log_lines": len(errors),
            "error_lines_without_a_name": [e for e in errors if not e["names_request_or_component"]][:20],
            "error_lines_sample": errors[:30],
            "samples": run.samples,
        }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--sample-s", type=float, default=30.0, help="seconds between samples")
    ap.add_argument("--users", type=int, default=4, help="concurrent streaming clients")
    ap.add_argument("--warmup-s", type=float, default=WARMUP_S, help="growth is measured after this")
    ap.add_argument("--growth-limit-pct", type=float, default=5.0, help="growth flagged above this")
    ap.add_argument("--summarize", type=Path, help="no run: recompute the growth of this result's samples")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "soak_watch.json")
    args = ap.parse_args()
    if args.summarize is not None:
        result = json.loads(args.summarize.read_text())
        result["growth"] = growth(result["samples"], args.warmup_s, args.growth_limit_pct)
    else:
        result = asyncio.run(main_async(args))
    text = json.dumps(result, indent=1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    summary = {k: v for k, v in result.items() if k != "samples"}
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()

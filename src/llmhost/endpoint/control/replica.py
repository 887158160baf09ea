"""One copy of a component: a `llmhost serve` process on 127.0.0.1, pinned to its CPUs, supervised.

The supervisor starts the process, waits for `/ping`, watches it (exit, memory) and restarts it with
an exponential backoff, logging why. `stop` drains it first: no new requests, those in flight finish.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import httpx

from llmhost.endpoint.adapters.spec import AdapterEntry
from llmhost.endpoint.bodies import Modalities, ReplicaStatus, modalities
from llmhost.endpoint.control.memlimit import MemoryLimit, memory_limit
from llmhost.endpoint.control.placement import Allocation
from llmhost.endpoint.control.procs import cpus_allowed, exit_reason, free_port, last_words, preexec, rss_mb
from llmhost.endpoint.internal import HEADER, InternalKey
from llmhost.endpoint.spec import ComponentSpec
from llmhost.settings.serve import SERVE_SPEC
from llmhost.store.model import ResolvedModel
from llmhost.web.auth import ENV_KEY_VARS

log = logging.getLogger("llmhost.endpoint")


def copy_command(
    spec: ComponentSpec,
    model_ref: str,
    port: int,
    threads: int,
    adapters: Sequence[AdapterEntry] | None = None,
    served_name: str | None = None,
    mmproj: str = "",
) -> list[str]:
    """`llmhost serve` for one copy of `spec`: the file's engine settings, the component's name, its
    CPUs' threads, on loopback (the router is the endpoint's only way in); `adapters`: the LoRA adapters
    the component has now (else the file's); `served_name`: the name requests give it (a variant's
    copies answer to their component's, else the component's own); `mmproj`: the projector's local file,
    resolved once for every copy (in place of the file's reference, which may be hf:// or s3://)."""
    options = spec.serve_options()
    if mmproj:
        options["mmproj"] = mmproj
    if adapters is not None:
        options.pop("lora", None)
        options.update({"lora": [a.lora_option for a in adapters]} if adapters else {})
    given = {
        "host": "127.0.0.1",
        "port": port,
        "threads": threads,
        "served_model_name": served_name or spec.name,
        "log_level": "warning",
        "embeddings": spec.embeddings,
        "memory_mb": spec.resources.memory_mb,
        **options,
    }
    return [sys.executable, "-m", "llmhost.cli", "serve", model_ref, *SERVE_SPEC.argv(given)]


class ReplicaState(StrEnum):
    # the process is launched and loading; /ping has not answered 200 yet; it gets no requests
    STARTING = "starting"
    # passed /ping; the router sends it requests
    READY = "ready"
    # leaving on purpose: no new requests, those in flight finish, then it is stopped
    DRAINING = "draining"
    # stopped on purpose (scale in, remove, down); its CPUs and memory are released
    STOPPED = "stopped"
    # died, missed its startup health check or exceeded its memory limit; restarted after a backoff
    FAILED = "failed"


@dataclass
class ReplicaTiming:
    poll_s: float = 0.2  # how often /ping (while starting), exit and RSS are checked
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 30.0
    stable_s: float = 60.0  # ready this long: the next failure starts the backoff over
    stop_grace_s: float = 30.0  # SIGTERM, then SIGKILL after this
    # a ready copy is pinged this often; this many missed answers in a row (each within the timeout)
    # mean it hangs: it is killed and restarted
    ping_interval_s: float = 2.0
    ping_timeout_s: float = 5.0
    ping_misses: int = 3

    def __post_init__(self) -> None:
        for name in ("poll_s", "backoff_initial_s", "backoff_max_s", "ping_interval_s", "ping_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.ping_misses < 1:
            raise ValueError(f"ping_misses must be >= 1, got {self.ping_misses}")


class Replica:
    def __init__(
        self,
        spec: ComponentSpec,
        index: int,
        model: ResolvedModel,
        alloc: Allocation,
        log_dir: Path,
        on_change: Callable[[Replica], None] | None = None,
        timing: ReplicaTiming | None = None,
        internal_key: InternalKey | None = None,
        adapters: Callable[[], list[AdapterEntry]] | None = None,
        served_name: str | None = None,
    ) -> None:
        self.spec = spec
        self.served_name = served_name
        self._adapters = adapters  # the component's LoRA adapters now, which a (re)started copy loads
        self.loaded_adapters: set[str] = set()  # those the copy process has, by name
        # ready, but adapters changed since it started are being loaded on it: not routed to meanwhile
        self.catching_up = False
        self.component = spec.name
        self.index = index
        self.id = f"{spec.name}-{index}"
        self.model = model
        self._internal_key = internal_key
        self.alloc = alloc
        self.log_path = log_dir / f"{self.id}.log"
        self.timing = timing or ReplicaTiming()
        self._on_change = on_change
        self.state = ReplicaState.STARTING
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self.last_reason: str | None = None
        self.outstanding = 0  # requests the router has in flight here
        self.served = 0
        self.ready_at: float | None = None
        self._stopping = False
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._first_start: asyncio.Future[bool] | None = None
        self._memory: MemoryLimit | None = None
        self._oom_kills = 0
        # what the model reads (text, vision, audio), as the copy's /v1/models said once it was ready
        self.modalities: Modalities = None

    # --- views -----------------------------------------------------------------------------------

    @property
    def key(self) -> str:
        """This copy in this process: a restart is a new key (the router may retry it)."""
        return f"{self.id}#{self.restarts}"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None and self.process.poll() is None else None

    @property
    def counts_as_capacity(self) -> bool:
        """Starting, ready or restarting: what the autoscaler counts as a copy."""
        return self.state in (ReplicaState.STARTING, ReplicaState.READY, ReplicaState.FAILED)

    def status(self) -> ReplicaStatus:
        pid = self.pid
        return {
            "copy": self.id,
            "component": self.component,
            "state": self.state.value,
            "pid": pid,
            "port": self.port,
            "cpus": list(self.alloc.cpus),
            "cpu_share": self.alloc.share,
            "cpus_allowed": cpus_allowed(pid) if pid else None,
            "threads": self.alloc.threads,
            "memory_mb": self.alloc.memory_mb,
            "max_memory_mb": self._memory.max_mb if self._memory else self.spec.resources.limit_mb,
            "memory_limit": self._memory.mechanism if self._memory else None,
            "rss_mb": round(rss_mb(pid) or 0.0, 1) if pid else None,
            "outstanding": self.outstanding,
            "served": self.served,
            "restarts": self.restarts,
            "last_reason": self.last_reason,
            "ready_for_s": round(time.monotonic() - self.ready_at, 1) if self.ready_at is not None else None,
            "log": str(self.log_path),
        }

    def set_state(self, state: ReplicaState) -> None:
        """Move to `state`, logged and reported to the owner (the component, its metrics)."""
        if state != self.state:
            log.info("copy %s: %s -> %s", self.id, self.state.value, state.value)
        self.state = state
        if self._on_change is not None:
            self._on_change(self)

    # --- lifecycle -------------------------------------------------------------------------------

    def start(self) -> asyncio.Future[bool]:
        """Begin supervising; the future resolves once the first start passed /ping (True) or not."""
        loop = asyncio.get_running_loop()
        self._first_start = loop.create_future()
        self._task = loop.create_task(self._supervise(), name=f"replica {self.id}")
        return self._first_start

    def _resolve_first(self, ok: bool) -> None:
        if self._first_start is not None and not self._first_start.done():
            self._first_start.set_result(ok)

    def poke(self) -> None:
        """The router could not reach this copy: check it now rather than at the next poll."""
        self._wake.set()

    def _command(self) -> list[str]:
        # the local form of the resolved model: its directory when it has one, so that the copy finds
        # code/inference.py and artifact files as `llmhost serve` of the reference would, and never
        # downloads an s3:// model again; its projector as a file too (found with the model or given)
        adapters = self._adapters() if self._adapters is not None else list(self.spec.adapters)
        self.loaded_adapters = {a.name for a in adapters}
        return copy_command(
            self.spec,
            self.model.serve_ref,
            self.port,
            self.alloc.threads,
            adapters,
            self.served_name,
            mmproj=next(iter(self.model.mmproj), ""),
        )

    def _spawn(self) -> None:
        self.port = free_port()
        if self._memory is None:
            res = self.spec.resources
            self._memory = memory_limit(self.id, res.limit_mb, res.limit_setting)
        self._oom_kills = self._memory.oom_kills()
        procs = self._memory.procs_file
        cmd = self._command()
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false"}
        # a copy never sees the clients' keys (the router checks them): only the endpoint's internal key
        for var in ENV_KEY_VARS:
            env.pop(var, None)
        if self._internal_key is not None:
            env.update(self._internal_key.env())
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as out:
            out.write(f"\n=== {time.strftime('%H:%M:%S')} start: {' '.join(cmd)}\n".encode())
            out.flush()
            self.process = subprocess.Popen(
                cmd,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                preexec_fn=preexec(self.alloc.cpus, procs),
                start_new_session=True,  # a terminal's Ctrl-C reaches the endpoint, which drains
            )
        log.info(
            "copy %s: pid %d on port %d, CPUs %s, %d thread(s)",
            self.id,
            self.process.pid,
            self.port,
            self.alloc.cpu_list,
            self.alloc.threads,
        )

    async def _sleep(self, seconds: float) -> None:
        """Sleep, cut short by poke() or stop()."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)
        self._wake.clear()

    def _died(self) -> str | None:
        assert self.process is not None
        code = self.process.poll()
        if code is None:
            return None
        reason = exit_reason(code)
        said = last_words(self.log_path) if code > 0 else None
        if said:
            reason += f": {said}"
        memory = self._memory
        if memory is not None and memory.oom_kills() > self._oom_kills:
            reason += f" (kernel OOM kill, {memory.mechanism}: over {memory.named} MB)"
        return reason

    def _over_memory(self) -> str | None:
        if self._memory is None or self.process is None:
            return None
        held = self._memory.over(self.process.pid)
        if held is not None:
            return f"RSS less mapped files {held:.0f} MB exceeded {self._memory.named} MB; killed"
        return None

    async def _await_ready(self, client: httpx.AsyncClient) -> str | None:
        """None once /ping answers 200, else why not."""
        timeout = self.spec.startup_health_check_timeout_s
        deadline = time.monotonic() + timeout
        while not self._stopping:
            if (reason := self._died()) is not None:
                return f"{reason} while starting"
            if (reason := self._over_memory()) is not None:
                return reason
            try:
                if (await client.get(f"{self.url}/ping", timeout=2.0)).status_code == 200:
                    return None
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                return f"did not pass /ping within startup_health_check_timeout_s={timeout:g}"
            await self._sleep(self.timing.poll_s)
        return "stopped"

    async def _read_modalities(self, client: httpx.AsyncClient) -> Modalities:
        """What the copy's /v1/models says its model reads; None where it does not answer."""
        headers = {HEADER: self._internal_key.value} if self._internal_key is not None else {}
        try:
            r = await client.get(f"{self.url}/v1/models", headers=headers, timeout=self.timing.ping_timeout_s)
        except httpx.HTTPError:
            return None
        return modalities(r.content)

    async def _watch(self, client: httpx.AsyncClient) -> str | None:
        """Until the copy dies, exceeds its memory or stops answering /ping (the reason), or is being
        stopped (None)."""
        next_ping, misses = time.monotonic() + self.timing.ping_interval_s, 0
        while not self._stopping:
            if (reason := self._died()) is not None:
                return reason
            if (reason := self._over_memory()) is not None:
                return reason
            if time.monotonic() >= next_ping:
                misses = 0 if await self._answers(client) else misses + 1
                next_ping = time.monotonic() + self.timing.ping_interval_s
                if misses >= self.timing.ping_misses:
                    t = self.timing
                    return (
                        f"did not answer /ping {misses} times in a row (every {t.ping_interval_s:g} s, "
                        f"{t.ping_timeout_s:g} s timeout): hung; killed"
                    )
            await self._sleep(self.timing.poll_s)
        return None

    async def _answers(self, client: httpx.AsyncClient) -> bool:
        try:
            r = await client.get(f"{self.url}/ping", timeout=self.timing.ping_timeout_s)
        except httpx.HTTPError:
            return self._stopping or self._died() is not None  # a death is reported by _watch itself
        # 503 while draining or after its engine died: it answers, and exits by itself if it must
        return r.status_code in (200, 503)

    async def _kill(self) -> None:
        """SIGKILL and reap, off the event loop (the router keeps routing meanwhile)."""
        proc = self.process
        if proc is not None and proc.poll() is None:
            proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                await asyncio.to_thread(proc.wait, 10)

    async def _supervise(self) -> None:
        backoff = self.timing.backoff_initial_s
        async with httpx.AsyncClient() as client:
            while not self._stopping:
                self.set_state(ReplicaState.STARTING)
                try:
                    self._spawn()
                except OSError as exc:
                    reason: str | None = f"could not start: {exc}"
                else:
                    reason = await self._await_ready(client)
                    if reason is None and not self._stopping:
                        self.modalities = await self._read_modalities(client)
                        self.ready_at = time.monotonic()
                        self.set_state(ReplicaState.READY)
                        self._resolve_first(True)
                        reason = await self._watch(client)
                if self._stopping:
                    break
                await self._kill()
                self.restarts += 1
                self.last_reason = reason
                if self.ready_at is not None and time.monotonic() - self.ready_at > self.timing.stable_s:
                    backoff = self.timing.backoff_initial_s
                self.ready_at = None
                log.warning(
                    "copy %s: %s; restarting in %.1f s (restart %d)", self.id, reason, backoff, self.restarts
                )
                self.set_state(ReplicaState.FAILED)
                self._resolve_first(False)
                await self._sleep(backoff)
                backoff = min(backoff * 2, self.timing.backoff_max_s)
        self._resolve_first(False)

    async def stop(self, drain_timeout_s: float = 60.0) -> None:
        """Drain (no new requests; wait for those in flight), then SIGTERM, then SIGKILL."""
        if self.state == ReplicaState.STOPPED:
            return
        self._stopping = True
        self._wake.set()
        self.set_state(ReplicaState.DRAINING)
        deadline = time.monotonic() + drain_timeout_s
        while self.outstanding > 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if self.outstanding > 0:
            log.warning(
                "copy %s: %d request(s) still in flight after %.0f s of draining",
                self.id,
                self.outstanding,
                drain_timeout_s,
            )
        proc = self.process
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + self.timing.stop_grace_s
            while proc.poll() is None and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            await self._kill()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._memory is not None:
            self._memory.remove()
        self.set_state(ReplicaState.STOPPED)

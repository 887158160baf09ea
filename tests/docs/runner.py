"""The runner of the docs' examples (convention: docs/contributing/docs.md).

A page's fenced blocks run in order, in one working directory shared by every page (as a user following
the pages in one shell would; `tests/` is linked into it, so repository paths such as
tests/fixtures/gemma_chat.jinja work), against real servers the blocks themselves start. A server block
whose text and port match a running one reuses it: pages share the servers they declare alike. Info strings:

    ```bash / ```sh          run with bash -euo pipefail; curl fails on an HTTP error (a .curlrc)
    ```bash server           a long-running server: started in the background, ready on /ping 200
    ```python                run with the project's Python (in the test's process, fresh globals)
    ```LANG notest           not run; syntax checked (bash -n, compile(), yaml.safe_load)
    ```python file=PATH      written to PATH (compiled, not run); ```yaml file=PATH likewise (parsed)
    ```yaml                  parsed
    anything else            shown only (text, json, console output...)

Addresses are written with the ports 8080-8099 (http://localhost:8080, --port 8081): each is mapped to
a free port of the test's own, and `llmhost serve` without --port listens on 8080's.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[2]
RUN_LANGS = {"bash", "sh", "shell", "python", "py", "yaml", "yml"}
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^`\n]*)$")
DOC_PORT = re.compile(r"(?:(?<=localhost:)|(?<=127\.0\.0\.1:)|(?<=0\.0\.0\.0:)|(?<=--port[ =]))(80[89]\d)\b")
SERVER_PORT = re.compile(r"--port[ =](\d+)")
BLOCK_TIMEOUT_S = 240
READY_TIMEOUT_S = 240
# small engines: the examples ask for a few tokens; options given in a block win over these
SMALL_LIMITS = {
    "LLMHOST_THREADS": "1",
    "MAX_CONCURRENT_REQUESTS": "4",
    "MAX_INPUT_LENGTH": "1024",
    "MAX_TOTAL_TOKENS": "2048",
}


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    words: tuple[str, ...]  # after the language: server, notest
    attrs: dict[str, str]  # file=PATH
    code: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def runs(self) -> bool:
        return self.lang in RUN_LANGS


def blocks(page: Path) -> list[Block]:
    """Every fenced block of a Markdown page, indented ones (in lists) included."""
    out: list[Block] = []
    lines = page.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = m.group("indent"), m.group("fence"), m.group("info").split()
        body: list[str] = []
        j = i + 1
        closing = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        while j < len(lines) and not closing.match(lines[j]):
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j].lstrip())
            j += 1
        lang = info[0].lower() if info else ""
        words = tuple(w for w in info[1:] if "=" not in w)
        attrs = dict(w.split("=", 1) for w in info[1:] if "=" in w)
        out.append(Block(page, i + 1, lang, words, attrs, "\n".join(body) + "\n"))
        i = j + 1
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    code: str
    port: int
    process: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=40)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


@dataclass
class Runner:
    """One per test session: the port map and the servers the pages started (shared between pages)."""

    tmp: Path
    ports: dict[int, int] = field(default_factory=dict)
    servers: dict[int, Server] = field(default_factory=dict)  # by documented port

    def port(self, documented: int) -> int:
        if documented not in self.ports:
            self.ports[documented] = free_port()
        return self.ports[documented]

    def localize(self, code: str) -> str:
        return DOC_PORT.sub(lambda m: str(self.port(int(m.group(1)))), code)

    def env(self) -> dict[str, str]:
        curl = self.tmp / "curl"
        curl.mkdir(exist_ok=True)
        (curl / ".curlrc").write_text("fail-with-body\nsilent\nshow-error\nmax-time = 200\n")
        path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
        return {
            **os.environ,
            **SMALL_LIMITS,
            "PATH": path,
            "CURL_HOME": str(curl),
            "PYTHONUNBUFFERED": "1",
            "SAGEMAKER_BIND_TO_PORT": str(self.port(8080)),
        }

    def workdir(self) -> Path:
        work = self.tmp / "work"
        if not work.exists():
            work.mkdir(parents=True)
            (work / "tests").symlink_to(ROOT / "tests")
        return work

    def run_page(self, page: Path) -> int:
        """Run every block of a page; the number of blocks run or checked."""
        done = 0
        for block in blocks(page):
            if block.runs:
                self.run(block, self.workdir())
                done += 1
        return done

    def run(self, block: Block, cwd: Path) -> None:
        lang = {"sh": "bash", "shell": "bash", "py": "python", "yml": "yaml"}.get(block.lang, block.lang)
        if lang == "yaml":
            yaml.safe_load(block.code)
        elif lang == "python":
            compile(block.code, block.where, "exec")
        if "file" in block.attrs:
            target = cwd / block.attrs["file"]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.code)
            return
        if "notest" in block.words or lang == "yaml":
            if lang == "bash":
                self._check(["bash", "-n"], block, cwd, block.code)
            return
        code = self.localize(block.code)
        if lang == "bash" and "server" in block.words:
            self.serve(block, code, cwd)
        elif lang == "bash":
            self._check(["bash", "-euo", "pipefail"], block, cwd, code)
        else:
            self._exec(block, cwd, code)

    def _exec(self, block: Block, cwd: Path, code: str) -> None:
        """A Python block runs as a script would (`__main__`, fresh globals, the working directory),
        in this process as doctest and sybil run theirs: the client libraries are imported once, not
        once per block, which keeps the examples within make test's budget on 2 cores."""
        out = io.StringIO()
        here = Path.cwd()
        os.chdir(cwd)
        try:
            with contextlib.redirect_stdout(out):
                exec(compile(code, block.where, "exec"), {"__name__": "__main__"})
        except BaseException as exc:  # an example's failure of any kind is the test's
            raise AssertionError(
                f"{block.where}: {type(exc).__name__}: {exc}\n--- block\n{code}\n"
                f"--- stdout\n{out.getvalue()[-3000:]}"
            ) from exc
        finally:
            os.chdir(here)

    def _check(self, argv: list[str], block: Block, cwd: Path, code: str) -> None:
        try:
            r = subprocess.run(
                argv,
                input=code,
                cwd=cwd,
                env=self.env(),
                capture_output=True,
                text=True,
                timeout=BLOCK_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"{block.where}: still running after {BLOCK_TIMEOUT_S} s:\n{code}") from exc
        if r.returncode != 0:
            raise AssertionError(
                f"{block.where}: exit {r.returncode}\n--- block\n{code}\n--- stdout\n"
                f"{r.stdout[-3000:]}\n--- stderr\n{r.stderr[-3000:]}"
            )

    def serve(self, block: Block, code: str, cwd: Path) -> None:
        """Start the block's server unless the same one already runs on its port; wait for /ping."""
        m = SERVER_PORT.search(block.code)
        documented = int(m.group(1)) if m else 8080
        running = self.servers.get(documented)
        if running is not None and running.code == code and running.process.poll() is None:
            return
        if running is not None:
            running.stop()
        log = self.tmp / f"server-{documented}-{len(self.servers)}-{block.line}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                ["bash", "-euo", "pipefail", "-c", code],
                cwd=cwd,
                env=self.env(),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        server = self.servers[documented] = Server(code, self.port(documented), proc, log)
        self._wait_ready(block, server)

    def _wait_ready(self, block: Block, server: Server) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        url = f"http://127.0.0.1:{server.port}/ping"
        while time.monotonic() < deadline:
            if server.process.poll() is not None:
                raise AssertionError(
                    f"{block.where}: the server exited with {server.process.returncode}:\n"
                    f"{server.log.read_text()[-4000:]}"
                )
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.25)
        server.stop()
        raise AssertionError(
            f"{block.where}: no /ping 200 within {READY_TIMEOUT_S} s:\n{server.log.read_text()[-4000:]}"
        )

    def close(self) -> None:
        for server in self.servers.values():
            server.stop()


def pages() -> list[Path]:
    """README.md, then every page under docs/, in the site's file order."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

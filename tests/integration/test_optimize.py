"""`llmhost optimize`: the default model's perplexity, and an AOT artifact served by `llmhost serve DIR`.

One engine thread throughout (as the servers of the tests have): two threads of ggml spin on their barrier,
and on a host whose two cores also run other test files the perplexity test took 169 s for 2 x 384 tokens.
The artifact is built from a tiny random-weight Gemma 3 (tests/tinymodels.py: sliding-window layers as the
default model's): what is tested is the saved prefix restored on the first request, the same for any GGUF;
the default model cost two builds (four timed loads, a quality evaluation) and two server loads."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from llmhost.optimize.quality import evaluate
from llmhost.store import resolve_model
from tests.integration.conftest import CHAT_TEMPLATE, Server, start_server, stop_server
from tests.tinymodels import build_tiny_gguf

SYSTEM = (
    "You are the guide of a small lighthouse museum on a windy coast. Answer visitors' questions "
    "about the lighthouse, its keepers, the lamp, the lens and the storms in two short sentences, "
    "politely and precisely, and never invent dates or names you do not know."
)
QUESTION = "How far can the light be seen?"


def optimize(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "llmhost.cli", "optimize", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_perplexity_of_the_default_model_is_finite_and_stable(tmp_path: Path) -> None:
    model = resolve_model("default")
    out = tmp_path / "quality.json"
    optimize("eval", str(model), "--out", str(out), "--max-tokens", "384", "--threads", "1")
    from_cli = json.loads(out.read_text())["perplexity"]
    in_process = evaluate(model, max_tokens=384, threads=1)["perplexity"]
    assert from_cli["tokens_scored"] == in_process["tokens_scored"] == 384
    assert math.isfinite(from_cli["perplexity"]) and 1 < from_cli["perplexity"] < 1000
    assert in_process["perplexity"] == pytest.approx(from_cli["perplexity"], rel=1e-6)


@pytest.fixture(scope="module")
def artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("aot")
    prompt_file = tmp / "system.txt"
    prompt_file.write_text(SYSTEM)
    out = tmp / "artifact"
    model = build_tiny_gguf(tmp / "tiny-gemma3.gguf", arch="gemma3")
    args = ["artifact", str(model), "--out", str(out), "--system-prompt-file", str(prompt_file)]
    args += ["--chat-template", str(CHAT_TEMPLATE), "--threads", "1"]
    first = json.loads(optimize(*args, "--eval-max-tokens", "64").stdout.splitlines()[-1])
    assert first["reused"] is False
    again = json.loads(optimize(*args, "--eval-max-tokens", "64").stdout.splitlines()[-1])
    assert again["reused"] is True and again["key"] == first["key"]
    return out


def chat(server: Server) -> dict[str, Any]:
    body = {
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}],
        "max_tokens": 8,
        "temperature": 0,
    }
    r = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    result: dict[str, Any] = r.json()
    return result


@pytest.fixture
def served(artifact: Path, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Server]:
    target = artifact if request.param == "artifact" else artifact / "model.gguf"
    server = start_server(
        tmp_path,
        str(target),
        "--max-concurrent",
        "2",
        "--max-input-tokens",
        "512",
        "--max-total-tokens",
        "1024",
        "--chat-template",
        str(CHAT_TEMPLATE),
    )
    yield server
    stop_server(server)


@pytest.mark.parametrize("served", ["cold", "artifact"], indirect=True)
def test_first_request_of_an_artifact_prefills_only_the_question(artifact: Path, served: Server) -> None:
    state = json.loads((artifact / "artifact.json").read_text())["prefix_state"]
    first = chat(served)
    timings = first["timings"]
    n_prompt = first["usage"]["prompt_tokens"]
    if "model.gguf" in " ".join(map(str, served.process.args)):  # type: ignore[arg-type]
        assert timings["cache_n"] == 0 and timings["prompt_n"] == n_prompt
    else:
        assert "restored a cached prefix" in served.log.read_text()
        assert timings["cache_n"] >= state["tokens"] - 1
        assert timings["prompt_n"] == n_prompt - timings["cache_n"]
        assert timings["prompt_n"] < n_prompt / 2

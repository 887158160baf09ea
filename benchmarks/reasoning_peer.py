"""A thinking model's thought split from its answer: llmhost serve against llama.cpp's llama-server, on
the same GGUF and chat template, each asked the same requests through the official `openai` client.

The model is tests/integration/thinking_model.py's scripted Qwen3 (Qwen3's real template; greedy output
`<think>I think</think>\\n\\nHello`), so both servers see the same tokens and only their parsing differs.
Each case records what each server answered (reasoning_content and content, streamed deltas in order)
and whether the two agree. llama-server runs with `--jinja --reasoning-format deepseek` (what it needs to
split `<think>`); llmhost with its defaults (the format taken from the template).

    python benchmarks/reasoning_peer.py --llama-server /path/to/llama-server
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.integration.thinking_model import build_thinking_model

HI: Any = [{"role": "user", "content": "hi"}]
GREEDY: dict[str, Any] = {"model": "m", "messages": HI, "temperature": 0, "max_tokens": 40}
OFF = {"enable_thinking": False}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def commands(model: Path, llama_server: str, ports: dict[str, int]) -> dict[str, list[str]]:
    return {
        "llmhost": [
            sys.executable,
            "-m",
            "llmhost.cli",
            "serve",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            str(ports["llmhost"]),
            "--max-concurrent",
            "1",
            "--max-total-tokens",
            "1024",
            "--max-input-tokens",
            "768",
            "--log-level",
            "warning",
        ],
        "llama-server": [
            llama_server,
            "-m",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            str(ports["llama-server"]),
            "-c",
            "1024",
            "-np",
            "1",
            "--jinja",
            "--reasoning-format",
            "deepseek",
            "--no-webui",
        ],
    }


def wait_ready(url: str, proc: subprocess.Popen[bytes], path: str) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url} exited with {proc.returncode}")
        try:
            if httpx.get(url + path, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} not ready")


def plain(client: openai.OpenAI, **extra: Any) -> dict[str, Any]:
    message = client.chat.completions.create(**GREEDY, extra_body=extra or None).choices[0].message
    return {
        "reasoning_content": getattr(message, "reasoning_content", None) or None,
        "content": message.content,
    }


def streamed(client: openai.OpenAI, **extra: Any) -> dict[str, Any]:
    """The deltas' text by field, and the order the fields came in (runs of one field merged)."""
    reasoning, content, order = [], [], []
    for chunk in client.chat.completions.create(**GREEDY, stream=True, extra_body=extra or None):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        for field, into in (("reasoning_content", reasoning), ("content", content)):
            text = getattr(delta, field, None)
            if text:
                into.append(text)
                if not order or order[-1] != field:
                    order.append(field)
    return {"reasoning_content": "".join(reasoning) or None, "content": "".join(content), "order": order}


def messages(url: str) -> dict[str, Any]:
    """Anthropic Messages with thinking on, through the `anthropic` client: the blocks in order."""
    client = anthropic.Anthropic(base_url=url, api_key="unused", timeout=60, max_retries=0)
    try:
        # the scripted model's next token has all the probability: no temperature needed
        out = client.messages.create(
            model="m", max_tokens=512, messages=HI, thinking={"type": "enabled", "budget_tokens": 256}
        )
    except anthropic.APIError as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    blocks = [[b.type, getattr(b, "thinking", None) or getattr(b, "text", None)] for b in out.content]
    return {"blocks": blocks}


CASES: dict[str, Callable[[openai.OpenAI], dict[str, Any]]] = {
    "chat": lambda c: plain(c),
    "chat stream": lambda c: streamed(c),
    "thinking off (chat_template_kwargs)": lambda c: plain(c, chat_template_kwargs=OFF),
    "thinking off, streamed": lambda c: streamed(c, chat_template_kwargs=OFF),
}


def run_case(case: Callable[[openai.OpenAI], dict[str, Any]], client: openai.OpenAI) -> dict[str, Any]:
    try:
        return case(client)
    except openai.APIError as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llama-server", required=True, help="path of llama.cpp's llama-server binary")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/reasoning_peer.json"))
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    model = build_thinking_model(tmp / "qwen3-thinking.gguf")
    ports = {name: free_port() for name in ("llmhost", "llama-server")}
    procs = {
        name: subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=(tmp / f"{name}.log").open("wb"))
        for name, cmd in commands(model, args.llama_server, ports).items()
    }
    try:
        answers: dict[str, dict[str, Any]] = {}
        for name, proc in procs.items():
            url = f"http://127.0.0.1:{ports[name]}"
            wait_ready(url, proc, "/ping" if name == "llmhost" else "/health")
            client = openai.OpenAI(base_url=url + "/v1", api_key="unused", timeout=60, max_retries=0)
            answers[name] = {case: run_case(fn, client) for case, fn in CASES.items()}
            answers[name]["anthropic messages, thinking on"] = messages(url)
    finally:
        for proc in procs.values():
            proc.terminate()
            proc.wait(timeout=30)
    version = subprocess.run([args.llama_server, "--version"], capture_output=True, text=True)
    ours, theirs = answers["llmhost"], answers["llama-server"]
    rows = {
        case: {"llmhost": ours[case], "llama-server": theirs[case], "same": ours[case] == theirs[case]}
        for case in ours
    }
    result = {
        "model": "tests/integration/thinking_model.py (scripted Qwen3, Qwen3's template)",
        "llama_server": (version.stdout + version.stderr).strip().splitlines()[-2:],
        "cases": rows,
        "all_same": all(r["same"] for r in rows.values()),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

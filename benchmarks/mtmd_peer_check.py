"""The tiny multimodal pairs (tests/tinymmproj.py) in llama.cpp's llama-server against the same pairs
driven in-process through llama-cpp-python's libmtmd (tests/mtmd_session.py): greedy tokens for the
same image, the same audio clip and the same prompt must agree.

For each pair, llama-server runs with `-m model.gguf --mmproj mmproj.gguf` and gets one OpenAI chat
request (temperature 0, logprobs): the image as an `image_url` data URI, the clip as an `input_audio`
WAV. Its own `/apply-template` renders the same messages, so the in-process run tokenizes exactly the
prompt llama-server did (its per-request media marker swapped for libmtmd's default one). The result
lists both sides' token ids and the first step's top log-probabilities.

    python benchmarks/mtmd_peer_check.py --llama-server /path/to/llama-server
"""

from __future__ import annotations

import argparse
import base64
import json
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.mtmd_session import MtmdSession
from tests.tinymmproj import (
    Pair,
    build_audio_pair,
    build_mrope_pair,
    build_vision_pair,
    png,
    random_pixels,
    tone,
    wav,
)

N_PREDICT = 8


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"llama-server exited with {proc.returncode}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} not ready")


def ask_peer(llama_server: str, pair: Pair, messages: list[dict[str, Any]], log: Path) -> dict[str, Any]:
    """llama-server's rendered prompt and its greedy answer (token ids and first-step top logprobs)."""
    port = free_port()
    cmd = [llama_server, "-m", str(pair.model), "--mmproj", str(pair.mmproj), "--host", "127.0.0.1"]
    cmd += ["--port", str(port), "-c", "2048", "-np", "1", "-t", "1", "--no-webui"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log.open("wb"))
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc)
        prompt = httpx.post(url + "/apply-template", json={"messages": messages}, timeout=60).json()["prompt"]
        body = {
            "messages": messages,
            "temperature": 0,
            "max_tokens": N_PREDICT,
            "logprobs": True,
            "top_logprobs": 3,
        }
        answer = httpx.post(url + "/v1/chat/completions", json=body, timeout=120).json()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    steps = answer["choices"][0]["logprobs"]["content"]
    return {
        "prompt": prompt,
        "tokens": [s["id"] for s in steps],
        "text": answer["choices"][0]["message"]["content"],
        "first_top": [[t["id"], round(t["logprob"], 4)] for t in steps[0]["top_logprobs"]],
        "prompt_tokens": answer["usage"]["prompt_tokens"],
    }


def run_here(pair: Pair, prompt: str, media: bytes) -> dict[str, Any]:
    with MtmdSession(pair.model, pair.mmproj) as session:
        # llama-server marks each request's media with a random marker of its own
        ours = re.sub(r"<__media_[A-Za-z0-9]+__>", session.marker, prompt)
        bitmap = session.media(media)
        try:
            run = session.generate(ours, [bitmap], N_PREDICT)
        finally:
            session.free([bitmap])
        return {
            "tokens": list(run.tokens),
            "text": session.detokenize(run.tokens),
            "first_top": [[i, round(lp, 4)] for i, lp in run.top[0]],
            "chunks": [[c.kind, c.n_tokens, c.n_pos] for c in run.chunks],
            "prompt_tokens": sum(c.n_tokens for c in run.chunks),
        }


def compare(
    llama_server: str, name: str, pair: Pair, media: bytes, part: dict[str, Any], tmp: Path
) -> dict[str, Any]:
    parts = {
        "vision": [{"type": "text", "text": "What is in "}, part, {"type": "text", "text": "?"}],
        "mrope": [{"type": "text", "text": "What is in "}, part, {"type": "text", "text": "?"}],
        "audio": [part, {"type": "text", "text": "What is this sound?"}],
    }[name]
    peer = ask_peer(llama_server, pair, [{"role": "user", "content": parts}], tmp / f"{name}.log")
    here = run_here(pair, peer["prompt"], media)
    return {
        "llama_server": peer,
        "in_process": here,
        "same_tokens": peer["tokens"] == here["tokens"],
        "same_prompt_tokens": peer["prompt_tokens"] == here["prompt_tokens"],
        "first_top_max_abs_diff": max(
            abs(a[1] - b[1]) for a, b in zip(peer["first_top"], here["first_top"], strict=True)
        ),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llama-server", required=True, help="path of llama.cpp's llama-server binary")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/mtmd_peer_check.json"))
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    image = png(random_pixels())
    clip = wav(tone())
    image_part = {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64," + base64.b64encode(image).decode()},
    }
    audio_part = {
        "type": "input_audio",
        "input_audio": {"data": base64.b64encode(clip).decode(), "format": "wav"},
    }
    cases = {
        "vision": compare(
            args.llama_server, "vision", build_vision_pair(tmp / "vision"), image, image_part, tmp
        ),
        "mrope": compare(args.llama_server, "mrope", build_mrope_pair(tmp / "mrope"), image, image_part, tmp),
        "audio": compare(args.llama_server, "audio", build_audio_pair(tmp / "audio"), clip, audio_part, tmp),
    }
    version = subprocess.run([args.llama_server, "--version"], capture_output=True, text=True)
    import llama_cpp

    result = {
        "pairs": (
            "tests/tinymmproj.py: gemma3 projector + Gemma 3 text; qwen2vl_merger projector + Qwen2-VL "
            "text (M-RoPE); qwen2a projector + Qwen2 text"
        ),
        "llama_server": (version.stdout + version.stderr).strip().splitlines()[-2:],
        "llama_cpp_python": llama_cpp.__version__,
        "cases": cases,
        "all_same": all(c["same_tokens"] and c["same_prompt_tokens"] for c in cases.values()),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

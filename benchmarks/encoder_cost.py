"""What a projector's encoder costs on CPU: a random-weight projector at a published shape (Gemma 3's
SigLIP: 896 px in 14 px patches, 27 layers of width 1152, 16 heads, FFN 4304, pooled to 256
embeddings; Qwen2-Audio's Whisper-large-v3 encoder: 32 layers of width 1280, 20 heads, FFN 5120, 128
mel bins, 750 embeddings a 30 s window), built by tests/tinymmproj.py with its projection set to the
text model's width (libmtmd refuses another), served by `llmhost serve MODEL --mmproj` beside the
default model (Gemma 3 270M, width 640).

For each modality and each `--threads` count, one server, and:

- `encode_ms`: the server's `timings.encode_ms` for one image (or clip) a request, a distinct one each
  round so that no cache answers it (a warm-up request first, excluded);
- `first_token_ms`: the client's time from sending a streamed chat request (2 new tokens) to its first
  token, with one image (clip) and with the same text alone; `ttft_ms`: the server's own;
- `rss_mb_idle` (started, nothing asked) and `rss_mb_after` (after the rounds: the encoder's compute
  buffers included) of the server's processes, beside those of a server of the text model alone.

Each figure is the median over `--rounds`; the JSON keeps every round's too. Random weights cost what
trained ones do (the same matrices, in F16 as llama.cpp's converters write them); the answers are
noise. An image at the full shape is about 5.4 TFLOP of encoder work and a clip about 2.3: at the
~20 GFLOP/s a thread of a 2-core Xeon gave in a 1-layer check, some 4 minutes an image and 2 a clip on
one thread, so the default run (3 rounds and a warm-up, 1 and 2 threads, both modalities) takes
about 45 minutes there; `--layers 1 --image-size 224 --rounds 2` checks that it works in 4.

    PYTHONPATH=src python benchmarks/encoder_cost.py --out benchmarks/results/encoder_cost.json
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import gguf
import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llmhost.bench.load.images import ImageSettings  # noqa: E402
from llmhost.store.resolve import resolve  # noqa: E402
from tests.integration.conftest import free_port  # noqa: E402
from tests.tinymmproj import (  # noqa: E402
    AUDIO_TOKENS,
    CHAT_TEMPLATE,
    GEMMA3_SIGLIP,
    WHISPER_LARGE,
    AudioShape,
    EncoderShape,
    VisionShape,
    build_gemma3_mmproj,
    build_qwen2a_mmproj,
    tone,
    wav,
)

MODALITIES = ("vision", "audio")
QUESTION = "Describe what you see or hear, round {i}."
CLIP_SECONDS = 10.0  # libmtmd pads a clip to a 30 s window: its length changes nothing encoded
START_TIMEOUT_S = 600.0  # loading a 1.3 GB projector on a slow disk


def text_width(model: Path) -> int:
    """The text model's embedding width (its GGUF's `ARCH.embedding_length`)."""
    fields = gguf.GGUFReader(model).fields
    arch = fields["general.architecture"].contents()
    return int(fields[f"{arch}.embedding_length"].contents())


@dataclass
class Server:
    """One `llmhost serve` process."""

    url: str
    proc: subprocess.Popen[bytes]

    def rss_mb(self) -> float:
        """The resident memory of the server and its children."""
        root = psutil.Process(self.proc.pid)
        return sum(p.memory_info().rss for p in (root, *root.children(recursive=True))) / 2**20


@contextmanager
def serve(model: Path, mmproj: Path | None, threads: int, log: Path) -> Iterator[Server]:
    # the default model's GGUF has no chat template: Gemma's turns, image and audio parts included
    template = log.with_suffix(".jinja")
    template.write_text(CHAT_TEMPLATE)
    port = free_port()
    cmd = [sys.executable, "-m", "llmhost.cli", "serve", str(model), "--host", "127.0.0.1"]
    cmd += ["--port", str(port), "--threads", str(threads), "--chat-template", str(template)]
    cmd += ["--mmproj", str(mmproj)] if mmproj is not None else []
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    server = Server(f"http://127.0.0.1:{port}", proc)
    try:
        wait_ready(server, log)
        yield server
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def wait_ready(server: Server, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise RuntimeError(
                f"llmhost serve exited with {server.proc.returncode}:\n{log.read_text()[-3000:]}"
            )
        try:
            if httpx.get(server.url + "/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{server.url} not ready in {START_TIMEOUT_S:g} s")


def ask(server: Server, content: list[dict[str, Any]]) -> dict[str, float]:
    """One streamed chat request: the client's time to its first token, and the server's timings."""
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": content}],
        "max_tokens": 2,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    first: float | None = None
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    with httpx.stream("POST", server.url + "/v1/chat/completions", json=body, timeout=1800) as r:
        if r.status_code != 200:
            raise RuntimeError(f"{r.status_code}: {r.read()[:500]!r}")
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if first is None and any((c.get("delta") or {}).get("content") for c in chunk.get("choices", [])):
                first = time.perf_counter() - t0
            timings = chunk.get("timings") or timings
    if first is None or not timings:
        raise RuntimeError("the stream carried no token or no timings")
    return {"first_token_ms": 1000 * first, "encode_ms": timings["encode_ms"], "ttft_ms": timings["ttft_ms"]}


def medium(modality: str, shape: EncoderShape, i: int) -> dict[str, Any]:
    """Round `i`'s image (or clip): a distinct one each round, so that no cache holds it."""
    if modality == "vision":
        assert isinstance(shape, VisionShape)
        size = (shape.image_size, shape.image_size)
        (b64,) = ImageSettings(1, size, seed=i).for_request(0)
        return {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{b64}"}}
    clip = wav(tone(hz=220.0 + 20 * i, seconds=CLIP_SECONDS))
    return {"type": "input_audio", "input_audio": {"data": base64.b64encode(clip).decode(), "format": "wav"}}


def median(rounds: list[dict[str, float]], key: str) -> float:
    return round(statistics.median(r[key] for r in rounds), 1)


def measure(server: Server, modality: str, shape: EncoderShape, rounds: int) -> dict[str, Any]:
    """`rounds` requests with a medium and as many with the text alone, a warm-up of each first."""
    idle = server.rss_mb()
    ask(server, [medium(modality, shape, -1), {"type": "text", "text": QUESTION.format(i=-1)}])
    ask(server, [{"type": "text", "text": QUESTION.format(i=-2)}])
    with_medium, text_only = [], []
    for i in range(rounds):
        question = {"type": "text", "text": QUESTION.format(i=i)}
        with_medium.append(ask(server, [medium(modality, shape, i), question]))
        # another round's words: the prefix cache holds nothing of it past the turn's header
        text_only.append(ask(server, [{"type": "text", "text": QUESTION.format(i=rounds + i)}]))
        print(f"  round {i + 1}/{rounds}: encode {with_medium[-1]['encode_ms']:.0f} ms", flush=True)
    return {
        "encode_ms": median(with_medium, "encode_ms"),
        "first_token_ms_with_medium": median(with_medium, "first_token_ms"),
        "first_token_ms_text_only": median(text_only, "first_token_ms"),
        "ttft_ms_with_medium": median(with_medium, "ttft_ms"),
        "ttft_ms_text_only": median(text_only, "ttft_ms"),
        "rss_mb_idle": round(idle, 1),
        "rss_mb_after": round(server.rss_mb(), 1),
        "rounds": {"with_medium": with_medium, "text_only": text_only},
    }


def text_alone(model: Path, threads: int, tmp: Path) -> dict[str, float]:
    """The RSS of a server of the text model alone, idle and after a few requests."""
    with serve(model, None, threads, tmp / "text-only.log") as server:
        idle = server.rss_mb()
        for i in range(3):
            ask(server, [{"type": "text", "text": QUESTION.format(i=i)}])
        return {"rss_mb_idle": round(idle, 1), "rss_mb_after": round(server.rss_mb(), 1)}


def shapes(args: argparse.Namespace, width: int) -> dict[str, EncoderShape]:
    """The published shapes, projected to the text model's width (and cut down for a quick check)."""
    vision: VisionShape = replace(GEMMA3_SIGLIP, projection=width)
    audio: AudioShape = replace(WHISPER_LARGE, projection=width)
    if args.image_size:
        vision = replace(vision, image_size=args.image_size)
    if args.layers:
        vision, audio = replace(vision, layers=args.layers), replace(audio, layers=args.layers)
    return {"vision": vision, "audio": audio}


def write_projector(shape: EncoderShape, path: Path) -> Path:
    if isinstance(shape, VisionShape):
        return build_gemma3_mmproj(path, 0, shape)
    assert isinstance(shape, AudioShape)
    return build_qwen2a_mmproj(path, 0, shape)


def run(args: argparse.Namespace) -> dict[str, Any]:
    model = resolve(args.model).gguf
    width = text_width(model)
    out: dict[str, Any] = {
        "model": model.name,
        "text_width": width,
        "rounds": args.rounds,
        "machine": {"cpus": os.cpu_count(), "cpu": cpu_name(), "python": platform.python_version()},
    }
    with tempfile.TemporaryDirectory(prefix="llmhost-encoder-cost-") as name:
        tmp = Path(name)
        out["text_only"] = text_alone(model, args.threads[0], tmp)
        for modality, shape in shapes(args, width).items():
            if modality not in args.modalities:
                continue
            print(f"{modality}: writing the projector ({shape})", flush=True)
            mmproj = write_projector(shape, tmp / f"{modality}.gguf")
            tokens = shape.tokens if isinstance(shape, VisionShape) else AUDIO_TOKENS
            figures: dict[str, Any] = {
                "shape": asdict(shape),
                "embeddings_per_medium": tokens,
                "mmproj_mb": round(mmproj.stat().st_size / 2**20, 1),
                "by_threads": {},
            }
            for threads in args.threads:
                print(f"{modality}: {threads} thread(s)", flush=True)
                with serve(model, mmproj, threads, tmp / f"{modality}-{threads}.log") as server:
                    figures["by_threads"][str(threads)] = measure(server, modality, shape, args.rounds)
            mmproj.unlink()
            out[modality] = figures
    return out


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="default", help="the text model (any `llmhost serve` reference)")
    ap.add_argument("--threads", default="1,2", help="engine thread counts, comma-separated")
    ap.add_argument("--rounds", type=int, default=3, help="measured requests of each kind")
    ap.add_argument("--modalities", default=",".join(MODALITIES), help="vision, audio or both")
    ap.add_argument(
        "--layers", type=int, default=0, help="encoder layers instead of the shape's (a quick check)"
    )
    ap.add_argument("--image-size", type=int, default=0, help="image side instead of 896 (a quick check)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "encoder_cost.json")
    args = ap.parse_args()
    args.threads = [int(t) for t in args.threads.split(",")]
    args.modalities = [m.strip() for m in args.modalities.split(",")]
    unknown = set(args.modalities) - set(MODALITIES)
    if unknown:
        ap.error(f"--modalities: vision or audio, got {', '.join(sorted(unknown))}")
    result = run(args)
    text = json.dumps(result, indent=1)
    args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()

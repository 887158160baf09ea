"""Cold start from S3: `llmhost serve s3://...` vs a plain boto3 download then `llmhost serve FILE`.

An S3-compatible server (moto's standalone server, its own process) on 127.0.0.1 holds the default
model under a prefix. Each round, one after the other on the same machine:

- first start: `llmhost serve s3://models/gemma/` with an empty cache, process start to /ping 200
  (ranged parallel download + verification + model load);
- second start: the same command again on the now-filled cache (a List, no GET of the model);
- baseline: boto3 `download_file` of the same object to a fresh directory, then `llmhost serve FILE`,
  timed from the start of the download to /ping 200.

Loopback S3 measures llmhost's overheads (ranges, MD5 check, rename), not a network.
Writes benchmarks/results/s3_cold_start.json.

    .venv/bin/python benchmarks/s3_cold_start.py --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import boto3
import httpx

from llmhost.store import resolve_model

STARTUP_TIMEOUT_S = 300
BUCKET, KEY = "models", "gemma/model.gguf"
CREDS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_moto() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    cmd = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            httpx.get(url, timeout=1)
            return proc, url
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("moto server did not start")


def s3_client(url: str) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
    )


def serve_until_ping(model: str, env: dict[str, str], log: Path) -> float:
    """Seconds from process start to /ping 200; the server is stopped afterwards."""
    port = free_port()
    cmd = [sys.executable, "-m", "llmhost.cli", "serve", "--host", "127.0.0.1", "--port", str(port), model]
    t0 = time.perf_counter()
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        while time.perf_counter() - t0 < STARTUP_TIMEOUT_S:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/ping", timeout=1).status_code == 200:
                    return time.perf_counter() - t0
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"no /ping 200 within {STARTUP_TIMEOUT_S} s")
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def one_round(url: str, work: Path, env: dict[str, str]) -> dict[str, float]:
    cache = work / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    s3_env = {**env, "LLMHOST_CACHE": str(cache), "AWS_ENDPOINT_URL": url}
    first = serve_until_ping(f"s3://{BUCKET}/gemma/", s3_env, work / "first.log")
    second = serve_until_ping(f"s3://{BUCKET}/gemma/", s3_env, work / "second.log")
    local = work / "plain" / "model.gguf"
    shutil.rmtree(local.parent, ignore_errors=True)
    local.parent.mkdir(parents=True)
    t0 = time.perf_counter()
    s3_client(url).download_file(BUCKET, KEY, str(local))
    download_s = time.perf_counter() - t0
    serve_s = serve_until_ping(str(local), env, work / "plain.log")
    return {
        "llmhost_s3_first_start_s": first,
        "llmhost_s3_cached_start_s": second,
        "boto3_download_s": download_s,
        "local_serve_start_s": serve_s,
        "boto3_download_then_local_serve_s": download_s + serve_s,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "s3_cold_start.json")
    args = ap.parse_args()
    model = resolve_model("default")
    env = {**os.environ, **CREDS}
    env.pop("LLMHOST_S3_ENDPOINT_URL", None)
    moto, url = start_moto()
    try:
        s3_client(url).create_bucket(Bucket=BUCKET)
        s3_client(url).upload_file(str(model), BUCKET, KEY)
        with tempfile.TemporaryDirectory(prefix="llmhost-s3-bench-") as tmp:
            rounds = [one_round(url, Path(tmp), env) for _ in range(args.rounds)]
    finally:
        moto.terminate()
        moto.wait(timeout=30)
    medians = {k: round(statistics.median(r[k] for r in rounds), 3) for k in rounds[0]}
    result = {
        "model": model.name,
        "model_bytes": model.stat().st_size,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "s3_server": "moto standalone server, 127.0.0.1",
        "rounds": [{k: round(v, 3) for k, v in r.items()} for r in rounds],
        "median": medians,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

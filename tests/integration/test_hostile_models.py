"""Hostile model files and settings under `llmhost serve`, `endpoint up` and `--models-dir`: each refused
with the file (or the settings) and the reason; a server exits non-zero rather than answering 503
forever; an endpoint keeps serving its other models. Never an abort (issue #43) nor a segfault."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from llmhost.store.resolve import default_model_path
from tests.hostile_gguf import set_string, truncate
from tests.integration.conftest import SMOLLM2, free_port
from tests.integration.endpoint_helpers import ENGINE, Endpoint, start_endpoint, stop_endpoint, up_command

# a template that writes nothing and never ends: 10^10 turns of the sandbox's largest range
LOOPING = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
ESCAPING = "{{ messages.__class__.__mro__[1].__subclasses__() }}"


def serve(model: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """`llmhost serve` until it exits by itself (a server that stays up fails the test by timeout)."""
    cmd = [
        sys.executable,
        "-m",
        "llmhost.cli",
        "serve",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(free_port()),
        "--threads",
        "1",
        "--max-total-tokens",
        "512",
        "--max-input-tokens",
        "256",
        *args,
    ]
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, "PYTHONUNBUFFERED": "1"}
    )


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("hostile")
    garbage = tmp / "garbage.gguf"
    garbage.write_bytes(b"GGUF" + os.urandom(4096))
    looping = shutil.copyfile(SMOLLM2, tmp / "looping.gguf")
    escaping = shutil.copyfile(SMOLLM2, tmp / "escaping.gguf")
    return {
        "truncated": truncate(default_model_path(), tmp / "truncated.gguf", 0.5),
        "garbage": garbage,
        "looping": set_string(looping, b"tokenizer.chat_template", LOOPING),
        "escaping": set_string(escaping, b"tokenizer.chat_template", ESCAPING),
    }


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("truncated", "lies past the end of the file"),
        ("garbage", "GGUF version"),
        ("looping", "chat template ran past its time limit"),
        ("escaping", "chat template tried to leave its sandbox"),
    ],
)
def test_serve_exits_non_zero_naming_the_file_and_the_reason(
    files: dict[str, Path], name: str, reason: str
) -> None:
    out = serve(files[name])
    text = out.stdout + out.stderr
    assert out.returncode == 1, text
    assert str(files[name]) in text and reason in text, text
    assert "Traceback" not in text and "GGML_ASSERT" not in text


@pytest.mark.parametrize(
    "args",
    [
        ("--max-batch-tokens", "4", "--max-concurrent", "8"),
        ("--max-concurrent", "250", "--prefix-cache-seqs", "8", "--max-batch-tokens", "512"),
    ],
)
def test_serve_refuses_settings_that_do_not_go_together_before_loading(args: tuple[str, ...]) -> None:
    out = serve(default_model_path(), *args, timeout=60)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "max_concurrent" in out.stderr and "serving" not in out.stdout
    assert "GGML_ASSERT" not in out.stderr


@pytest.mark.parametrize(("concurrent", "batch"), [(1, 1), (3, 5), (2, 2)])
def test_tight_batches_the_scheduler_allows_serve(concurrent: int, batch: int, tmp_path: Path) -> None:
    """Settings llama.cpp used to abort on (#43) load and generate on the real engine."""
    from tests.integration.conftest import start_server, stop_server

    srv = start_server(
        tmp_path,
        "--max-concurrent",
        str(concurrent),
        "--max-batch-tokens",
        str(batch),
        "--max-total-tokens",
        "256",
        "--max-input-tokens",
        "128",
    )
    try:
        with srv.client() as c:
            r = c.post(
                "/v1/completions",
                json={
                    "prompt": "The capital of France is",
                    "max_tokens": 4,
                    "ignore_eos": True,
                    "temperature": 0,
                },
            )
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] == 4
    finally:
        stop_server(srv)
    assert srv.process.returncode in (0, -15), srv.log.read_text()


def test_endpoint_up_refuses_a_corrupt_model_and_bad_settings(files: dict[str, Path], tmp_path: Path) -> None:
    for i, (model, engine, reason) in enumerate(
        [
            (files["truncated"], ENGINE, "lies past the end of the file"),
            (
                default_model_path(),
                "{max_batch_tokens: 4, max_concurrent: 8}",
                "max_batch_tokens (4) must be >= max_concurrent (8)",
            ),
        ]
    ):
        file = tmp_path / f"ep{i}.yaml"
        file.write_text(f"name: bad\ncomponents:\n  - name: a\n    model: {model}\n    engine: {engine}\n")
        cmd = up_command(file, free_port(), tmp_path / "copies")
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert out.returncode == 2, out.stdout + out.stderr
        assert reason in out.stderr, out.stderr


@pytest.fixture(scope="module")
def folder_ep(files: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoint]:
    folder = tmp_path_factory.mktemp("folder")
    (folder / "smol.gguf").symlink_to(SMOLLM2)
    for name in ("truncated", "looping"):
        (folder / f"{name}.gguf").symlink_to(files[name])
    yaml = f"""
name: hostile
models_dir:
  path: {folder}
  defaults:
    resources: {{num_cpus: 0.5, memory_mb: 500}}
    engine: {ENGINE}
"""
    ep = start_endpoint(tmp_path_factory.mktemp("ep"), yaml, wait_ping=False)
    yield ep
    stop_endpoint(ep)


def test_models_dir_refuses_the_hostile_models_and_serves_the_others(folder_ep: Endpoint) -> None:
    body = {"prompt": "Hello", "max_tokens": 3, "temperature": 0}
    with httpx.Client(base_url=folder_ep.url, timeout=180) as c:
        for name, reason in (
            ("truncated", "lies past the end of the file"),
            ("looping", "chat template ran past its time limit"),
        ):
            r = c.post("/v1/completions", json={**body, "model": name})
            assert r.status_code == 503, r.text
            message = r.json()["error"]["message"]
            assert f"model {name!r} failed to load" in message and reason in message, message
            assert name in message
        r = c.post("/v1/completions", json={**body, "model": "smol"})
        assert r.status_code == 200, r.text
    states = {c["name"]: c["on_demand"]["state"] for c in folder_ep.status()["components"]}
    assert states["smol"] == "loaded"
    assert states["truncated"] == states["looping"] == "unloaded"

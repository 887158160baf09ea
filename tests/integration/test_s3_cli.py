"""The commands that take s3:// models, run as subprocesses against moto on 127.0.0.1: their failures
are usage errors (exit 2) naming bucket, key or path, never tracebacks; `bench sweep` and `optimize
quantize` of an s3:// model work end to end."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from llmhost.bench import load_results
from llmhost.store import resolve_model
from tests.integration.conftest import free_port
from tests.s3server import FAKE_CREDS, S3Server, moto_server, moto_subprocess

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    from llmhost.optimize.convert import convert_hf
    from tests.unit.optimize.tiny import make_tiny_hf

    tmp = tmp_path_factory.mktemp("s3-cli")
    tiny = tmp / "tiny-f32.gguf"
    convert_hf(make_tiny_hf(tmp / "hf"), tiny, outtype="f32")
    with moto_server() as server:
        client = server.client()
        client.create_bucket(Bucket="models")
        client.upload_file(str(resolve_model("default")), "models", "gemma/model.gguf")
        client.upload_file(str(tiny), "models", "tiny/model.gguf")
        yield server


def llmhost(*args: str, cache: Path, timeout: float = 180, **env: str) -> tuple[int, str]:
    """Exit status and stderr+stdout, the rich error box's borders and line wrapping removed."""
    full = {**os.environ, **FAKE_CREDS, "LLMHOST_CACHE": str(cache), "COLUMNS": "400"}
    for name in ("AWS_ENDPOINT_URL", "LLMHOST_S3_ENDPOINT_URL", "AWS_PROFILE"):
        full.pop(name, None)  # only what the test gives
    full.update(env)
    done = subprocess.run(
        [sys.executable, "-m", "llmhost.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full,
        stdin=subprocess.DEVNULL,
    )
    text = re.sub(r"[│╭╮╰╯─]", " ", done.stderr + done.stdout)
    return done.returncode, " ".join(text.split())


def serve(*args: str, cache: Path, **env: str) -> tuple[int, str]:
    return llmhost("serve", "--host", "127.0.0.1", "--port", str(free_port()), *args, cache=cache, **env)


@pytest.mark.parametrize(
    ("ref", "says"),
    [
        ("s3://no-such-bucket/m/", "s3://no-such-bucket/m/: bucket 'no-such-bucket' does not exist"),
        ("s3://no-such-bucket/m.gguf", "s3://no-such-bucket/m.gguf: bucket 'no-such-bucket' does not exist"),
        ("s3://models/missing.gguf", "s3://models/missing.gguf: no object 'missing.gguf' in bucket 'models'"),
        ("s3://models/empty/", "s3://models/empty/: no objects under prefix 'empty/' in bucket 'models'"),
    ],
)
def test_serve_names_what_is_missing(s3: S3Server, tmp_path: Path, ref: str, says: str) -> None:
    code, out = serve("--s3-endpoint-url", s3.url, ref, cache=tmp_path)
    assert code == 2 and says in out and "Traceback" not in out


def test_serve_with_unknown_credentials(tmp_path: Path) -> None:
    with moto_subprocess(unauthenticated_actions=2) as server:
        client = server.client()
        client.create_bucket(Bucket="private")
        client.put_object(Bucket="private", Key="m/model.gguf", Body=b"GGUF")
        # from here on moto checks keys, and "testing" is no key it knows
        code, out = serve("--s3-endpoint-url", server.url, "s3://private/m/", cache=tmp_path)
    assert code == 2 and "s3://private/m/: access denied" in out and "check the AWS credentials" in out


def test_serve_with_an_endpoint_that_is_unreachable_or_not_a_url(tmp_path: Path) -> None:
    nobody = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    code, out = serve("--s3-endpoint-url", nobody, "s3://models/gemma/", cache=tmp_path)
    assert code == 2 and "s3://models/gemma/: cannot reach the S3 endpoint" in out and "Traceback" not in out
    code, out = serve("s3://models/gemma/", cache=tmp_path, LLMHOST_S3_ENDPOINT_URL="localhost:9000")
    assert code == 2 and "S3 endpoint URL 'localhost:9000' is not usable" in out and "Traceback" not in out


def test_serve_with_a_cache_that_cannot_be_written(s3: S3Server, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code, out = serve("--s3-endpoint-url", s3.url, "s3://models/gemma/", cache=blocker / "cache")
    assert code == 2 and "s3://models/gemma/: model cache" in out and "Not a directory" in out
    assert str(blocker) in out and "Traceback" not in out


def test_endpoint_up_refuses_a_missing_model_as_a_usage_error(s3: S3Server, tmp_path: Path) -> None:
    file = tmp_path / "endpoint.yaml"
    file.write_text("name: e\ncomponents:\n  - name: a\n    model: s3://models/nothing-here.gguf\n")
    code, out = llmhost(
        "endpoint", "up", str(file), "--port", str(free_port()), "--s3-endpoint-url", s3.url, cache=tmp_path
    )
    assert code == 2 and "component 'a': model 's3://models/nothing-here.gguf'" in out
    assert "no object 'nothing-here.gguf' in bucket 'models'" in out and "Traceback" not in out


def test_bench_sweep_of_an_s3_model(s3: S3Server, tmp_path: Path) -> None:
    sweep = {
        "api": "openai",
        "concurrency": [1],
        "requests": 1,
        "warmup": 0,
        "prompt_tokens": 16,
        "max_new_tokens": 4,
        "saturation_gain": None,
        "server_metrics": False,
        "startup_timeout_s": 120,
        "configurations": [{"serve": {"model": "s3://models/gemma/", "threads": 1, "max_concurrent": 1}}],
    }
    file = tmp_path / "sweep.yaml"
    file.write_text(yaml.safe_dump(sweep))
    out = tmp_path / "results"
    code, text = llmhost(
        "bench",
        "sweep",
        str(file),
        "--out",
        str(out),
        "--no-live",
        "--s3-endpoint-url",
        s3.url,
        cache=tmp_path / "cache",
        timeout=300,
    )
    assert code == 0, text
    [config] = load_results(out).configs
    assert config.error is None and config.name == "gemma-t1-mc1"
    assert config.params["model"] == "s3://models/gemma/" and config.levels[0].successes == 1


def test_optimize_quantize_of_an_s3_model(s3: S3Server, tmp_path: Path) -> None:
    out = tmp_path / "tiny-q8_0.gguf"
    code, text = llmhost(
        "optimize",
        "quantize",
        "s3://models/tiny/",
        "--type",
        "q8_0",
        "--out",
        str(out),
        "--s3-endpoint-url",
        s3.url,
        cache=tmp_path / "cache",
    )
    assert code == 0, text
    assert out.read_bytes()[:4] == b"GGUF" and f"{out}: f32 -> q8_0" in text
    code, text = llmhost(
        "optimize",
        "quantize",
        "s3://models/nope/",
        "--type",
        "q8_0",
        "--out",
        str(out),
        "--s3-endpoint-url",
        s3.url,
        cache=tmp_path / "cache",
    )
    assert code == 2 and "s3://models/nope/: no objects under prefix 'nope/' in bucket 'models'" in text

"""A model directory's code/inference.py (SageMaker inference toolkit hooks) and the `serve` entry
point SageMaker runs in a container, against real servers on 127.0.0.1."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.integration.conftest import STARTUP_TIMEOUT_S, Server, free_port, start_server, stop_server

pytestmark = pytest.mark.integration

TGI = {"inputs": "The capital of France is", "parameters": {"max_new_tokens": 4}}

OUTPUT_ONLY = """
import json

def output_fn(prediction, accept):
    if isinstance(prediction, dict) and prediction.get("object") == "text_completion":
        return 42  # no body a response can carry
    if "details" in prediction[0]:
        raise LookupError("no details here")
    # reshapes the normal prediction: TGI's [{"generated_text": ...}]
    return json.dumps({"text": prediction[0]["generated_text"], "accept": accept}), "application/json"
"""

TEXT_IO = """
import helpers  # next to inference.py: code/ is on sys.path

def input_fn(body, content_type):
    if content_type != "text/plain":
        raise ValueError(f"expected text/plain, got {content_type}")
    text = body.decode()
    if not text:
        raise KeyError("empty body")
    return text

def predict_fn(data, model):
    if data == "boom":
        raise RuntimeError("kaboom")
    if data == "too long":
        return model.generate("word " * 3000)
    if data.startswith("stream:"):
        return ({"piece": piece} for piece in model.stream(data[7:], max_new_tokens=4))
    return {"generated": model.generate(data, max_new_tokens=4), "tag": helpers.TAG}
"""

MODEL_FN = """
import os

def model_fn(model_dir):
    if os.environ.get("FAIL_MODEL_FN"):
        raise OSError("weights missing")
    return {"dir": model_dir, "files": sorted(os.listdir(model_dir))}

async def predict_fn(data, model):
    return {"model": model, "asked": data}
"""

BROKEN = """
import no_such_module_here
"""


def gguf() -> Path:
    from llmhost.store.resolve import default_model_path

    return default_model_path()


def model_dir(root: Path, script: str | None, helpers: str = "") -> Path:
    """A SageMaker-like /opt/ml/model: the GGUF, and code/inference.py if `script`."""
    root.mkdir(parents=True)
    (root / "model.gguf").symlink_to(gguf())
    if script is not None:
        (root / "code").mkdir()
        (root / "code" / "inference.py").write_text(textwrap.dedent(script))
        if helpers:
            (root / "code" / "helpers.py").write_text(helpers)
    return root


def start_serve(tmp: Path, directory: Path) -> Server:
    """The `serve` console script as SageMaker runs it: no arguments, the model in $SM_MODEL_DIR and
    the port in $SAGEMAKER_BIND_TO_PORT (the thread count too, as LLMHOST_THREADS)."""
    port = free_port()
    log = tmp / f"serve-entry-{port}.log"
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "SM_MODEL_DIR": str(directory),
        "SAGEMAKER_BIND_TO_PORT": str(port),
        "LLMHOST_THREADS": "1",
    }
    entry = Path(sys.executable).parent / "serve"
    with log.open("wb") as out:
        proc = subprocess.Popen([str(entry)], stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"serve exited with {proc.returncode}:\n{log.read_text()}")
        try:
            if httpx.get(f"{url}/ping", timeout=2).status_code == 200:
                return Server(url, proc, log)
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"serve did not pass /ping:\n{log.read_text()}")


@pytest.fixture(scope="module")
def output_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("custom-output")
    srv = start_server(tmp, str(model_dir(tmp / "model", OUTPUT_ONLY)))
    yield srv
    stop_server(srv)


@pytest.fixture(scope="module")
def text_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("custom-text")
    srv = start_serve(tmp, model_dir(tmp / "model", TEXT_IO, helpers="TAG = 'from-helper'\n"))
    yield srv
    stop_server(srv)


def test_output_fn_reshapes_the_normal_prediction(output_server: Server) -> None:
    with output_server.client() as c:
        r = c.post("/invocations", json=TGI, headers={"Accept": "application/json"})
        assert r.status_code == 200, r.text
        assert r.headers["content-type"].startswith("application/json")
        body = r.json()
        assert body["accept"] == "application/json"
        assert isinstance(body["text"], str) and body["text"]
        # default input_fn: today's JSON parse and its 4xx
        bad = c.post("/invocations", content=b"{not json", headers={"Content-Type": "application/json"})
        assert bad.status_code == 400 and bad.json()["error"]["field"] == "body"
        # a stream cannot be reshaped as one object: refused, naming output_fn
        stream = c.post("/invocations", json={**TGI, "stream": True})
        assert stream.status_code == 400 and stream.json()["error"]["field"] == "output_fn"
        # the other APIs do not go through inference.py
        v1 = c.post("/v1/completions", json={"prompt": "Hi", "max_tokens": 2})
        assert v1.status_code == 200 and v1.json()["object"] == "text_completion"


def test_output_fn_failures_are_json_500s_naming_it(output_server: Server) -> None:
    with output_server.client() as c:
        bad = c.post("/invocations", json={"prompt": "Hi", "max_tokens": 2})
        assert bad.status_code == 500
        err = bad.json()["error"]
        assert err["field"] == "output_fn" and err["request_id"] == bad.headers["x-request-id"]
        assert err["message"].startswith("output_fn raised TypeError: returned int; return bytes, str")
        detailed = {"inputs": "Hi", "parameters": {"max_new_tokens": 2, "details": True}}
        raised = c.post("/invocations", json=detailed)
        assert raised.status_code == 500  # a TGI body: TGI's error shape
        assert raised.json()["error"] == "output_fn raised LookupError: no details here"
        assert c.post("/invocations", json=TGI).status_code == 200  # still serving
    assert "inference.py output_fn raised" in output_server.log.read_text()


def test_serve_entry_point_with_input_and_predict_fn(text_server: Server) -> None:
    plain = {"Content-Type": "text/plain"}
    with text_server.client() as c:
        assert c.get("/ping").status_code == 200
        r = c.post("/invocations", content=b"The capital of France is", headers=plain)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["tag"] == "from-helper" and isinstance(body["generated"], str) and body["generated"]
        streamed = c.post("/invocations", content=b"stream:Once upon a time", headers=plain)
        assert streamed.status_code == 200
        assert streamed.headers["content-type"].startswith("text/event-stream")
        events = [line for line in streamed.text.splitlines() if line.startswith("data: ")]
        assert events and all('"piece"' in e for e in events)


def test_user_function_errors_name_the_function(text_server: Server) -> None:
    with text_server.client() as c:
        bad_type = c.post("/invocations", json=TGI)  # input_fn raises ValueError: the body was bad
        assert bad_type.status_code == 400
        err = bad_type.json()["error"]
        assert err["field"] == "input_fn" and err["message"].startswith("input_fn raised ValueError")
        empty = c.post("/invocations", content=b"", headers={"Content-Type": "text/plain"})
        assert empty.status_code == 400 and empty.json()["error"]["field"] == "input_fn"
        boom = c.post("/invocations", content=b"boom", headers={"Content-Type": "text/plain"})
        assert boom.status_code == 500
        err = boom.json()["error"]
        assert err["field"] == "predict_fn" and "RuntimeError: kaboom" in err["message"]
        assert err["request_id"] == boom.headers["x-request-id"]
        # the engine's refusal inside predict_fn keeps its status: the prompt is over MAX_INPUT_LENGTH
        long = c.post("/invocations", content=b"too long", headers={"Content-Type": "text/plain"})
        assert long.status_code == 422 and long.json()["error"]["limit"] == 2048
        # still serving
        ok = c.post("/invocations", content=b"Hello", headers={"Content-Type": "text/plain"})
        assert ok.status_code == 200
    assert "predict_fn raised" in text_server.log.read_text()


def as_artifact(directory: Path) -> Path:
    """Marks a model directory as an `llmhost optimize` artifact whose recipe asks for ngram speculation
    (no saved system-prompt state): what `serve` must read from it whatever the reference's form."""
    (directory / "artifact.json").write_text("{}")
    (directory / "recipe.yaml").write_text("serving:\n  speculative: ngram\n  draft_tokens: 4\n")
    return directory


ARTIFACT_SAYS = "serving settings from the artifact's recipe: {'speculative': 'ngram', 'draft_tokens': 4}"


def test_serve_entry_point_without_code(tmp_path: Path) -> None:
    # $SM_MODEL_DIR: the artifact's settings are found as for `llmhost serve DIR`
    srv = start_serve(tmp_path, as_artifact(model_dir(tmp_path / "model", None)))
    try:
        r = httpx.post(f"{srv.url}/invocations", json=TGI, timeout=120)
        assert r.status_code == 200, r.text
        assert isinstance(r.json()[0]["generated_text"], str)
    finally:
        stop_server(srv)
    assert ARTIFACT_SAYS in srv.log.read_text()


def test_inference_py_that_fails_to_import_stops_the_server(tmp_path: Path) -> None:
    directory = model_dir(tmp_path / "model", BROKEN)
    cmd = [
        sys.executable,
        "-m",
        "llmhost.cli",
        "serve",
        str(directory),
        "--port",
        str(free_port()),
        "--host",
        "127.0.0.1",
        "--threads",
        "1",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "inference.py failed to import: ModuleNotFoundError" in done.stderr
    assert "no_such_module_here" in done.stderr


def test_model_fn_value_is_predict_fns_model(tmp_path: Path) -> None:
    directory = model_dir(tmp_path / "model", MODEL_FN)
    srv = start_server(tmp_path, str(directory))
    try:
        r = httpx.post(f"{srv.url}/invocations", json={"q": 1}, timeout=60)
        assert r.status_code == 200, r.text
        model = {"dir": str(directory), "files": ["code", "model.gguf"]}
        assert r.json() == {"model": model, "asked": {"q": 1}}
    finally:
        stop_server(srv)


def test_model_fn_that_raises_stops_the_server(tmp_path: Path) -> None:
    directory = model_dir(tmp_path / "model", MODEL_FN)
    cmd = [
        sys.executable,
        "-m",
        "llmhost.cli",
        "serve",
        str(directory),
        "--port",
        str(free_port()),
        "--host",
        "127.0.0.1",
        "--threads",
        "1",
    ]
    env = {**os.environ, "FAIL_MODEL_FN": "1"}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode != 0  # uvicorn: 3, "Application startup failed"
    assert "model_fn raised OSError: weights missing" in done.stdout + done.stderr

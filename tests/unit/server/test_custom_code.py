"""Finding and importing a model directory's code/inference.py, and the container's contract."""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmhost.server.custom_code import CustomCodeError, find_script, load_handlers
from llmhost.store import resolve

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def _clean_modules() -> Iterator[None]:
    saved = list(sys.path)
    yield
    sys.path[:] = saved
    for name in ("inference", "helper_mod"):
        sys.modules.pop(name, None)


def model_dir(tmp_path: Path, script: str | None) -> Path:
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    if script is not None:
        (tmp_path / "code").mkdir()
        (tmp_path / "code" / "inference.py").write_text(script)
    return tmp_path


def test_script_is_found_at_the_model_root_whatever_the_reference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = model_dir(tmp_path / "m", "def output_fn(p, a):\n    return p\n")
    script = d / "code" / "inference.py"
    # one path for every form: the resolved model's directory decides
    assert find_script(resolve(str(d)).model_dir) == script
    monkeypatch.setenv("SM_MODEL_DIR", str(d))
    assert find_script(resolve(None).model_dir) == script
    # a .gguf file given alone has no model directory (its folder may hold anything)
    assert resolve(str(d / "m.gguf")).model_dir is None and find_script(None) is None
    assert find_script(resolve(str(model_dir(tmp_path / "plain", None))).model_dir) is None


def test_nested_gguf_serves_with_the_code_at_the_root(tmp_path: Path) -> None:
    # as an s3:// prefix or an archive: the weights one level down, code/ at the top
    root = tmp_path / "model"
    (root / "weights").mkdir(parents=True)
    (root / "weights" / "b.gguf").write_bytes(b"GGUF")
    (root / "weights" / "deeper").mkdir()
    (root / "weights" / "deeper" / "a.gguf").write_bytes(b"GGUF")
    (root / "code").mkdir()
    (root / "code" / "inference.py").write_text("def output_fn(p, a):\n    return p\n")
    resolved = resolve(str(root))
    assert resolved.gguf == root / "weights" / "b.gguf"  # fewest levels first
    assert resolved.model_dir == root and resolved.serve_ref == str(root)
    assert find_script(resolved.model_dir) == root / "code" / "inference.py"


def test_hooks_are_picked_and_helpers_import(tmp_path: Path) -> None:
    d = model_dir(tmp_path, "import helper_mod\n\ndef input_fn(body, ct):\n    return helper_mod.X\n")
    (d / "code" / "helper_mod.py").write_text("X = 7\n")
    handlers = load_handlers(d / "code" / "inference.py")
    assert handlers.defined() == ["input_fn"]
    assert handlers.input_fn is not None and handlers.input_fn(b"", "text/plain") == 7
    assert handlers.model_dir == d


@pytest.mark.parametrize(
    ("script", "reason"),
    [
        ("raise RuntimeError('no GPU here')\n", "failed to import: RuntimeError: no GPU here"),
        ("import sys\nsys.exit(3)\n", "failed to import: SystemExit: 3"),
        ("X = 1\n", "defines none of model_fn, input_fn, predict_fn, output_fn"),
        ("def predict_fn(data):\n    return data\n", "predict_fn must take 2 argument(s)"),
        ("output_fn = 3\n", "output_fn is a int, not a function"),
    ],
)
def test_unusable_scripts_are_refused_with_the_reason(tmp_path: Path, script: str, reason: str) -> None:
    d = model_dir(tmp_path, script)
    with pytest.raises(CustomCodeError, match=re.escape(reason)):
        load_handlers(d / "code" / "inference.py")


def test_dockerfile_contract() -> None:
    """What SageMaker relies on: `docker run IMAGE serve` finds `serve` on PATH (no ENTRYPOINT to
    swallow the argument), port 8080, and a non-root user in the final stage."""
    lines = [line.strip() for line in (ROOT / "Dockerfile").read_text().splitlines()]
    final = lines[max(i for i, line in enumerate(lines) if line.startswith("FROM ")) :]
    users = [line.split()[1] for line in final if line.startswith("USER ")]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    assert "EXPOSE 8080" in final
    assert 'CMD ["serve"]' in final
    assert not any(line.startswith("ENTRYPOINT") for line in lines)
    assert any("GGML_NATIVE=OFF" in line for line in lines)
    # tomllib is 3.11+; the console-script line is plain enough to read
    entry = re.search(r'^serve = "([\w.]+):(\w+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert entry is not None
    module, attr = entry.groups()
    assert callable(getattr(importlib.import_module(module), attr))

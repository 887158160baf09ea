"""The environment variables llmhost reads, found in its source: every `...environ.get(X)`,
`env.get(X)`, `os.environ[X]` whose X is a string (or a module constant holding one), plus each serve
setting's variable. Their meanings are below; a test keeps both sets equal."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from docsgen.md import table
from llmhost.settings.serve import SERVE_SPEC

SRC = Path(__file__).resolve().parents[1] / "src" / "llmhost"
NAME = re.compile(r"^[A-Z][A-Z0-9_]{2,}$")

# what each variable does (the serve settings' variables take their setting's help)
MEANING = {
    "SM_MODEL_DIR": (
        "The model `llmhost serve` and the container's `serve` load when no MODEL is given "
        "(SageMaker sets it); unset: /opt/ml/model if it exists, else the bundled default model."
    ),
    "LLMHOST_CACHE": "Where s3:// models are downloaded (default ~/.cache/llmhost/models).",
    "LLMHOST_S3_ENDPOINT_URL": (
        "An S3-compatible store's URL for s3:// models (llmhost only; "
        "`--s3-endpoint-url` sets it for the processes a command starts)."
    ),
    "AWS_ENDPOINT_URL": (
        "The S3 endpoint URL every AWS SDK reads; used when LLMHOST_S3_ENDPOINT_URL is unset."
    ),
    "HF_ENDPOINT": (
        "The Hugging Face Hub (or mirror) hf:// models come from (default "
        "https://huggingface.co); read by huggingface_hub too."
    ),
    "HF_HOME": (
        "huggingface_hub's folder: hf:// models are cached in HF_HOME/hub (default ~/.cache/huggingface)."
    ),
    "XDG_DATA_HOME": (
        "The user's data directory: batch jobs are kept in XDG_DATA_HOME/llmhost/jobs/serve-PORT (an "
        "endpoint's in .../endpoint-NAME-PORT) when --jobs-dir and LLMHOST_JOBS_DIR are unset (default "
        "~/.local/share); `llmhost batch` keeps its runs in XDG_DATA_HOME/llmhost/batch-runs."
    ),
    "HF_HUB_CACHE": "The Hub cache hf:// models are downloaded into (default HF_HOME/hub).",
    "HF_HUB_OFFLINE": "`1`: hf:// models are taken from the Hub cache only; the Hub is never asked.",
    "LLMHOST_API_KEYS": (
        "API keys a server or endpoint requires, comma-separated (added to --api-key and "
        "--api-key-file); the admin commands send its first key when LLMHOST_API_KEY is unset."
    ),
    "LLMHOST_API_KEY": (
        "The key the `llmhost endpoint` admin commands (status, scale, add, remove, down) "
        "send; a server or endpoint also requires it (comma-separated, added to LLMHOST_API_KEYS)."
    ),
    "RAY_AUTH_MODE": "`disabled`: no Ray token is sent to Ray Serve's REST API (`endpoint up --ray`).",
    "RAY_AUTH_TOKEN": "The Ray cluster's token, sent to Ray Serve's REST API (`endpoint up --ray`).",
    "RAY_AUTH_TOKEN_PATH": "A file holding the Ray cluster's token (else ~/.ray/auth_token).",
}


def _constants() -> dict[str, str]:
    """Module-level NAME = "VALUE" strings of every module (env var names are kept in such constants)."""
    out: dict[str, str] = {}
    for path in SRC.rglob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                for t in node.targets:
                    if isinstance(t, ast.Name) and isinstance(node.value.value, str):
                        out[t.id] = node.value.value
    return out


def _name(node: ast.expr, consts: dict[str, str]) -> str | None:
    value = (
        node.value
        if isinstance(node, ast.Constant)
        else consts.get(node.id)
        if isinstance(node, ast.Name)
        else None
    )
    return value if isinstance(value, str) and NAME.match(value) else None


def _envish(node: ast.expr) -> bool:
    text = ast.unparse(node)
    return (
        text.endswith("environ")
        or text.endswith("environ)")
        or text in ("env", "environ")
        or text.endswith(".env")
        or "os.environ" in text
    )


def read_in_source() -> set[str]:
    consts = _constants()
    found: set[str] = set()
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get"
                and node.args
                and _envish(node.func.value)
            ):
                name = _name(node.args[0], consts)
            elif isinstance(node, ast.Subscript) and _envish(node.value):
                name = _name(node.slice, consts)
            else:
                continue
            if name:
                found.add(name)
    return found


def variables() -> dict[str, str]:
    """Every variable read, with its meaning."""
    out = {s.env: f"`--{s.name.replace('_', '-')}` when not given: {s.help}" for s in SERVE_SPEC if s.env}
    for name in sorted(read_in_source() - set(out)):
        out[name] = MEANING.get(name, "")
    return out


def render() -> str:
    return table(["variable", "meaning"], [[f"`{k}`", v] for k, v in sorted(variables().items())])

"""mkdocs hooks (mkdocs.yml `hooks:`): a page's `<!-- gen: NAME -->` line becomes the reference that
docsgen generates from the code at build time, and the example runner's words after a fence's language
(```bash server) are dropped from what the site shows."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from docsgen import api_compat, cli_ref, endpoint_ref, env_ref, errors_ref, http_ref, metrics_ref, perf

GENERATORS: dict[str, Callable[[], str]] = {
    "api-compatibility": api_compat.render,
    "cli": cli_ref.render,
    "endpoint-file": endpoint_ref.render,
    "environment": env_ref.render,
    "errors": errors_ref.render,
    "http-api": http_ref.render,
    "metrics": metrics_ref.render,
    "performance": perf.render,
}
MARKER = re.compile(r"^<!-- gen: ([\w-]+) -->$", re.M)
FENCE_WORDS = re.compile(r"^(\s*(?:`{3,}|~{3,})[\w#.+-]+)[ \t]+[^\n{]*$", re.M)


def expand(markdown: str) -> str:
    def one(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in GENERATORS:
            raise ValueError(f"unknown generated section {name!r}; known: {', '.join(GENERATORS)}")
        return GENERATORS[name]()

    return FENCE_WORDS.sub(r"\1", MARKER.sub(one, markdown))


def on_page_markdown(markdown: str, **_: Any) -> str:
    return expand(markdown)

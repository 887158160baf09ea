"""An endpoint file's validation errors, one line each naming the key's path (and the component's name)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError


def _named_loc(loc: tuple[int | str, ...], data: Any) -> str:
    """components[0] → components[0](gemma-q4): the name helps in long files."""
    out = ""
    node = data
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
            if isinstance(node, list) and 0 <= part < len(node):
                node = node[part]
                if isinstance(node, dict) and isinstance(node.get("name"), str):
                    out += f"({node['name']})"
            else:
                node = None
        else:
            out += f".{part}" if out else str(part)
            node = node.get(part) if isinstance(node, dict) else None
    return out or "(top level)"


def format_errors(exc: ValidationError, data: Any = None) -> str:
    lines = []
    for err in exc.errors():
        loc = _named_loc(tuple(err["loc"]), data)
        msg = str(err["msg"])
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        elif err["type"] == "missing":
            msg = "required key is missing"
        msg = re.sub(r"^Value error, ", "", msg)
        lines.append(f"{loc}: {msg}")
    return "; ".join(lines)

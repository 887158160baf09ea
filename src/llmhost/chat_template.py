"""Chat prompts from the model's Jinja chat template (GGUF metadata) or a user-supplied file."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from jinja2 import TemplateError, meta
from jinja2.sandbox import ImmutableSandboxedEnvironment


class ChatTemplateError(ValueError):
    """No template, or the template refused the messages."""


def _raise(message: str) -> None:
    raise ChatTemplateError(message)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:  # fmt: skip
    """Hugging Face's `tojson` (transformers' chat templating), which templates are written against:
    keys in their order, no HTML escaping, and plain text. Jinja's own sorts keys, writes `'` `<` `>`
    `&` as \\u escapes, and returns Markup, which escapes the text a template adds to it (Mistral's
    `'"' + key + '": ' + val|tojson` rendered `&#34;parameters&#34;`)."""
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)  # fmt: skip
# the variables render() sets itself: a request's template kwargs may not replace them
RESERVED = frozenset({"messages", "tools", "add_generation_prompt", "bos_token", "eos_token"})


class ChatTemplate:
    def __init__(self, source: str, bos_token: str, eos_token: str) -> None:
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        env.filters["tojson"] = _tojson
        try:
            self._template = env.from_string(source)
            # the variables it reads from its context: a kwarg it never reads would be silently ignored
            self.variables = frozenset(meta.find_undeclared_variables(env.parse(source)))
        except TemplateError as exc:
            raise ChatTemplateError(f"chat template does not parse: {exc}") from exc
        self.source = source
        self.bos_token = bos_token
        self.eos_token = eos_token

    def render(
        self,
        messages: list[dict[str, Any]],
        add_generation_prompt: bool = True,
        tools: list[dict[str, Any]] | None = None,
        kwargs: Mapping[str, Any] | None = None,
    ) -> str:
        """The prompt; `kwargs` are more template variables (`enable_thinking`), never the ones above."""
        try:
            return self._template.render(
                **(kwargs or {}),
                messages=messages,
                tools=tools,
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
            )
        except ChatTemplateError:
            raise
        except TemplateError as exc:
            raise ChatTemplateError(f"chat template failed on these messages: {exc}") from exc

    def uses(self, name: str) -> bool:
        return name in self.variables

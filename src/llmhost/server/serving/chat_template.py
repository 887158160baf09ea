"""Chat prompts from the model's Jinja chat template (GGUF metadata) or a user-supplied file.

A template is code from whoever made the file: it renders in Jinja's immutable sandbox (no attribute of
Python's internals, no mutation of what it is given), within a time and an output size, so that a
template that loops or multiplies strings without end fails its request instead of holding a thread."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal, NotRequired

from jinja2 import TemplateError, meta
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment
from typing_extensions import TypedDict

from llmhost.errors import BadRequestError, ModelError
from llmhost.shared.jsontypes import JSONObject, JSONValue

# a prompt is refused beyond max_input_tokens long before this; a template writing more is broken
MAX_OUTPUT_CHARS = 32 * 2**20
RENDER_TIMEOUT_S = 5.0


class TemplateFunction(TypedDict):
    name: str
    arguments: JSONValue  # a mapping (Hugging Face's convention), or the text when it is no JSON


class TemplateToolCall(TypedDict):
    id: str
    type: Literal["function"]
    function: TemplateFunction


class TemplateMessage(TypedDict):
    """A message as chat templates read it."""

    role: str
    content: str
    name: NotRequired[str]
    tool_call_id: NotRequired[str]
    reasoning_content: NotRequired[str]  # Qwen3's name for a thought; gpt-oss's template reads `thinking`
    thinking: NotRequired[str]
    tool_calls: NotRequired[list[TemplateToolCall]]


# a template's sample conversation when it is checked at load
PROBE_MESSAGES: list[TemplateMessage] = [{"role": "user", "content": "Hello"}]


class ChatTemplateError(BadRequestError, ValueError):
    """No template, or the template refused the messages."""

    status = 400  # messages no template takes are malformed, as OpenAI's API answers them


class ChatTemplateBoundError(ModelError, ChatTemplateError):
    """The template ran past its time or output bound, or tried to leave the sandbox: the template is at
    fault, not the messages."""

    status = 500  # the server's fault: a client can change nothing


def _raise(message: str) -> None:
    raise ChatTemplateError(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    """Hugging Face's `tojson` (transformers' chat templating), which templates are written against:
    keys in their order, no HTML escaping, and plain text. Jinja's own sorts keys, writes `'` `<` `>`
    `&` as \\u escapes, and returns Markup, which escapes the text a template adds to it (Mistral's
    `'"' + key + '": ' + val|tojson` rendered `&#34;parameters&#34;`)."""
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


# the variables render() sets itself: a request's template kwargs may not replace them
RESERVED = frozenset({"messages", "tools", "add_generation_prompt", "bos_token", "eos_token"})


class _Budget(threading.local):
    """The running render's deadline and output so far (each thread renders its own)."""

    deadline = float("inf")
    chars = 0
    max_chars = MAX_OUTPUT_CHARS

    def check(self) -> None:
        if time.monotonic() > self.deadline:
            raise ChatTemplateBoundError("chat template ran past its time limit")

    def grow(self, n: int) -> None:
        self.chars += n
        if self.chars > self.max_chars:
            raise ChatTemplateBoundError(f"chat template wrote more than {self.max_chars} characters")


class _BoundedEnvironment(ImmutableSandboxedEnvironment):
    """The sandbox, with every call, attribute, loop over `range` and `*`/`**` checked against the
    render's budget."""

    intercepted_binops = frozenset({"*", "**"})

    def __init__(self, budget: _Budget) -> None:
        super().__init__(trim_blocks=True, lstrip_blocks=True)
        self.budget = budget
        self.globals["range"] = self._range

    def _range(self, *args: int) -> Iterator[int]:
        for i in range(*args):
            self.budget.check()
            yield i

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        self.budget.check()
        if operator == "**" and isinstance(right, int) and abs(right) > 1024:
            raise ChatTemplateBoundError(f"chat template raised to the power {right}")
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                sized = isinstance(seq, str | list | tuple) and isinstance(n, int)
                if sized and len(seq) * n > self.budget.max_chars:
                    raise ChatTemplateBoundError("chat template multiplied a sequence past its output limit")
        return super().call_binop(context, operator, left, right)

    def call(self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        self.budget.check()
        return super().call(__context, __obj, *args, **kwargs)

    def getattr(self, obj: Any, attribute: str) -> Any:
        self.budget.check()
        return super().getattr(obj, attribute)


class ChatTemplate:
    def __init__(
        self,
        source: str,
        bos_token: str,
        eos_token: str,
        timeout_s: float = RENDER_TIMEOUT_S,
        max_chars: int = MAX_OUTPUT_CHARS,
    ) -> None:
        self._budget = _Budget()
        self._budget.max_chars = max_chars
        self.timeout_s = timeout_s
        self.max_chars = max_chars
        env = _BoundedEnvironment(self._budget)
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        env.filters["tojson"] = _tojson
        try:
            self._template = env.from_string(source)
            # the variables it reads from its context: a kwarg it never reads would be silently ignored
            self.variables = frozenset(meta.find_undeclared_variables(env.parse(source)))
        except TemplateError as exc:
            raise ChatTemplateError(f"chat template does not parse: {exc}") from exc
        except RecursionError:
            raise ChatTemplateBoundError("chat template nests too deeply to parse") from None
        self.source = source
        self.bos_token = bos_token
        self.eos_token = eos_token

    def render(
        self,
        messages: Sequence[TemplateMessage],
        add_generation_prompt: bool = True,
        tools: list[JSONObject] | None = None,  # the request's tool definitions, as sent
        kwargs: Mapping[str, JSONValue] | None = None,
    ) -> str:
        """The prompt; `kwargs` are more template variables (`enable_thinking`), never the ones above."""
        budget = self._budget
        budget.deadline, budget.chars, budget.max_chars = time.monotonic() + self.timeout_s, 0, self.max_chars
        parts: list[str] = []
        try:
            for chunk in self._template.generate(
                **(kwargs or {}),
                messages=messages,
                tools=tools,
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
            ):
                budget.grow(len(chunk))
                budget.check()
                parts.append(chunk)
        except ChatTemplateError:
            raise
        except SecurityError as exc:
            raise ChatTemplateBoundError(f"chat template tried to leave its sandbox: {exc}") from exc
        except TemplateError as exc:
            raise ChatTemplateError(f"chat template failed on these messages: {exc}") from exc
        except RecursionError:
            raise ChatTemplateBoundError("chat template recursed without end") from None
        except (MemoryError, OverflowError) as exc:
            raise ChatTemplateBoundError(f"chat template ran out of room: {type(exc).__name__}") from None
        finally:
            budget.deadline = float("inf")
        return "".join(parts)

    def uses(self, name: str) -> bool:
        return name in self.variables

    def probe(self) -> str | None:
        """Why the template cannot serve (it loops, writes without end, or leaves the sandbox on a plain
        conversation), else None; a template refusing the sample through raise_exception is not at fault."""
        try:
            self.render(PROBE_MESSAGES)
        except ChatTemplateBoundError as exc:
            return str(exc)
        except ChatTemplateError:
            return None
        return None


def template_fault(source: str, bos_token: str, eos_token: str) -> str | None:
    """Why a model's chat template cannot serve (see ChatTemplate.probe), else None; one that does not
    parse is left to each chat request to report, as before any check."""
    try:
        template = ChatTemplate(source, bos_token, eos_token)
    except ChatTemplateBoundError as exc:
        return f"chat template: {exc}"
    except ChatTemplateError:
        return None
    fault = template.probe()
    return None if fault is None else f"chat template: {fault}"

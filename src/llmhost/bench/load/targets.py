"""API adapters: how to ask each kind of server for a streamed generation and read its answer.

Every adapter builds a request body for a prompt and a fixed number of new tokens, and turns the
``data`` payloads of the server-sent events it gets back into token arrivals. Output tokens are
counted from the server's own report when it gives one (OpenAI ``usage``, TGI ``details``, the
Messages and Responses APIs' ``usage``), else by counting the stream events that carry generated text.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from typing_extensions import TypedDict

from llmhost.errors import LlmhostError

APIS = ("openai", "chat", "messages", "responses", "sagemaker", "tgi")
IMAGE_APIS = ("chat", "messages", "responses", "sagemaker", "tgi")  # those whose requests carry images
MEDIA_MARKER = "<__media__>"  # where a raw prompt's medium goes (llama-server's multimodal_data)
COMPONENT_HEADER = "X-Amzn-SageMaker-Inference-Component"


class StreamError(LlmhostError):
    """The stream could not be understood (``malformed_stream``) or carried an error event."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


class StreamState:
    """What one streamed response said so far. Subclasses parse one API's event payloads; a thinking
    model's thought (OpenAI `reasoning_content`, Anthropic `thinking_delta`, Responses
    `reasoning_text`) counts as generated tokens, and `answered` turns true with the first answer event."""

    __slots__ = (
        "answered",
        "counted_tokens",
        "encode_ms",
        "finished",
        "reported_output_tokens",
        "reported_prompt_tokens",
        "reported_reasoning_tokens",
        "thought_events",
    )

    def __init__(self) -> None:
        self.counted_tokens = 0
        self.reported_output_tokens: int | None = None
        self.reported_prompt_tokens: int | None = None
        self.reported_reasoning_tokens: int | None = None
        self.thought_events = 0  # events that carried thought text
        self.answered = False  # an event carried answer text (or a tool call)
        self.finished = False
        self.encode_ms: float | None = None  # the server's `timings.encode_ms` (llmhost's), when it tells

    def _read_timings(self, timings: Any) -> None:
        if isinstance(timings, dict) and isinstance(timings.get("encode_ms"), (int, float)):
            self.encode_ms = float(timings["encode_ms"])

    def _count(self, thought: bool) -> int:
        """One generated-text event: of the thought, or of the answer."""
        self.counted_tokens += 1
        if thought:
            self.thought_events += 1
        else:
            self.answered = True
        return 1

    @property
    def reasoning_tokens(self) -> int:
        """The thought's tokens: the server's report, else its events."""
        if self.reported_reasoning_tokens is not None:
            return self.reported_reasoning_tokens
        return self.thought_events

    def feed(self, payload: bytes) -> int:
        """Parse one event's data; return how many generated tokens it carried."""
        raise NotImplementedError

    @property
    def output_tokens(self) -> int:
        if self.reported_output_tokens is not None:
            return self.reported_output_tokens
        return self.counted_tokens

    @property
    def counted_by(self) -> str:
        return "server" if self.reported_output_tokens is not None else "events"

    def check_complete(self) -> None:
        """Raise when the stream ended without its API's end marker."""
        if not self.finished:
            raise StreamError("malformed_stream", "stream ended without its final event")


def _loads(payload: bytes) -> Any:
    try:
        return json.loads(payload)
    except ValueError as exc:
        raise StreamError("malformed_stream", f"event is not JSON: {payload[:80]!r}") from exc


class StreamOptions(TypedDict):
    include_usage: bool


class OpenAIBody(TypedDict, total=False):
    """A streamed completion or chat request."""

    model: str
    messages: list[dict[str, Any]]  # chat: a message's content is a string, or text and image parts
    prompt: str  # completion
    max_tokens: int
    stream: bool
    stream_options: StreamOptions
    ignore_eos: bool
    temperature: float


class TGIParameters(TypedDict, total=False):
    max_new_tokens: int
    details: bool
    temperature: float
    do_sample: bool


class TGIPrompt(TypedDict):
    """llama-server's prompt object: a raw prompt whose markers stand for the media, in order."""

    prompt_string: str
    multimodal_data: list[str]


class TGIBody(TypedDict, total=False):
    """A TGI request (`stream` on SageMaker's /invocations)."""

    inputs: str | TGIPrompt
    parameters: TGIParameters
    stream: bool


class AgentBody(TypedDict, total=False):
    """A streamed Anthropic Messages or OpenAI Responses request: one user turn."""

    model: str
    stream: bool
    messages: list[dict[str, Any]]  # Messages
    max_tokens: int  # Messages
    input: str | list[dict[str, Any]]  # Responses
    max_output_tokens: int  # Responses
    temperature: float


RequestBody = OpenAIBody | TGIBody | AgentBody


def _error_text(obj: dict[str, Any]) -> str:
    err = obj.get("error")
    if isinstance(err, dict):
        return str(err.get("message") or err)
    return str(err)


def _event(payload: bytes) -> dict[str, Any]:
    """One SSE event's JSON object; an `error` event or a non-object is a failure of its own kind."""
    obj = _loads(payload)
    if not isinstance(obj, dict):
        raise StreamError("malformed_stream", f"event is not an object: {payload[:80]!r}")
    if "error" in obj:
        raise StreamError("stream_error", _error_text(obj))
    return obj


class OpenAIStream(StreamState):
    """OpenAI completion / chat chunks, ending with ``data: [DONE]``."""

    __slots__ = ("_chat", "parts")

    def __init__(self, chat: bool) -> None:
        super().__init__()
        self._chat = chat
        self.parts: list[str] = []  # the generated text, as it came (a conversation's next turn has it)

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def feed(self, payload: bytes) -> int:
        if payload.startswith(b"[DONE]"):
            self.finished = True
            return 0
        obj = _event(payload)
        self._read_timings(obj.get("timings"))
        usage = obj.get("usage")
        if isinstance(usage, dict):
            out = usage.get("completion_tokens")
            if isinstance(out, int):
                self.reported_output_tokens = out
            details = usage.get("completion_tokens_details") or {}
            if isinstance(details.get("reasoning_tokens"), int):
                self.reported_reasoning_tokens = details["reasoning_tokens"]
            prompt = usage.get("prompt_tokens")
            if isinstance(prompt, int):
                self.reported_prompt_tokens = prompt
        choices = obj.get("choices")
        if not isinstance(choices, list):
            raise StreamError("malformed_stream", f"chunk without choices: {payload[:80]!r}")
        n = 0
        for choice in choices:
            if not isinstance(choice, dict):
                raise StreamError("malformed_stream", "choice is not an object")
            if self._chat:
                delta = choice.get("delta") or {}
                content = delta.get("content")
                if content:
                    n += self._count(thought=False)
                    if isinstance(content, str):
                        self.parts.append(content)
                elif delta.get("reasoning_content"):
                    n += self._count(thought=True)
            elif text := choice.get("text"):
                n += self._count(thought=False)
                if isinstance(text, str):
                    self.parts.append(text)
        return n


class TGIStream(StreamState):
    """TGI ``data:{"token": {...}, "generated_text": ..., "details": ...}`` events."""

    __slots__ = ()

    def feed(self, payload: bytes) -> int:
        obj = _event(payload)
        token = obj.get("token")
        if not isinstance(token, dict):
            raise StreamError("malformed_stream", f"event without a token: {payload[:80]!r}")
        self._count(thought=False)
        if obj.get("generated_text") is not None:
            self.finished = True
            details = obj.get("details")
            if isinstance(details, dict) and isinstance(details.get("generated_tokens"), int):
                self.reported_output_tokens = details["generated_tokens"]
            if isinstance(details, dict):
                self._read_timings(details.get("timings"))
        return 1


class MessagesStream(StreamState):
    """Anthropic Messages events (``{"type": "message_start" | "content_block_delta" | ...}``), ending
    with ``message_stop``."""

    __slots__ = ()

    def feed(self, payload: bytes) -> int:
        obj = _event(payload)  # an `error` event carries an "error" object
        kind = obj.get("type")
        if kind == "message_start":
            usage = (obj.get("message") or {}).get("usage") or {}
            if isinstance(usage.get("input_tokens"), int):
                self.reported_prompt_tokens = usage["input_tokens"]
        elif kind == "content_block_delta":
            delta = obj.get("delta") or {}
            if delta.get("text") or delta.get("partial_json"):
                return self._count(thought=False)
            if delta.get("thinking"):
                return self._count(thought=True)
        elif kind == "message_delta":
            usage = obj.get("usage") or {}
            if isinstance(usage.get("output_tokens"), int):
                self.reported_output_tokens = usage["output_tokens"]
        elif kind == "message_stop":
            self.finished = True
        return 0


class ResponsesStream(StreamState):
    """OpenAI Responses events (``{"type": "response.output_text.delta", ...}``), ending with
    ``response.completed`` or ``response.incomplete``."""

    __slots__ = ()

    def feed(self, payload: bytes) -> int:
        obj = _event(payload)
        kind = obj.get("type")
        if kind in ("error", "response.failed"):
            err = (obj.get("response") or {}).get("error") or obj
            raise StreamError("stream_error", str(err.get("message") if isinstance(err, dict) else err))
        if kind in ("response.output_text.delta", "response.function_call_arguments.delta"):
            if obj.get("delta"):
                return self._count(thought=False)
        elif kind == "response.reasoning_text.delta":
            if obj.get("delta"):
                return self._count(thought=True)
        elif kind in ("response.completed", "response.incomplete"):
            self.finished = True
            usage = (obj.get("response") or {}).get("usage") or {}
            if isinstance(usage.get("output_tokens"), int):
                self.reported_output_tokens = usage["output_tokens"]
            if isinstance(usage.get("input_tokens"), int):
                self.reported_prompt_tokens = usage["input_tokens"]
            details = usage.get("output_tokens_details") or {}
            if isinstance(details.get("reasoning_tokens"), int):
                self.reported_reasoning_tokens = details["reasoning_tokens"]
        return 0


@dataclass(frozen=True)
class Target:
    """One API on one server: the route, the body and the stream parser.

    ``api``: ``openai`` (``/v1/completions``), ``chat`` (``/v1/chat/completions``), ``messages``
    (Anthropic's ``/v1/messages``), ``responses`` (OpenAI's ``/v1/responses``), ``sagemaker``
    (``/invocations`` with a TGI body, ``"stream": true``, optional inference-component header) or
    ``tgi`` (``/generate_stream``). ``ignore_eos`` applies to the OpenAI completion APIs only: the
    others have no such field (their max tokens are a cap, and usage reports the real count).
    """

    api: str
    model: str | None = None
    component: str | None = None
    ignore_eos: bool = True
    temperature: float | None = None  # None: leave it to the server
    extra_headers: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.api not in APIS:
            raise ValueError(f"unknown api {self.api!r}; choose one of {', '.join(APIS)}")

    @property
    def path(self) -> str:
        return {
            "openai": "/v1/completions",
            "chat": "/v1/chat/completions",
            "messages": "/v1/messages",
            "responses": "/v1/responses",
            "sagemaker": "/invocations",
            "tgi": "/generate_stream",
        }[self.api]

    def mix(self) -> list[tuple[str | None, Target]]:
        """The targets of a mix (`model: a,b`, or `component: a,b` for /invocations), each with its name;
        one target (named None) otherwise."""
        header = self.api == "sagemaker"
        names = [n.strip() for n in ((self.component if header else self.model) or "").split(",")]
        if len(names) < 2:
            return [(None, self)]
        return [(n, replace(self, component=n) if header else replace(self, model=n)) for n in names]

    def headers(self) -> dict[str, str]:
        headers = {"Accept": "text/event-stream"}
        if self.component and self.api == "sagemaker":
            headers[COMPONENT_HEADER] = self.component
        headers.update(dict(self.extra_headers))
        return headers

    def body(
        self, prompt: str | list[dict[str, str]], max_new_tokens: int, images: Sequence[str] = ()
    ) -> RequestBody:
        """The request for ``prompt``: a text, or (chat only) the messages of a conversation.
        ``images``: base64 PNGs the prompt's user turn carries before its text (IMAGE_APIS only)."""
        if isinstance(prompt, list) and self.api != "chat":
            raise ValueError("messages are sent to the chat API only")
        if images and (self.api not in IMAGE_APIS or isinstance(prompt, list)):
            raise ValueError(
                f"--images: the {self.api} API's requests carry no images here; use {', '.join(IMAGE_APIS)}"
            )
        if self.api in ("messages", "responses"):
            assert isinstance(prompt, str)
            return self._agent_body(prompt, max_new_tokens, images)
        if self.api in ("openai", "chat"):
            body: OpenAIBody = {"model": self.model or "default"}
            if self.api == "chat":
                if isinstance(prompt, list):
                    body["messages"] = list(prompt)  # a conversation (carries no images: refused above)
                else:
                    content = _parts(prompt, images, "chat") if images else prompt
                    body["messages"] = [{"role": "user", "content": content}]
            else:
                assert isinstance(prompt, str)  # a conversation was refused above
                body["prompt"] = prompt
            body.update(
                {
                    "max_tokens": max_new_tokens,
                    "stream": True,
                    "stream_options": {"include_usage": True},
                }
            )
            if self.ignore_eos:
                body["ignore_eos"] = True  # llama-server, vLLM and llmhost honour it
            if self.temperature is not None:
                body["temperature"] = self.temperature
            return body
        # TGI has no ignore_eos: max_new_tokens is a cap, and details report the real count.
        assert isinstance(prompt, str)
        inputs = TGIPrompt(prompt_string=MEDIA_MARKER * len(images) + prompt, multimodal_data=list(images))
        tgi: TGIBody = {
            "inputs": inputs if images else prompt,
            "parameters": {"max_new_tokens": max_new_tokens, "details": True},
        }
        if self.temperature:  # TGI wants temperature > 0; 0 means greedy, its default
            tgi["parameters"] |= {"temperature": self.temperature, "do_sample": True}
        if self.api == "sagemaker":
            tgi["stream"] = True
        return tgi

    def _agent_body(self, prompt: str, max_new_tokens: int, images: Sequence[str]) -> AgentBody:
        """Messages and Responses bodies: one user turn, streamed."""
        body: AgentBody = {"model": self.model or "default", "stream": True}
        content = _parts(prompt, images, self.api) if images else prompt
        if self.api == "messages":
            body |= {"messages": [{"role": "user", "content": content}], "max_tokens": max_new_tokens}
        elif images:
            body |= {"input": [{"role": "user", "content": content}], "max_output_tokens": max_new_tokens}
        else:
            body |= {"input": prompt, "max_output_tokens": max_new_tokens}
        if self.temperature is not None:
            body["temperature"] = self.temperature
        return body

    def new_stream(self) -> StreamState:
        if self.api in ("openai", "chat"):
            return OpenAIStream(chat=self.api == "chat")
        if self.api == "messages":
            return MessagesStream()
        if self.api == "responses":
            return ResponsesStream()
        return TGIStream()


def _parts(text: str, images: Sequence[str], api: str) -> list[dict[str, Any]]:
    """A user turn's content in ``api``'s words: the images (base64 PNGs), then the text (a prompt
    must not end with a medium)."""
    if api == "messages":
        media = [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64}}
            for b64 in images
        ]
        return [*media, {"type": "text", "text": text}]
    uris = [f"data:image/png;base64,{b64}" for b64 in images]
    if api == "responses":
        return [
            *({"type": "input_image", "image_url": u} for u in uris),
            {"type": "input_text", "text": text},
        ]
    return [*({"type": "image_url", "image_url": {"url": u}} for u in uris), {"type": "text", "text": text}]

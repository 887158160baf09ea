"""Model families' chat templates and tool-call markers through the real server's OpenAI chat route: a
tiny random-weight GGUF (tests/tinymodels.py) per family, carrying the family's real template in its
metadata and its control tokens (Mistral's `[TOOL_CALLS]`, Granite's `<|tool_call|>`, gpt-oss's
`<|channel|>` ...) in its vocabulary.

The random weights write no valid call of their own; a logit bias makes the model write a call's first
marker, which shows that a control token a tool parser needs reaches it as text (llama.cpp leaves control
tokens out of generated text; a call after a dropped `[TOOL_CALLS]` could never be read back)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from llmhost.server.protocol.openai import ChatCompletionRequest
from llmhost.server.serving import tools
from llmhost.server.serving.chat_template import ChatTemplate
from tests.integration.conftest import Server, start_server, stop_server
from tests.tinymodels import build_tiny_gguf
from tests.unit.server.test_chat_templates import CONVERSATION, TEMPLATES, WEATHER


@dataclass(frozen=True)
class TinyFamily:
    template: str  # a file of tests/fixtures/templates
    arch: str
    special_tokens: list[str]  # the family's control tokens
    bos: str
    eos: str
    marker: str  # the control token a tool call starts with
    # llama.cpp writes the marker out itself (it does so for gpt-oss's <|channel|>, <|message|>,
    # <|start|> and <|constrain|>)
    always_written: bool = False


FAMILIES = {
    "mistral-nemo": TinyFamily(
        "mistralai-Mistral-Nemo-Instruct-2407.jinja",
        "llama",
        [
            "<s>",
            "</s>",
            "[INST]",
            "[/INST]",
            "[TOOL_CALLS]",
            "[AVAILABLE_TOOLS]",
            "[/AVAILABLE_TOOLS]",
            "[TOOL_RESULTS]",
            "[/TOOL_RESULTS]",
        ],
        "<s>",
        "</s>",
        "[TOOL_CALLS]",
    ),
    "granite3.3": TinyFamily(
        "ibm-granite-granite-3.3-2B-Instruct.jinja",
        "granite",
        ["<|start_of_role|>", "<|end_of_role|>", "<|end_of_text|>", "<|tool_call|>"],
        "<|end_of_text|>",
        "<|end_of_text|>",
        "<|tool_call|>",
    ),
    "gpt-oss": TinyFamily(
        "openai-gpt-oss-120b.jinja",
        "gpt-oss",
        [
            "<|startoftext|>",
            "<|start|>",
            "<|message|>",
            "<|channel|>",
            "<|constrain|>",
            "<|end|>",
            "<|call|>",
            "<|return|>",
        ],
        "<|startoftext|>",
        "<|return|>",
        "<|channel|>",
        always_written=True,
    ),
}


@dataclass
class Served:
    server: Server
    family: TinyFamily
    source: str  # the template's text


@pytest.fixture(scope="module")
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    family = FAMILIES[request.param]
    tmp = tmp_path_factory.mktemp(f"tiny-{request.param}")
    source = (TEMPLATES / family.template).read_text()
    gguf = build_tiny_gguf(
        tmp / "model.gguf",
        arch=family.arch,
        chat_template=source,
        special_tokens=family.special_tokens,
        bos_token=family.bos,
        eos_token=family.eos,
    )
    srv = start_server(
        tmp, str(gguf), "--max-concurrent", "2", "--max-input-tokens", "1536", "--max-total-tokens", "2048"
    )
    yield Served(srv, family, source)
    stop_server(srv)


def chat(server: Server, **body: Any) -> dict[str, Any]:
    r = httpx.post(f"{server.url}/v1/chat/completions", json={"temperature": 0, **body}, timeout=60)
    assert r.status_code == 200, r.text
    result: dict[str, Any] = r.json()
    return result


def token_id(server: Server, text: str) -> int:
    r = httpx.post(f"{server.url}/tokenize", json={"content": text}, timeout=10)
    tokens: list[int] = r.json()["tokens"]
    assert len(tokens) == 1, f"{text!r} is not one token"
    return tokens[0]


@pytest.mark.parametrize("served", sorted(FAMILIES), indirect=True)
def test_the_ggufs_own_template_renders_the_tool_conversation(served: Served) -> None:
    """No --chat-template: the server renders the template from the GGUF's metadata, tools and the
    earlier call and result included, into the prompt its tokenizer reads."""
    answer = chat(served.server, messages=CONVERSATION, tools=[WEATHER], max_tokens=1)
    body = ChatCompletionRequest.model_validate({"messages": CONVERSATION, "tools": [WEATHER]})
    template = ChatTemplate(served.source, served.family.bos, served.family.eos)
    messages = [tools.template_message(m) for m in body.messages]
    text = template.render(messages, tools=tools.template_tools(body))
    assert "get_weather" in text and "temperature_c" in text
    add_bos = not text.startswith(served.family.bos)
    r = httpx.post(
        f"{served.server.url}/tokenize", json={"content": text, "add_special": add_bos}, timeout=10
    )
    assert answer["usage"]["prompt_tokens"] == len(r.json()["tokens"])


@pytest.mark.parametrize("served", sorted(FAMILIES), indirect=True)
def test_the_tool_call_marker_reaches_the_parser_as_text(served: Served) -> None:
    marker = served.family.marker
    forced = {
        "messages": CONVERSATION[:2],
        "max_tokens": 3,
        "logit_bias": {str(token_id(served.server, marker)): 100},
    }
    with_tools = chat(served.server, tools=[WEATHER], **forced)["choices"][0]
    # three markers and no JSON after them: no call, and the text stays content, markers and all
    assert with_tools["message"]["content"] == marker * 3
    assert with_tools["message"].get("tool_calls") in (None, [])
    without_tools = chat(served.server, **forced)["choices"][0]["message"]["content"]
    assert without_tools == (marker * 3 if served.family.always_written else ""), "written out without tools"

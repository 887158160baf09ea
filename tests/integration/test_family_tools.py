"""A model family's chat template and tool-call markers through the real server's OpenAI chat route: a
tiny random-weight GGUF (tests/tinymodels.py) carrying Mistral Nemo's real template in its metadata and
Mistral's control tokens (`[TOOL_CALLS]`, `[INST]` ...) in its vocabulary.

The random weights write no valid call of their own; a logit bias makes the model write the marker,
which shows that a control token a tool parser needs reaches it as text (llama.cpp leaves control
tokens out of generated text; a call after a dropped `[TOOL_CALLS]` could never be read back)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from llmhost.chat_template import ChatTemplate
from llmhost.server.protocol.openai import ChatCompletionRequest
from llmhost.server.serving import tools
from tests.integration.conftest import Server, start_server, stop_server
from tests.tinymodels import build_tiny_gguf
from tests.unit.server.test_chat_templates import CONVERSATION, TEMPLATES, WEATHER

MISTRAL_TOKENS = ["<s>", "</s>", "[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]",
                  "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]"]  # fmt: skip
NEMO = (TEMPLATES / "mistralai-Mistral-Nemo-Instruct-2407.jinja").read_text()


@pytest.fixture(scope="module")
def mistral(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("tiny-mistral")
    gguf = build_tiny_gguf(tmp / "mistral.gguf", arch="llama", chat_template=NEMO,
                           special_tokens=MISTRAL_TOKENS, bos_token="<s>", eos_token="</s>")  # fmt: skip
    srv = start_server(tmp, str(gguf), "--max-concurrent", "2", "--max-input-tokens", "768",
                       "--max-total-tokens", "1024")  # fmt: skip
    yield srv
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


def test_the_ggufs_own_template_renders_the_tool_conversation(mistral: Server) -> None:
    """No --chat-template: the server renders the template from the GGUF's metadata, tools and the
    earlier call and result included, into the prompt its tokenizer reads."""
    answer = chat(mistral, messages=CONVERSATION, tools=[WEATHER], max_tokens=1)
    body = ChatCompletionRequest.model_validate({"messages": CONVERSATION, "tools": [WEATHER]})
    text = ChatTemplate(NEMO, "<s>", "</s>").render([tools.template_message(m) for m in body.messages],
                                                   tools=tools.template_tools(body))  # fmt: skip
    assert "[AVAILABLE_TOOLS]" in text and "[TOOL_RESULTS]" in text
    r = httpx.post(f"{mistral.url}/tokenize", json={"content": text, "add_special": False}, timeout=10)
    assert answer["usage"]["prompt_tokens"] == len(r.json()["tokens"])


def test_the_tool_call_marker_reaches_the_parser_as_text(mistral: Server) -> None:
    marker = token_id(mistral, "[TOOL_CALLS]")
    forced = {"messages": CONVERSATION[:2], "max_tokens": 3, "logit_bias": {str(marker): 100}}
    with_tools = chat(mistral, tools=[WEATHER], **forced)["choices"][0]
    # three markers and no JSON after them: no call, and the text stays content, markers and all
    assert with_tools["message"]["content"] == "[TOOL_CALLS]" * 3
    assert with_tools["message"].get("tool_calls") in (None, [])
    without_tools = chat(mistral, **forced)["choices"][0]
    assert without_tools["message"]["content"] == "", "a control token was written out without tools"

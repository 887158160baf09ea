"""The real chat templates of the common model families (tests/fixtures/templates/, as each model
ships it in its GGUF's tokenizer.chat_template) rendered by our sandboxed Jinja from an OpenAI chat
request: a system prompt, the tools, an assistant's tool call and the tool's result; and the tool-call
parser each template's markers select. docs/guides/supported-models.md names these tests."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from llmhost.server.protocol.openai import ChatCompletionRequest
from llmhost.server.serving import generic_tools, tools
from llmhost.server.serving.chat_template import ChatTemplate, ChatTemplateError

TEMPLATES = Path(__file__).parents[2] / "fixtures" / "templates"


@dataclass(frozen=True)
class Family:
    file: str
    bos: str
    eos: str
    parser: str | None  # the --tool-parser "auto" picks; None: the template offers no tools
    generation_prompt: str  # how the rendered prompt ends: the assistant's turn opened
    renders_calls: bool = True  # the assistant's earlier tool calls are in the prompt


CHATML = "<|im_start|>assistant\n"
FAMILIES = {
    "qwen2.5": Family("Qwen-Qwen2.5-7B-Instruct.jinja", "", "<|im_end|>", "hermes", CHATML),
    "qwen3": Family("Qwen-Qwen3-0.6B.jinja", "", "<|im_end|>", "hermes", CHATML),
    "llama3.1": Family(
        "meta-llama-Llama-3.1-8B-Instruct.jinja",
        "<|begin_of_text|>",
        "<|eot_id|>",
        "llama3",
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
    ),
    "llama3.2": Family(
        "meta-llama-Llama-3.2-3B-Instruct.jinja",
        "<|begin_of_text|>",
        "<|eot_id|>",
        "llama3",
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
    ),
    "mistral-nemo": Family("mistralai-Mistral-Nemo-Instruct-2407.jinja", "<s>", "</s>", "mistral", "[/INST]"),
    "mistral-small3.2": Family(
        "mistralai-Mistral-Small-3.2-24B-Instruct-2506.jinja", "<s>", "</s>", "mistral", "[/INST]"
    ),
    # Granite 3.3's template writes an assistant turn's content only, never its tool calls
    "granite3.3": Family(
        "ibm-granite-granite-3.3-2B-Instruct.jinja",
        "",
        "<|end_of_text|>",
        "granite",
        "<|start_of_role|>assistant<|end_of_role|>",
        renders_calls=False,
    ),
    "gpt-oss": Family(
        "openai-gpt-oss-120b.jinja", "<|startoftext|>", "<|return|>", "harmony", "<|start|>assistant"
    ),
    "gemma3": Family("google-gemma-3-it.jinja", "<bos>", "<eos>", None, "<start_of_turn>model\n"),
    "phi3.5": Family(
        "microsoft-Phi-3.5-mini-instruct.jinja", "<s>", "<|endoftext|>", None, "<|assistant|>\n"
    ),
    # SmolLM3's template takes tools as `xml_tools` / `python_tools`, not the `tools` it is given here
    "smollm3": Family("HuggingFaceTB-SmolLM3-3B.jinja", "", "<|im_end|>", None, CHATML),
}
WITH_TOOLS = [name for name, f in FAMILIES.items() if f.parser]
WITHOUT_TOOLS = [name for name, f in FAMILIES.items() if not f.parser]

SYSTEM = "You are a weather assistant."
QUESTION = "What is the weather in Paris?"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
# Mistral's template refuses tool call ids other than 9 letters or digits (what its clients send)
CALL = {
    "id": "call12345",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}
CONVERSATION = [
    {"role": "system", "content": SYSTEM},
    {"role": "user", "content": QUESTION},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call12345", "content": '{"temperature_c": 18}'},
    {"role": "assistant", "content": "It is 18 degrees in Paris."},
    # Mistral's template writes the system prompt and the tools with the last user message
    {"role": "user", "content": "And tomorrow?"},
]


def template(name: str) -> ChatTemplate:
    family = FAMILIES[name]
    return ChatTemplate((TEMPLATES / family.file).read_text(), family.bos, family.eos)


def render(name: str, messages: list[dict[str, object]]) -> str:
    """What the server's chat path renders: the request validated, its messages and tools in the
    shape templates expect."""
    body = ChatCompletionRequest.model_validate({"messages": messages, "tools": [WEATHER]})
    messages_seen = [tools.template_message(m) for m in body.messages]
    return template(name).render(messages_seen, tools=tools.template_tools(body))


@pytest.mark.parametrize("name", WITH_TOOLS)
def test_renders_system_tools_a_tool_call_and_its_result(name: str) -> None:
    text = render(name, CONVERSATION)
    assert SYSTEM in text and QUESTION in text
    assert "The current weather of a city" in text, "the tool is not offered"
    call = re.search(r'"?city"?\s*:\s*"Paris"', text)
    assert bool(call) == FAMILIES[name].renders_calls, "the assistant's call is not in the prompt"
    assert "temperature_c" in text and "18" in text, "the tool's result is not in the prompt"
    assert text.index(QUESTION) < text.index("temperature_c") < text.index("And tomorrow?")
    assert text.endswith(FAMILIES[name].generation_prompt)


@pytest.mark.parametrize("name", WITH_TOOLS)
def test_the_template_selects_its_tool_call_parser(name: str) -> None:
    assert tools.parser_for("auto", template(name).source) is tools.PARSERS[FAMILIES[name].parser or ""]


@pytest.mark.parametrize("name", WITHOUT_TOOLS)
def test_renders_a_system_prompt_and_turns(name: str) -> None:
    """Templates that take no tools: the system prompt and the turns, nothing of the tools."""
    messages = [
        *CONVERSATION[:2],
        {"role": "assistant", "content": "Mild."},
        {"role": "user", "content": "Thanks"},
    ]
    text = render(name, messages)
    assert SYSTEM in text and QUESTION in text and "Mild." in text and "Thanks" in text
    assert "get_weather" not in text
    assert text.endswith(FAMILIES[name].generation_prompt)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_the_templates_without_tools_are_the_ones_given_the_generic_format(name: str) -> None:
    assert generic_tools.renders_tools(template(name)) == (FAMILIES[name].parser is not None)


@pytest.mark.parametrize("name", WITHOUT_TOOLS)
def test_the_generic_format_renders_the_tools_a_call_and_its_result(name: str) -> None:
    """What the server renders on a template without tools (--tool-format auto): the tools in the
    system message, the call as its JSON, the result as a user turn; Gemma 3's alternation holds."""
    body = ChatCompletionRequest.model_validate({"messages": CONVERSATION, "tools": [WEATHER]})
    seen = [tools.template_message(m) for m in body.messages]
    text = template(name).render(generic_tools.conversation(seen, tools.template_tools(body)))
    assert SYSTEM in text and QUESTION in text and "The current weather of a city" in text
    assert text.index(SYSTEM) < text.index('{"name": "<tool name>"') < text.index(QUESTION)
    assert '{"name": "get_weather", "arguments": {"city": "Paris"}}' in text
    assert 'Result of the tool call get_weather:\n{"temperature_c": 18}' in text
    assert text.index("temperature_c") < text.index("18 degrees") < text.index("And tomorrow?")
    assert text.endswith(FAMILIES[name].generation_prompt)


def test_gemma3_refuses_a_tool_result_and_phi35_leaves_it_out() -> None:
    """What a tool conversation does on the templates without tools: Gemma 3's insists on alternating
    user and model turns (the server answers 400 with its message); Phi-3.5's skips the tool turn."""
    with pytest.raises(ChatTemplateError, match="roles must alternate"):
        render("gemma3", CONVERSATION)
    assert "temperature_c" not in render("phi3.5", CONVERSATION)


@pytest.mark.parametrize("name", ["qwen3", "mistral-nemo"])
def test_tojson_writes_text_as_hugging_face_does(name: str) -> None:
    """Templates are written against Hugging Face's `tojson`: keys in their order, `'<>&` as they are,
    and text that nothing around it escapes (Jinja's own sorted keys, wrote `\\u0027`, and turned
    Mistral's `'"' + key + '": ' + val|tojson` into `&#34;parameters&#34;`)."""
    q = {"type": "string", "description": "it's <b> & c"}
    function = {"name": "f", "description": "d", "parameters": {"type": "object", "properties": {"q": q}}}
    tool = {"type": "function", "function": function}
    body = ChatCompletionRequest.model_validate({"messages": CONVERSATION, "tools": [tool]})
    messages = [tools.template_message(m) for m in body.messages]
    text = template(name).render(messages, tools=tools.template_tools(body))
    assert "it's <b> & c" in text and "&#34;" not in text
    assert '"type": "object", "properties"' in text


# -- tool calls as the models write them -------------------------------------------------------------
OUTPUTS = {
    # Qwen 2.5 and Qwen 3 (after its thinking) write Hermes calls
    "qwen3": (
        "<think>\nThe user wants the weather.\n</think>\n\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    ),
    "llama3.2": '{"name": "get_weather", "parameters": {"city": "Paris"}}',
    "mistral-nemo": (
        '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "a1b2c3d4e"}]'
    ),
    "mistral-small3.2": '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}',
    "granite3.3": '<|tool_call|>[{"arguments": {"city": "Paris"}, "name": "get_weather"}]',
    "gpt-oss": (
        "<|channel|>analysis<|message|>Need to call get_weather.<|end|><|start|>assistant"
        "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
        '{"city":"Paris"}'
    ),
}


@pytest.mark.parametrize("name", OUTPUTS)
def test_a_models_tool_call_is_parsed(name: str) -> None:
    parser = tools.parser_for("auto", template(name).source)
    _, calls = parser.parse(OUTPUTS[name])
    assert [(c.name, c.arguments.replace(" ", "")) for c in calls] == [("get_weather", '{"city":"Paris"}')]

"""A thinking model's thought, split from its answer, through the official `openai` and `anthropic`
clients, streamed and not: a tiny Qwen3 GGUF with Qwen3's real template whose greedy output is
`<think>I think</think>\\n\\nHello` (tests/integration/thinking_model.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import ollama
import openai
import pytest

from tests.integration.conftest import Server, start_server, stop_server
from tests.integration.thinking_model import ANSWER, FIXTURES, THOUGHT, build_thinking_model
from tests.sdk_errors import sent_error
from tests.tinymodels import build_tiny_gguf

MODEL = "qwen3-tiny"
HI: Any = [{"role": "user", "content": "hi"}]
GREEDY: dict[str, Any] = {"temperature": 0, "max_tokens": 40}
COLD = {"temperature": 0}
SCHEMA = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}


def serve(tmp: Any, *args: str) -> Server:
    model = build_thinking_model(tmp / "qwen3-thinking.gguf")
    return start_server(
        tmp,
        str(model),
        "--served-model-name",
        MODEL,
        "--max-concurrent",
        "2",
        "--max-input-tokens",
        "768",
        "--max-total-tokens",
        "1024",
        *args,
    )


@pytest.fixture(scope="module")
def thinker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = serve(tmp_path_factory.mktemp("thinker"))
    yield srv
    stop_server(srv)


def oai(srv: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{srv.url}/v1", api_key="unused", timeout=60, max_retries=0)


def claude(srv: Server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=srv.url, api_key="unused", timeout=60, max_retries=0)


# -- OpenAI chat completions ---------------------------------------------------------------------------
def test_chat_gives_the_thought_as_reasoning_content(thinker: Server) -> None:
    r = oai(thinker).chat.completions.create(model=MODEL, messages=HI, **GREEDY)
    message = r.choices[0].message
    assert message.content == ANSWER and message.reasoning_content == THOUGHT  # type: ignore[attr-defined]
    assert r.choices[0].finish_reason == "stop"
    assert r.usage is not None and r.usage.completion_tokens_details is not None
    assert r.usage.completion_tokens_details.reasoning_tokens == 2  # "I", " think"


def test_chat_streams_the_thought_before_the_answer(thinker: Server) -> None:
    before = thinker.metric("llmhost_reasoning_tokens_total")
    chunks = list(
        oai(thinker).chat.completions.create(
            model=MODEL, messages=HI, stream=True, stream_options={"include_usage": True}, **GREEDY
        )
    )
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    thought = [d.reasoning_content for d in deltas if getattr(d, "reasoning_content", None)]  # type: ignore[attr-defined]
    content = [(i, d.content) for i, d in enumerate(deltas) if d.content]
    first_thought = next(i for i, d in enumerate(deltas) if getattr(d, "reasoning_content", None))
    assert "".join(thought) == THOUGHT and "".join(c for _, c in content) == ANSWER
    assert first_thought < content[0][0]
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens_details is not None
    assert usage.completion_tokens_details.reasoning_tokens == 2
    assert thinker.metric("llmhost_reasoning_tokens_total") == before + 2


@pytest.mark.parametrize(
    "extra",
    [
        {"reasoning_effort": "none"},
        {"extra_body": {"chat_template_kwargs": {"enable_thinking": False}}},
        {"extra_body": {"reasoning_budget": 0}},
    ],
)
def test_thinking_off_gives_no_reasoning(thinker: Server, extra: dict[str, Any]) -> None:
    r = oai(thinker).chat.completions.create(model=MODEL, messages=HI, **GREEDY, **extra)
    message = r.choices[0].message
    assert message.content == ANSWER and getattr(message, "reasoning_content", None) is None
    assert r.usage is not None and r.usage.completion_tokens_details is not None
    assert r.usage.completion_tokens_details.reasoning_tokens == 0


def test_a_budget_closes_the_thought_and_the_answer_follows(thinker: Server) -> None:
    r = oai(thinker).chat.completions.create(
        model=MODEL, messages=HI, **GREEDY, extra_body={"reasoning_budget": 1}
    )
    message = r.choices[0].message
    assert message.reasoning_content == "I" and message.content == ANSWER  # type: ignore[attr-defined]
    assert r.usage is not None and r.usage.completion_tokens_details is not None
    assert r.usage.completion_tokens_details.reasoning_tokens == 1


@pytest.mark.parametrize("stream", [False, True])
def test_a_json_schema_constrains_the_answer_not_the_thought(thinker: Server, stream: bool) -> None:
    fmt: Any = {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}}
    client = oai(thinker)
    if stream:
        chunks = list(
            client.chat.completions.create(
                model=MODEL, messages=HI, response_format=fmt, stream=True, **GREEDY
            )
        )
        deltas = [c.choices[0].delta for c in chunks if c.choices]
        thought = "".join(getattr(d, "reasoning_content", None) or "" for d in deltas)
        content = "".join(d.content or "" for d in deltas)
    else:
        message = client.chat.completions.create(model=MODEL, messages=HI, response_format=fmt, **GREEDY)
        thought, content = message.choices[0].message.reasoning_content, message.choices[0].message.content  # type: ignore[attr-defined]
    assert thought == THOUGHT
    assert isinstance(json.loads(content or "")["answer"], int)


def test_a_forced_tool_call_follows_the_thought(thinker: Server) -> None:
    tool: Any = {"type": "function", "function": {"name": "get_answer", "parameters": SCHEMA}}
    choice: Any = {"type": "function", "function": {"name": "get_answer"}}
    r = oai(thinker).chat.completions.create(
        model=MODEL, messages=HI, tools=[tool], tool_choice=choice, **GREEDY
    )
    message = r.choices[0].message
    assert message.reasoning_content == THOUGHT and message.tool_calls  # type: ignore[attr-defined]
    call = message.tool_calls[0]
    assert call.function.name == "get_answer"  # type: ignore[union-attr]
    assert isinstance(json.loads(call.function.arguments)["answer"], int)  # type: ignore[union-attr]


def test_an_earlier_turns_thought_goes_back_and_the_prefix_is_reused(thinker: Server) -> None:
    client = oai(thinker)
    first = client.chat.completions.create(model=MODEL, messages=HI, **GREEDY).choices[0].message
    turn: Any = {"role": "assistant", "content": first.content, "reasoning_content": first.reasoning_content}  # type: ignore[attr-defined]
    again = client.chat.completions.create(
        model=MODEL, messages=[*HI, turn, {"role": "user", "content": "and?"}], **GREEDY
    )
    assert again.choices[0].message.content == ANSWER
    assert again.usage is not None and again.usage.prompt_tokens_details is not None
    assert again.usage.prompt_tokens_details.cached_tokens > 0


def test_refusals_name_the_field(thinker: Server) -> None:
    client = oai(thinker)
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(
            model=MODEL, messages=HI, max_tokens=4, extra_body={"chat_template_kwargs": {"no_such": 1}}
        )
    assert "chat_template_kwargs.no_such" in sent_error(err.value)["message"]
    r = httpx.post(
        f"{thinker.url}/v1/chat/completions", timeout=30, json={"messages": HI, "reasoning_effort": "extreme"}
    )
    assert 400 <= r.status_code < 500 and "reasoning_effort" in r.text


# -- Anthropic Messages --------------------------------------------------------------------------------
def test_messages_give_thinking_blocks(thinker: Server) -> None:
    c = claude(thinker)
    m = c.messages.create(model=MODEL, max_tokens=40, messages=HI, extra_body=COLD)
    assert [b.type for b in m.content] == ["thinking", "text"]
    assert m.content[0].thinking == THOUGHT and m.content[1].text == ANSWER  # type: ignore[union-attr]
    budget = c.messages.create(
        model=MODEL,
        max_tokens=40,
        messages=HI,
        extra_body=COLD,
        thinking={"type": "enabled", "budget_tokens": 1},
    )
    assert budget.content[0].thinking == "I" and budget.content[1].text == ANSWER  # type: ignore[union-attr]
    off = c.messages.create(
        model=MODEL, max_tokens=40, messages=HI, extra_body=COLD, thinking={"type": "disabled"}
    )
    assert [b.type for b in off.content] == ["text"] and off.content[0].text == ANSWER  # type: ignore[union-attr]
    # counted as the template renders it: the empty thought Qwen3 writes when thinking is off
    counted = c.messages.count_tokens(model=MODEL, messages=HI, thinking={"type": "disabled"})
    assert counted.input_tokens == off.usage.input_tokens > m.usage.input_tokens


def test_messages_stream_thinking_deltas(thinker: Server) -> None:
    with claude(thinker).messages.stream(model=MODEL, max_tokens=40, messages=HI, extra_body=COLD) as stream:
        events = list(stream)
        final = stream.get_final_message()
    kinds = [e.delta.type for e in events if e.type == "content_block_delta"]
    assert kinds.index("thinking_delta") < kinds.index("text_delta")
    assert final.content[0].thinking == THOUGHT and final.content[1].text == ANSWER  # type: ignore[union-attr]
    # the thinking block goes back as the client got it
    follow: Any = [*HI, {"role": "assistant", "content": final.content}, {"role": "user", "content": "and?"}]
    again = claude(thinker).messages.create(model=MODEL, max_tokens=40, messages=follow, extra_body=COLD)
    assert again.content[-1].text == ANSWER  # type: ignore[union-attr]


def test_messages_budget_must_be_below_max_tokens(thinker: Server) -> None:
    with pytest.raises(anthropic.BadRequestError) as err:
        claude(thinker).messages.create(
            model=MODEL, max_tokens=8, messages=HI, thinking={"type": "enabled", "budget_tokens": 8}
        )
    assert "budget_tokens" in sent_error(err.value)["message"]


# -- OpenAI Responses ----------------------------------------------------------------------------------
def test_responses_give_a_reasoning_item(thinker: Server) -> None:
    c = oai(thinker)
    r = c.responses.create(model=MODEL, input="hi", max_output_tokens=40, extra_body=COLD)
    assert [item.type for item in r.output] == ["reasoning", "message"]
    assert r.output[0].content[0].text == THOUGHT and r.output_text == ANSWER  # type: ignore[union-attr,index]
    assert r.usage is not None and r.usage.output_tokens_details.reasoning_tokens == 2
    off = c.responses.create(
        model=MODEL, input="hi", max_output_tokens=40, extra_body=COLD, reasoning={"effort": "none"}
    )
    assert [item.type for item in off.output] == ["message"] and off.output_text == ANSWER
    events = list(
        c.responses.create(model=MODEL, input="hi", max_output_tokens=40, temperature=0, stream=True)
    )
    thought = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert thought == THOUGHT and text == ANSWER
    final = events[-1].response  # type: ignore[union-attr]
    assert [item.type for item in final.output] == ["reasoning", "message"]
    # the output replayed as the next request's input: the reasoning item goes with its message
    replay = [i.model_dump(exclude_none=True) for i in r.output]
    again = c.responses.create(
        model=MODEL,
        max_output_tokens=40,
        extra_body=COLD,
        input=[{"role": "user", "content": "hi"}, *replay, {"role": "user", "content": "and?"}],
    )
    assert again.output_text == ANSWER


# -- server settings -----------------------------------------------------------------------------------
# -- Ollama's API ------------------------------------------------------------------------------------
def test_ollama_chat_and_generate_give_the_thought_as_thinking(thinker: Server) -> None:
    client = ollama.Client(host=thinker.url, timeout=60)
    greedy = {"temperature": 0, "num_predict": 40}
    r = client.chat(model=MODEL, messages=HI, options=greedy)
    assert (r.message.thinking, r.message.content) == (THOUGHT, ANSWER)
    parts = list(client.chat(model=MODEL, messages=HI, options=greedy, think=True, stream=True))
    assert "".join(p.message.thinking or "" for p in parts) == THOUGHT
    assert "".join(p.message.content or "" for p in parts) == ANSWER
    first_answer = next(i for i, p in enumerate(parts) if p.message.content)
    assert not any(p.message.thinking for p in parts[first_answer:])  # the thought comes first
    off = client.chat(model=MODEL, messages=HI, options=greedy, think=False)
    assert not off.message.thinking and off.message.content
    g = client.generate(model=MODEL, prompt="hi", options=greedy)
    assert (g.thinking, g.response) == (THOUGHT, ANSWER)
    # an earlier turn's thought goes back to the template (Qwen3's drops it from past turns)
    history = [*HI, {"role": "assistant", "content": ANSWER, "thinking": THOUGHT}, *HI]
    assert client.chat(model=MODEL, messages=history, options=greedy).message.content
    shown = client.show(MODEL)
    assert shown.capabilities is not None and "thinking" in shown.capabilities


def test_server_budget_and_format_none(tmp_path_factory: pytest.TempPathFactory) -> None:
    budget = serve(tmp_path_factory.mktemp("budget"), "--reasoning-budget", "1")
    try:
        message = oai(budget).chat.completions.create(model=MODEL, messages=HI, **GREEDY).choices[0].message
        assert message.reasoning_content == "I" and message.content == ANSWER  # type: ignore[attr-defined]
    finally:
        stop_server(budget)
    raw = serve(tmp_path_factory.mktemp("raw"), "--reasoning-format", "none")
    try:
        client = oai(raw)
        message = client.chat.completions.create(model=MODEL, messages=HI, **GREEDY).choices[0].message
        assert message.content == f"<think>{THOUGHT}</think>\n\n{ANSWER}"
        with pytest.raises(openai.BadRequestError) as err:
            client.chat.completions.create(model=MODEL, messages=HI, reasoning_effort="low", **GREEDY)
        assert sent_error(err.value)["param"] == "reasoning_effort"
    finally:
        stop_server(raw)


def test_a_budget_over_the_servers_max_is_refused_naming_field_and_limit(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    capped = serve(tmp_path_factory.mktemp("capped"), "--reasoning-budget-max", "1")
    try:
        # a thought with no budget asked stops at the cap; a budget within it is taken
        message = oai(capped).chat.completions.create(model=MODEL, messages=HI, **GREEDY).choices[0].message
        assert message.reasoning_content == "I" and message.content == ANSWER  # type: ignore[attr-defined]
        within = claude(capped).messages.create(
            model=MODEL, max_tokens=40, messages=HI, thinking={"type": "enabled", "budget_tokens": 1}
        )
        assert within.content[0].thinking == "I"  # type: ignore[union-attr]
        with pytest.raises(anthropic.BadRequestError) as bad:
            claude(capped).messages.create(
                model=MODEL, max_tokens=40, messages=HI, thinking={"type": "enabled", "budget_tokens": 2}
            )
        sent = sent_error(bad.value)
        assert (sent["field"], sent["limit"]) == ("thinking.budget_tokens", 1), sent
        assert "--reasoning-budget-max" in sent["message"]
        with pytest.raises(openai.BadRequestError) as err:
            oai(capped).chat.completions.create(
                model=MODEL, messages=HI, extra_body={"reasoning_budget": 5}, **GREEDY
            )
        assert (sent_error(err.value)["param"], sent_error(err.value)["limit"]) == ("reasoning_budget", 1)
        with pytest.raises(openai.BadRequestError) as err:
            oai(capped).responses.create(model=MODEL, input="hi", extra_body={"reasoning_budget": 5})
        assert (sent_error(err.value)["param"], sent_error(err.value)["limit"]) == ("reasoning_budget", 1)
    finally:
        stop_server(capped)


# -- raw text and SageMaker ----------------------------------------------------------------------------
def test_raw_text_routes_keep_the_thought_and_invocations_split_it(thinker: Server) -> None:
    with thinker.client() as c:
        prompt = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
        text = c.post("/v1/completions", json={"prompt": prompt, "max_tokens": 40, "temperature": 0}).json()
        assert text["choices"][0]["text"] == f"<think>{THOUGHT}</think>\n\n{ANSWER}"
        tgi = c.post("/generate", json={"inputs": prompt, "parameters": {"max_new_tokens": 40}}).json()
        assert tgi["generated_text"] == f"<think>{THOUGHT}</think>\n\n{ANSWER}"
        chat = c.post("/invocations", json={"messages": HI, **GREEDY}).json()
        message = chat["choices"][0]["message"]
        assert message["reasoning_content"] == THOUGHT and message["content"] == ANSWER


# a template whose generation prompt opens the thought, as DeepSeek-R1's (no switch to turn it off)
OPENING = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n<think>{% endif %}"
)


def test_a_prompt_that_opens_the_thought(tmp_path_factory: pytest.TempPathFactory) -> None:
    tmp = tmp_path_factory.mktemp("opening")
    (tmp / "opening.jinja").write_text(OPENING)
    srv = serve(tmp, "--chat-template", str(tmp / "opening.jinja"))
    try:
        client = oai(srv)
        message = client.chat.completions.create(model=MODEL, messages=HI, **GREEDY).choices[0].message
        assert (message.reasoning_content, message.content) == (THOUGHT, ANSWER)  # type: ignore[attr-defined]
        bounded = client.chat.completions.create(
            model=MODEL, messages=HI, **GREEDY, extra_body={"reasoning_budget": 1}
        )
        budget = bounded.choices[0].message
        assert budget.reasoning_content == "I" and budget.content == ANSWER  # type: ignore[attr-defined]
        fmt: Any = {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}}
        shaped = (
            client.chat.completions.create(model=MODEL, messages=HI, response_format=fmt, **GREEDY)
            .choices[0]
            .message
        )
        assert shaped.reasoning_content == THOUGHT  # type: ignore[attr-defined]
        assert isinstance(json.loads(shaped.content or "")["answer"], int)
        with pytest.raises(openai.BadRequestError) as err:
            client.chat.completions.create(model=MODEL, messages=HI, reasoning_effort="none", **GREEDY)
        assert "cannot turn thinking off" in sent_error(err.value)["message"]
    finally:
        stop_server(srv)


# -- gpt-oss (harmony channels) ------------------------------------------------------------------------
HARMONY_TOKENS = [
    "<|startoftext|>",
    "<|start|>",
    "<|message|>",
    "<|channel|>",
    "<|constrain|>",
    "<|end|>",
    "<|call|>",
    "<|return|>",
]


def test_gpt_oss_analysis_channel_is_the_thought(tmp_path_factory: pytest.TempPathFactory) -> None:
    """A tiny random gpt-oss with its real template, steered: a logit bias makes it write <|channel|>
    (so it opens the analysis channel, whose other tokens are forced), the budget of 2 closes the thought
    (<|end|><|start|>assistant forced), and a grammar writes the answer."""
    tmp = tmp_path_factory.mktemp("gpt-oss")
    template = (FIXTURES / "templates" / "openai-gpt-oss-120b.jinja").read_text()
    model = build_tiny_gguf(
        tmp / "gpt-oss.gguf",
        "gpt-oss",
        chat_template=template,
        special_tokens=HARMONY_TOKENS,
        bos_token="<|startoftext|>",
        eos_token="<|return|>",
    )
    srv = start_server(tmp, str(model), "--max-input-tokens", "768", "--max-total-tokens", "1024")
    try:
        client = oai(srv)
        tokenized = httpx.post(f"{srv.url}/tokenize", json={"content": "<|channel|>"}, timeout=10)
        channel = tokenized.json()["tokens"]
        r = client.chat.completions.create(
            model=MODEL,
            messages=HI,
            max_tokens=20,
            temperature=0,
            reasoning_effort="low",
            logit_bias={str(channel[0]): 100},
            extra_body={"reasoning_budget": 2, "grammar": 'root ::= "4"'},
        )
        message = r.choices[0].message
        thought = message.reasoning_content  # type: ignore[attr-defined]
        assert message.content == "4" and thought == "<|channel|><|channel|>"
        assert r.usage is not None and r.usage.completion_tokens_details is not None
        assert r.usage.completion_tokens_details.reasoning_tokens == 2
        with pytest.raises(openai.BadRequestError) as err:
            client.chat.completions.create(model=MODEL, messages=HI, max_tokens=2, reasoning_effort="none")
        assert "cannot turn thinking off" in sent_error(err.value)["message"]
    finally:
        stop_server(srv)

"""What a request asks of a thought, in the chat template's terms (Qwen3's real template), and the 400s
where the model cannot do it."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmhost.server.serving.chat_template import ChatTemplate
from llmhost.server.serving.reasoning import SYNTAXES, opened_by, syntax_for
from llmhost.server.serving.thinking import ThinkingAsk, from_effort, plan
from llmhost.web.errors import APIError

QWEN3 = ChatTemplate(
    (Path(__file__).parents[2] / "fixtures" / "templates" / "Qwen-Qwen3-0.6B.jinja").read_text(), "", ""
)
PLAIN = ChatTemplate("{% for m in messages %}{{ m.content }}{% endfor %}", "", "")
THINK = SYNTAXES["deepseek"]
HI = [{"role": "user", "content": "hi"}]


def test_effort_none_turns_qwen3s_thought_off_in_its_prompt() -> None:
    p = plan(from_effort("none", None), QWEN3, THINK, {}, None, -1)
    assert p.kwargs == {"enable_thinking": False} and p.budget is None
    prompt = QWEN3.render(HI, kwargs=p.kwargs)
    assert prompt.endswith("<think>\n\n</think>\n\n") and not opened_by(prompt, THINK)
    on = plan(from_effort("high", None), QWEN3, THINK, {}, None, -1)
    assert on.kwargs == {"enable_thinking": True}
    assert QWEN3.render(HI, kwargs=on.kwargs).endswith("<|im_start|>assistant\n")


def test_kwargs_server_defaults_then_the_request() -> None:
    p = plan(ThinkingAsk(), QWEN3, THINK, {"enable_thinking": False}, {"enable_thinking": True}, -1)
    assert p.kwargs == {"enable_thinking": True}


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"no_such_variable": 1}, "chat_template_kwargs.no_such_variable"),
        ({"messages": []}, "chat_template_kwargs.messages"),
    ],
)
def test_kwargs_the_template_does_not_read_are_refused(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(APIError) as err:
        plan(ThinkingAsk(), QWEN3, THINK, {}, kwargs, -1)
    assert err.value.status == 400 and err.value.field == field


def test_budgets_request_over_server_and_zero_is_off() -> None:
    assert plan(ThinkingAsk(), QWEN3, THINK, {}, None, 64).budget == 64
    assert plan(ThinkingAsk(budget=8), QWEN3, THINK, {}, None, 64).budget == 8
    off = plan(ThinkingAsk(budget=0), QWEN3, THINK, {}, None, -1)
    assert off.kwargs == {"enable_thinking": False}


def test_the_budget_max_caps_what_a_request_asks_and_bounds_an_unbudgeted_thought() -> None:
    assert plan(ThinkingAsk(budget=8), QWEN3, THINK, {}, None, -1, budget_max=8).budget == 8
    assert plan(ThinkingAsk(), QWEN3, THINK, {}, None, -1, budget_max=8).budget == 8
    assert plan(ThinkingAsk(), QWEN3, THINK, {}, None, 4, budget_max=8).budget == 4
    ask = ThinkingAsk(True, 9, field="thinking", budget_field="thinking.budget_tokens")
    with pytest.raises(APIError) as err:
        plan(ask, QWEN3, THINK, {}, None, -1, budget_max=8)
    assert err.value.status == 400 and err.value.field == "thinking.budget_tokens"
    assert err.value.extra == {"value": 9, "limit": 8}


def test_a_model_that_does_not_think_refuses_naming_the_field() -> None:
    for ask, field in (
        (from_effort("low", None), "reasoning_effort"),
        (from_effort(None, 5), "reasoning_budget"),
        (ThinkingAsk(True, 10, field="thinking", budget_field="thinking.budget_tokens"), "thinking"),
        (from_effort("none", None, "reasoning.effort"), "reasoning.effort"),
    ):
        with pytest.raises(APIError) as err:
            plan(ask, PLAIN, None, {}, None, -1)
        assert err.value.status == 400 and err.value.field == field
    # the server's budget applies to thinking models only
    assert plan(ThinkingAsk(), PLAIN, None, {}, None, 64).budget is None


def test_granites_switch_is_thinking() -> None:
    source = "{% if thinking %}Think in <think></think>.{% endif %}{{ messages[0].content }}"
    granite = ChatTemplate(source, "", "")
    assert plan(from_effort("high", None), granite, THINK, {}, None, -1).kwargs == {"thinking": True}
    assert plan(from_effort("none", None), granite, THINK, {}, None, -1).kwargs == {"thinking": False}


def test_a_template_without_a_switch_cannot_turn_thinking_off() -> None:
    always = ChatTemplate("{{ messages[0].content }}<think>\n", "", "")
    with pytest.raises(APIError) as err:
        plan(from_effort("none", None), always, THINK, {}, None, -1)
    assert err.value.field == "reasoning_effort"
    assert plan(from_effort("high", None), always, THINK, {}, None, -1).kwargs == {}
    assert opened_by(always.render(HI), THINK)


def test_gpt_oss_levels_go_to_its_template_and_it_cannot_stop_thinking() -> None:
    source = (
        '{{ "Reasoning: " + (reasoning_effort or "medium") }}{% for m in messages %}{% if m.thinking %}'
        "<|start|>assistant<|channel|>analysis<|message|>{{ m.thinking }}<|end|>{% endif %}{% endfor %}"
        "<|start|>assistant"
    )
    gpt_oss = ChatTemplate(source, "", "")
    harmony = syntax_for("auto", source)
    assert harmony == SYNTAXES["harmony"]
    low = plan(from_effort("low", None), gpt_oss, harmony, {}, None, -1)
    assert low.kwargs == {"reasoning_effort": "low"}
    with pytest.raises(APIError) as err:
        plan(from_effort("none", None), gpt_oss, harmony, {}, None, -1)
    assert err.value.field == "reasoning_effort"

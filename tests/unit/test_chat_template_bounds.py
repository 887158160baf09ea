"""A chat template is code from whoever made the model: it renders sandboxed, within a time and an output
size; one that loops, writes without end or reaches for Python's internals fails with why."""

from __future__ import annotations

import pytest

from llmhost.server.serving.chat_template import ChatTemplate, ChatTemplateBoundError, ChatTemplateError

MESSAGES = [{"role": "user", "content": "Hi"}]
PLAIN = (
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
    "{% if add_generation_prompt %}<a>{% endif %}"
)


def template(source: str, **kw: float) -> ChatTemplate:
    return ChatTemplate(source, "<s>", "</s>", **kw)  # type: ignore[arg-type]


def test_a_plain_template_renders_and_passes_the_probe() -> None:
    t = template(PLAIN)
    assert t.render(MESSAGES) == "<user>Hi<a>"
    assert t.probe() is None


@pytest.mark.parametrize(
    "source",
    [
        # nested loops over the sandbox's largest range, writing nothing: 10^10 iterations
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        # loops that call something at every turn
        "{% for i in range(100000) %}{% for j in range(100000) %}{{ ''.join([]) }}{% endfor %}{% endfor %}",
    ],
)
def test_a_template_that_loops_stops_at_its_time_limit(source: str) -> None:
    t = template(source, timeout_s=0.3)
    with pytest.raises(ChatTemplateBoundError, match="time limit"):
        t.render(MESSAGES)
    assert t.probe() is not None and "time limit" in str(t.probe())
    assert template(PLAIN, timeout_s=0.3).render(MESSAGES) == "<user>Hi<a>"  # the budget is per render


def test_a_template_that_writes_without_end_stops_at_its_output_limit() -> None:
    writes = "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}"
    with pytest.raises(ChatTemplateBoundError, match="more than 10000 characters"):
        template(writes, max_chars=10000).render(MESSAGES)
    with pytest.raises(ChatTemplateBoundError, match="multiplied"):
        template("{{ 'x' * 10000000000 }}").render(MESSAGES)
    with pytest.raises(ChatTemplateBoundError, match="power"):
        template("{{ 10 ** 10000000 }}").render(MESSAGES)


@pytest.mark.parametrize(
    "source",
    [
        "{{ messages.__class__.__mro__[1].__subclasses__() }}",
        "{{ ''.__class__.__base__.__subclasses__() }}",
        "{{ raise_exception.__globals__['os'].system('true') }}",
        "{{ cycler.__init__.__globals__.os.popen('id').read() }}",
        "{% set x = messages.append({'role': 'system'}) %}",  # the immutable sandbox: no mutation
    ],
)
def test_a_template_that_reaches_outside_its_sandbox_is_refused(source: str) -> None:
    t = template(source)
    with pytest.raises(ChatTemplateError):
        t.render(MESSAGES)
    fault = t.probe()
    if "__" in source or "append" in source:
        assert fault is not None and "sandbox" in fault


def test_recursion_without_end_is_a_bound_error() -> None:
    source = "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"
    with pytest.raises(ChatTemplateBoundError, match="recursed"):
        template(source).render(MESSAGES)


def test_a_template_refusing_the_messages_is_the_messages_fault() -> None:
    t = template("{{ raise_exception('roles must alternate') }}")
    with pytest.raises(ChatTemplateError, match="roles must alternate") as err:
        t.render(MESSAGES)
    assert not isinstance(err.value, ChatTemplateBoundError)
    assert t.probe() is None  # not the template's fault: the server starts, the request gets its 400

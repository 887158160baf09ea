"""A refusal over a token limit speaks the request's API: its own field names and the server's flag."""

from __future__ import annotations

import pytest

from llmhost.engine.config import EngineConfig
from llmhost.engine.request import RequestTooLargeError, check_limits
from llmhost.server import limit_fields
from llmhost.server.errors import from_engine
from llmhost.server.limit_fields import LimitFields

CONFIG = EngineConfig(max_input_tokens=32, max_total_tokens=64)


def refusal(n_prompt: int, max_tokens: int) -> RequestTooLargeError:
    with pytest.raises(RequestTooLargeError) as err:
        check_limits(CONFIG, n_prompt, max_tokens)
    return err.value


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        (limit_fields.COMPLETIONS, "max_tokens"),
        (limit_fields.CHAT_MAX_COMPLETION, "max_completion_tokens"),
        (limit_fields.MESSAGES, "max_tokens"),
        (limit_fields.RESPONSES, "max_output_tokens"),
        (limit_fields.TGI, "parameters.max_new_tokens"),
        (limit_fields.OLLAMA_CHAT, "options.num_predict"),
    ],
)
def test_prompt_plus_new_tokens_names_the_apis_field_and_the_flag(fields: LimitFields, field: str) -> None:
    err = from_engine(refusal(10, 100), fields)
    assert err.status == 422 and err.field == field
    assert err.extra == {"value": 110, "limit": 64}
    assert f"{field} 100" in err.message and "110" in err.message and "(--max-total-tokens)" in err.message
    assert "MAX_TOTAL_TOKENS" not in err.message and "max_total_tokens" not in err.message


@pytest.mark.parametrize(
    ("fields", "field"),
    [(limit_fields.COMPLETIONS, "prompt"), (limit_fields.TGI, "inputs"), (limit_fields.RESPONSES, "input")],
)
def test_a_long_prompt_names_the_prompts_field_and_the_flag(fields: LimitFields, field: str) -> None:
    err = from_engine(refusal(40, 1), fields)
    assert err.field == field and err.extra == {"value": 40, "limit": 32}
    assert "40 tokens" in err.message and "(--max-input-tokens)" in err.message


def test_an_empty_prompt_names_the_prompts_field() -> None:
    err = from_engine(refusal(0, 1), limit_fields.OLLAMA_GENERATE)
    assert err.field == "prompt" and "empty" in err.message


def test_an_embedding_inputs_refusal_keeps_its_field() -> None:
    exc = RequestTooLargeError("input", 0, 1, "input is empty: at least one input is needed")
    err = from_engine(exc, limit_fields.CHAT)
    assert err.field == "input" and err.message == "input is empty: at least one input is needed"

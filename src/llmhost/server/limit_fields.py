"""Each API's words for the fields the token limits bear on: a refusal over a limit names the
request's own field (`max_tokens` on OpenAI and Anthropic, `parameters.max_new_tokens` on TGI,
`options.num_predict` on Ollama) and the server's limit by its flag, never llmhost's internal names."""

from __future__ import annotations

from dataclasses import dataclass

from llmhost.engine.request import RequestTooLargeError
from llmhost.settings.serve import SERVE_SPEC
from llmhost.shared.jsontypes import JSONValue
from llmhost.web.errors import APIError


@dataclass(frozen=True, slots=True)
class LimitFields:
    """The fields of one API's request that the token limits bear on, in that API's own words: a
    refusal over a limit names them (and the server's limit by its flag), never llmhost's names."""

    prompt: str  # what holds the prompt
    max_tokens: str  # what asks for new tokens


COMPLETIONS = LimitFields("prompt", "max_tokens")
CHAT = LimitFields("messages", "max_tokens")
CHAT_MAX_COMPLETION = LimitFields("messages", "max_completion_tokens")
MESSAGES = LimitFields("messages", "max_tokens")  # Anthropic's
RESPONSES = LimitFields("input", "max_output_tokens")
TGI = LimitFields("inputs", "parameters.max_new_tokens")
OLLAMA_GENERATE = LimitFields("prompt", "options.num_predict")
OLLAMA_CHAT = LimitFields("messages", "options.num_predict")


def too_large(exc: RequestTooLargeError, fields: LimitFields) -> APIError:
    """The engine's refusal over a token limit, in the API's field names, with the limit's flag."""
    facts: dict[str, JSONValue] = {"value": exc.value, "limit": exc.limit}
    if exc.limit_name == "max_input_tokens":
        flag = SERVE_SPEC.setting_of(exc.limit_name).flag
        message = (
            f"{fields.prompt}: the prompt is {exc.n_prompt} tokens, over this server's limit of "
            f"{exc.limit} input tokens ({flag})"
        )
        return APIError(exc.status, message, field=fields.prompt, extra=facts)
    if exc.limit_name == "max_total_tokens":
        flag = SERVE_SPEC.setting_of(exc.limit_name).flag
        message = (
            f"{fields.max_tokens}: the prompt's {exc.n_prompt} tokens + {fields.max_tokens} "
            f"{exc.max_tokens} = {exc.value} tokens, over this server's limit of {exc.limit} "
            f"total tokens ({flag})"
        )
        return APIError(exc.status, message, field=fields.max_tokens, extra=facts)
    if exc.field_name == "prompt":  # an empty prompt
        return APIError(exc.status, f"{fields.prompt}: {exc}", field=fields.prompt, extra=facts)
    return APIError(exc.status, str(exc), field=exc.field_name, extra=facts)

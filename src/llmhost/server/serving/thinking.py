"""What a chat request asks of a thinking model's thought, put in the chat template's terms: on or off
(`enable_thinking`), how long (a budget the engine enforces), and the template variables it passes.

Each API's field is mapped here once: OpenAI `reasoning_effort`, Responses `reasoning.effort`, Anthropic
`thinking`, and `reasoning_budget` / `--reasoning-budget`. Where the model cannot do what is asked (it
does not think, or its template has no switch), the answer is a 400 naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmhost.server.serving.chat_template import RESERVED, ChatTemplate
from llmhost.server.serving.reasoning import ThinkSyntax
from llmhost.shared.jsontypes import JSONObject
from llmhost.web.errors import APIError

# the switches templates read: Qwen3's, SmolLM3's and DeepSeek-V3.1's; Granite 3.3's
SWITCHES = ("enable_thinking", "thinking")
LEVELS = "reasoning_effort"  # gpt-oss's template: low, medium or high
# OpenAI's reasoning_effort levels; none and minimal turn a switchable thought off, the others on
EFFORTS = ("none", "minimal", "low", "medium", "high")


@dataclass(slots=True, frozen=True)
class ThinkingAsk:
    """A request's ask in API-neutral terms; `field` is the request field named in errors."""

    enabled: bool | None = None  # None: the template's own default
    budget: int | None = None  # most thought tokens; None: the server's --reasoning-budget
    effort: str | None = None  # OpenAI's level, for templates that read `reasoning_effort` (gpt-oss)
    field: str = "reasoning_effort"
    budget_field: str = "reasoning_budget"


def from_effort(effort: str | None, budget: int | None, field: str = "reasoning_effort") -> ThinkingAsk:
    """OpenAI's `reasoning_effort` (and llmhost's `reasoning_budget`)."""
    enabled = None if effort is None else effort not in ("none", "minimal")
    return ThinkingAsk(enabled, budget, effort if enabled else None, field=field)


@dataclass(slots=True, frozen=True)
class ThinkingPlan:
    """The template variables to render with, and the thought's budget (None: unbounded)."""

    kwargs: JSONObject
    budget: int | None


def plan(
    ask: ThinkingAsk,
    template: ChatTemplate,
    syntax: ThinkSyntax | None,
    defaults: JSONObject,
    requested: JSONObject | None,
    server_budget: int,
    budget_max: int = -1,
) -> ThinkingPlan:
    """The kwargs (server defaults, then the request's), the switch set by `ask`, and the budget (at
    most `budget_max`, --reasoning-budget-max, where it is not -1)."""
    kwargs = {**defaults, **checked_kwargs(template, requested or {})}
    enabled = ask.enabled
    budget = capped(ask, server_budget, budget_max)
    if syntax is None:
        if enabled is not None or ask.budget is not None:
            named = ask.field if enabled is not None else ask.budget_field
            raise APIError(
                400,
                f"{named}: this model does not think (its chat template writes no thought, "
                "or the server runs with --reasoning-format none)",
                field=named,
            )
        return ThinkingPlan(kwargs, None)
    switch = next((name for name in SWITCHES if template.uses(name)), None)
    if budget == 0 and enabled is None and switch is not None:
        enabled = False  # llama-server's --reasoning-budget 0: thinking off where the template can
    if ask.effort is not None and template.uses(LEVELS):
        kwargs[LEVELS] = ask.effort
    if enabled is not None:
        if switch is not None:
            kwargs[switch] = enabled
        elif not enabled:
            raise APIError(
                400,
                f"{ask.field}: this model's chat template cannot turn thinking off (it "
                f"reads neither {' nor '.join(SWITCHES)})",
                field=ask.field,
            )
    return ThinkingPlan(kwargs, budget)


def capped(ask: ThinkingAsk, server_budget: int, budget_max: int) -> int | None:
    """The thought's budget: the request's, else the server's, never over `budget_max` (a request's
    budget overrides the server's, as llama-server's thinking_budget_tokens does: the cap bounds what a
    client may ask). None: unbounded."""
    budget = ask.budget if ask.budget is not None else (server_budget if server_budget >= 0 else None)
    if budget_max < 0:
        return budget
    if ask.budget is not None and ask.budget > budget_max:
        raise APIError(
            400,
            f"{ask.budget_field} {ask.budget} is over this server's limit of {budget_max} thought tokens "
            "(--reasoning-budget-max)",
            field=ask.budget_field,
            extra={"value": ask.budget, "limit": budget_max},
        )
    return budget_max if budget is None else budget


def checked_kwargs(template: ChatTemplate, kwargs: JSONObject) -> JSONObject:
    """A request's chat_template_kwargs: only variables the template reads and render() leaves free."""
    for name in kwargs:
        where = f"chat_template_kwargs.{name}"
        if name in RESERVED:
            raise APIError(
                400, f"{where}: {name} is set by the request itself, not a template kwarg", field=where
            )
        if not template.uses(name):
            raise APIError(400, f"{where}: the model's chat template does not read {name}", field=where)
    return kwargs

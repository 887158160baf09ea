"""Engine sampling parameters from the fields the OpenAI bodies share (the other chat APIs are put in
those terms first)."""

from __future__ import annotations

from llmhost.engine import Constraint, SamplingParams
from llmhost.server.protocol.openai import SamplingFields
from llmhost.server.serving.context import build_params
from llmhost.web.errors import APIError


def sampling_params(
    body: SamplingFields, max_tokens: int, logprobs: int | None, constraint: Constraint | None
) -> SamplingParams:
    bias: dict[int, float] = {}
    for key, value in (body.logit_bias or {}).items():
        try:
            bias[int(key)] = value
        except ValueError as exc:
            raise APIError(422, f"logit_bias key {key!r} is not a token id", field="logit_bias") from exc
    return build_params(
        max_tokens=max_tokens,
        temperature=body.temperature,
        top_k=body.top_k,
        top_p=body.top_p,
        min_p=body.min_p,
        typical_p=body.typical_p,
        repetition_penalty=body.repetition_penalty,
        frequency_penalty=body.frequency_penalty,
        presence_penalty=body.presence_penalty,
        seed=body.seed,
        stop=body.stop_list(),
        ignore_eos=body.ignore_eos,
        logit_bias=bias,
        logprobs=logprobs,
        constraint=constraint,
    )

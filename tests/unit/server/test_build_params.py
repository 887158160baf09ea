"""A sampling value the engine refuses is a 422 naming its field, from the exception's type (ParamError
carries the field), not from the message's text."""

from __future__ import annotations

import pytest

from llmhost.engine.request import ParamError, SamplingParams
from llmhost.server.serving.context import build_params
from llmhost.web.errors import APIError


@pytest.mark.parametrize(
    ("given", "field"),
    [
        ({"top_p": 2.0}, "top_p"),
        ({"temperature": float("nan")}, "temperature"),
        ({"logit_bias": {1: float("inf")}}, "logit_bias"),
    ],
)
def test_a_refused_value_names_its_field(given: dict[str, object], field: str) -> None:
    with pytest.raises(APIError) as info:
        build_params(max_tokens=4, **given)
    assert info.value.status == 422 and info.value.field == field
    assert info.value.message.startswith(f"{field} ")  # the message reads as before: "top_p must be ..."
    with pytest.raises(ParamError) as raw:
        SamplingParams(**given)  # type: ignore[arg-type]
    assert raw.value.field_name == field and isinstance(raw.value, ValueError)

"""The API compatibility page (docs/reference/api-compatibility.md) says what the protocol models do:
every field of each model and of the vendor's request type is listed, each hand-kept note names a real
field, each refused field is refused by the model, and the one-value fields take that value only."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from docsgen import api_compat
from docsgen.api_compat import APIS, NOTES, REFUSED, Api
from docsgen.hooks import expand
from llmhost.server.protocol.responses import ResponsesRequest
from llmhost.server.serving.apis.responses import to_chat
from llmhost.web.errors import APIError
from tests.docs.runner import ROOT

MINIMAL: dict[str, dict[str, Any]] = {
    "chat": {"messages": [{"role": "user", "content": "hi"}]},
    "completions": {"prompt": "hi"},
    "responses": {"input": "hi"},
    "embeddings": {"input": "hi"},
    "messages": {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]},
    "tgi": {},
}
IDS = [a.key for a in APIS]


def test_the_page_is_generated() -> None:
    text = expand((ROOT / "docs" / "reference" / "api-compatibility.md").read_text())
    for api in APIS:
        assert f"## {api.title}" in text
    assert "`max_tokens` | supported" in text


@pytest.mark.parametrize("api", APIS, ids=IDS)
def test_every_field_on_either_side_is_listed_once(api: Api) -> None:
    listed = [name.strip("`") for name, *_ in api_compat.rows(api)]
    assert len(listed) == len(set(listed))
    assert set(listed) == set(api.ours()) | api.theirs()
    assert api.theirs(), f"no fields read from {api.upstream}"
    assert set(MINIMAL) == {a.key for a in APIS}


@pytest.mark.parametrize("api", APIS, ids=IDS)
def test_each_note_names_a_field_of_the_model(api: Api) -> None:
    assert set(NOTES.get(api.key, {})) <= set(api.ours())


@pytest.mark.parametrize("api", APIS, ids=IDS)
def test_each_refused_field_is_refused_by_the_model(api: Api) -> None:
    model = api.protocol()
    model.model_validate(MINIMAL[api.key])
    refused = [name.strip("`") for name, status, *_ in api_compat.rows(api) if status == REFUSED]
    for name in refused:
        with pytest.raises(ValidationError) as err:
            model.model_validate({**MINIMAL[api.key], name: 1})
        assert any(e["type"] == "extra_forbidden" and e["loc"] == (name,) for e in err.value.errors()), name


ONE_VALUE = [  # (api, field, the value accepted, a value refused) at the model
    ("completions", "suffix", "", "x"),
    ("responses", "truncation", "disabled", "auto"),
    ("tgi", "best_of", 1, 2),
    ("tgi", "watermark", False, True),
]


@pytest.mark.parametrize(("key", "field", "good", "bad"), ONE_VALUE)
def test_one_value_fields_take_that_value_only(key: str, field: str, good: Any, bad: Any) -> None:
    assert NOTES[key][field][0] == api_compat.ONLY
    model = next(a for a in APIS if a.key == key).protocol()
    model.model_validate({**MINIMAL[key], field: good})
    with pytest.raises(ValidationError):
        model.model_validate({**MINIMAL[key], field: bad})


def test_responses_store_and_previous_response_id_are_refused_when_set() -> None:
    to_chat(ResponsesRequest.model_validate({"input": "hi", "store": False}))
    for body in ({"store": True}, {"previous_response_id": "resp_1"}):
        with pytest.raises(APIError) as err:
            to_chat(ResponsesRequest.model_validate({"input": "hi", **body}))
        assert err.value.status == 400

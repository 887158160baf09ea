"""SageMaker's X-Amzn-SageMaker-Adapter-Identifier on a copy: it selects the adapter as the body's own
fields would, and a body choosing another one is refused naming its field."""

from __future__ import annotations

from typing import Any

import pytest

from llmhost.engine.lora import AdapterSpec
from llmhost.server.serving.adapters import ADAPTER_HEADER, AdapterChoice, header_selects
from llmhost.web.errors import APIError

CHOICE = AdapterChoice((AdapterSpec("sql", "sql.gguf"), AdapterSpec("poet", "poet.gguf", 0.5)))


def test_the_header_selects_the_adapter_by_the_bodys_field() -> None:
    assert header_selects(CHOICE, "sql", {"prompt": "x"}, "base") == {"prompt": "x", "model": "sql"}
    assert header_selects(CHOICE, "sql", {"messages": [], "model": "base"}, "base")["model"] == "sql"
    tgi = header_selects(CHOICE, "poet", {"inputs": "x", "parameters": {"max_new_tokens": 2}}, "base")
    assert tgi["parameters"] == {"max_new_tokens": 2, "adapter_id": "poet"}
    assert header_selects(CHOICE, None, {"prompt": "x"}, "base") == {"prompt": "x"}


@pytest.mark.parametrize(
    ("adapter", "body", "field"),
    [
        ("nope", {"prompt": "x"}, ADAPTER_HEADER),
        ("sql", {"prompt": "x", "model": "poet"}, "model"),
        ("sql", {"prompt": "x", "lora": []}, "lora"),
        ("sql", {"inputs": "x", "parameters": {"adapter_id": "poet"}}, "parameters.adapter_id"),
    ],
)
def test_a_body_choosing_otherwise_is_a_422_naming_its_field(
    adapter: str, body: dict[str, Any], field: str
) -> None:
    with pytest.raises(APIError) as caught:
        header_selects(CHOICE, adapter, body, "base")
    assert caught.value.status == 422 and caught.value.field == field

"""Which component a request naming an adapter goes to, and what its copy is told (pure routing logic:
the behaviour on real copies is in tests/integration/test_lora_components.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from starlette.requests import Request

from llmhost.endpoint.dataplane.routing import (
    ADAPTER_HEADER,
    COMPONENT_HEADER,
    by_header,
    header_adapter,
    model_named,
    with_adapter,
)


@dataclass
class Comp:
    name: str
    adapters: frozenset[str] = frozenset()
    removing: bool = False


@dataclass
class Registry:
    components: dict[str, Comp] = field(default_factory=dict)


REG = Registry({"base": Comp("base", frozenset({"sql"})), "other": Comp("other")})


def test_a_header_naming_an_adapter_goes_to_its_base_with_the_adapter() -> None:
    assert by_header(REG, {COMPONENT_HEADER: "sql"}) is REG.components["base"]
    assert header_adapter(REG, {COMPONENT_HEADER: "sql"}) == "sql"
    assert header_adapter(REG, {COMPONENT_HEADER: "base"}) is None  # a component: no adapter
    assert header_adapter(REG, {}) is None
    unknown = by_header(REG, {COMPONENT_HEADER: "nope"})
    assert not isinstance(unknown, Comp) and unknown.status_code == 404


def test_the_copy_gets_the_adapter_header_and_its_own_component_name() -> None:
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/invocations",
        "headers": [
            (b"x-amzn-sagemaker-inference-component", b"sql"),
            (b"x-amzn-sagemaker-adapter-identifier", b"spoofed"),
        ],
    }
    request = with_adapter(Request(scope), "sql", "base")
    assert request.headers[ADAPTER_HEADER] == "sql" and request.headers[COMPONENT_HEADER] == "base"
    assert request.headers.getlist(ADAPTER_HEADER) == ["sql"]
    plain = Request(scope)
    assert with_adapter(plain, None, "base") is plain


def test_a_body_naming_no_model_names_the_header_adapter() -> None:
    assert json.loads(model_named(b'{"prompt": "x"}', "sql")) == {"prompt": "x", "model": "sql"}
    assert json.loads(model_named(b'{"prompt": "x", "model": "tgi"}', "sql"))["model"] == "sql"
    assert model_named(b'{"model": "base"}', "sql") == b'{"model": "base"}'  # the body decides
    assert model_named(b"not json", "sql") == b"not json"
    assert model_named(b'{"prompt": "x"}', None) == b'{"prompt": "x"}'

"""JSON text as llmhost writes it: compact, not ASCII-escaped, one line."""

from __future__ import annotations

import json

from llmhost.shared.jsontext import compact


def test_compact_is_one_line_without_spaces_and_keeps_text_as_it_is() -> None:
    data = {"text": "café 🙂\nnext", "n": [1, 2.5, None, True], "nested": {"a": "b"}}
    line = compact(data)
    assert line == '{"text":"café 🙂\\nnext","n":[1,2.5,null,true],"nested":{"a":"b"}}'
    assert "\n" not in line and json.loads(line) == data


def test_compact_is_what_json_dumps_writes_with_those_options() -> None:
    data = {"k": ["ü", {"x": 1e-05, "y": -0.0}], "big": 10**20}
    assert compact(data) == json.dumps(data, separators=(",", ":"), ensure_ascii=False)

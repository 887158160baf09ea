"""A sweep's `serve: {lora: [...]}`: a repeatable setting's value is a list (each item one `--lora`), a list
of such lists is swept; several copies get the adapters under their component's `adapters:`."""

from __future__ import annotations

from pathlib import Path

import yaml

from llmhost.bench.sweep import SweepSpec, expand
from llmhost.endpoint.spec import parse_endpoint


def loras(argv: list[str]) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == "--lora"]


def test_a_list_of_adapters_is_one_value_and_a_list_of_lists_is_swept() -> None:
    one = {"configurations": [{"serve": {"lora": ["a=a.gguf", "b=s3://x/b.gguf:0.5"]}}]}
    [launch] = expand(SweepSpec.model_validate(one))
    assert loras(launch.argv) == ["a=a.gguf", "b=s3://x/b.gguf:0.5"]
    swept = {"configurations": [{"serve": {"lora": [["a=a.gguf"], ["a=a.gguf", "b=b.gguf"]]}}]}
    assert [loras(x.argv) for x in expand(SweepSpec.model_validate(swept))] == [
        ["a=a.gguf"],
        ["a=a.gguf", "b=b.gguf"],
    ]


def test_copies_load_the_adapters_from_their_endpoint_file() -> None:
    spec = {"configurations": [{"serve": {"copies": 2, "threads": 1, "lora": ["a=/m/a.gguf:0.5"]}}]}
    [launch] = expand(SweepSpec.model_validate(spec))
    i = launch.argv.index("up")
    [component] = parse_endpoint(yaml.safe_load(Path(launch.argv[i + 1]).read_text())).components
    assert [(a.name, a.path, a.scale) for a in component.adapters] == [("a", "/m/a.gguf", 0.5)]
    assert "lora" not in component.engine.model_dump(exclude_none=True)

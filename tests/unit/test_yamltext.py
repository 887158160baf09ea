"""llmhost.shared.yamltext: what yaml.safe_load reads, refused as yaml.safe_load refuses, with libyaml's
parser (the lock's PyYAML wheel is built with it)."""

from __future__ import annotations

import pytest
import yaml

from llmhost.shared import yamltext

DOCUMENTS = [
    "name: chat\ncomponents:\n  - {name: a, resources: {num_cpus: 0.5, memory_mb: 600}}\n",
    "- key: sk-1\n  name: team\n  requests_per_minute: 5\n- sk-2\n",
    "a: 1.5e3\nb: ~\nc: [yes, no, on, 0o17, 0x1f, .inf]\nd: 2026-12-07\ne: !!str 12\n",
    "text: |\n  two\n  lines\nfolded: >\n  one\n  line\n",
    "base: &b {x: 1}\nderived: {<<: *b, y: 2}\n",
    "",
    '"just a string"',
]


@pytest.mark.parametrize("text", DOCUMENTS)
def test_the_same_document_as_safe_load(text: str) -> None:
    assert yamltext.load(text) == yaml.safe_load(text)
    assert yamltext.load(text.encode()) == yaml.safe_load(text)


def test_libyaml_reads_it() -> None:
    assert yaml.__with_libyaml__


@pytest.mark.parametrize(
    "text", ["a: [1,\n", "a: b: c\n", "!!python/object/apply:os.system ['true']\n", "a: *undefined\n"]
)
def test_refused_as_safe_load_refuses_with_where(text: str) -> None:
    with pytest.raises(yaml.YAMLError):
        yaml.safe_load(text)
    with pytest.raises(yaml.YAMLError) as info:
        yamltext.load(text)
    assert getattr(info.value, "problem_mark", None) is not None or isinstance(
        info.value, yaml.constructor.ConstructorError
    )

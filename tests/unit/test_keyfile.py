"""`--api-key-file`: plain lines or a YAML list of named keys with quotas; a wrong entry is named,
its key never shown."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmhost.web.auth import load_keys
from llmhost.web.keyfile import UNNAMED, KeyEntry, Limits, is_yaml, read_key_file

YAML = """\
# the team's keys
- key: sk-alice-1
  name: alice
  requests_per_minute: 5
- {key: sk-bob-2, name: bob, tokens_per_minute: 2000}
- key: sk-carol-3
  name: carol
"""


def test_plain_lines_stay_unnamed_and_unlimited(tmp_path: Path) -> None:
    file = tmp_path / "keys"
    file.write_text("# operators\nfrom-file\n\n  -dash-first  \n")
    assert read_key_file(file) == [KeyEntry("from-file"), KeyEntry("-dash-first")]


def test_yaml_entries_carry_name_and_limits(tmp_path: Path) -> None:
    file = tmp_path / "keys.yaml"
    file.write_text(YAML)
    assert read_key_file(file) == [
        KeyEntry("sk-alice-1", "alice", Limits(requests_per_minute=5)),
        KeyEntry("sk-bob-2", "bob", Limits(tokens_per_minute=2000)),
        KeyEntry("sk-carol-3", "carol"),
    ]
    keys = load_keys(["flag"], file, env={"LLMHOST_API_KEYS": "sk-alice-1"})
    alice = keys.match("sk-alice-1")
    # the same key given again without a name keeps the entry's name and quota
    assert alice is not None and alice.name == "alice" and alice.limits.requests_per_minute == 5
    assert keys.match("flag") == UNNAMED and keys.match("nope") is None and keys.limited


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("- key: a\n", True),
        ("\n# c\n-\n", True),
        ("key-one\n- key: a\n", False),
        ("-key\n", False),
        ("# only comments\n", False),
    ],
)
def test_the_first_entry_tells_the_form(text: str, expected: bool) -> None:
    assert is_yaml(text) is expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- key: sk-secret\n  name: a\n  requests_per_minute: 0\n", "(name 'a'): requests_per_minute:"),
        ("- key: sk-secret\n  name: a\n  tokens_per_minute: many\n", "(name 'a'): tokens_per_minute:"),
        ("- key: sk-ok\n  name: a\n- key: sk-secret\n", "entry 2: name: Field required"),
        ("- key: sk-secret x\n  name: a\n", "entry 1 (name 'a'): key: must not contain whitespace"),
        ("- key: sk-secret\n  name: a b\n", "name: letters, digits"),
        ("- key: sk-secret\n  name: a\n  rpm: 3\n", "entry 1 (name 'a'): rpm: unknown field"),
        ("- sk-secret\n", "entry 1 is not a mapping"),
        ("- key: sk-secret\n  name: a\n- key: sk-secret\n  name: b\n", "'a' and 'b' have the same key"),
        ("- key: sk-secret\n  name: a\n- key: sk-other\n  name: a\n", "the name 'a' is given twice"),
        ("- key: sk-secret\n  name: [\n", "not valid YAML at line"),
        ("- key: 12345\n  name: a\n", "entry 1 (name 'a'): key: Input should be a valid string"),
    ],
)
def test_a_wrong_entry_is_named_never_its_key(tmp_path: Path, text: str, message: str) -> None:
    file = tmp_path / "keys.yaml"
    file.write_text(text)
    with pytest.raises(ValueError, match="api-key-file") as refused:
        load_keys([], file, env={})
    assert message in str(refused.value) and "secret" not in str(refused.value)
    assert "12345" not in str(refused.value)


def test_a_front_that_cannot_count_tokens_refuses_a_token_quota(tmp_path: Path) -> None:
    file = tmp_path / "keys.yaml"
    file.write_text(YAML)
    with pytest.raises(ValueError, match="tokens_per_minute is counted by `llmhost serve`"):
        load_keys([], file, env={}, count_tokens=False)


def test_keys_reload_from_where_they_came(tmp_path: Path) -> None:
    file = tmp_path / "keys.yaml"
    file.write_text(YAML)
    keys = load_keys([], file, env={"LLMHOST_API_KEY": "env"})
    file.write_text("- key: sk-dave-4\n  name: dave\n")
    assert keys.loader is not None
    again = keys.loader()
    assert again.accepts("sk-dave-4") and again.accepts("env") and not again.accepts("sk-alice-1")

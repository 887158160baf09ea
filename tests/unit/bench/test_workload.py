"""Prompts: exact synthetic lengths via /tokenize, the stated approximation, files, the built-in set."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmhost.bench.load.workload import (
    METHOD_APPROX,
    METHOD_TOKENIZE,
    Tokenizer,
    builtin_prompts,
    listed_workload,
    load_prompts_file,
    synthetic_workload,
)


async def test_synthetic_prompts_have_exact_token_length(fake_url: str) -> None:
    tok = await Tokenizer.probe(fake_url)
    assert tok is not None
    wl = await synthetic_workload(100, 6, tok)
    assert wl.token_count_method == METHOD_TOKENIZE and len(wl.prompts) == 6
    for p in wl.prompts:
        assert p.exact and len(await tok.tokenize(p.text)) == 100
    assert len({p.text for p in wl.prompts}) == 6  # distinct: a prefix cache cannot serve one from another


async def test_without_tokenizer_lengths_are_approximate(fake_url_no_tokenizer: str) -> None:
    assert await Tokenizer.probe(fake_url_no_tokenizer) is None
    wl = await synthetic_workload(50, 3, None)
    assert wl.token_count_method == METHOD_APPROX == "approx_4_chars_per_token"
    assert all(len(p.text) == 200 and not p.exact for p in wl.prompts)


def test_builtin_prompts_are_varied() -> None:
    prompts = builtin_prompts()
    assert 20 <= len(prompts) <= 40
    lengths = sorted(len(t) for t, _ in prompts)
    assert lengths[0] < 80 and lengths[-1] > 400


async def test_prompts_file(tmp_path: Path) -> None:
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "one two three", "max_new_tokens": 5}\n\n"four five"\n')
    items = load_prompts_file(f)
    assert items == [("one two three", 5), ("four five", None)]
    wl = await listed_workload(items, f"file:{f}", None)
    assert wl.prompts[0].max_new_tokens == 5 and wl.prompts[0].tokens == 3  # 13 chars / 4
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"nothing": 1}\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:1"):
        load_prompts_file(bad)

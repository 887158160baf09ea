"""An embeddings input cut to the tokens it may have (Ollama's and TEI's `truncate`): the text's own
tokens are cut, from its end or its start, and the model's special tokens around them (BOS; a BERT's
CLS and SEP) kept, as a Hugging Face tokenizer truncates before adding them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

Direction = Literal["Right", "Left"]


@dataclass(frozen=True, slots=True)
class Cut:
    limit: int  # the most tokens an input may have, its special tokens included
    direction: Direction = "Right"  # Right: its last tokens are dropped; Left: its first


def cut_tokens(tokens: list[int], plain: list[int], cut: Cut) -> list[int]:
    """`tokens` (a text's, special tokens added) cut to `cut.limit`, given `plain`, the same text's
    tokens without them: the special tokens before and after the text's stay. Where `plain` is not
    found in `tokens` (a tokenizer that merges across the boundary), `tokens` themselves are cut."""
    if len(tokens) <= cut.limit:
        return tokens
    head = next((i for i in range(len(tokens) - len(plain) + 1) if tokens[i : i + len(plain)] == plain), None)
    if head is None or not plain:
        return tokens[: cut.limit] if cut.direction == "Right" else tokens[-cut.limit :]
    before, after = tokens[:head], tokens[head + len(plain) :]
    room = max(0, cut.limit - len(before) - len(after))
    body = plain[:room] if cut.direction == "Right" else plain[len(plain) - room :]
    return (before + body + after)[: cut.limit]


def cut_inputs(
    inputs: list[str | list[int]],
    tokens: list[list[int]],
    cut: Cut,
    plain: Callable[[str], list[int]],
) -> list[list[int]]:
    """Each input's `tokens` cut to fit; `plain(text)`: a text's tokens without special tokens (asked
    only of the texts over the limit). Token-id inputs are cut as they are."""
    out: list[list[int]] = []
    for item, ids in zip(inputs, tokens, strict=True):
        if len(ids) <= cut.limit:
            out.append(ids)
        elif isinstance(item, str):
            out.append(cut_tokens(ids, plain(item), cut))
        else:
            out.append(ids[: cut.limit] if cut.direction == "Right" else ids[-cut.limit :])
    return out

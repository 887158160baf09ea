"""The completions API's logprobs object: token offsets in characters with multi-byte characters split
across tokens, merged tokens, special tokens, and the echoed prompt's text."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from llmhost.engine import TokenLogprob
from llmhost.server.serving.apis.scoring import Echo, LogprobsBuilder, Offsets, concat, echo_prompt


def char_at_byte(data: bytes, pos: int) -> int:
    """The index of the character holding byte `pos` (or the end)."""
    return len(data[:pos].decode("utf-8", errors="ignore"))


def test_merged_and_multibyte_tokens() -> None:
    # "Hello €uro 日本" with "€" split over two tokens and "日本" merged into one
    pieces = [b"Hel", b"lo", b" \xe2\x82", b"\xacuro", b" ", "日本".encode()]
    text = b"".join(pieces).decode()
    assert text == "Hello €uro 日本"
    offsets = Offsets().take(pieces)
    assert offsets == [0, 3, 5, 6, 10, 11]
    assert text[offsets[3]] == "€"  # the token finishing "€" points at it
    assert text[offsets[2]] == " " and text[offsets[5] :] == "日本"


def test_a_character_over_three_tokens_and_special_tokens_without_text() -> None:
    pieces = [b"", b"a", b"\xf0\x9f", b"\x98", b"\x80", b"b", b""]  # <bos> a 😀 (4 bytes over 3) b <eos>
    assert b"".join(pieces).decode() == "a😀b"
    assert Offsets().take(pieces) == [0, 0, 1, 1, 1, 2, 3]


def test_offsets_count_on_from_a_start_across_calls() -> None:
    counter = Offsets(7)
    assert counter.take([b"ab", b"\xc3"]) == [7, 9]
    assert counter.take([b"\xa9", b"x"]) == [9, 10]  # "é" completed by the next event's token


def test_invalid_bytes_count_as_the_replacement_character_the_text_holds() -> None:
    pieces = [b"a", b"\xff", b"b"]
    assert b"".join(pieces).decode("utf-8", "replace") == "a\ufffdb"
    assert Offsets().take(pieces) == [0, 1, 2]


@given(st.text(min_size=1, max_size=40), st.data())
def test_each_offset_is_the_character_holding_the_token_s_first_byte(text: str, data: st.DataObject) -> None:
    raw = text.encode()
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=12)))
    bounds = [0, *cuts, len(raw)]
    pieces = [raw[a:b] for a, b in itertools.pairwise(bounds)]
    offsets = Offsets().take(pieces)
    assert offsets == [char_at_byte(raw, a) for a in bounds[:-1]]
    assert offsets == sorted(offsets)


def test_echo_of_text_token_ids_and_a_space_prefix() -> None:
    pieces = [b"", b"Hi", b" there"]
    assert echo_prompt([2, 5, 6], pieces, "Hi there") == Echo("Hi there", [2, 5, 6], [0, 0, 2])
    assert echo_prompt([2, 5, 6], pieces, None) == Echo("Hi there", [2, 5, 6], [0, 0, 2])
    # a tokenizer that adds a leading space: offsets index the text as sent
    spaced = [b" Hi", b" there"]
    assert echo_prompt([5, 6], spaced, "Hi there") == Echo("Hi there", [5, 6], [0, 2])
    # a tokenizer that normalized the text: the echo is what the model was given
    assert echo_prompt([7], [b"ff"], "\ufb00") == Echo("ff", [7], [0])


def test_prompt_then_generated_logprobs() -> None:
    vocab = {
        1: (b"", "<bos>"),
        2: (b"Hi", "Hi"),
        3: (b" \xc3", "\ufffd"),
        4: (b"\xa9", "\ufffd"),
        5: (b"!", "!"),
    }
    builder = LogprobsBuilder(lambda t: vocab[t][1], lambda t: vocab[t][0])
    echo = echo_prompt([1, 2, 3], [vocab[t][0] for t in (1, 2, 3)], None)
    assert echo.text == "Hi \ufffd"  # the prompt ends inside "é": its echo ends with a replacement
    prompt = builder.prompt(echo, [TokenLogprob(2, -1.5, ((2, -1.5), (5, -2.0))), TokenLogprob(3, -0.5, ())])
    generated_lps = [TokenLogprob(4, -0.25, ()), TokenLogprob(5, -3.0, ())]
    generated = builder.generated(generated_lps, Offsets(len(echo.text)))
    out = concat(prompt, generated)
    assert out == {
        "tokens": ["<bos>", "Hi", "\ufffd", "\ufffd", "!"],
        "token_logprobs": [None, -1.5, -0.5, -0.25, -3.0],
        "top_logprobs": [None, {"Hi": -1.5, "!": -2.0}, {}, {}, {}],
        "text_offset": [0, 0, 2, 4, 5],
    }

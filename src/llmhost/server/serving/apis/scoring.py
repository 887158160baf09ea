"""The completions API's (legacy) logprobs object: per token its text, logprob, top alternatives and
character offset in the choice's text; echoed prompt tokens first (scoring a prompt), then generated
ones.

Offsets count characters of the returned text, as Python and JSON count them. A character whose UTF-8
bytes are split across tokens starts at the token holding its first byte; the tokens holding its other
bytes get its offset too, so offsets never decrease.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from llmhost.engine import TokenLogprob
from llmhost.server.protocol.shapes import CompletionLogprobs


class Offsets:
    """Character offsets of tokens in the text their bytes decode to, counted on from `start`."""

    def __init__(self, start: int = 0) -> None:
        self.position = start
        # "replace", as the engine decodes: an invalid byte is one U+FFFD character there and here
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def take(self, pieces: Iterable[bytes]) -> list[int]:
        out = []
        for piece in pieces:
            # a character still incomplete is not counted yet: this token continues it, at its offset
            out.append(self.position)
            self.position += len(self._decoder.decode(piece))
        return out


@dataclass(slots=True)
class Echo:
    """An echoed prompt: the text that starts the choice, its tokens and their offsets in it."""

    text: str = ""
    tokens: list[int] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)


def echo_prompt(tokens: list[int], pieces: list[bytes], raw: str | None) -> Echo:
    """The echo of a prompt given as text (`raw`) or token ids (None: their text is echoed)."""
    offsets = Offsets().take(pieces)
    decoded = b"".join(pieces).decode("utf-8", "replace")
    if raw is None or raw == decoded:
        return Echo(decoded if raw is None else raw, tokens, offsets)
    if decoded.endswith(raw):  # a tokenizer that adds a leading space (SentencePiece's space prefix)
        shift = len(decoded) - len(raw)
        return Echo(raw, tokens, [max(0, o - shift) for o in offsets])
    # a tokenizer that normalized the text: echo what the model was given, which the offsets index
    return Echo(decoded, tokens, offsets)


class LogprobsBuilder:
    """`text`: a token as shown in `tokens` (special tokens by name); `piece`: the bytes it adds to
    the text (special tokens none)."""

    def __init__(self, text: Callable[[int], str], piece: Callable[[int], bytes]) -> None:
        self.text = text
        self.piece = piece

    def generated(self, lps: list[TokenLogprob], offsets: Offsets) -> CompletionLogprobs:
        text = self.text
        return {
            "tokens": [text(lp.token) for lp in lps],
            "token_logprobs": [lp.logprob for lp in lps],
            "top_logprobs": [{text(t): v for t, v in lp.top} for lp in lps],
            "text_offset": offsets.take(self.piece(lp.token) for lp in lps),
        }

    def prompt(self, echo: Echo, lps: list[TokenLogprob]) -> CompletionLogprobs:
        """The first prompt token has no logprob (nothing predicts it): null, as OpenAI wrote it."""
        if len(lps) != len(echo.tokens) - 1:
            raise RuntimeError(f"{len(lps)} prompt logprobs for a prompt of {len(echo.tokens)} tokens")
        rest = self.generated(lps, Offsets())
        return {
            "tokens": [self.text(echo.tokens[0]), *rest["tokens"]],
            "token_logprobs": [None, *rest["token_logprobs"]],
            "top_logprobs": [None, *rest["top_logprobs"]],
            "text_offset": echo.offsets,
        }


def concat(first: CompletionLogprobs, then: CompletionLogprobs) -> CompletionLogprobs:
    return {
        "tokens": first["tokens"] + then["tokens"],
        "token_logprobs": first["token_logprobs"] + then["token_logprobs"],
        "top_logprobs": first["top_logprobs"] + then["top_logprobs"],
        "text_offset": first["text_offset"] + then["text_offset"],
    }

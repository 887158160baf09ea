"""OpenAI's streamed transcription: `data:` events of `transcript.text.delta` as the text comes, then one
`transcript.text.done` with the whole text and the usage (no `[DONE]`: OpenAI's stream ends there), or
OpenAI's SSE error where the generation fails. The deltas add up to the done event's text, which is
the unstreamed answer's: its `strip()`."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Callable

from llmhost.engine import FinishReason, GenerationEvent
from llmhost.server.serving.context import openai_error_event, sse
from llmhost.shared.jsontypes import JSONObject


def usage(last: GenerationEvent) -> JSONObject:
    """OpenAI's token usage of a transcription (`type: tokens`), whole or streamed."""
    n_in, n_out = last.prompt_tokens, last.completion_tokens
    return {"type": "tokens", "input_tokens": n_in, "output_tokens": n_out, "total_tokens": n_in + n_out}


class Trimmed:
    """Streamed text cut as `str.strip` cuts the whole: leading whitespace dropped, trailing whitespace
    held back until text follows it (the end never sends it)."""

    def __init__(self) -> None:
        self.text = ""  # what was given out so far
        self._held = ""

    def feed(self, piece: str) -> str:
        """What of `piece` can be sent now."""
        if not self.text:
            piece = piece.lstrip()
        piece = self._held + piece
        sent = piece.rstrip()
        self._held = piece[len(sent) :]
        self.text += sent
        return sent


async def transcript_events(
    events: AsyncIterable[GenerationEvent],
    answer_of: Callable[[GenerationEvent], str],
    finished: Callable[[GenerationEvent], None],
) -> AsyncIterator[str]:
    """The SSE events of one transcription's generation; `answer_of` reads an event's answer text (the
    model's thought left out), `finished` is told the last event."""
    trimmed = Trimmed()
    async for event in events:
        if event.error is not None:
            timeout = event.finish_reason is FinishReason.TIMEOUT
            yield openai_error_event(
                event.error, "timeout" if timeout else "server_error", 503 if timeout else 500
            )
            return
        delta = trimmed.feed(answer_of(event))
        if delta:
            yield sse({"type": "transcript.text.delta", "delta": delta})
        if event.finished:
            finished(event)
            yield sse({"type": "transcript.text.done", "text": trimmed.text, "usage": usage(event)})

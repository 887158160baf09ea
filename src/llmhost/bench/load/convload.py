"""A level of conversations: each user waits its think time, sends its next turn (the whole conversation
so far, streamed), keeps the answer's text for the turn after, and so on to its last turn.

A level ends when every user has sent its turns, or at ``--duration`` (no turn starts after it; those in
flight complete), or when the error rate passes its bound. A turn that fails ends its user's
conversation (the next turn would resend an answer it never got): counted as ``cut``. Each level holds
new users (numbered on from the last level's), so no level is answered from an earlier level's
conversations; the system prompts stay those of the groups, as a server's users keep them.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from llmhost.bench.figures import metrics as m
from llmhost.bench.load.conversations import Conversation, ConversationSettings, conversations
from llmhost.bench.load.http import Endpoint, new_session, prepare
from llmhost.bench.load.loadgen import LevelOutcome, LevelState, LoadSettings, Phase, PreparedRequest, Sink
from llmhost.bench.load.loadgen import send_with_timeout as send
from llmhost.bench.load.targets import OpenAIStream, Target
from llmhost.bench.load.workload import CHARS_PER_TOKEN


@dataclass
class ConversationLoad:
    """The conversations of one configuration's levels, and how to send a turn."""

    endpoint: Endpoint
    target: Target
    path: str  # the API route under the URL's prefix
    settings: ConversationSettings
    max_new_tokens: int
    next_user: int = 0  # the first user of the next level
    counts: dict[str, Any] = field(default_factory=dict)  # the last level's

    def next_level(self, users: int) -> list[Conversation]:
        """The conversations of a level of ``users`` users, new ones."""
        convs = conversations(self.settings, range(self.next_user, self.next_user + users))
        self.next_user += users
        return convs

    def request(self, conv: Conversation, answers: list[str]) -> PreparedRequest:
        """The next turn of ``conv``, whose earlier turns were answered ``answers``."""
        max_new = conv.max_new_tokens or self.max_new_tokens
        if self.target.api == "chat":
            messages = conv.chat_messages(answers)
            body = self.target.body(messages, max_new)
            chars = sum(len(msg["content"]) for msg in messages)
        else:
            prompt = conv.completion_prompt(answers)
            body = self.target.body(prompt, max_new)
            chars = len(prompt)
        http = prepare(self.endpoint, "POST", self.path, json.dumps(body).encode(), self.target.headers())
        # the server's usage replaces this estimate once it answers
        return PreparedRequest(http, max(1, round(chars / CHARS_PER_TOKEN)))

    async def run_level(
        self,
        convs: list[Conversation],
        settings: LoadSettings,
        state: LevelState,
        sink: Sink,
        run_t0: float,
        before_measured: Callable[[], Awaitable[None]] | None = None,
    ) -> LevelOutcome:
        counts = {
            "users": len(convs),
            "turns_planned": sum(len(c.messages) for c in convs),
            "completed": 0,
            "cut": 0,
            "unfinished": 0,
        }
        self.counts = counts
        async with new_session(len(convs)) as session:
            if before_measured is not None:
                await before_measured()
            state.started_at = time.perf_counter()
            phase = Phase(state, settings, sink, False, settings.requests, settings.duration_s)

            async def user(conv: Conversation) -> None:
                counts[await self._converse(session, conv, phase, run_t0)] += 1

            await asyncio.gather(*(user(c) for c in convs))
        return LevelOutcome(time.perf_counter() - state.started_at, state.stopped, state.stop_detail)

    async def _converse(self, session: Any, conv: Conversation, phase: Phase, run_t0: float) -> str:
        """One user's conversation: "completed", "cut" (a turn failed) or "unfinished" (the level ended
        before all its turns were sent)."""
        answers: list[str] = []
        wake = phase.state.started_at
        for turn, think in enumerate(conv.think_s, 1):
            at = wake + think
            if phase.deadline is not None and at >= phase.deadline:
                return "unfinished"
            await asyncio.sleep(max(0.0, at - time.perf_counter()))
            if phase.take() is None:
                return "unfinished"
            rec = m.RequestRecord(phase.state.config, phase.state.level, conv.user, 0.0, False, turn=turn)
            phase.begin(rec)
            stream = await send(
                session, self.target, self.request(conv, answers), rec, run_t0, phase.settings.timeout_s
            )
            phase.record(rec)
            if not isinstance(stream, OpenAIStream):
                return "cut"
            answers.append(stream.text)
            wake = time.perf_counter()
        return "completed"

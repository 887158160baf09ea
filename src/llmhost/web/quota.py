"""Per-key quotas over HTTP: a named key's requests and tokens a minute (web/ratelimit.py counts them),
OpenAI's rate-limit headers, a 429 with Retry-After past a limit, and each named key's usage for
/metrics. Secrets never appear: a key is its name here.

Requests are counted at admission, for every authenticated route. Tokens are counted as OpenAI does:
when a generation is submitted its prompt plus its max_tokens are taken (the most it can use; the
serving code calls `reserve_tokens`), and when the request ends what it did not use is given back, so a
key spends its prompt and generated tokens. A request that would take more than the key's minute holds
is refused whatever the wait.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from llmhost.web.asgi import request_id, send_error
from llmhost.web.errors import APIError, error_body
from llmhost.web.keyfile import KeyIdentity
from llmhost.web.ratelimit import Decision, Level, RateLimiter

log = logging.getLogger("llmhost")

REQUESTS = "requests"
TOKENS = "tokens"
KEY_REQUESTS = "llmhost_api_key_requests"  # _total added by the client library
KEY_TOKENS = "llmhost_api_key_tokens"
KEY_LIMITED = "llmhost_api_key_rate_limited"


def duration(seconds: float) -> str:
    """`seconds` as OpenAI's x-ratelimit-reset-* write it: 250ms, 12s, 1m30s."""
    if seconds < 1:
        return f"{math.ceil(seconds * 1000)}ms"
    minutes, rest = divmod(math.ceil(seconds), 60)
    return f"{minutes}m{rest}s" if minutes else f"{rest}s"


def retry_after_s(decision: Decision) -> int:
    """Whole seconds to wait, at least 1; a request more than a minute holds waits a minute (and is
    refused again: its message says so)."""
    wait = decision.retry_after_s
    return 60 if wait is None else max(1, math.ceil(wait))


@dataclass
class KeyUsage:
    """What each named key used since the process started."""

    requests: Counter[str] = field(default_factory=Counter)
    tokens: Counter[str] = field(default_factory=Counter)
    limited: Counter[tuple[str, str]] = field(default_factory=Counter)

    def families(self) -> list[Metric]:
        # copies (made whole under the GIL): a scrape may run in a worker thread while a request counts
        return [
            _family(
                KEY_REQUESTS,
                "Requests admitted, by API key name",
                {(name,): n for name, n in self.requests.copy().items()},
            ),
            _family(
                KEY_TOKENS,
                "Prompt and generated tokens of finished generations, by API key name",
                {(name,): n for name, n in self.tokens.copy().items()},
            ),
            _family(
                KEY_LIMITED,
                "Requests refused with 429 over a key's quota, by API key name and limit",
                {pair: n for pair, n in self.limited.copy().items()},
                labels=("key_name", "limit"),
            ),
        ]


def _family(
    name: str,
    help_text: str,
    counts: Mapping[tuple[str, ...], int],
    labels: tuple[str, ...] = ("key_name",),
) -> Metric:
    family = CounterMetricFamily(name, help_text, labels=list(labels))
    for values, n in sorted(counts.items()):
        family.add_metric(list(values), n)
    return family


class UsageCollector(Collector):
    def __init__(self, usage: KeyUsage) -> None:
        self.usage = usage

    def collect(self) -> Iterable[Metric]:
        return self.usage.families()


class Quotas:
    """The buckets and usage of every named key of one process (its clock injected for tests)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.limiter = RateLimiter(clock)
        self.usage = KeyUsage()

    async def serve(
        self,
        identity: KeyIdentity,
        app: ASGIApp,
        scope: Scope,
        receive: Receive,
        send: Send,
        routes: Sequence[BaseRoute],
    ) -> None:
        """`app` answers the request of the named key `identity`, or a 429 if it is over its requests a
        minute; its tokens are counted meanwhile, and settled when the answer is written."""
        with_headers = self._adding_headers(identity, send)
        rpm = identity.limits.requests_per_minute
        if rpm is not None:
            decision = self.limiter.take(identity.name, REQUESTS, rpm, 1)
            if not decision.allowed:
                await self._refuse(identity, rpm, decision, scope, with_headers, routes)
                return
        self.usage.requests[identity.name] += 1
        charge = TokenCharge(self, identity)
        token = _CHARGE.set(charge)
        try:
            await app(scope, receive, with_headers)
        finally:
            _CHARGE.reset(token)
            charge.settle()

    async def _refuse(
        self,
        identity: KeyIdentity,
        rpm: int,
        decision: Decision,
        scope: Scope,
        send: Send,
        routes: Sequence[BaseRoute],
    ) -> None:
        """The 429 of a request over its key's requests a minute, in the route's API format."""
        self.usage.limited[identity.name, REQUESTS] += 1
        rid, wait = request_id(scope), retry_after_s(decision)
        log.info("request %s refused: API key %r over its requests_per_minute", rid, identity.name)
        message = f"API key {identity.name!r} is over its requests_per_minute ({rpm}): retry in {wait} s"
        body = error_body(429, message, "rate_limit_error", request_id=rid, limit=rpm)
        await send_error(send, scope, routes, 429, body, [(b"retry-after", str(wait).encode())])

    def headers(self, identity: KeyIdentity) -> list[tuple[bytes, bytes]]:
        """OpenAI's x-ratelimit-* headers for each limit `identity` has."""
        out: list[tuple[bytes, bytes]] = []
        limits = identity.limits
        kinds = ((REQUESTS, limits.requests_per_minute), (TOKENS, limits.tokens_per_minute))
        for counted, per_minute in kinds:
            if per_minute is not None:
                out += _level_headers(counted, self.limiter.level(identity.name, counted, per_minute))
        return out

    def _adding_headers(self, identity: KeyIdentity, send: Send) -> Send:
        if not identity.limits.any:
            return send

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *self.headers(identity)]}
            await send(message)

        return sending


def _level_headers(counted: str, level: Level) -> list[tuple[bytes, bytes]]:
    return [
        (f"x-ratelimit-limit-{counted}".encode(), str(level.limit).encode()),
        (f"x-ratelimit-remaining-{counted}".encode(), str(level.remaining).encode()),
        (f"x-ratelimit-reset-{counted}".encode(), duration(level.reset_s).encode()),
    ]


class Reservation:
    """Tokens taken for one generation: settled with what it used (`measure`), or all given back
    (`cancel`, or never measured: it did not run)."""

    def __init__(self, estimate: int) -> None:
        self.estimate = estimate
        self.actual: Callable[[], int] | None = None

    def measure(self, actual: Callable[[], int]) -> None:
        """`actual`: the tokens the generation used, asked when the request ends."""
        self.actual = actual

    def cancel(self) -> None:
        self.actual = None


class TokenCharge:
    """The tokens of one request of a named key."""

    def __init__(self, quotas: Quotas, identity: KeyIdentity) -> None:
        self.quotas = quotas
        self.identity = identity
        self.reservations: list[Reservation] = []

    def reserve(self, estimate: int) -> Reservation:
        """Take `estimate` tokens now; a 429 (APIError) if the key's minute does not hold them."""
        tpm = self.identity.limits.tokens_per_minute
        if tpm is not None:
            decision = self.quotas.limiter.take(self.identity.name, TOKENS, tpm, estimate)
            if not decision.allowed:
                self.quotas.usage.limited[self.identity.name, TOKENS] += 1
                log.info("a generation refused: API key %r over its tokens_per_minute", self.identity.name)
                raise self._refusal(estimate, tpm, decision)
        reservation = Reservation(estimate)
        self.reservations.append(reservation)
        return reservation

    def settle(self) -> None:
        """Give back what each generation did not use, and count what it did."""
        tpm = self.identity.limits.tokens_per_minute
        for reservation in self.reservations:
            used = reservation.actual() if reservation.actual is not None else 0
            self.quotas.usage.tokens[self.identity.name] += used
            if tpm is not None:
                self.quotas.limiter.adjust(self.identity.name, TOKENS, tpm, reservation.estimate - used)
        self.reservations.clear()

    def _refusal(self, estimate: int, tpm: int, decision: Decision) -> APIError:
        name = self.identity.name
        wait = retry_after_s(decision)
        if decision.retry_after_s is None:
            message = (
                f"this request needs up to {estimate} tokens (prompt + max_tokens), more than API key "
                f"{name!r}'s tokens_per_minute ({tpm}) allows at all: lower max_tokens"
            )
            return APIError(
                429, message, "rate_limit_error", "max_tokens", {"limit": tpm}, {"Retry-After": str(wait)}
            )
        message = (
            f"API key {name!r} is over its tokens_per_minute ({tpm}): this request needs up to {estimate} "
            f"tokens (prompt + max_tokens); retry in {wait} s"
        )
        return APIError(429, message, "rate_limit_error", None, {"limit": tpm}, {"Retry-After": str(wait)})


_CHARGE: ContextVar[TokenCharge | None] = ContextVar("llmhost_token_charge", default=None)


def reserve_tokens(estimate: int) -> Reservation:
    """Take `estimate` tokens (a generation's prompt + max_tokens) from the quota of the key this request
    came with; a 429 (APIError) over it. A request without a named key reserves nothing."""
    charge = _CHARGE.get()
    return charge.reserve(estimate) if charge is not None else Reservation(estimate)

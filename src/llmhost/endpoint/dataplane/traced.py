"""The router's span of a request it routes (either back end's): begun as the request arrived, named
for the request (`POST /v1/chat/completions`), its context sent to the copy in place of the client's, so
that the copy's span is its child and the client's trace runs through both."""

from __future__ import annotations

from collections.abc import Mapping

from llmhost.web.traces import PROPAGATED, AttrValue, current


class RouteSpan:
    """What the router's span says (a `SpanDetail`): the component and the copy that answered."""

    def __init__(self, method: str, path: str, component: str) -> None:
        self.method, self.path, self.component = method, path, component
        self.copy = ""  # the copy that took the request, once one did

    def name(self) -> str:
        return f"{self.method} {self.path}"

    def attributes(self) -> Mapping[str, AttrValue]:
        attrs: dict[str, AttrValue] = {"llmhost.component": self.component}
        return attrs | ({"llmhost.copy": self.copy} if self.copy else {})


def traced(headers: dict[str, str], method: str, path: str, component: str) -> RouteSpan | None:
    """The request's span, its context put in `headers` (what the copy gets); None where tracing is off."""
    trace = current()
    if trace is None:
        return None
    span = RouteSpan(method, path, component)
    trace.detail = span
    for name in PROPAGATED:
        headers.pop(name, None)
    headers.update(trace.propagated())
    return span

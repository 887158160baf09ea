"""Server-sent events: split a byte stream into the ``data`` payloads of complete events."""

from __future__ import annotations


class SSEDecoder:
    """Incremental decoder: :meth:`feed` bytes as they arrive, get back each complete event's data.

    Events end with a blank line; ``\\r\\n`` line endings are accepted; comment lines and fields other
    than ``data`` are ignored; several ``data`` lines of one event are joined with ``\\n``.
    """

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        buf = self._buf + chunk if self._buf else chunk
        if b"\r" in buf:
            tail = b"\r" if buf.endswith(b"\r") else b""
            buf = buf[: len(buf) - len(tail)].replace(b"\r\n", b"\n").replace(b"\r", b"\n") + tail
        if b"\n\n" not in buf:
            self._buf = buf
            return []
        events = buf.split(b"\n\n")
        self._buf = events.pop()
        out: list[bytes] = []
        for event in events:
            data = _event_data(event)
            if data is not None:
                out.append(data)
        return out

    def finish(self) -> list[bytes]:
        """Payload of a last event that the server did not terminate with a blank line, if any."""
        rest, self._buf = self._buf.strip(b"\r\n"), b""
        if not rest:
            return []
        data = _event_data(rest.replace(b"\r\n", b"\n"))
        return [] if data is None else [data]


def _event_data(event: bytes) -> bytes | None:
    if b"\n" not in event:  # the common case: one `data:` line
        if event.startswith(b"data:"):
            return event[6:] if event[5:6] == b" " else event[5:]
        return None
    parts: list[bytes] = []
    for line in event.split(b"\n"):
        if line.startswith(b"data:"):
            parts.append(line[6:] if line[5:6] == b" " else line[5:])
    return b"\n".join(parts) if parts else None

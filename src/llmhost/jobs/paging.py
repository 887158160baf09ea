"""OpenAI's cursor pages: `limit` items after the one whose id is `after`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from llmhost.jobs.protocol import Batch, FileObject, Page
from llmhost.web.errors import APIError

Listed = TypeVar("Listed", FileObject, Batch)


def page(items: Sequence[Listed], limit: int, after: str | None) -> Page[Listed]:
    """`items` in list order; an `after` naming none of them is a 404 naming it."""
    start = 0
    if after is not None:
        ids = [item.id for item in items]
        if after not in ids:
            raise APIError(404, f"after: no object {after!r} in this list", field="after")
        start = ids.index(after) + 1
    data = list(items[start : start + limit])
    return Page[Listed](
        data=data,
        first_id=data[0].id if data else None,
        last_id=data[-1].id if data else None,
        has_more=start + limit < len(items),
    )

"""Where an image URL's bytes may come from besides the request itself, as the operator allows: http(s)
hosts listed in --allowed-media-domains (fetched, bounded in time and bytes, redirects followed only to
listed hosts) and files under --media-path (named by file:// URLs relative to it). Nothing else: a
server that fetched whatever a request names would be a door into the network it runs in. Each
refusal is a 400 naming the part's field."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import httpx

from llmhost.server.settings import ServerSettings
from llmhost.web.errors import APIError

FETCH_TIMEOUT_S = 10.0  # llama-server's for a media URL
MAX_REDIRECTS = 5


@dataclass(frozen=True, slots=True)
class MediaSources:
    """What the operator allows beyond inline bytes, and the byte limit every medium keeps."""

    max_bytes: int
    domains: frozenset[str] = frozenset()
    folder: Path | None = None
    timeout_s: float = FETCH_TIMEOUT_S

    @classmethod
    def of(cls, settings: ServerSettings) -> MediaSources:
        domains = frozenset(h.strip().lower() for h in settings.allowed_media_domains.split(",") if h.strip())
        folder = Path(settings.media_path).expanduser().resolve() if settings.media_path else None
        return cls(settings.max_media_bytes, domains, folder)


def too_large(size: int, kind: str, field: str, limit: int) -> APIError:
    """The 400 of a medium over --max-media-bytes (`size`: its bytes, or those read so far)."""
    message = f"the {kind} is {size} bytes, more than --max-media-bytes {limit}"
    return APIError(400, message, field=field, extra={"limit": limit})


async def fetch(url: str, field: str, sources: MediaSources) -> bytes:
    """The body of an http(s) URL on a listed host, read up to the byte limit, all within the timeout."""
    timeout = sources.timeout_s
    try:
        async with asyncio.timeout(timeout), httpx.AsyncClient(timeout=timeout, trust_env=False) as client:
            for _ in range(MAX_REDIRECTS + 1):
                _check_host(url, field, sources)
                body, url = await _get(client, url, field, sources.max_bytes)
                if body is not None:
                    return body
    except (httpx.HTTPError, TimeoutError) as e:
        message = f"the image URL could not be fetched within {timeout:g} s: {e!r}"
        raise APIError(400, message, field=field) from None
    raise APIError(400, f"the image URL redirected more than {MAX_REDIRECTS} times", field=field)


async def _get(client: httpx.AsyncClient, url: str, field: str, limit: int) -> tuple[bytes | None, str]:
    """One GET of `url`: its body, or none and where it redirects."""
    async with client.stream("GET", url) as reply:
        if reply.is_redirect and "location" in reply.headers:
            return None, urljoin(url, reply.headers["location"])
        if reply.status_code != 200:
            raise APIError(400, f"the image URL answered HTTP {reply.status_code}", field=field)
        return await _body(reply, field, limit), url


def _check_host(url: str, field: str, sources: MediaSources) -> None:
    """Refuse `url` unless it is http(s) on a listed host (a redirect's target is checked again)."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https"):
        raise APIError(400, f"a remote image URL must be http(s), not {parts.scheme or 'none'}", field=field)
    host = (parts.hostname or "").lower()
    if host not in sources.domains:
        allowed = ", ".join(sorted(sources.domains)) or "none"
        raise APIError(
            400,
            f"remote image URLs are not fetched from {host or 'an empty host'} (--allowed-media-domains: "
            f"{allowed}); send the image inline as a data: URI (data:image/png;base64,...)",
            field=field,
        )


async def _body(reply: httpx.Response, field: str, limit: int) -> bytes:
    declared = reply.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large(int(declared), "image", field, limit)
    chunks, size = [], 0
    async for chunk in reply.aiter_bytes():
        size += len(chunk)
        if size > limit:
            raise too_large(size, "image", field, limit)  # stopped reading here: no more is taken
        chunks.append(chunk)
    return b"".join(chunks)


async def read_file(url: str, field: str, sources: MediaSources) -> bytes:
    """The file a file:// URL names relative to --media-path (as llama-server reads it), if it stays
    inside that folder once `..` and symlinks are resolved."""
    if sources.folder is None:
        raise APIError(400, "file:// image URLs are read only under --media-path, not set here", field=field)
    relative = url[len("file://") :].lstrip("/")
    path = (sources.folder / relative).resolve()
    if not path.is_relative_to(sources.folder):
        raise APIError(400, "the file:// URL leads outside --media-path", field=field)
    return await asyncio.to_thread(_read, path, field, sources.max_bytes)


def _read(path: Path, field: str, limit: int) -> bytes:
    if not path.is_file():
        raise APIError(400, "the file:// URL names no file under --media-path", field=field)
    with path.open("rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise too_large(path.stat().st_size, "image", field, limit)
    return data

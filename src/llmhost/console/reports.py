"""`--reports DIR`: the `llmhost bench` and `llmhost tune` results folders under DIR, listed for the
console, and their files read back (only files inside DIR, of the kinds a report is made of)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, TypedDict

from llmhost.errors import BadRequestError, LlmhostError, NotFoundError

# what a results folder holds, by its marker file
ReportKind = Literal["bench", "tune"]
KINDS: dict[str, ReportKind] = {"summary.json": "bench", "tune.json": "tune"}
MEDIA = {
    ".html": "text/html; charset=utf-8",
    ".json": "application/json",
    ".jsonl": "application/x-ndjson",
    ".csv": "text/csv; charset=utf-8",
    ".yaml": "text/plain; charset=utf-8",
    ".txt": "text/plain; charset=utf-8",
}
MAX_DEPTH = 3  # DIR/run/report.html, DIR/group/run/..., DIR/a/b/c/...
MAX_BYTES = 32 * 2**20


class ReportError(LlmhostError):
    """A report file refused: not there (404) or not one the console shows (422), as `status` says."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class ReportEntry(TypedDict):
    """A folder of the reports directory holding a result (console/apidoc.py's ReportInfo)."""

    name: str  # its path under the reports directory
    kind: ReportKind
    modified: float  # Unix time of its summary
    report: str | None  # its report.html, if it has one
    files: list[str]


def list_reports(root: Path) -> list[ReportEntry]:
    """Every folder under `root` (itself included) holding a bench or tune result, newest first."""
    found: list[ReportEntry] = []
    if not root.is_dir():
        return found
    folders = [
        root,
        *(p for p in root.rglob("*") if p.is_dir() and len(p.relative_to(root).parts) <= MAX_DEPTH),
    ]
    for folder in folders:
        kind = next((k for marker, k in KINDS.items() if (folder / marker).is_file()), None)
        if kind is None:
            continue
        files = sorted(f for f in folder.iterdir() if f.is_file() and f.suffix in MEDIA)
        marker = next(folder / m for m in KINDS if (folder / m).is_file())
        rel = folder.relative_to(root).as_posix()
        found.append(
            {
                "name": rel if rel != "." else root.name,
                "kind": kind,
                "modified": marker.stat().st_mtime,
                "report": (folder / "report.html").relative_to(root).as_posix()
                if (folder / "report.html").is_file()
                else None,
                "files": [f.relative_to(root).as_posix() for f in files],
            }
        )
    return sorted(found, key=lambda r: -r["modified"])


def read_report(root: Path, rel: str) -> tuple[bytes, str]:
    """A file of a report under `root`: its bytes and media type."""
    try:
        return _read(root, rel)
    except (OSError, ValueError):  # a name no file can have (a NUL byte, too long): none such
        raise ReportError(NotFoundError.status, f"no report file {rel!r} in the reports folder") from None


def _read(root: Path, rel: str) -> tuple[bytes, str]:
    base = root.resolve()
    path = (base / rel).resolve()
    if not path.is_relative_to(base) or path == base:
        raise ReportError(NotFoundError.status, f"no report file {rel!r} in the reports folder")
    media = MEDIA.get(path.suffix)
    if media is None:
        raise ReportError(
            BadRequestError.status, f"{rel!r}: only {', '.join(sorted(MEDIA))} files of a report are shown"
        )
    if not path.is_file():
        raise ReportError(NotFoundError.status, f"no report file {rel!r} in the reports folder")
    if path.stat().st_size > MAX_BYTES:
        raise ReportError(BadRequestError.status, f"{rel!r} is over {MAX_BYTES // 2**20} MB")
    return path.read_bytes(), media

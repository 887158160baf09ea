"""Extract a model.tar.gz without letting it write outside the target directory."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path, PurePosixPath

from llmhost.errors import ModelError


class UnsafeArchiveError(ModelError, ValueError):
    """The archive holds a member that would land outside the extraction directory."""


def _inside(root: Path, candidate: Path) -> bool:
    root_s = os.path.normpath(root)
    cand_s = os.path.normpath(candidate)
    return cand_s == root_s or cand_s.startswith(root_s + os.sep)


def check_member(member: tarfile.TarInfo, root: Path) -> None:
    """Raise UnsafeArchiveError for absolute paths, `..` escapes, links leaving root, devices."""
    name = PurePosixPath(member.name)
    if name.is_absolute() or ".." in name.parts:
        raise UnsafeArchiveError(f"archive member {member.name!r} escapes the extraction directory")
    target = root / name
    if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
        raise UnsafeArchiveError(f"archive member {member.name!r} is not a regular file, directory or link")
    if member.issym():
        link = PurePosixPath(member.linkname)
        dest = Path(os.path.normpath(target.parent / link)) if not link.is_absolute() else Path(link)
        if not _inside(root, dest):
            raise UnsafeArchiveError(
                f"archive symlink {member.name!r} -> {member.linkname!r} leaves the archive"
            )
    if member.islnk():
        link = PurePosixPath(member.linkname)
        if link.is_absolute() or ".." in link.parts:
            raise UnsafeArchiveError(
                f"archive hard link {member.name!r} -> {member.linkname!r} leaves the archive"
            )
    if not _inside(root, target):
        raise UnsafeArchiveError(f"archive member {member.name!r} escapes the extraction directory")


def safe_extract(archive: Path, dest: Path) -> None:
    """Check every member first, so a bad archive leaves nothing half-extracted behind."""
    dest.mkdir(parents=True, exist_ok=True)
    root = dest.resolve()
    with tarfile.open(archive, "r:*") as tar:
        members = tar.getmembers()
        for m in members:
            check_member(m, root)
        # the stdlib "data" filter (3.11.4+) re-checks and also drops setuid bits and odd modes
        if hasattr(tarfile, "data_filter"):
            tar.extractall(root, members=members, filter="data")
        else:  # pragma: no cover - older 3.10/3.11 patch releases
            tar.extractall(root, members=members)
    _check_sizes(members, root)


def _check_sizes(members: list[tarfile.TarInfo], root: Path) -> None:
    """Every regular file landed whole: the archive may be deleted once this passes."""
    last = {m.name: m for m in members}  # a name archived twice: the later member is what landed
    for m in last.values():
        if m.isfile():
            landed = (root / m.name).stat().st_size
            if landed != m.size:
                raise OSError(f"archive member {m.name!r}: extracted {landed} of {m.size} bytes")

"""Resolve an hf:// model reference to files in the Hugging Face Hub's own cache, downloading them once.

Everything goes through `huggingface_hub`, so the variables its users know hold: `HF_ENDPOINT` (a
mirror or a private hub), `HF_TOKEN` (gated and private repositories), `HF_HOME` / `HF_HUB_CACHE` (the
cache) and `HF_HUB_OFFLINE`. The repository is listed once (its files, sizes and LFS digests at one
commit); the model's files are fetched at that commit, so the parts of a split model never mix two
commits. Offline, or with the hub unreachable, the cached snapshot of `main` is listed instead: a cached
model starts without the hub. huggingface_hub is imported only when an hf:// reference is given.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from llmhost.store.ggufnames import (
    DEFAULT_QUANT,
    GgufModel,
    group_models,
    is_mmproj,
    is_projector_file,
    matches_quant,
    model_of,
    pick_quant,
)
from llmhost.store.hubref import HubModelError, HubRef, parse_hub_ref
from llmhost.store.model import ResolvedModel
from llmhost.store.progress import quarter_logger

log = logging.getLogger("llmhost.store")
REVISION = "main"
ATTEMPTS = 4  # transfers of one file, each resuming where the last was cut
ALTERED_TRIES = 2  # whole downloads of a file whose bytes do not match the listing's digest
LIST_TIMEOUT_S = 10.0  # a hub that does not answer the listing: the cached snapshot is served
# the transports' transient failures (requests' and httpx's, by name: huggingface_hub's versions use either)
_TRANSIENT = {"ConnectionError", "Timeout", "ChunkedEncodingError", "TransportError", "TimeoutException"}


@dataclass(frozen=True, slots=True)
class RepoFile:
    size: int | None
    sha256: str | None = None  # an LFS file's digest: a download is checked against it


@dataclass(frozen=True, slots=True)
class Listing:
    commit: str
    files: dict[str, RepoFile]
    offline_reason: str = ""  # set when the cache was listed, not the hub: why


def hub_cache_dir() -> Path:
    """The hub's cache, as huggingface_hub finds it (HF_HUB_CACHE, else HF_HOME/hub, else its default)."""
    if explicit := os.environ.get("HF_HUB_CACHE"):
        return Path(explicit).expanduser()
    if home := os.environ.get("HF_HOME"):
        return Path(home).expanduser() / "hub"
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def hub_endpoint() -> str:
    from huggingface_hub import constants

    return os.environ.get("HF_ENDPOINT", "").rstrip("/") or constants.ENDPOINT


def offline() -> bool:
    from huggingface_hub import constants

    return os.environ.get("HF_HUB_OFFLINE", "").upper() in constants.ENV_VARS_TRUE_VALUES or bool(
        constants.HF_HUB_OFFLINE
    )


def repo_dir(repo: str, cache: Path | None = None) -> Path:
    return (cache or hub_cache_dir()) / ("models--" + repo.replace("/", "--"))


def resolve_hf(uri: str, *, projector: bool = False) -> ResolvedModel:
    """The model's file in the cache (a split model's first part, its other parts beside it). Not a
    model directory: the snapshot holds whatever else the repository has. `projector`: with the mmproj
    GGUFs in the model's folder of the repository (one: downloaded too; several: named, for the caller
    to refuse)."""
    ref = parse_hub_ref(uri)
    listing = list_repo(ref)
    model = choose(ref, listing)
    paths = _fetch_files(ref, listing, model.parts)
    mmproj = _projectors(ref, listing, model) if projector else ()
    return ResolvedModel(paths[0], mmproj=mmproj)


def fetch(ref: HubRef) -> list[Path]:
    """Every file of the model `ref` names, in the cache (downloaded when missing); the first is the one
    to load."""
    listing = list_repo(ref)
    return _fetch_files(ref, listing, choose(ref, listing).parts)


def fetch_projector(uri: str) -> Path:
    """The multimodal projector `uri` names, in the cache (downloaded when missing): the mmproj GGUF it
    names by path, else the repository's one mmproj GGUF (with a quantization type: the one whose name
    holds it). HubModelError naming the choices where it names a model, nothing, or several."""
    ref = parse_hub_ref(uri)
    listing = list_repo(ref)
    where = f"in the cache: {listing.offline_reason}" if listing.offline_reason else "in the repository"
    names = sorted(n for n in listing.files if is_projector_file(n))
    listed = ", ".join(f"hf://{ref.repo}/{n}" for n in names) or "none"
    if ref.file is not None:
        if ref.file not in listing.files:
            raise HubModelError(
                f"{ref.uri}: no file {ref.file!r} in {ref.repo} ({where}); its projectors: {listed}"
            )
        if not is_mmproj(ref.file):
            raise HubModelError(
                f"{ref.uri}: {ref.file} is a model, not a multimodal projector (an mmproj GGUF); "
                f"the projectors of {ref.repo}: {listed}"
            )
        names = [ref.file]
    elif ref.quant is not None:
        names = [n for n in names if matches_quant(GgufModel(n, (n,)), ref.quant)]
    if len(names) != 1:
        some = "no multimodal projector" if not names else f"{len(names)} multimodal projectors"
        quant = f" matching {ref.quant!r}" if ref.quant else ""
        raise HubModelError(
            f"{ref.uri}: {ref.repo} holds {some}{quant} ({where}); name one by its file: {listed}"
        )
    return _fetch_files(ref, listing, tuple(names))[0]


def _projectors(ref: HubRef, listing: Listing, model: GgufModel) -> tuple[str, ...]:
    """The mmproj GGUFs in the model's folder of the repository: one, in the cache; several, by name."""
    folder = PurePosixPath(model.first).parent
    names = sorted(n for n in listing.files if is_projector_file(n) and PurePosixPath(n).parent == folder)
    if len(names) == 1:
        return (str(_fetch_files(ref, listing, tuple(names))[0]),)
    return tuple(f"hf://{ref.repo}/{n}" for n in names)


def _fetch_files(ref: HubRef, listing: Listing, names: tuple[str, ...]) -> list[Path]:
    """The files `names` of the listed repository, in the cache (downloaded when missing)."""
    cache = hub_cache_dir()
    todo = [name for name in names if _cached(ref, listing.commit, name, cache) is None]
    if todo and listing.offline_reason:
        raise HubModelError(
            f"{ref.uri}: {listing.offline_reason}, and the cache {cache} lacks "
            f"{', '.join(todo)} of {ref.repo}"
        )
    check_space(ref, [listing.files[n].size for n in todo], cache)
    paths = []
    for name in names:
        cached = _cached(ref, listing.commit, name, cache)
        paths.append(cached or download(ref, listing, name, cache))
    if todo:
        _record_ref(repo_dir(ref.repo, cache), listing.commit)
    return paths


def list_repo(ref: HubRef) -> Listing:
    """The repository's files at `main`: from the hub, else (offline, hub unreachable or failing)
    from the cache."""
    if offline():
        return cached_listing(ref, "HF_HUB_OFFLINE is set")
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    endpoint = hub_endpoint()
    try:
        info = HfApi(endpoint=endpoint).model_info(
            ref.repo, revision=REVISION, files_metadata=True, timeout=LIST_TIMEOUT_S
        )
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else 0
        if status >= 500 or status == 429:  # the hub failing: a cached model still starts
            return cached_listing(ref, f"{endpoint} answered {status}")
        raise hub_error(ref, exc, f"listing {ref.repo}") from None
    except Exception as exc:  # the transport's errors (httpx's, whose module differs across versions)
        if not _network_error(exc):
            raise
        return cached_listing(ref, f"{endpoint} is unreachable ({type(exc).__name__})")
    if not info.sha:
        raise HubModelError(f"{ref.uri}: {endpoint} gave no commit for {ref.repo}")
    files = {s.rfilename: RepoFile(s.size, s.lfs.sha256 if s.lfs else None) for s in info.siblings or []}
    return Listing(info.sha, files)


def _network_error(exc: Exception) -> bool:
    return any(c.__name__ in _TRANSIENT for c in type(exc).__mro__)


def hub_error(ref: HubRef, exc: Exception, doing: str) -> HubModelError:
    """A failure of huggingface_hub as an error naming the repository (and file) and what to do."""
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
    )

    endpoint = hub_endpoint()
    if isinstance(exc, GatedRepoError):
        return HubModelError(
            f"{ref.uri}: {ref.repo} is a gated repository on {endpoint}: accept its "
            "conditions there, then set HF_TOKEN to a token of that account"
        )
    if isinstance(exc, RepositoryNotFoundError):
        return HubModelError(
            f"{ref.uri}: no repository {ref.repo} on {endpoint} (a private one needs HF_TOKEN)"
        )
    if isinstance(exc, EntryNotFoundError) and isinstance(exc, HfHubHTTPError):  # the hub's 404
        return HubModelError(f"{ref.uri}: {doing}: no such file in {ref.repo} on {endpoint}")
    return HubModelError(f"{ref.uri}: {doing} from {endpoint}: {_first_line(exc)}")


def _first_line(exc: Exception) -> str:
    return next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)


def cached_listing(ref: HubRef, reason: str) -> Listing:
    """The files of the cached snapshot `main` points to."""
    storage = repo_dir(ref.repo)
    try:
        commit = (storage / "refs" / REVISION).read_text().strip()
        snapshot = storage / "snapshots" / commit
        files = {
            p.relative_to(snapshot).as_posix(): RepoFile(p.stat().st_size)
            for p in snapshot.rglob("*")
            if p.is_file()
        }
    except OSError:
        raise HubModelError(
            f"{ref.uri}: {reason}, and {ref.repo} is not in the cache {hub_cache_dir()}"
        ) from None
    log.info("%s: %s: using the cached snapshot %s", ref.uri, reason, commit[:12])
    return Listing(commit, files, reason)


def choose(ref: HubRef, listing: Listing) -> GgufModel:
    """The model `ref` names among the listed files; an error listing the choices when it names none."""
    models = group_models(listing.files)
    where = f"in the cache: {listing.offline_reason}" if listing.offline_reason else "in the repository"
    if not models:
        raise HubModelError(f"{ref.uri}: {ref.repo} holds no GGUF model ({where})")
    choices = ", ".join(f"hf://{ref.repo}/{m.first}" for m in models)
    if ref.file is not None:
        if is_mmproj(ref.file):
            raise HubModelError(f"{ref.uri}: {ref.file} is a multimodal projector (mmproj), not a model")
        model = model_of(ref.file, models)
        if model is None:
            raise HubModelError(
                f"{ref.uri}: no file {ref.file!r} in {ref.repo} ({where}); its GGUF models: {choices}"
            )
    else:
        found, _ = pick_quant(models, ref.quant)
        if found is None:
            raise HubModelError(
                f"{ref.uri}: {_no_pick(ref, models)} of {ref.repo} ({where}); name one of: {choices}"
            )
        model = found
    if model.missing:
        missing = ", ".join(model.missing)
        raise HubModelError(f"{ref.uri}: split model {model.first} lacks its parts {missing} ({where})")
    return model


def _no_pick(ref: HubRef, models: list[GgufModel]) -> str:
    quant = ref.quant or DEFAULT_QUANT
    hits = sum(matches_quant(m, quant) for m in models)
    some = "several models" if hits else "no model"
    if ref.quant is None:
        return f"no quantization named, and {some.replace('model', DEFAULT_QUANT + ' model')}"
    return f"the quantization {quant!r} matches {some}"


def _cached(ref: HubRef, commit: str, name: str, cache: Path) -> Path | None:
    path = repo_dir(ref.repo, cache) / "snapshots" / commit / name
    return path if path.is_file() else None


def check_space(ref: HubRef, sizes: list[int | None], cache: Path) -> None:
    """Refuse a download the cache's disk cannot hold, before any byte of it."""
    need = sum(size or 0 for size in sizes)
    probe = cache
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if need > free:
        raise HubModelError(
            f"{ref.uri}: needs {need / 1e6:.1f} MB in the cache {cache}; its disk has "
            f"{free / 1e6:.1f} MB free"
        )


def _record_ref(storage: Path, commit: str) -> None:
    """`main` -> the commit fetched, as huggingface_hub records a branch: an offline start finds it."""
    ref = storage / "refs" / REVISION
    ref.parent.mkdir(parents=True, exist_ok=True)
    partial = ref.with_name(f"{ref.name}.{os.getpid()}")
    partial.write_text(commit)
    partial.replace(ref)


def download(ref: HubRef, listing: Listing, name: str, cache: Path) -> Path:
    """One file at the listed commit, into the cache, its digest checked (an LFS file's sha256). A file
    that arrives altered is deleted and fetched once more (bytes changed on the way are not changed
    twice); altered again, the download fails naming the file, and nothing of it stays in the cache."""
    meta = listing.files[name]
    log.info("downloading %s/%s (%.1f MB) from %s", ref.repo, name, (meta.size or 0) / 1e6, hub_endpoint())
    for attempt in range(1, ALTERED_TRIES + 1):
        path = _transfer(ref, listing, name, cache)
        problem = verify(path, meta)
        if problem is None:
            log.info("verified %s/%s (%s check)", ref.repo, name, "sha256" if meta.sha256 else "size-only")
            return path
        if attempt == ALTERED_TRIES:
            raise HubModelError(
                f"{ref.uri}: {name} arrived altered {attempt} times ({problem}): deleted; "
                f"the hub ({hub_endpoint()}) serves other bytes than it lists"
            )
        log.warning("%s/%s arrived altered (%s): deleted, fetching it again", ref.repo, name, problem)
    raise AssertionError("unreachable")


def _transfer(ref: HubRef, listing: Listing, name: str, cache: Path) -> Path:
    """The file through huggingface_hub. A cut transfer is taken up again where it stopped
    (huggingface_hub keeps the bytes it got in the blob's `.incomplete` file and asks for the rest with
    a Range, renaming it into place only when whole), up to ATTEMPTS times in all."""
    meta = listing.files[name]
    for attempt in range(1, ATTEMPTS + 1):
        try:
            with _progress(repo_dir(ref.repo, cache), meta, f"{ref.repo}/{name}"):
                return Path(_hf_hub_download(ref, listing.commit, name, cache))
        except Exception as exc:  # huggingface_hub's errors, the transport's, a full disk
            if _network_error(exc) and attempt < ATTEMPTS:
                log.warning(
                    "%s/%s: %s; resuming (attempt %d of %d)", ref.repo, name, exc, attempt + 1, ATTEMPTS
                )
                time.sleep(attempt)
                continue
            if not (_network_error(exc) or isinstance(exc, OSError)):
                raise
            raise hub_error(ref, exc, f"downloading {name}") from None
    raise AssertionError("unreachable")


def _hf_hub_download(ref: HubRef, commit: str, name: str, cache: Path) -> str:
    from huggingface_hub import hf_hub_download
    from huggingface_hub.utils.tqdm import disable_progress_bars

    if not sys.stderr.isatty():
        disable_progress_bars()  # redrawn bars would fill a captured log: `_progress` logs quarters
    return str(hf_hub_download(ref.repo, name, revision=commit, cache_dir=cache, endpoint=hub_endpoint()))


@contextmanager
def _progress(storage: Path, meta: RepoFile, what: str) -> Iterator[None]:
    """Off a terminal, a log line per quarter of the file, read from the size of its partial download;
    on one, huggingface_hub draws its bar."""
    if sys.stderr.isatty() or not meta.sha256 or not meta.size:
        yield
        return
    partials = storage / "blobs"
    stop = threading.Event()

    def received() -> int:
        try:
            return max((p.stat().st_size for p in partials.glob(f"{meta.sha256}*.incomplete")), default=0)
        except OSError:  # renamed into place (done) between the listing and the stat
            return 0

    seen = received()  # bytes an earlier, interrupted run left: the download resumes after them
    advance = quarter_logger(what, meta.size, seen)

    def watch() -> None:
        nonlocal seen
        while not stop.wait(1.0):
            size = received()
            if size > seen:
                advance(size - seen)
                seen = size

    thread = threading.Thread(target=watch, name="hub download progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def verify(path: Path, meta: RepoFile) -> str | None:
    """A fresh download's bytes against the listing: the LFS sha256, else the size. None when they
    match; else what differs, the cached file and its blob deleted (never served, fetched again)."""
    size = path.stat().st_size
    digest = _sha256(path) if meta.sha256 else None
    if (meta.size is not None and size != meta.size) or (digest is not None and digest != meta.sha256):
        blob = path.resolve()
        path.unlink(missing_ok=True)
        blob.unlink(missing_ok=True)
        return f"{size} bytes, sha256 {digest}; expected {meta.size} bytes, sha256 {meta.sha256}"
    return None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 22):
            h.update(block)
    return h.hexdigest()

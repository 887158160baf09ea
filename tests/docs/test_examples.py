"""Every code block of the README and of docs/ runs (or, marked notest, is syntax checked) against real
servers the blocks start: the examples are what a user types. Convention: docs/contributing/docs.md."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docs.runner import ROOT, Runner, blocks, pages

# pages with at least one block the runner runs or checks (a page of text only has nothing to test)
PAGES = [p for p in pages() if any(b.runs for b in blocks(p))]


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runner]:
    r = Runner(tmp_path_factory.mktemp("docs"))
    yield r
    r.close()


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_the_page_examples_run(runner: Runner, page: Path) -> None:
    assert runner.run_page(page) > 0


SHOWN_ONLY = {"", "text", "json", "console", "jinja", "dockerfile", "toml", "http", "ini"}


def test_every_fence_is_one_the_runner_knows() -> None:
    """A typo (```pyhton, ```bash sever) would silently turn an example into text shown only."""
    bad = [
        f"{b.where}: {b.lang} {' '.join(b.words)} {b.attrs}"
        for p in pages()
        for b in blocks(p)
        if not _known(b.lang, b.runs, set(b.words), set(b.attrs))
    ]
    assert not bad, bad
    assert sum(b.runs for p in pages() for b in blocks(p)) > 40


def _known(lang: str, runs: bool, words: set[str], attrs: set[str]) -> bool:
    if not runs and lang not in SHOWN_ONLY:
        return False
    if "server" in words and lang not in ("bash", "sh"):
        return False
    return words <= {"server", "notest"} and attrs <= {"file"}

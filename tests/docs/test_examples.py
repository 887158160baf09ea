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
    # a page's own servers (all but the shared one on 8080) stop with it: memory for the next pages
    runner.stop_all_but(8080)

"""The console's browser tests: Debian's headless Chromium driven by Playwright (never a downloaded
browser), and a page whose console errors and requests are recorded."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

playwright_api = pytest.importorskip("playwright.sync_api")
CHROMIUM = shutil.which("chromium")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="Debian's chromium is not installed (make test installs it)"
)
WAIT_MS = 90_000
# page.wait_for_function is given functions, never expressions: the page's CSP forbids eval, which polls them


# screenshots are kept where pytest's rotating temporary folders do not reach (build/ is git-ignored)
ARTIFACTS = Path(__file__).resolve().parents[2] / "build" / "test-artifacts" / "console"


def artifacts_dir() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


def chromium() -> Iterator[Any]:
    """A browser for a module's tests (its fixture yields from this)."""
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--disable-gpu", "--no-first-run"])
        yield b
        b.close()


class Watched:
    """A page whose console errors and requests are recorded; requests leaving 127.0.0.1 are refused.
    `key`: put in the tab's session storage first, as after the page's prompt."""

    def __init__(self, browser: Any, key: str | None) -> None:
        self.context = browser.new_context(viewport={"width": 1400, "height": 1000})
        if key is not None:
            # the top page only: a report's sandboxed frame has no storage
            self.context.add_init_script(
                f"if (window === window.top) sessionStorage.setItem('llmhost-console-key', {json.dumps(key)})"
            )
        self.requests: list[str] = []
        self.outside: list[str] = []
        self.errors: list[str] = []
        self.context.route("**/*", self._route)
        self.page = self.context.new_page()
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

    def _route(self, route: Any) -> None:
        url = route.request.url
        self.requests.append(url)
        if urlsplit(url).hostname != "127.0.0.1":
            self.outside.append(url)
            route.abort()
        else:
            route.continue_()

    def check_clean(self) -> None:
        assert self.outside == [], f"requests left 127.0.0.1: {self.outside}"
        assert self.errors == [], f"console errors: {self.errors}"

    def close(self) -> None:
        self.context.close()

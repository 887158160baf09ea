"""`mkdocs build --strict` of the docs site (a broken link, a missing page or an unknown generated
section fails it), and the site works offline: no page loads anything from another host (no web fonts,
no CDN scripts), and search has its index."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.docs.runner import ROOT

LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")

REMOTE_LOAD = re.compile(r"""<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)=["']?(?:https?:)?//""", re.I)
CSS_REMOTE = re.compile(r"""(?:@import|url\()\s*["']?(?:https?:)?//""", re.I)


def test_the_site_builds_strict_and_offline(tmp_path: Path) -> None:
    site = tmp_path / "site"
    mkdocs = Path(sys.executable).parent / "mkdocs"
    r = subprocess.run(
        [str(mkdocs), "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-5000:]
    pages = list(site.rglob("*.html"))
    assert len(pages) > 20
    for html in pages:
        loads = REMOTE_LOAD.findall(html.read_text())
        assert not loads, f"{html.relative_to(site)} loads from another host: {loads}"
    for css in site.rglob("*.css"):
        assert not CSS_REMOTE.search(css.read_text()), f"{css.relative_to(site)} imports from another host"
    index = json.loads((site / "search" / "search_index.json").read_text())
    titles = {d["title"] for d in index["docs"]}
    assert {"Serve a model", "Command line", "Endpoint file"} <= titles
    cli = (site / "reference" / "cli.html").read_text()
    assert "--max-concurrent" in cli and "llmhost endpoint up" in cli


def test_the_readme_is_short_and_its_links_resolve() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    links = [t for t in LINK.findall(text) if "://" not in t]
    assert links
    missing = [t for t in links if not (ROOT / t).exists()]
    assert not missing, f"README links to files that do not exist: {missing}"

"""The docs site builds and its generated pages are the code's.

* ``mkdocs build --strict`` (mkdocs.yml: every page in the nav, every link to a page that exists) passes, offline.
* ``docs/settings.md``, ``docs/error-codes.md`` and ``docs/api-reference.md`` are what ``python -m cli.docs_pages``
  writes now: a setting, a code or a route changed without them fails here.
* Every page of docs/ is in the nav, and every ``curl`` example in the README and docs/ sends the key and the
  Content-Type (a copied example that answers 401 or 422 is a broken example).
* The generators react to what they read: a setting, a route, a stale page each change the outcome.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cli import docs_pages
from vlbatch.settings import FLAT_NAMES

pytestmark = pytest.mark.timeout(180)

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
FENCE = re.compile(r"^(`{3,})[^\n]*\n(.*?)^\1[ \t]*$", re.M | re.S)


def test_mkdocs_builds_the_site_strict(tmp_path: Path) -> None:
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "WARNING" not in proc.stderr, proc.stderr[-4000:]
    for page in sorted(DOCS.glob("*.md")):
        built = site / ("index.html" if page.stem == "index" else f"{page.stem}/index.html")
        assert built.is_file(), f"{page.name} was not built"
    start = (site / "index.html").read_text(encoding="utf-8")
    assert "Getting started" in start and "fonts.googleapis.com" not in start  # no web font fetched when shown


def test_a_broken_link_fails_the_strict_build(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# x\n\n[gone](nowhere.md)\n")
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8").split("\nnav:", 1)[0]
    (tmp_path / "mkdocs.yml").write_text(config + "\n")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=tmp_path,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert proc.returncode != 0 and "nowhere.md" in proc.stderr


def test_the_generated_pages_are_the_codes() -> None:
    assert docs_pages.stale() == [], "run: python -m cli.docs_pages"


def test_the_generators_follow_the_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = docs_pages.settings_table()
    assert '| `VLBATCH_DATABASE_URL` | str | `"sqlite:///./vlbatch.db"` |' in table
    assert "| `VLBATCH_API_KEY` | SecretStr \\| None | unset |" in table
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    assert len(rows) == len(FLAT_NAMES)
    headings = [line for line in table.splitlines() if line.startswith("### ")]
    assert headings[:2] == ["### `settings.database`", "### `settings.broker`"]
    assert len(headings) == len(docs_pages.Settings.model_fields)
    assert "| `VLBATCH_VISIBLE_DEVICES` or `ASCEND_RT_VISIBLE_DEVICES` |" in table

    spec = docs_pages.openapi_spec()
    page = docs_pages.api_reference(spec)
    assert "### `POST /v1/jobs/tagging`" in page and "### TaggingJobCreate" in page
    assert "| 401 | error | `unauthorized` |" in page
    spec["paths"]["/v1/made-up"] = {"get": {"summary": "Made Up", "tags": ["jobs"], "responses": {}}}
    assert "### `GET /v1/made-up`" in docs_pages.api_reference(spec)

    for name in docs_pages.PAGES:
        (tmp_path / name).write_text((DOCS / name).read_text(encoding="utf-8"))
    assert docs_pages.stale(tmp_path) == []
    (tmp_path / "settings.md").write_text((tmp_path / "settings.md").read_text().replace("VLBATCH_BROKER_URL", "X"))
    (tmp_path / "api-reference.md").write_text("# API reference\n")
    assert docs_pages.stale(tmp_path) == ["settings.md", "api-reference.md"]
    assert docs_pages.write(tmp_path) == ["settings.md", "api-reference.md"]
    assert docs_pages.stale(tmp_path) == []
    with pytest.raises(ValueError, match="markers"):
        docs_pages.with_settings("# no markers\n")


def _nav_pages() -> set[str]:
    """The pages mkdocs.yml's nav names (read as text: the config holds a python tag a safe YAML loader refuses)."""
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8").split("\nnav:\n", 1)[1]
    return set(re.findall(r":\s+([\w.-]+\.md)\s*$", nav, re.M))


def test_every_docs_page_is_in_the_nav() -> None:
    assert _nav_pages() == {p.name for p in DOCS.glob("*.md")}


def curl_problems(text: str) -> list[str]:
    """Each ``curl`` command in the code blocks of ``text`` that lacks the key or the Content-Type header."""
    problems = []
    for block in FENCE.finditer(text):
        for command in block.group(2).replace("\\\n", " ").splitlines():
            if not re.search(r"(?:^|[\s$(])curl\s", command):
                continue
            if "Authorization: Bearer" not in command and "X-API-Key:" not in command:
                problems.append(f"no API key: {command.strip()[:100]}")
            if "Content-Type:" not in command:
                problems.append(f"no Content-Type: {command.strip()[:100]}")
    return problems


@pytest.mark.parametrize(
    "page", [ROOT / "README.md", *sorted(DOCS.glob("*.md"))], ids=lambda p: p.relative_to(ROOT).as_posix()
)
def test_every_curl_example_sends_the_key_and_the_content_type(page: Path) -> None:
    assert curl_problems(page.read_text(encoding="utf-8")) == []


def test_the_curl_checker_catches_what_it_is_for() -> None:
    text = (
        "```bash\n"
        "curl localhost:8000/v1/jobs\n"
        "curl -H 'X-API-Key: k' localhost:8000/v1/jobs\n"
        'curl -X POST localhost:8000/v1/jobs -H "Authorization: Bearer $K" \\\n'
        "  -H 'Content-Type: application/json'\n"
        "echo not a curlew\n"
        "```\n"
    )
    assert curl_problems(text) == [
        "no API key: curl localhost:8000/v1/jobs",
        "no Content-Type: curl localhost:8000/v1/jobs",
        "no Content-Type: curl -H 'X-API-Key: k' localhost:8000/v1/jobs",
    ]

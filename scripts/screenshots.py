"""The docs' screenshots, taken in headless Chromium (Debian's `chromium`, driven by Playwright through its
executable path; no browser is downloaded):

* docs/images/docs-site.png: the docs site's start page, built by mkdocs into a temporary folder and served on
  loopback;
* docs/images/dashboard.png: the dashboard's page of a finished tagging job over the demo's sample photos (their
  scenes as tags, two broken files failed), served by the real API on SQLite.

Run: `.venv/bin/python scripts/screenshots.py` (after `uv sync --extra cpu --extra dev`). Look at both before
committing them.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
IMAGES = ROOT / "docs" / "images"
VIEWPORT = {"width": 1280, "height": 860}


def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        raise SystemExit("Debian's chromium is not installed: apt-get install -y chromium")
    return path


def docs_site(browser: Any, tmp: Path) -> Path:
    site = tmp / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(site)],
        cwd=ROOT,
        env=env,
        check=True,
    )

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        page = browser.new_page(viewport=VIEWPORT)
        page.goto(f"http://127.0.0.1:{server.server_address[1]}/")
        page.wait_for_load_state("networkidle")
        out = IMAGES / "docs-site.png"
        page.screenshot(path=str(out))
        page.close()
    finally:
        server.shutdown()
    return out


def dashboard(browser: Any, tmp: Path) -> Path:
    from api.main import create_app
    from cli.demo import write_sample_photos
    from tests.conftest import LiveServer, make_key
    from tests.support.ledger import finished_job
    from vlbatch.settings import Settings

    album = tmp / "vlbatch-demo" / "photos"
    photos = write_sample_photos(album, count=10)
    items: list[tuple[dict[str, Any], dict[str, Any] | None]] = []
    for path in photos:
        if path.name.startswith("broken"):
            items.append(({"images": [str(path)]}, None))
            continue
        scene = path.stem.split("_", 1)[1]
        tags = [scene, "outdoor" if scene != "night" else "city", "landscape"]
        items.append(({"images": [str(path)]}, {"tags": tags, "caption": f"A {scene} scene, wide and calm"}))
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        database_url=f"sqlite:///{tmp / 'ui.db'}",
        model_name="tiny",
        allowed_input_roots=[album],
        data_dir=tmp / "data",
    )
    _, job_id = finished_job(settings.database.database_url, items, model="tiny")
    key = make_key(settings.database.database_url, tenant="default")  # the tenant finished_job makes its job for
    with LiveServer(create_app(settings)) as srv:
        page = browser.new_page(viewport=VIEWPORT)
        page.goto(f"{srv.url}/ui/login")
        page.fill("#key", key)
        page.click("#login")
        page.wait_for_url(f"{srv.url}/ui")
        page.goto(f"{srv.url}/ui/jobs/{job_id}")
        page.wait_for_load_state("networkidle")
        out = IMAGES / "dashboard.png"
        page.screenshot(path=str(out), full_page=True)
        page.close()
    return out


def main() -> None:
    from playwright.sync_api import sync_playwright

    IMAGES.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=_chromium(), args=["--no-sandbox"], headless=True)
        try:
            for out in (dashboard(browser, Path(tmp)), docs_site(browser, Path(tmp))):  # the site shows the dashboard's
                print(f"wrote {out.relative_to(ROOT)}")
        finally:
            browser.close()


if __name__ == "__main__":
    main()

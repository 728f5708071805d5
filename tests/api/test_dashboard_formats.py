"""The dashboard in a real headless Chromium (Debian's package) on a job of the formats a phone or a camera makes:
every card's picture loads (a HEIC, a DNG, a JPEG XL, AVIFs, a PSD; a file no decoder reads shows its placeholder),
each card names its file, long names, tags and captions wrap inside their card, and the page follows a running
job until it ends. The screenshot goes to test-artifacts/dashboard/ (the copy in docs/images/dashboard-formats.png is
one of these, looked at and kept)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from sqlalchemy import update

from api.main import create_app
from tests.api.test_dashboard import _chromium
from tests.support.format_album import format_album
from tests.support.ledger import finished_job
from vlbatch.db.models import Item, Job
from vlbatch.settings import Settings

pytestmark = pytest.mark.timeout(300)

SCREENSHOT = Path(__file__).parents[2] / "test-artifacts" / "dashboard" / "dashboard-formats.png"
LONG_FOLDER = "holiday-2026-" + "very-long-folder-name-without-any-space-" * 3
LONG_CAPTION = "A harbour at dusk " + "with_a_caption_token_that_never_breaks_by_itself_" * 4
LONG_TAG = "tag-" + "x" * 80


def test_a_running_job_of_heic_dng_and_friends_in_chromium(
    tmp_path: Path, redis_url: str, serve: type, api_key: Any
) -> None:
    from playwright.sync_api import sync_playwright

    album = tmp_path / "album"
    deep = album / LONG_FOLDER
    deep.mkdir(parents=True)
    files = format_album(album)
    Image.new("RGB", (1200, 800), (30, 90, 160)).save(deep / "harbour_at_dusk_from_the_lighthouse_steps.jpg")
    (album / "not-an-image.heic").write_bytes(b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic" + b"\x07" * 400)
    names = [*files, "not-an-image.heic"]
    items: list[tuple[dict[str, Any], dict[str, Any] | None]] = [
        ({"images": [str(album / n)]}, {"tags": [Path(n).suffix[1:], "photo"], "caption": f"{n} in the album"})
        for n in names
    ]
    # A photo on a web server: the API fetches nothing for a page view, so its card says so instead of a picture.
    items.append(({"images": ["https://photos.example/2026/IMG_0001.jpg?size=full"]}, {"tags": ["web"]}))
    # The two the worker is still on: the same phone's next photo, and one with a long path, tag and caption.
    (album / "IMG_0002.HEIC").write_bytes(files["iphone-xs.heic"].read_bytes())
    items.append(({"images": [str(album / "IMG_0002.HEIC")]}, {"tags": ["heic", "phone"], "caption": "the next one"}))
    items.append(
        (
            {"images": [str(deep / "harbour_at_dusk_from_the_lighthouse_steps.jpg")]},
            {"tags": ["harbour", LONG_TAG], "caption": LONG_CAPTION},
        )
    )
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'ui.db'}",
        broker_url=redis_url,
        model_name="m",
        allowed_input_roots=[album],
        data_dir=tmp_path / "data",
    )
    factory, job_id = finished_job(settings.database.database_url, items)
    with factory() as s:  # the job still runs: its last two items are not done yet
        last_two = list(
            s.scalars(Item.__table__.select().with_only_columns(Item.id).order_by(Item.seq.desc()).limit(2))
        )
        s.execute(update(Item).where(Item.id.in_(last_two)).values(status="running"))
        s.execute(update(Job).where(Job.id == job_id).values(status="running", finished_at=None))
        s.commit()
    key = api_key.make(settings.database.database_url, tenant="default")
    total = len(items)

    with serve(create_app(settings)) as srv, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=_chromium(), args=["--no-sandbox"], headless=True)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"{srv.url}/ui/login")
        page.fill("#key", key)
        page.click("#login")
        page.wait_for_url(f"{srv.url}/ui")
        assert page.get_attribute("#live", "data-live") == "1"  # the job list follows a running job too
        page.goto(f"{srv.url}/ui/jobs/{job_id}")
        assert f"{total - 2}/{total} done" in page.inner_text("#status")
        assert page.get_attribute("#live", "data-live") == "1"
        page.wait_for_function("() => [...document.querySelectorAll('#results img')].every(i => i.complete)")
        loaded = page.eval_on_selector_all(
            "#results .card",
            "cards => cards.map(c => [c.querySelector('.name').innerText, c.querySelector('img')?.naturalWidth ?? -1])",
        )
        shown = dict(loaded)
        for name in names[:-1]:  # HEIC, DNG, JPEG XL, AVIF, PSD: each card shows its file's picture and name
            assert shown.get(name, 0) > 0, (name, loaded)
        assert shown.get("not-an-image.heic", 0) > 0  # the placeholder, not a broken image
        assert shown.get("IMG_0002.HEIC") == -1  # still running: no picture yet
        assert shown.get("IMG_0001.jpg") == -1 and "local files only" in page.inner_text("#results")

        # Long names, tags and captions wrap inside their card; nothing widens the page.
        overflow = page.evaluate(
            """() => [document.documentElement.scrollWidth - document.documentElement.clientWidth,
                      ...[...document.querySelectorAll('#results .card')].map(c => c.scrollWidth - c.clientWidth)]"""
        )
        assert max(overflow) <= 0, overflow

        with factory() as s:  # the worker finishes the job while the page is open
            s.execute(update(Item).where(Item.id.in_(last_two)).values(status="succeeded"))
            s.execute(update(Job).where(Job.id == job_id).values(status="finished"))
            s.commit()
        page.wait_for_function("() => document.querySelector('#live').dataset.live === '0'", timeout=120_000)
        assert f"{total}/{total} done" in page.inner_text("#status") and "finished" in page.inner_text("#status")
        page.wait_for_function("() => [...document.querySelectorAll('#results img')].every(i => i.complete)")
        widths = page.eval_on_selector_all("#results img", "imgs => imgs.map(i => i.naturalWidth)")
        assert len(widths) == total - 1 and min(widths) > 0, widths  # every card but the URL's
        assert "harbour_at_dusk_from_the_lighthouse_steps.jpg" in page.inner_text("#results")
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOT), full_page=True)
        browser.close()


def test_a_card_names_its_file_from_the_items_inputs() -> None:
    from api.routes.ui import _file_name

    assert _file_name({"images": ["/srv/album/2026/IMG_0001.HEIC", "/srv/album/b.jpg"]}) == (
        "IMG_0001.HEIC",
        "/srv/album/2026/IMG_0001.HEIC",
    )
    assert _file_name({"images": ["file:///srv/a/DSC_0042.NEF"]})[0] == "DSC_0042.NEF"
    assert _file_name({"images": ["https://photos.example/x/IMG_9.jpg?size=full#top"]})[0] == "IMG_9.jpg"
    assert _file_name({"images": ["s3://bucket/raw/A7_0001.ARW"]})[0] == "A7_0001.ARW"
    assert _file_name({"images": ["data:image/png;base64,iVBORw0KGgo="]}) == ("inline image", None)
    assert _file_name({"path": "/srv/docs/contract final (2).pdf"})[0] == "contract final (2).pdf"
    assert _file_name({"line": {"custom_id": "r1"}}) == (None, None)  # a batch line: the card shows its ref

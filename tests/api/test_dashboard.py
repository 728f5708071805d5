"""The dashboard in a real headless Chromium (Debian's package) over real HTTP, on a finished job with photos
and failures: log in with a key, see thumbnails and tags, filter by tag and by error, retry the failed items.
Screenshots go to test-artifacts/dashboard/."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image
from sqlalchemy import update

from api.main import create_app
from api.routes.ui import COOKIE
from tests.support.ledger import finished_job
from vlbatch.db import job_store
from vlbatch.db.models import Job, Result
from vlbatch.settings import Settings

ARTIFACTS = Path(__file__).parents[2] / "test-artifacts" / "dashboard"
COLOURS = {"sunset": (250, 110, 30), "forest": (30, 120, 40), "sea": (20, 60, 200)}


def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        message = "Debian's chromium is not installed (./scripts/test.sh installs it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.fixture
def dashboard(tmp_path: Path, redis_url: str, serve: type, api_key: Any) -> Any:
    album = tmp_path / "album"
    album.mkdir()
    items: list[tuple[dict[str, Any], dict[str, Any] | None]] = []
    for i, (tag, colour) in enumerate([*COLOURS.items(), *COLOURS.items()]):
        photo = album / f"{tag}{i}.jpg"
        Image.new("RGB", (1200, 900), colour).save(photo, quality=85)
        items.append(({"images": [str(photo)]}, {"tags": [tag, "outdoor"], "caption": f"A {tag} photo"}))
    (album / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really")
    items += [({"images": [str(album / "broken.jpg")]}, None)] * 2
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'ui.db'}",
        broker_url=redis_url,
        model_name="m",
        allowed_input_roots=[album],
        data_dir=tmp_path / "data",
    )
    factory, job_id = finished_job(settings.database.database_url, items)
    key = api_key.make(settings.database.database_url, tenant="default")
    other = api_key.make(settings.database.database_url, tenant="elsewhere")
    with serve(create_app(settings)) as srv:
        yield srv.url, key, other, factory, job_id, settings


def test_dashboard_in_chromium(dashboard: Any) -> None:
    from playwright.sync_api import sync_playwright

    url, key, _, factory, job_id, settings = dashboard
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=_chromium(), args=["--no-sandbox"], headless=True)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"{url}/ui")
        assert page.url.endswith("/ui/login")  # no cookie yet
        page.fill("#key", "vlb_not_a_key")
        page.click("#login")
        assert "unknown or revoked" in page.inner_text("#login-error")
        page.fill("#key", key)
        page.click("#login")
        page.wait_for_url(f"{url}/ui")
        assert job_id[:12] in page.inner_text("#jobs")
        page.screenshot(path=str(ARTIFACTS / "jobs.png"))

        page.click(f"a[href='/ui/jobs/{job_id}']")
        page.wait_for_load_state("networkidle")
        assert "6/8" not in page.inner_text("#status") and "8/8" in page.inner_text("#status")
        widths = page.eval_on_selector_all("#results img", "imgs => imgs.map(i => i.complete ? i.naturalWidth : -1)")
        assert widths == [256] * 6  # six thumbnails made (256 px); a failed item shows its error instead
        assert page.query_selector("#progress-chart polyline") is not None  # progress over time
        cards = page.inner_text("#results")
        assert all(tag in cards for tag in COLOURS) and "A sunset photo" in cards
        assert "decode_error: JPEG decode failed" in cards
        page.screenshot(path=str(ARTIFACTS / "job.png"), full_page=True)

        page.click("#tag-filters a:has-text('sunset')")
        page.wait_for_load_state("networkidle")
        shown = page.eval_on_selector_all("#results .card", "cards => cards.map(c => c.innerText)")
        assert len(shown) == 2 and all("sunset" in text for text in shown)
        page.screenshot(path=str(ARTIFACTS / "filtered.png"), full_page=True)

        page.click("#error-filters a:has-text('decode_error')")
        page.wait_for_load_state("networkidle")
        assert len(page.query_selector_all("#results .card.failed")) == 2
        assert len(page.query_selector_all("#results .card")) == 2

        page.click("#retry-failed")
        page.wait_for_url(f"{url}/ui/jobs/{job_id}")
        browser.close()

    thumbs = list((settings.uploads.data_dir / "thumbs" / job_id).glob("*.jpg"))
    assert len(thumbs) == 6 and all(Image.open(t).size == (256, 192) for t in thumbs)  # small, cached on disk
    with factory() as s:
        counts = job_store.item_counts(s, job_id=job_id)
        job = s.get(Job, job_id)
        assert counts["queued"] == 2 and counts["failed"] == 0 and counts["succeeded"] == 6
        assert job is not None and job.status == "running" and job.finished_at is None


def test_dashboard_pages_need_the_tenants_own_key(dashboard: Any) -> None:
    url, key, other, _, job_id, _ = dashboard
    with httpx.Client(base_url=url, follow_redirects=False) as client:
        assert client.get("/ui").headers["location"] == "/ui/login"
        assert client.get(f"/ui/jobs/{job_id}/thumbs/1.jpg").status_code == 401
        client.post("/ui/login", data={"key": other})
        assert client.get(f"/ui/jobs/{job_id}").status_code == 404  # another tenant's job is not found
        assert client.get(f"/ui/jobs/{job_id}/thumbs/1.jpg").status_code == 404
        client.post("/ui/login", data={"key": key})
        assert client.get(f"/ui/jobs/{job_id}").status_code == 200
        cross = client.post(f"/ui/jobs/{job_id}/retry-failed", headers={"Sec-Fetch-Site": "cross-site"})
        assert cross.status_code == 403 and cross.json()["code"] == "cross_site_refused"
        login = client.post("/ui/login", data={"key": key})
        cookie = login.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "path=/ui" in cookie


def test_progress_chart_draws_the_done_count_over_time(tmp_path: Path) -> None:
    import re
    from datetime import UTC, datetime, timedelta

    from sqlalchemy import update

    from api.progress_chart import progress_svg
    from vlbatch.db.models import Item

    factory, job_id = finished_job(f"sqlite:///{tmp_path / 'c.db'}", [({"images": ["/x"]}, {"tags": []})] * 10)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    with factory() as s:
        for seq in range(10):  # nine items in the first 9 s, the last after a 91 s stall
            at = t0 + timedelta(seconds=seq + 1 if seq < 9 else 100)
            s.execute(update(Item).where(Item.job_id == job_id, Item.seq == seq).values(updated_at=at))
        s.commit()
        svg = progress_svg(s, job_id=job_id, total=10, started_at=t0)
    assert svg is not None and "100 s · 0.10 items/s overall" in svg
    points = [tuple(map(float, p.split(","))) for p in re.search(r'points="([^"]+)"', svg).group(1).split()]  # type: ignore[union-attr]
    assert len(points) == 11 and points[0] == (0.0, 160.0) and points[-1] == (640.0, 0.0)
    assert points[9] == (57.6, 16.0)  # 9 of 10 done at 9 s: the stall is the flat stretch after it


@contextmanager
def _logged_in(url: str, key: str) -> Iterator[tuple[httpx.Client, str]]:
    # A thumbnail starts a decoder child first: seconds on a loaded host, past httpx's 5 s default.
    with httpx.Client(base_url=url, follow_redirects=False, timeout=60) as client:
        r = client.post("/ui/login", data={"key": key})
        assert r.status_code == 303, r.text
        yield client, client.cookies[COOKIE]


def test_the_session_cookie_is_not_the_key_and_ends_at_logout_and_at_revocation(dashboard: Any) -> None:
    from vlbatch.db.keys import list_keys, revoke_key

    url, key, _, factory, job_id, _ = dashboard
    with _logged_in(url, key) as (client, cookie):
        assert key not in cookie and client.get(f"/ui/jobs/{job_id}").status_code == 200
        as_bearer = httpx.get(f"{url}/v1/jobs", headers={"Authorization": f"Bearer {cookie}"})
        assert as_bearer.status_code == 401 and as_bearer.json()["code"] == "unauthorized"
        assert client.post("/ui/logout").status_code == 303

    copied = httpx.Client(base_url=url, follow_redirects=False, cookies={COOKIE: cookie})
    with copied:  # the cookie kept from before the logout works nowhere
        r = copied.get(f"/ui/jobs/{job_id}")
        assert r.status_code == 303 and r.headers["location"] == "/ui/login?error=session_ended"
        assert copied.get(f"/ui/jobs/{job_id}/thumbs/1.jpg").status_code == 401

    with _logged_in(url, key) as (client, cookie):
        assert client.get(f"/ui/jobs/{job_id}").status_code == 200
        with factory() as s:
            (row,) = [k for k in list_keys(s, tenant="default")]
            assert revoke_key(s, key_id=row.id)
            s.commit()
        assert client.get(f"/ui/jobs/{job_id}").headers["location"] == "/ui/login?error=session_ended"


def test_no_page_or_answer_can_be_framed(dashboard: Any) -> None:
    url, key, _, _, job_id, _ = dashboard
    with _logged_in(url, key) as (client, _):
        answers = [
            client.get("/ui/login"),
            client.get(f"/ui/jobs/{job_id}"),
            client.get(f"/ui/jobs/{job_id}/thumbs/1.jpg"),
            httpx.get(f"{url}/v1/jobs", headers={"Authorization": f"Bearer {key}"}),
            httpx.get(f"{url}/v1/jobs"),  # a refusal too
        ]
    for r in answers:
        assert r.headers.get("x-frame-options") == "DENY", (r.url, r.headers)
        assert "frame-ancestors 'none'" in r.headers.get("content-security-policy", ""), (r.url, r.headers)


def test_login_refuses_a_foreign_origin_when_the_browser_sends_no_fetch_metadata(dashboard: Any) -> None:
    """Login CSRF: another site's form would log the victim in as the attacker. A browser without Sec-Fetch-Site
    still sends Origin; a foreign or null one is refused, the page's own is taken, and so is a script with none."""
    url, key = dashboard[0], dashboard[1]
    own = url  # http://127.0.0.1:<port>
    for origin in ("https://evil.example", "null", own.replace("127.0.0.1", "localhost")):
        r = httpx.post(f"{url}/ui/login", data={"key": key}, headers={"Origin": origin})
        assert (r.status_code, r.json()["code"]) == (403, "cross_site_refused"), origin
        assert COOKIE not in r.cookies
    for headers in ({"Origin": own}, {}):
        r = httpx.post(f"{url}/ui/login", data={"key": key}, headers=headers)
        assert r.status_code == 303 and COOKIE in r.cookies, headers


def test_dashboard_answers_are_not_cached_nor_sniffed(dashboard: Any) -> None:
    url, key, _, _, job_id, _ = dashboard
    with _logged_in(url, key) as (client, _):
        pages = [client.get("/ui/login"), client.get("/ui"), client.get(f"/ui/jobs/{job_id}")]
        api_answer = httpx.get(f"{url}/v1/jobs", headers={"Authorization": f"Bearer {key}"})
    for r in pages:
        assert r.status_code == 200 and r.headers.get("cache-control") == "no-store", (r.url, r.headers)
    for r in [*pages, api_answer]:
        assert r.headers.get("x-content-type-options") == "nosniff", (r.url, r.headers)


def test_the_login_page_shows_only_its_own_messages(dashboard: Any) -> None:
    url = dashboard[0]
    spoof = "Your account is locked. Call +1 555 0100 and read out your key."
    for text in (spoof, spoof * 10):
        r = httpx.get(f"{url}/ui/login", params={"error": text})
        assert r.status_code == 200 and "Call +1 555" not in r.text and "login-error" not in r.text
    known = httpx.get(f"{url}/ui/login", params={"error": "unknown_key"}).text
    assert "That key is unknown or revoked." in known


def test_the_login_page_offers_no_log_out_and_says_the_cookie_holds_a_session_not_the_key(dashboard: Any) -> None:
    url, key, _, _, job_id, _ = dashboard
    page = httpx.get(f"{url}/ui/login").text
    assert "Log out" not in page and "/ui/logout" not in page  # nobody is logged in yet
    assert "keeps a session id in a cookie for this site,\nnever the key itself" in page
    with httpx.Client(base_url=url, follow_redirects=False) as client:
        client.post("/ui/login", data={"key": key})
        assert all("Log out" in client.get(p).text for p in ("/ui", f"/ui/jobs/{job_id}"))


def _failed_counts(factory: Any, job_id: str) -> dict[str, int]:
    with factory() as s:
        return dict(job_store.item_counts(s, job_id=job_id))


@pytest.mark.parametrize(
    ("change", "status", "code"),
    [
        ({"status": "cancelled"}, 409, "job_state_conflict"),
        ({"status": "paused"}, 409, "job_state_conflict"),
        ({"pipeline": "chat"}, 409, "batch_owned_job"),  # a batch's job: its lines are the batch's
    ],
)
def test_retry_failed_in_the_dashboard_keeps_to_the_jobs_state(
    dashboard: Any, change: dict[str, str], status: int, code: str
) -> None:
    from sqlalchemy import update

    url, key, _, factory, job_id, _ = dashboard
    with factory() as s:
        s.execute(update(Job).where(Job.id == job_id).values(**change))
        s.commit()
    before = _failed_counts(factory, job_id)
    with _logged_in(url, key) as (client, _):
        r = client.post(f"/ui/jobs/{job_id}/retry-failed")
    assert r.status_code == status and r.json()["code"] == code, r.text
    assert _failed_counts(factory, job_id) == before and before["failed"] == 2
    with factory() as s:
        job = s.get(Job, job_id)
        assert job is not None and all(getattr(job, k) == v for k, v in change.items())


def test_retry_failed_in_the_dashboard_counts_against_the_active_jobs_quota(
    tmp_path: Path, redis_url: str, serve: type, api_key: Any
) -> None:
    db_url = f"sqlite:///{tmp_path / 'quota.db'}"
    factory, job_id = finished_job(db_url, [({"images": ["/x.jpg"]}, {"tags": ["a"]}), ({"images": ["/y.jpg"]}, None)])
    with factory() as s:  # the tenant's one allowed unfinished job
        job_store.create_job(
            s, pipeline="image_tagging", model="m", options={}, items=[job_store.NewItem(inputs={})], chunk_size=10
        )
        s.commit()
    settings = Settings(
        database_url=db_url, broker_url=redis_url, model_name="m", data_dir=tmp_path / "d", tenant_max_active_jobs=1
    )
    key = api_key.make(db_url, tenant="default")
    with serve(create_app(settings)) as srv, _logged_in(srv.url, key) as (client, _):
        r = client.post(f"/ui/jobs/{job_id}/retry-failed")
    assert r.status_code == 429 and r.json()["code"] == "active_jobs_quota_exceeded", r.text
    assert _failed_counts(factory, job_id)["failed"] == 1
    with factory() as s:
        job = s.get(Job, job_id)
        assert job is not None and job.status == "finished"


def test_a_result_card_shows_what_made_its_answer(dashboard: Any) -> None:
    url, key, _, factory, job_id, _ = dashboard
    with factory() as s:
        s.execute(
            update(Result).where(Result.job_id == job_id).values(model_revision="rev7", prompt_hash="c0ffee" * 10)
        )
        s.execute(update(Job).where(Job.id == job_id).values(options={"max_tags": 5, "reuse": False}))
        s.commit()
    with httpx.Client(base_url=url) as client:
        client.post("/ui/login", data={"key": key})
        page = client.get(f"/ui/jobs/{job_id}").text
    cards = page.split('<div class="card')[1:]
    assert len(cards) == 8
    for card in cards:  # every result, failed ones too: each row says what it was made with
        made_by = card.split('<details class="made-by">')[1].split("</details>")[0]
        assert "<dd>m</dd>" in made_by and "<dd>rev7</dd>" in made_by and "<dd>1</dd>" in made_by
        assert 'title="' + "c0ffee" * 10 + '">c0ffeec0ffee</dd>' in made_by
    # the options that shaped the answers, not those that only say how the job runs
    assert "options {&#34;max_tags&#34;: 5} · hash" in page

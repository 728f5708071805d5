"""Dashboard thumbnails over real HTTP: clients' images are decoded in decoder child processes, never in the API
process, a bounded number at once, and only from inside the input roots; every format the worker reads gets one,
and a file no decoder reads, or that kills its decoder, a placeholder naming its code while the API goes on."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image
from sqlalchemy import select

from api import thumbnails
from api.main import create_app
from api.routes.ui import THUMBNAIL_ERROR_HEADER
from tests.support import decode_faults
from tests.support.format_album import format_album
from tests.support.ledger import finished_job
from vlbatch.db.models import Item
from vlbatch.settings import Settings

pytestmark = pytest.mark.timeout(300)

SIDE = 8000  # 64 megapixels: 192 MB of RGB once decoded


def _huge_png(path: Path) -> None:
    """Written by another process, so this one's heap never held the pixels the test then looks for."""
    code = f"from PIL import Image; Image.new('RGB', ({SIDE}, {SIDE}), (40, 90, 200)).save({str(path)!r})"
    subprocess.run([sys.executable, "-c", code], check=True)


def _rss_now() -> int:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmRSS:"))


def _peak_rss() -> int:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmHWM:"))


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")


def _album_job(tmp_path: Path, n: int) -> tuple[Path, str, list[int], str]:
    album = tmp_path / "album"
    album.mkdir()
    _huge_png(album / "huge.png")
    db_url = f"sqlite:///{tmp_path / 't.db'}"
    items = [({"images": [str(album / "huge.png")]}, {"tags": ["sky"]}) for _ in range(n)]
    items.append(({"images": ["/etc/hostname"]}, {"tags": ["outside"]}))
    factory, job_id = finished_job(db_url, items)
    with factory() as s:
        ids = list(s.scalars(select(Item.id).where(Item.job_id == job_id).order_by(Item.seq)))
    return album, db_url, ids, job_id


def test_huge_images_are_thumbnailed_outside_the_api_process(
    tmp_path: Path, redis_url: str, serve: type, api_key: Any
) -> None:
    album, db_url, ids, job_id = _album_job(tmp_path, 4)
    settings = Settings(
        database_url=db_url,
        broker_url=redis_url,
        model_name="m",
        allowed_input_roots=[album],
        data_dir=tmp_path / "d",
        thumbnail_wait_s=240,  # a loaded test host: every request waits its turn
        image_decode_timeout_s=120,
    )
    key = api_key.make(db_url)
    with serve(create_app(settings)) as srv, httpx.Client(base_url=srv.url, timeout=120) as browser:
        assert browser.post("/ui/login", data={"key": key}).status_code == 303
        outside = browser.get(f"/ui/jobs/{job_id}/thumbs/{ids[-1]}.jpg")
        assert outside.status_code == 404  # a path outside the roots is never read
        _reset_peak()
        start = _rss_now()
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda i: browser.get(f"/ui/jobs/{job_id}/thumbs/{i}.jpg"), ids[:4]))
        grown = _peak_rss() - start
    assert [a.status_code for a in answers] == [200] * 4
    assert all(Image.open(t).size == (256, 256) for t in (settings.uploads.data_dir / "thumbs" / job_id).glob("*.jpg"))
    # One decode in this process would take 192 MB; the children's pixels are not this process's memory.
    assert grown < 100 * 1024**2, f"the API process grew by {grown / 1024**2:.0f} MiB"


def test_thumbnails_are_made_a_bounded_number_at_a_time(
    tmp_path: Path, redis_url: str, serve: type, api_key: Any
) -> None:
    album, db_url, ids, job_id = _album_job(tmp_path, 4)
    settings = Settings(
        database_url=db_url,
        broker_url=redis_url,
        model_name="m",
        allowed_input_roots=[album],
        data_dir=tmp_path / "d",
        thumbnail_processes=1,
        thumbnail_wait_s=0.05,  # far shorter than one decode, which starts a child first
    )
    key = api_key.make(db_url)
    with serve(create_app(settings)) as srv, httpx.Client(base_url=srv.url, timeout=120) as browser:
        assert browser.post("/ui/login", data={"key": key}).status_code == 303
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda i: browser.get(f"/ui/jobs/{job_id}/thumbs/{i}.jpg"), ids[:4]))
    codes = sorted(a.status_code for a in answers)
    assert codes.count(200) >= 1 and 503 in codes, codes
    assert all(a.headers.get("retry-after") for a in answers if a.status_code == 503)


def test_every_format_gets_a_thumbnail_and_a_hostile_file_a_placeholder_while_the_api_stays_up(
    tmp_path: Path, redis_url: str, serve: type, api_key: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    album = tmp_path / "album"
    album.mkdir()
    files = format_album(album)
    (album / "garbage.heic").write_bytes(b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic" + b"\x07" * 4000)
    Image.new("RGB", (640, 480), (30, 120, 40)).save(album / "hostile.jpg")
    names = [*files, "garbage.heic", "hostile.jpg"]
    db_url = f"sqlite:///{tmp_path / 't.db'}"
    _, job_id = finished_job(db_url, [({"images": [str(album / n)]}, {"tags": ["x"]}) for n in names])
    settings = Settings(
        database_url=db_url,
        broker_url=redis_url,
        model_name="m",
        allowed_input_roots=[album],
        data_dir=tmp_path / "d",
        thumbnail_wait_s=240,  # a loaded test host: every request waits its turn
        image_decode_timeout_s=120,
    )
    key = api_key.make(db_url)
    with serve(create_app(settings)) as srv, httpx.Client(base_url=srv.url, timeout=120) as browser:
        assert browser.post("/ui/login", data={"key": key}).status_code == 303
        page = browser.get(f"/ui/jobs/{job_id}").text
        ids = [int(i) for i in re.findall(rf"/ui/jobs/{job_id}/thumbs/(\d+)\.jpg", page)]
        assert len(ids) == len(names)
        by_name = dict(zip(names, ids, strict=True))
        for name in files:  # HEIC, DNG, JPEG XL, AVIF, PSD
            answer = browser.get(f"/ui/jobs/{job_id}/thumbs/{by_name[name]}.jpg")
            assert answer.status_code == 200 and THUMBNAIL_ERROR_HEADER not in answer.headers, (name, answer.headers)
            made = Image.open(io.BytesIO(answer.content))
            assert made.format == "JPEG" and 0 < max(made.size) <= 256, name
        broken = browser.get(f"/ui/jobs/{job_id}/thumbs/{by_name['garbage.heic']}.jpg")
        assert broken.status_code == 200 and broken.headers[THUMBNAIL_ERROR_HEADER] == "decode_error"
        assert Image.open(io.BytesIO(broken.content)).format == "JPEG"  # the placeholder, never a broken image
        with monkeypatch.context() as hostile:  # a decoder that dies of the file it reads
            hostile.setattr(thumbnails, "thumbnail_jpeg", decode_faults.segfault)
            crashed = browser.get(f"/ui/jobs/{job_id}/thumbs/{by_name['hostile.jpg']}.jpg")
        assert crashed.status_code == 200 and crashed.headers[THUMBNAIL_ERROR_HEADER] == "decode_crashed"
        assert browser.get("/healthz").status_code == 200  # the API went on
        again = browser.get(f"/ui/jobs/{job_id}/thumbs/{by_name['iphone-xs.heic']}.jpg")
        assert again.status_code == 200 and again.headers["content-type"] == "image/jpeg"

"""Dry runs as a hostile client sends them, over real HTTP (SQLite and PostgreSQL): the API opens no file outside
the tenant's roots (an inline path outside them is refused at submit like a folder, present or missing alike), never
blocks on a FIFO or a descriptor, decodes no pixels (a PNG's size from its IHDR, however broken its IDAT), holds no
pooled connection while it reads headers, reads at most so many headers a dry run (the rest extrapolated, and said
so) and runs so many dry runs of a tenant at once (429 ``dry_run_busy`` beyond)."""

from __future__ import annotations

import base64
import io
import os
import struct
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image

from api.main import create_app
from tests.conftest import make_key
from vlbatch.db import tenants
from vlbatch.db.session import make_engine, make_sessionmaker
from vlbatch.settings import Settings

pytestmark = [pytest.mark.services, pytest.mark.timeout(120)]


@dataclass
class Api:
    url: str
    root: Path
    keys: dict[str, str]
    app: Any

    def client(self, tenant: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=15, headers={"Authorization": f"Bearer {self.keys[tenant]}"})


@pytest.fixture
def api(db_url: str, redis_url: str, tmp_path: Path, serve: type, request: pytest.FixtureRequest) -> Iterator[Api]:
    """Tenant a reads <root>/a, tenant b reads <root>/ab (a prefix sibling); each holds one 640x480 photo."""
    root = tmp_path / "inputs"
    for name in ("a", "ab"):
        (root / name).mkdir(parents=True)
        Image.new("RGB", (640, 480), (90, 60, 30)).save(root / name / "photo.jpg")
    extra = getattr(request, "param", {})
    settings = Settings(
        database_url=db_url, broker_url=redis_url, model_name="tiny", allowed_input_roots=[root], **extra
    )
    keys = {"a": make_key(db_url, tenant="a"), "b": make_key(db_url, tenant="b")}
    engine = make_engine(db_url)
    with make_sessionmaker(engine)() as s:
        tenants.set_roots(s, settings, tenant="a", inputs=[str(root / "a")])
        tenants.set_roots(s, settings, tenant="b", inputs=[str(root / "ab")])
        s.commit()
    engine.dispose()
    app = create_app(settings)
    with serve(app) as srv:
        yield Api(srv.url, root, keys, app)


def _dry(client: httpx.Client, *images: str) -> httpx.Response:
    return client.post("/v1/jobs/tagging", json={"items": [{"images": [i]} for i in images], "dry_run": True})


def _png(width: int, height: int, *, exif_after_idat: bool) -> bytes:
    """A PNG whose IHDR says ``width`` x ``height`` and whose IDAT is not a zlib stream at all: decoding it fails,
    reading its header does not. With ``exif_after_idat`` an eXIf chunk follows the IDAT."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    exif = Image.Exif()
    exif[0x0112] = 1
    out = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
    out += chunk(b"IDAT", b"not zlib at all" * 64)
    if exif_after_idat:
        out += chunk(b"eXIf", exif.tobytes())
    return out + chunk(b"IEND", b"")


def test_an_inline_path_outside_the_tenants_roots_is_refused_present_or_missing(api: Api) -> None:
    with api.client("a") as a:
        own = _dry(a, str(api.root / "a" / "photo.jpg"))
        assert own.status_code == 200 and own.json()["visual_tokens"] == 234, own.text
        answers = []
        for path in (
            api.root / "ab" / "photo.jpg",  # another tenant's root, a prefix sibling of a's
            api.root / "ab" / "none.jpg",
            Path("/etc/hostname"),
            Path("/etc/none.jpg"),
            api.root / "a" / ".." / "ab" / "photo.jpg",
        ):
            r = _dry(a, str(path))
            answers.append((r.status_code, r.json().get("code"), r.json().get("detail", "").replace(str(path), "P")))
        assert {answer for answer in answers} == {(422, "input_path_refused", answers[0][2])}
        assert str(api.root) not in answers[0][2]
        # The real submit is refused the same way, and stores nothing.
        r = a.post("/v1/jobs/tagging", json={"items": [{"images": [str(api.root / "ab" / "photo.jpg")]}]})
        assert r.status_code == 422 and r.json()["code"] == "input_path_refused"
        assert a.get("/v1/jobs").json()["data"] == []


def test_a_fifo_or_a_descriptor_never_blocks_a_dry_run(api: Api) -> None:
    fifo = api.root / "a" / "pipe.jpg"
    os.mkfifo(fifo)
    try:
        with api.client("a") as a:
            r = _dry(a, str(fifo))
            assert r.status_code == 200 and r.json()["per_item"][0]["visual_tokens"] is None, r.text
            for path in ("/proc/self/fd/0", "/dev/zero", "/dev/stdin"):
                r = _dry(a, path)
                assert r.status_code == 422 and r.json()["code"] == "input_path_refused", r.text
            assert a.get("/v1/jobs").status_code == 200  # the API still answers
    finally:  # unblock a reader the unfixed code left waiting
        fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
        os.close(fd)


def test_no_pixels_are_decoded_a_pngs_size_comes_from_its_header(api: Api) -> None:
    png = _png(4000, 3000, exif_after_idat=True)
    (api.root / "a" / "broken.png").write_bytes(png)
    url = "data:image/png;base64," + base64.b64encode(png).decode()
    with api.client("a") as a:
        r = _dry(a, str(api.root / "a" / "broken.png"), url)
    assert r.status_code == 200, r.text
    # Both sized from the IHDR alone (decoding would fail on the IDAT), as a 4000x3000 JPEG's header sizes it.
    tokens = [t["visual_tokens"] for t in r.json()["per_item"]]
    assert tokens[0] is not None and tokens == [tokens[0], tokens[0]]
    with api.client("a") as a:
        jpeg = io.BytesIO()
        Image.new("RGB", (4000, 3000)).save(jpeg, "JPEG")
        (api.root / "a" / "same.jpg").write_bytes(jpeg.getvalue())
        same = _dry(a, str(api.root / "a" / "same.jpg")).json()["visual_tokens"]
    assert tokens[0] == same


def test_no_pooled_connection_is_held_while_headers_are_read(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    from jobs import headers

    engine = api.app.state.sessionmaker.kw["bind"]
    held: list[int] = []
    read = headers.read_head

    def watched(*args: Any, **kwargs: Any) -> bytes | None:
        held.append(engine.pool.checkedout())
        return read(*args, **kwargs)

    monkeypatch.setattr(headers, "read_head", watched)
    with api.client("a") as a:
        r = _dry(a, str(api.root / "a" / "photo.jpg"))
    assert r.status_code == 200 and r.json()["visual_tokens"] == 234
    assert held == [0]


@pytest.mark.parametrize("api", [{"dry_run_max_files": 2, "dry_run_concurrency": 1}], indirect=True)
def test_dry_runs_read_so_many_headers_and_a_tenant_runs_so_many_at_once(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(5):
        Image.new("RGB", (640, 480)).save(api.root / "a" / f"{i}.jpg")
    with api.client("a") as a:
        r = a.post("/v1/jobs/tagging", json={"directory": str(api.root / "a"), "dry_run": True})
    e = r.json()
    assert r.status_code == 200 and e["items"] == 6, r.text
    assert e["visual_tokens"] == 6 * 234  # 2 read, 4 at their mean
    assert [t["visual_tokens"] for t in e["per_item"]] == [234, 234, None, None, None, None]
    assert any("2 of 6 images" in w for w in e["warnings"]), e["warnings"]

    from jobs import headers

    entered, release = threading.Event(), threading.Event()
    read = headers.read_head

    def slow(*args: Any, **kwargs: Any) -> bytes | None:
        if not entered.is_set():  # the first dry run waits inside its header read, holding its tenant's slot
            entered.set()
            release.wait(20)
        return read(*args, **kwargs)

    monkeypatch.setattr(headers, "read_head", slow)
    first: list[httpx.Response] = []
    with api.client("a") as a, api.client("b") as b:
        t = threading.Thread(target=lambda: first.append(_dry(a, str(api.root / "a" / "photo.jpg"))))
        t.start()
        try:
            assert entered.wait(10)
            busy = _dry(a, str(api.root / "a" / "photo.jpg"))
            assert busy.status_code == 429 and busy.json()["code"] == "dry_run_busy", busy.text
            assert a.get("/v1/jobs").status_code == 200  # only dry runs wait their turn
            other = _dry(b, str(api.root / "ab" / "photo.jpg"))  # another tenant's slots are its own
            assert other.status_code == 200, other.text
        finally:
            release.set()
            t.join(20)
        assert first[0].status_code == 200
        assert _dry(a, str(api.root / "a" / "photo.jpg")).status_code == 200  # the slot was given back

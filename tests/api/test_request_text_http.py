"""Request text the API must refuse cleanly (NUL, lone surrogates, past the length caps), Idempotency-Key reuse
with another request, and an output folder left alone by a refused request: over real HTTP on SQLite and
PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from api.main import create_app
from api.text_check import text_fault
from tests.conftest import LiveServer, bearer, make_key
from vlbatch.db.models import Job
from vlbatch.db.session import make_engine, make_sessionmaker
from vlbatch.settings import Settings

pytestmark = pytest.mark.timeout(120)

CAPS = {"max_items_per_request": 50, "max_images_per_item": 4, "max_source_chars": 200}


def _jobs_in(db_url: str) -> int:
    engine = make_engine(db_url)
    with make_sessionmaker(engine)() as s:
        n = int(s.scalar(select(func.count()).select_from(Job)) or 0)
    engine.dispose()
    return n


@pytest.fixture
def api(db_url: str, redis_url: str, tmp_path: Path, serve: type, api_key: type) -> Iterator[tuple[httpx.Client, Path]]:
    root = tmp_path / "inbox"
    root.mkdir()
    (root / "a.jpg").write_bytes(b"x")
    (root / "a.txt").write_text("hello")
    settings = Settings(
        database_url=db_url, broker_url=redis_url, model_name="tiny", allowed_input_roots=[root], **CAPS
    )
    headers = api_key.header(api_key.make(db_url))
    with serve(create_app(settings)) as srv, httpx.Client(base_url=srv.url, timeout=30, headers=headers) as client:
        yield client, root


@pytest.fixture(scope="module")
def refusing_api(module_db_url: str, redis_url: str) -> Iterator[tuple[httpx.Client, str]]:
    """One server and database per module and backend for the tests whose every request is refused: each asserts
    that nothing was stored, which holds in a shared database only if no refusal before it stored anything either."""
    settings = Settings(database_url=module_db_url, broker_url=redis_url, model_name="tiny", **CAPS)
    headers = bearer(make_key(module_db_url))
    with LiveServer(create_app(settings)) as srv, httpx.Client(base_url=srv.url, timeout=30, headers=headers) as client:
        yield client, module_db_url


def _raw(client: httpx.Client, path: str, body: str, **headers: str) -> httpx.Response:
    """``body`` sent as written: JSON escapes such as ``\\ud800`` reach the server's decoder untouched."""
    return client.post(path, content=body.encode("ascii"), headers={"Content-Type": "application/json", **headers})


def _refused(r: httpx.Response, *, code: str = "invalid_request") -> dict[str, Any]:
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["code"] == code and body["detail"], body
    return body


BAD = {"nul": "\\u0000", "surrogate": "\\ud800"}


@pytest.mark.parametrize("bad", sorted(BAD))
@pytest.mark.parametrize(
    ("path", "template"),
    [
        ("/v1/jobs/tagging", '{"items": [{"images": ["/a.jpg"], "ref": "r%s"}]}'),
        ("/v1/jobs/tagging", '{"items": [{"images": ["/a%s.jpg"]}]}'),
        ("/v1/jobs/tagging", '{"model": "m%s", "items": [{"images": ["/a.jpg"]}]}'),
        ("/v1/jobs/tagging", '{"directory": "/in%s"}'),
        ("/v1/jobs/tagging", '{"items": [{"images": ["/a.jpg"]}], "options": {"prompt": "p%s"}}'),
        ("/v1/jobs", '{"pipeline": "summarize", "items": [{"path": "/a%s.txt"}]}'),
        ("/v1/jobs", '{"pipeline": "summarize", "directory": "/in", "output_dir": "/out%s"}'),
        ("/v1/jobs", '{"pipeline": "tagging", "items": [{"images": ["/a.jpg"]}], "options": {"k%s": 1}}'),
        ("/v1/jobs/documents", '{"pipeline": "summarize", "items": [{"path": "/a.txt", "ref": "%s"}]}'),
        ("/v1/jobs/documents", '{"pipeline": "summarize", "directory": "/in", "output_dir": "%s/out"}'),
    ],
)
def test_nul_and_lone_surrogates_in_a_body_are_422_and_nothing_is_stored(
    refusing_api: tuple[httpx.Client, str], path: str, template: str, bad: str
) -> None:
    client, db_url = refusing_api
    body = _refused(_raw(client, path, template % BAD[bad]))
    text = json.dumps(body)
    assert "NUL" in text or "surrogate" in text
    assert text_fault(body) is None  # the answer carries neither back: it encodes, and a client can store it
    assert _jobs_in(db_url) == 0


@pytest.mark.parametrize("url", ["/v1/jobs?cursor=a%00b", "/v1/jobs?status=qu%00", "/v1/jobs/abc%00/items"])
def test_nul_in_a_query_or_path_is_422(refusing_api: tuple[httpx.Client, str], url: str) -> None:
    client, _ = refusing_api
    _refused(client.get(url))


def test_an_idempotency_key_with_control_characters_is_422(api: tuple[httpx.Client, Path], db_url: str) -> None:
    client, _ = api
    body = {"items": [{"images": ["/a.jpg"]}]}
    r = client.post("/v1/jobs/tagging", json=body, headers={"Idempotency-Key": "a\tb"})
    _refused(r)
    assert _jobs_in(db_url) == 0


def test_a_422_echoes_no_huge_input(api: tuple[httpx.Client, Path]) -> None:
    client, _ = api
    r = client.post("/v1/jobs/tagging", json={"items": [{"images": ["/a.jpg"], "ref": "x" * 100_000}]})
    body = _refused(r)
    assert len(r.content) < 4000, len(r.content)
    assert any("100000 characters" in str(e.get("input")) for e in body["detail"])
    r = client.post("/v1/jobs/tagging", json={"items": [{"images": [f"/{i}.jpg" for i in range(5000)]}], "bad": 1})
    _refused(r)
    assert len(r.content) < 4000, len(r.content)


def test_inline_caps_refuse_at_submission(api: tuple[httpx.Client, Path], db_url: str) -> None:
    client, root = api
    img = str(root / "a.jpg")
    many_images = client.post("/v1/jobs/tagging", json={"items": [{"images": [img] * 5}]})
    assert "VLBATCH_MAX_IMAGES_PER_ITEM" in _refused(many_images, code="invalid_items")["detail"]
    long_source = client.post("/v1/jobs/tagging", json={"items": [{"images": ["/" + "a" * 300 + ".jpg"]}]})
    assert "VLBATCH_MAX_SOURCE_CHARS" in _refused(long_source, code="invalid_items")["detail"]
    many_items = client.post("/v1/jobs/tagging", json={"items": [{"images": [img]}] * 51})
    assert "VLBATCH_MAX_ITEMS_PER_REQUEST" in _refused(many_items, code="too_many_items")["detail"]
    docs = client.post("/v1/jobs/documents", json={"pipeline": "summarize", "items": [{"path": "/a.txt"}] * 51})
    _refused(docs, code="too_many_items")
    assert _jobs_in(db_url) == 0
    # a data URL is bounded by the body cap, not the source cap; at the caps a job is taken
    data_url = "data:image/png;base64," + "A" * 1000
    ok = client.post("/v1/jobs/tagging", json={"items": [{"images": [data_url, img, img, img]}] * 50})
    assert ok.status_code == 201, ok.text
    assert ok.json()["total"] == 50


def test_an_idempotency_key_reused_for_another_request_is_409(api: tuple[httpx.Client, Path], db_url: str) -> None:
    client, root = api
    img = str(root / "a.jpg")
    key = {"Idempotency-Key": "import-7"}
    first = client.post("/v1/jobs/tagging", json={"items": [{"images": [img]}]}, headers=key)
    assert first.status_code == 201, first.text
    # the same request again, keys reordered and a default spelled out: the same job
    again = _raw(client, "/v1/jobs/tagging", json.dumps({"priority": "batch", "items": [{"images": [img]}]}), **key)
    assert again.status_code in (200, 201) and again.json()["id"] == first.json()["id"]
    other_body = client.post("/v1/jobs/tagging", json={"items": [{"images": [img, img]}]}, headers=key)
    assert other_body.status_code == 409, other_body.text
    assert other_body.json()["code"] == "idempotency_key_reused" and first.json()["id"] in other_body.json()["detail"]
    other_route = client.post("/v1/jobs", json={"pipeline": "tagging", "items": [{"images": [img]}]}, headers=key)
    assert other_route.status_code == 409 and other_route.json()["code"] == "idempotency_key_reused"
    assert _jobs_in(db_url) == 1


def test_a_refused_request_creates_no_output_folder(api: tuple[httpx.Client, Path], db_url: str) -> None:
    client, root = api
    out = root / "results" / "deep"
    body = {"pipeline": "summarize", "items": [{"path": str(root / "missing.txt")}], "output_dir": str(out)}
    r = client.post("/v1/jobs/documents", json=body)
    assert r.status_code == 422 and r.json()["code"] == "input_path_refused", r.text
    assert not (root / "results").exists()
    file_there = client.post("/v1/jobs/documents", json={**body, "output_dir": str(root / "a.txt")})
    assert file_there.status_code == 422, file_there.text
    assert _jobs_in(db_url) == 0

"""Large jobs over real HTTP, on SQLite and PostgreSQL: a folder of a few thousand files and an NDJSON upload of as
many item lines are accepted with every item and its chunk, in order; a bad NDJSON line, an overlong one, or an
upload past the tenant's quota refuses the job with nothing stored."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select

from api.main import create_app
from tests.conftest import LiveServer, bearer, make_key
from vlbatch.db.models import Chunk, Item, Job
from vlbatch.db.session import make_engine, make_sessionmaker
from vlbatch.settings import Settings, TenantQuota

CHUNK = 7


@pytest.fixture
def api(db_url: str, redis_url: str, tmp_path: Path) -> Iterator[tuple[httpx.Client, Settings]]:
    root = tmp_path / "album"
    root.mkdir()
    settings = Settings(
        database_url=db_url,
        broker_url=redis_url,
        model_name="tiny",
        chunk_size=CHUNK,
        allowed_input_roots=[root],
        max_item_line_bytes=2048,
        tenant_quotas={"small": TenantQuota(max_items_per_job=1000)},
    )
    headers = bearer(make_key(db_url))
    with (
        LiveServer(create_app(settings)) as srv,
        httpx.Client(base_url=srv.url, timeout=120, headers=headers) as client,
    ):
        yield client, settings


def _stored(settings: Settings, job_id: str) -> list[tuple[int, str | None, dict, int]]:
    """(seq, ref, inputs, chunk seq) of the job's items, in order."""
    with make_sessionmaker(make_engine(settings.database.database_url))() as s:
        stmt = select(Item.seq, Item.ref, Item.inputs, Chunk.seq).join(Chunk, Chunk.id == Item.chunk_id)
        return [tuple(r) for r in s.execute(stmt.where(Item.job_id == job_id).order_by(Item.seq))]  # type: ignore[misc]


def _counts(settings: Settings) -> tuple[int, int, int]:
    with make_sessionmaker(make_engine(settings.database.database_url))() as s:
        return tuple(s.scalar(select(func.count()).select_from(t)) or 0 for t in (Job, Item, Chunk))  # type: ignore[return-value]


def _chunked(lines: list[str], size: int = 4096) -> Iterator[bytes]:
    """The upload as a client streams it: chunked, lines cut anywhere."""
    body = "".join(lines).encode()
    for k in range(0, len(body), size):
        yield body[k : k + size]


def test_a_folder_of_thousands_of_files_is_accepted_with_every_item_and_chunk_in_order(
    api: tuple[httpx.Client, Settings],
) -> None:
    client, settings = api
    root = settings.inputs.allowed_input_roots[0]
    paths = []
    for d in range(30):
        (root / f"d{d:02d}").mkdir()
        for f in range(100):
            path = root / f"d{d:02d}" / f"{f:03d}.jpg"
            path.write_bytes(b"x")
            paths.append(str(path))
    r = client.post("/v1/jobs/tagging", json={"directory": str(root)})
    assert r.status_code == 201, r.text
    assert r.json()["total"] == 3000
    stored = _stored(settings, r.json()["id"])
    assert [(q, ref, inputs["images"]) for q, ref, inputs, _ in stored] == [(i, p, [p]) for i, p in enumerate(paths)]
    assert [c for *_, c in stored] == [i // CHUNK for i in range(3000)]


def test_an_ndjson_upload_is_accepted_with_every_item_and_chunk_in_order(api: tuple[httpx.Client, Settings]) -> None:
    client, settings = api
    root = settings.inputs.allowed_input_roots[0]
    head = json.dumps({"pipeline": "image_tagging", "options": {"max_tags": 5}}) + "\n"
    lines = [
        json.dumps({"images": [f"{root}/{i}.jpg"], "ref": f"r{i}"}) + ("\r\n" if i % 2 else "\n") for i in range(2500)
    ]
    lines.insert(100, "\n")  # a blank line is skipped
    r = client.post(
        "/v1/jobs/ndjson", content=_chunked([head, *lines]), headers={"Content-Type": "application/x-ndjson"}
    )
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["total"] == 2500 and job["counts"]["queued"] == 2500 and job["pipeline"] == "image_tagging"
    stored = _stored(settings, job["id"])
    assert [(q, ref, inputs["images"]) for q, ref, inputs, _ in stored] == [
        (i, f"r{i}", [f"{root}/{i}.jpg"]) for i in range(2500)
    ]
    assert [c for *_, c in stored] == [i // CHUNK for i in range(2500)]


@pytest.mark.parametrize(
    ("bad", "status", "code", "needle"),
    [
        ("{not json\n", 422, "invalid_items", "line 1202:"),
        ('{"path": "/a.pdf"}\n', 422, "invalid_items", "line 1202: not a image item"),
        ('{"images": ["/etc/passwd"]}\n', 422, "input_path_refused", "line 1202: '/etc/passwd' is outside"),
        ('{"images": ["' + "x" * 3000 + '"]}\n', 413, "item_line_too_long", "line 1202 is longer than 2048 bytes"),
    ],
)
def test_a_bad_line_refuses_the_upload_by_its_number_and_nothing_is_stored(
    api: tuple[httpx.Client, Settings], bad: str, status: int, code: str, needle: str
) -> None:
    client, settings = api
    root = settings.inputs.allowed_input_roots[0]
    head = json.dumps({"pipeline": "image_tagging"}) + "\n"
    lines = [json.dumps({"images": [f"{root}/{i}.jpg"]}) + "\n" for i in range(2000)]
    lines[1200] = bad  # line 1202: the head is line 1
    r = client.post(
        "/v1/jobs/ndjson", content=_chunked([head, *lines]), headers={"Content-Type": "application/x-ndjson"}
    )
    assert (r.status_code, r.json()["code"]) == (status, code), r.text
    assert needle in r.json()["detail"]
    assert _counts(settings) == (0, 0, 0)


def test_an_unending_line_is_refused_before_it_is_held(api: tuple[httpx.Client, Settings]) -> None:
    client, settings = api

    def endless() -> Iterator[bytes]:
        yield b'{"pipeline": "image_tagging"}\n{"images": ["'
        for _ in range(100):
            yield b"x" * 1024

    r = client.post("/v1/jobs/ndjson", content=endless(), headers={"Content-Type": "application/x-ndjson"})
    assert (r.status_code, r.json()["code"]) == (413, "item_line_too_long")
    assert "line 2 " in r.json()["detail"]
    assert _counts(settings) == (0, 0, 0)


@pytest.mark.parametrize(
    ("body", "content_type", "code", "needle"),
    [
        (b"", "application/x-ndjson", "invalid_request", "empty"),
        (
            b'{"pipeline": "image_tagging", "items": []}\n',
            "application/x-ndjson",
            "invalid_request",
            "line 1 (the job's head)",
        ),
        (b'{"pipeline": "image_tagging"}\n\n', "application/x-ndjson", "no_inputs", "no item line"),
        (b'{"pipeline": "image_tagging"}\n', "application/json", "invalid_request", "application/x-ndjson"),
    ],
)
def test_an_upload_without_a_head_or_items_is_refused(
    api: tuple[httpx.Client, Settings], body: bytes, content_type: str, code: str, needle: str
) -> None:
    client, settings = api
    r = client.post("/v1/jobs/ndjson", content=body, headers={"Content-Type": content_type})
    assert r.json()["code"] == code, r.text
    assert needle in r.json()["detail"]
    assert _counts(settings) == (0, 0, 0)


def test_an_upload_past_the_tenants_quota_is_refused_with_nothing_stored(
    api: tuple[httpx.Client, Settings], db_url: str
) -> None:
    _, settings = api
    root = settings.inputs.allowed_input_roots[0]
    client = httpx.Client(base_url=api[0].base_url, timeout=120, headers=bearer(make_key(db_url, tenant="small")))
    head = json.dumps({"pipeline": "image_tagging"}) + "\n"
    lines = [json.dumps({"images": [f"{root}/{i}.jpg"]}) + "\n" for i in range(1500)]
    with client:
        r = client.post(
            "/v1/jobs/ndjson", content=_chunked([head, *lines]), headers={"Content-Type": "application/x-ndjson"}
        )
    assert (r.status_code, r.json()["code"]) == (413, "items_quota_exceeded"), r.text
    assert _counts(settings) == (0, 0, 0)

"""The REST API over real HTTP against SQLite and PostgreSQL, with the real Redis broker."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from api.main import create_app
from tests.conftest import LiveServer, bearer, make_key
from vlbatch.settings import Settings


@contextmanager
def _api(db_url: str, redis_url: str, folder: Path) -> Iterator[tuple[httpx.Client, Settings]]:
    root = folder / "album"
    root.mkdir()
    settings = Settings(
        database_url=db_url,
        broker_url=redis_url,
        model_name="tiny",
        chunk_size=7,
        allowed_input_roots=[root, Path("/x")],  # /x: the inline items' paths, never read here
    )
    headers = bearer(make_key(db_url))
    with LiveServer(create_app(settings)) as srv, httpx.Client(base_url=srv.url, timeout=30, headers=headers) as client:
        yield client, settings


@pytest.fixture
def api(db_url: str, redis_url: str, tmp_path: Path) -> Iterator[tuple[httpx.Client, Settings]]:
    with _api(db_url, redis_url, tmp_path) as served:
        yield served


@pytest.fixture(scope="module")
def refusing_api(
    module_db_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[httpx.Client, Settings]]:
    """One server and database per module and backend for the requests it refuses."""
    with _api(module_db_url, redis_url, tmp_path_factory.mktemp("refusing")) as served:
        yield served


def test_create_page_stream_cancel(api: tuple[httpx.Client, Settings]) -> None:
    client, _ = api
    items = [{"images": [f"/x/{i}.jpg"], "ref": f"r{i}"} for i in range(20)]
    r = client.post("/v1/jobs/tagging", json={"items": items, "options": {"max_tags": 5}})
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["total"] == 20 and job["counts"]["queued"] == 20 and job["model"] == "tiny"

    got, cursor = [], None
    while True:
        page = client.get(
            f"/v1/jobs/{job['id']}/items", params={"limit": 6, **({"cursor": cursor} if cursor else {})}
        ).json()
        got += page["data"]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert [i["ref"] for i in got] == [f"r{i}" for i in range(20)]

    c = client.post(f"/v1/jobs/{job['id']}/cancel").json()
    assert c["status"] == "cancelled" and c["counts"]["cancelled"] == 20
    assert client.get(f"/v1/jobs/{job['id']}/results.jsonl").text == ""


def test_idempotency_key_returns_same_job(api: tuple[httpx.Client, Settings]) -> None:
    client, _ = api
    body = {"items": [{"images": ["/x/a.jpg"]}]}
    a = client.post("/v1/jobs/tagging", json=body, headers={"Idempotency-Key": "k1"}).json()
    b = client.post("/v1/jobs/tagging", json=body, headers={"Idempotency-Key": "k1"}).json()
    c = client.post("/v1/jobs/tagging", json=body, headers={"Idempotency-Key": "k2"}).json()
    assert a["id"] == b["id"] != c["id"]


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"items": []}, "empty"),
        ({"items": [{"images": ["/x/a.jpg"]}], "bogus": 1}, "bogus"),
        ({"items": [{"images": ["/x/a.jpg"]}], "options": {"max_visual_tokens": 0}}, "max_visual_tokens"),
        ({}, "exactly one"),
        ({"directory": "/etc"}, "outside the allowed input roots"),
    ],
)
def test_bad_requests_are_422_with_message(
    refusing_api: tuple[httpx.Client, Settings], body: dict, needle: str
) -> None:
    client, _ = refusing_api
    r = client.post("/v1/jobs/tagging", json=body)
    assert r.status_code == 422
    assert needle in json.dumps(r.json())


def test_directory_job_confined_to_roots(api: tuple[httpx.Client, Settings], tmp_path: Path) -> None:
    client, settings = api
    root = settings.inputs.allowed_input_roots[0]
    (root / "sub").mkdir()
    for name in ["a.jpg", "b.png", "sub/c.jpeg", "notes.txt"]:
        (root / name).write_bytes(b"x")
    outside = tmp_path / "secret.jpg"
    outside.write_bytes(b"x")
    (root / "link.jpg").symlink_to(outside)
    r = client.post("/v1/jobs/tagging", json={"directory": str(root), "options": {"images_per_prompt": 2}})
    assert r.status_code == 201, r.text
    items = client.get(f"/v1/jobs/{r.json()['id']}/items").json()["data"]
    paths = [p for it in items for p in it["inputs"]["images"]]
    assert sorted(Path(p).name for p in paths) == ["a.jpg", "b.png", "c.jpeg"]
    assert [len(it["inputs"]["images"]) for it in items] == [2, 1]
    assert client.post("/v1/jobs/tagging", json={"directory": str(root / "..")}).status_code == 422


def test_unknown_job_404(api: tuple[httpx.Client, Settings]) -> None:
    client, _ = api
    r = client.get("/v1/jobs/nope")
    assert r.status_code == 404 and "nope" in r.json()["detail"]
    assert client.get("/readyz").json() == {"status": "ready"}


def _finish_some(settings: Settings, job_id: str) -> None:
    """Straight in the DB: results for most items (awkward strings included), a failure without a result
    row, and items left queued or cancelled (not exported)."""
    from sqlalchemy import select

    from vlbatch.db import outcomes
    from vlbatch.db.models import Item, Result
    from vlbatch.db.session import make_engine, make_sessionmaker

    engine = make_engine(settings.database.database_url)
    with make_sessionmaker(engine)() as s:
        items = list(s.scalars(select(Item).where(Item.job_id == job_id).order_by(Item.seq)))
        for it in items:
            if it.seq % 5 == 4:
                continue  # left queued: not in the export
            if it.seq == 13:
                it.status = "cancelled"
                continue
            failed = it.seq % 3 == 0
            it.status = "failed" if failed else "succeeded"
            if failed:
                it.error_code, it.error_message = "bad_image", f'cannot decode "{it.seq}"\nline two'
            if it.seq == 6:
                continue  # failed before any answer: no result row
            s.add(
                Result(
                    item_id=it.id,
                    job_id=job_id,
                    output=None if failed else {"tags": ["café", 'a "b"', "\u2028"], "caption": f"n°{it.seq}\n"},
                    raw_text=None if it.seq == 1 else f'{{"tags": ["é"]}}\t{it.seq}\\',
                    prompt_tokens=10 + it.seq,
                    completion_tokens=it.seq,
                    model="tiny",
                    pipeline_version="1",
                    options_hash="h" * 64,
                )
            )
        s.flush()
        finished = [it for it in items if it.status in ("succeeded", "failed")]
        first = outcomes.take_positions(s, job_id=job_id, count=len(finished))
        assert first is not None
        for k, it in enumerate(finished):  # written in seq order: paging and export agree
            it.written_seq = first + k
        s.commit()
    engine.dispose()


def test_jsonl_export_spans_pages_and_matches_results(
    api: tuple[httpx.Client, Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    from api.routes import results

    monkeypatch.setattr(results, "EXPORT_PAGE_ROWS", 3)  # many internal pages for 20 items
    client, settings = api
    items = [{"images": [f"/x/{i}.jpg"], **({"ref": f"r{i}"} if i % 4 else {})} for i in range(20)]
    job = client.post("/v1/jobs/tagging", json={"items": items}).json()
    _finish_some(settings, job["id"])

    paged, cursor = [], None
    while True:
        page = client.get(
            f"/v1/jobs/{job['id']}/results", params={"limit": 4, **({"cursor": cursor} if cursor else {})}
        ).json()
        paged += page["data"]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    body = client.get(f"/v1/jobs/{job['id']}/results.jsonl").text
    assert body.endswith("\n")
    lines = body.splitlines()
    expected = [i for i in range(20) if i % 5 != 4 and i != 13]
    assert [json.loads(line)["seq"] for line in lines] == expected  # each once, in seq order
    assert [json.loads(line) for line in lines] == paged
    assert lines == [json.dumps(row) for row in paged]  # the same bytes json.dumps gives for each row
    no_result = json.loads(lines[expected.index(6)])
    assert no_result["status"] == "failed" and no_result["output"] is None and no_result["prompt_tokens"] == 0


def test_client_leaving_mid_export_leaves_the_api_working(
    api: tuple[httpx.Client, Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    from api.routes import results

    monkeypatch.setattr(results, "EXPORT_PAGE_ROWS", 1)
    client, settings = api
    job = client.post("/v1/jobs/tagging", json={"items": [{"images": [f"/x/{i}.jpg"]} for i in range(20)]}).json()
    _finish_some(settings, job["id"])
    for _ in range(3):
        with client.stream("GET", f"/v1/jobs/{job['id']}/results.jsonl") as r:
            assert json.loads(next(r.iter_lines()))["seq"] == 0
        # closed after one line: the server drops the stream (and its cursor) on its own
        assert client.get(f"/v1/jobs/{job['id']}").json()["counts"]["succeeded"] > 0
    assert len(client.get(f"/v1/jobs/{job['id']}/results.jsonl").text.splitlines()) == 15
    # each export left was closed when its client left: no reader thread waits on a page nobody takes
    deadline = time.monotonic() + 30
    while any(t.name == "row-stream" for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.05)  # a wait for the condition, not a timing being measured
    assert not [t for t in threading.enumerate() if t.name == "row-stream"]

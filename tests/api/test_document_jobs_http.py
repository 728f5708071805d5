"""Document jobs over real HTTP (SQLite and PostgreSQL, real Redis): create, queue, validation, re-run."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from api.main import create_app
from jobs.publisher import queue_name
from tests.conftest import LiveServer, bearer, make_key
from vlbatch.settings import Settings


@contextmanager
def _api(db_url: str, redis_url: str, folder: Path) -> Iterator[tuple[httpx.Client, Settings]]:
    import redis

    redis.Redis.from_url(redis_url).delete(queue_name("tiny", "documents"))
    root = folder / "inbox"
    root.mkdir()
    settings = Settings(database_url=db_url, broker_url=redis_url, model_name="tiny", allowed_input_roots=[root])
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
    """One server and database per module and backend for the requests it refuses (nothing is stored)."""
    with _api(module_db_url, redis_url, tmp_path_factory.mktemp("refusing")) as served:
        yield served


def test_directory_job_goes_to_the_documents_queue_and_reruns(
    api: tuple[httpx.Client, Settings], redis_url: str
) -> None:
    import redis

    client, settings = api
    root = settings.inputs.allowed_input_roots[0]
    for name in ["a.pdf", "b.docx", "c.md", "d.txt", "photo.jpg"]:
        (root / name).write_bytes(b"x")
    body = {
        "pipeline": "classify",
        "directory": str(root),
        "options": {"labels": ["contract", "report"]},
        "output_dir": str(root / "out"),
    }
    r = client.post("/v1/jobs/documents", json=body)
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["pipeline"] == "classify" and job["priority"] == "documents" and job["total"] == 4
    items = client.get(f"/v1/jobs/{job['id']}/items").json()["data"]
    assert sorted(Path(i["inputs"]["path"]).name for i in items) == ["a.pdf", "b.docx", "c.md", "d.txt"]
    # one message per chunk of document_chunk_size documents, on the model's documents queue
    assert redis.Redis.from_url(redis_url).llen(queue_name("tiny", "documents")) == -(
        -4 // settings.scheduling.document_chunk_size
    )
    again = client.post(f"/v1/jobs/{job['id']}/rerun", json={"scope": "all"})
    assert again.status_code == 201 and again.json()["total"] == 4 and again.json()["id"] != job["id"]
    client.post(f"/v1/jobs/{job['id']}/cancel")
    missing = client.post(f"/v1/jobs/{job['id']}/rerun", json={"scope": "missing"}).json()
    assert missing["total"] == 4  # cancelled is not succeeded: all four are missing


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (
            {"pipeline": "extract", "items": [{"path": "IN/a.pdf"}], "options": {"json_schema": {"type": "array"}}},
            "type",
        ),
        ({"pipeline": "extract", "items": [{"path": "IN/a.pdf"}], "options": {}}, "json_schema"),
        ({"pipeline": "classify", "items": [{"path": "IN/a.pdf"}], "options": {"labels": []}}, "labels"),
        ({"pipeline": "summarize", "items": [{"path": "IN/a.pdf"}], "options": {"bogus": 1}}, "bogus"),
        ({"pipeline": "translate", "items": [{"path": "IN/a.pdf"}]}, "pipeline"),
        ({"pipeline": "summarize", "items": [{"path": "/etc/passwd"}]}, "outside the allowed input roots"),
        ({"pipeline": "summarize", "items": [{"path": "IN/missing.pdf"}]}, "not a file"),
        ({"pipeline": "summarize", "directory": "IN", "output_dir": "/tmp/elsewhere"}, "outside"),
        ({"pipeline": "summarize", "items": []}, "empty"),
    ],
)
def test_bad_document_requests_are_422(refusing_api: tuple[httpx.Client, Settings], body: dict, needle: str) -> None:
    client, settings = refusing_api
    root = settings.inputs.allowed_input_roots[0]
    (root / "a.pdf").write_bytes(b"x")
    text = json.dumps(body).replace("IN", str(root))
    r = client.post("/v1/jobs/documents", content=text, headers={"Content-Type": "application/json"})
    assert r.status_code == 422, r.text
    assert needle in json.dumps(r.json())


def test_rerun_of_unknown_job_is_404(api: tuple[httpx.Client, Settings]) -> None:
    client, _ = api
    assert client.post("/v1/jobs/nope/rerun", json={"scope": "all"}).status_code == 404

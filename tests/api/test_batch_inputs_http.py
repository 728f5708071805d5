"""Hostile batch inputs over real HTTP on SQLite and PostgreSQL: lines that cannot be stored fail alone with their
codes, lines past the line cap are never held whole, an upload whose row fails keeps no bytes, a file whose
bytes are gone answers with its code, and the batch fields (window, metadata, line count) have their caps."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.main import create_app
from tests.conftest import LiveServer, bearer, make_key
from vlbatch.settings import Settings

pytestmark = pytest.mark.timeout(180)

LINE_CAP = 4096


def chat(custom_id: str, **body: Any) -> dict[str, Any]:
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **body}
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}


@contextmanager
def _api(db_url: str, redis_url: str, data_dir: Path) -> Iterator[tuple]:
    settings = Settings(
        database_url=db_url,
        broker_url=redis_url,
        model_name=f"nobody-{data_dir.parent.name}",  # no worker serves it: batches stay in progress
        data_dir=data_dir,
        max_batch_line_bytes=LINE_CAP,
        max_batch_lines=6,
    )
    headers = bearer(make_key(db_url, tenant="acme"))
    with LiveServer(create_app(settings)) as srv, httpx.Client(base_url=srv.url, timeout=60, headers=headers) as c:
        yield c, settings


@pytest.fixture
def api(db_url: str, redis_url: str, tmp_path: Path) -> Iterator[tuple]:
    with _api(db_url, redis_url, tmp_path / "data") as served:
        yield served


@pytest.fixture(scope="module")
def refusing_api(module_db_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple]:
    """One server and database per module and backend for requests refused before anything is kept: a test that
    asserts no bytes were kept then holds for every refusal made before it too."""
    with _api(module_db_url, redis_url, tmp_path_factory.mktemp("refusing") / "data") as served:
        yield served


@pytest.fixture(scope="module")
def batch_refusing_api(module_db_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple]:
    """One server and database per module and backend for uploads whose batch is then refused (the files stay)."""
    with _api(module_db_url, redis_url, tmp_path_factory.mktemp("batch-refusing") / "data") as served:
        yield served


def upload(client: httpx.Client, content: bytes, name: str = "in.jsonl") -> httpx.Response:
    return client.post("/v1/files", files={"file": (name, content)}, data={"purpose": "batch"})


def create(client: httpx.Client, file_id: str, **fields: Any) -> httpx.Response:
    body = {"input_file_id": file_id, "endpoint": "/v1/chat/completions", "completion_window": "24h", **fields}
    return client.post("/v1/batches", json=body)


def stored(settings: Settings) -> list[Path]:
    folder = settings.uploads.data_dir / "files"
    return sorted(p for p in folder.iterdir() if p.is_file()) if folder.exists() else []


def test_lines_the_database_cannot_store_fail_alone(api: tuple) -> None:
    client, _ = api
    lines = [
        json.dumps(chat("ok-1")),
        '{"custom_id": "\\ud800", "method": "POST", "url": "/v1/chat/completions", "body": {}}',  # lone surrogate
        '{"custom_id": "a\\u0000b", "method": "POST", "url": "/v1/chat/completions", "body": {}}',  # NUL
        json.dumps(chat("nan")).replace('"max_tokens": 4', '"max_tokens": 4, "temperature": NaN'),
        json.dumps(chat("inf")).replace('"max_tokens": 4', '"max_tokens": 4, "top_p": 1e400'),
        json.dumps(chat("ok-2")),
    ]
    file_id = upload(client, "\n".join(lines).encode()).json()["id"]
    r = create(client, file_id)
    assert r.status_code == 200, r.text
    batch = r.json()
    assert batch["status"] == "in_progress"
    assert batch["request_counts"] == {"total": 6, "completed": 0, "failed": 4}
    assert {e["line"]: e["code"] for e in batch["errors"]["data"]} == {
        2: "invalid_batch_line",
        3: "invalid_batch_line",
        4: "invalid_batch_line",
        5: "invalid_batch_line",
    }


def test_a_line_past_the_cap_fails_alone_and_is_never_held_whole(api: tuple) -> None:
    client, _ = api
    long_line = json.dumps(chat("long", messages=[{"role": "user", "content": "x" * (LINE_CAP * 20)}]))
    content = "\n".join([json.dumps(chat("a")), long_line, json.dumps(chat("b"))]).encode()
    file_id = upload(client, content).json()["id"]
    batch = create(client, file_id).json()
    assert batch["request_counts"] == {"total": 3, "completed": 0, "failed": 1}
    (error,) = batch["errors"]["data"]
    assert error["line"] == 2 and error["code"] == "batch_line_too_long"
    assert str(len(long_line)) in error["message"]


def test_a_batch_over_the_line_count_cap_is_refused(batch_refusing_api: tuple) -> None:
    client, _ = batch_refusing_api
    content = "\n".join(json.dumps(chat(f"id-{i}")) for i in range(7)).encode()
    r = create(client, upload(client, content).json()["id"])
    assert r.status_code == 422 and r.json()["code"] == "too_many_batch_lines"


def test_a_completion_window_past_any_duration_is_a_422(batch_refusing_api: tuple) -> None:
    client, _ = batch_refusing_api
    file_id = upload(client, json.dumps(chat("a")).encode()).json()["id"]
    r = create(client, file_id, completion_window="99999999999999999999h")
    assert r.status_code == 422 and r.json()["code"] == "invalid_batch"


@pytest.mark.parametrize(
    "metadata",
    [{"k": "v" * 513}, {"k" * 65: "v"}, {f"k{i}": "v" for i in range(17)}, {"k": "a\x00b"}],
    ids=["long-value", "long-key", "17-keys", "nul"],
)
def test_batch_metadata_has_openais_caps(batch_refusing_api: tuple, metadata: dict[str, str]) -> None:
    client, _ = batch_refusing_api
    file_id = upload(client, json.dumps(chat("a")).encode()).json()["id"]
    r = create(client, file_id, metadata=metadata)
    assert r.status_code == 422 and r.json()["code"] == "invalid_request"


@pytest.mark.parametrize("name", [b"a\x00b.jsonl", b"a\x1bb.jsonl", b"../x.jsonl", b"", b"\xff.jsonl"])
def test_a_file_name_that_cannot_be_stored_is_refused_and_keeps_no_bytes(refusing_api: tuple, name: bytes) -> None:
    client, settings = refusing_api
    # Built by hand: a client library would escape the name's control characters before sending it.
    body = (
        b'--b0\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
        b'--b0\r\nContent-Disposition: form-data; name="file"; filename="'
        + name
        + b'"\r\n\r\n'
        + json.dumps(chat("a")).encode()
        + b"\r\n--b0--\r\n"
    )
    r = client.post("/v1/files", content=body, headers={"Content-Type": "multipart/form-data; boundary=b0"})
    assert r.status_code == 422 and r.json()["code"] == "invalid_file_name"
    assert stored(settings) == []


def test_an_upload_whose_row_fails_keeps_no_bytes(api: tuple) -> None:
    client, settings = api
    from sqlalchemy import create_engine, text

    engine = create_engine(settings.database.database_url)
    with engine.begin() as conn:  # the files table cannot take a row any more
        conn.execute(text("DROP TABLE files CASCADE" if engine.dialect.name == "postgresql" else "DROP TABLE files"))
    engine.dispose()
    r = upload(client, json.dumps(chat("a")).encode())
    assert r.status_code >= 500
    assert stored(settings) == []


def test_a_file_whose_bytes_are_gone_answers_with_its_code(api: tuple) -> None:
    client, settings = api
    file_id = upload(client, json.dumps(chat("a")).encode()).json()["id"]
    for path in stored(settings):
        path.unlink()
    r = client.get(f"/v1/files/{file_id}/content")
    assert r.status_code == 410 and r.json()["code"] == "file_content_missing"
    r = create(client, file_id)
    assert r.status_code == 410 and r.json()["code"] == "file_content_missing"
    assert client.get(f"/v1/files/{file_id}").status_code == 200  # the row is still there to delete

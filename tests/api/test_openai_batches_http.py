"""The Files and Batches API through the official openai client over real HTTP (no engine): line checks with
their line numbers, tenant scoping, the upload cap, cancel and expiry with their error files."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.main import create_app
from tests.conftest import make_key
from vlbatch.settings import Settings

openai = pytest.importorskip("openai")
from openai.types import BatchError  # noqa: E402

pytestmark = [pytest.mark.services, pytest.mark.timeout(120)]

RED = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"
)


def chat(custom_id: str, **body: Any) -> dict[str, Any]:
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **body}
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}


def image_message(n: int) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": RED}} for _ in range(n)]
    return [{"role": "user", "content": [*parts, {"type": "text", "text": "what colour?"}]}]


# (line, expected code) of each bad line in LINES below
LINES: list[Any] = [
    chat("ok-1"),
    chat("ok-2", messages=image_message(1)),
    chat("bad-field", temperature=0.5, logit_bias={"1": 2}),  # line 3: unknown field
    chat("bad-stream", stream=True),  # line 4
    chat("bad-n", n=2),  # line 5
    chat("ok-1"),  # line 6: duplicate custom_id
    {**chat("bad-url"), "url": "/v1/embeddings"},  # line 7
    "{not json",  # line 8
    chat("bad-images", messages=image_message(3)),  # line 9: over images_per_prompt=2
    chat("ok-3", response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": {"type": "object"}}}),
]
BAD = {
    3: "invalid_batch_line",
    4: "invalid_batch_line",
    5: "invalid_batch_line",
    6: "duplicate_custom_id",
    7: "mismatched_endpoint",
    8: "invalid_batch_line",
    9: "too_many_images",
}


def jsonl(lines: list[Any]) -> bytes:
    return "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines).encode()


@pytest.fixture
def api(tmp_path: Path, redis_url: str, serve: type) -> Any:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'b.db'}",
        broker_url=redis_url,
        model_name=f"nobody-{tmp_path.name}",  # no worker serves it: batches stay in progress
        data_dir=tmp_path / "data",
        max_upload_bytes=64 * 1024,
    )
    with serve(create_app(settings)) as srv:
        yield srv, settings


def client(srv: Any, key: str) -> Any:
    return openai.OpenAI(base_url=f"{srv.url}/v1", api_key=key, max_retries=0, timeout=30)


def test_a_dry_run_batch_estimates_its_valid_lines_and_stores_nothing(api: Any) -> None:
    srv, settings = api
    key = make_key(settings.database.database_url, tenant="acme")
    acme = client(srv, key)
    up = acme.files.create(file=("in.jsonl", io.BytesIO(jsonl(LINES))), purpose="batch")
    body = {
        "input_file_id": up.id,
        "endpoint": "/v1/chat/completions",
        "options": {"images_per_prompt": 2},
        "dry_run": True,
    }
    headers = {"Authorization": f"Bearer {key}"}
    r = httpx.post(f"{srv.url}/v1/batches", json=body, headers=headers, timeout=30)
    assert r.status_code == 200, r.text
    e = r.json()
    assert e["dry_run"] is True and e["items"] == len(LINES) - len(BAD)  # the bad lines do not run
    assert any(w.startswith(f"{len(BAD)} line(s) would fail") for w in e["warnings"])
    assert "no worker has measured" in e["engine_seconds"]["assumption"]
    assert [b.id for b in acme.batches.list()] == []  # nothing stored
    # The refusals of a real create: another tenant's (or no) file, the wrong endpoint.
    missing = httpx.post(f"{srv.url}/v1/batches", json={**body, "input_file_id": "file-nope"}, headers=headers)
    assert missing.status_code == 404 and missing.json()["code"] == "file_not_found"
    wrong = httpx.post(f"{srv.url}/v1/batches", json={**body, "endpoint": "/v1/embeddings"}, headers=headers)
    assert wrong.status_code in (400, 422) and wrong.json()["code"], wrong.text


def test_lines_are_checked_with_their_numbers_and_cancel_writes_the_error_file(api: Any) -> None:
    srv, settings = api
    acme = client(srv, make_key(settings.database.database_url, tenant="acme"))
    other = client(srv, make_key(settings.database.database_url, tenant="other"))
    up = acme.files.create(file=("in.jsonl", io.BytesIO(jsonl(LINES))), purpose="batch")
    assert up.bytes == len(jsonl(LINES)) and up.purpose == "batch"
    assert acme.files.content(up.id).read() == jsonl(LINES)
    batch = acme.batches.create(
        input_file_id=up.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        metadata={"run": "t1"},
        extra_body={"options": {"images_per_prompt": 2}},
    )
    assert batch.status == "in_progress" and batch.in_progress_at and batch.metadata == {"run": "t1"}
    assert batch.request_counts.total == len(LINES)
    assert batch.request_counts.failed == len(BAD) and batch.request_counts.completed == 0
    assert {e.line: e.code for e in batch.errors.data} == BAD
    assert all(e.message.startswith(f"line {e.line}:") for e in batch.errors.data)
    assert "logit_bias" in next(e.message for e in batch.errors.data if e.line == 3)
    # another tenant sees neither the file nor the batch
    with pytest.raises(openai.NotFoundError):
        other.batches.retrieve(batch.id)
    with pytest.raises(openai.NotFoundError):
        other.files.retrieve(up.id)
    assert [b.id for b in other.batches.list()] == []
    assert [b.id for b in acme.batches.list()] == [batch.id]

    cancelling = acme.batches.cancel(batch.id)
    assert cancelling.status == "cancelling" and cancelling.cancelling_at
    done = acme.batches.retrieve(batch.id)
    assert done.status == "cancelled" and done.cancelled_at and done.finalizing_at
    assert done.output_file_id is None and done.error_file_id
    assert done.request_counts.total == len(LINES) and done.request_counts.failed == len(LINES)
    rows = [json.loads(x) for x in _lines(acme, done.error_file_id)]
    assert sorted(r["custom_id"] or "" for r in rows) == sorted(
        x["custom_id"] if isinstance(x, dict) else "" for x in LINES
    )
    assert all(r["response"] is None and r["id"].startswith("batch_req_") for r in rows)
    pairs = [(r["custom_id"] or "", BatchError.model_validate(r["error"]).code) for r in rows]
    unrun = [("ok-1", "batch_cancelled"), ("ok-2", "batch_cancelled"), ("ok-3", "batch_cancelled")]
    assert sorted(pairs) == sorted(
        [
            *unrun,
            ("bad-field", BAD[3]),
            ("bad-stream", BAD[4]),
            ("bad-n", BAD[5]),
            ("ok-1", BAD[6]),
            ("bad-url", BAD[7]),
            ("", BAD[8]),
            ("bad-images", BAD[9]),
        ]
    )
    with pytest.raises(openai.ConflictError):
        acme.batches.cancel(batch.id)


def test_expiry_marks_unrun_lines_batch_expired(api: Any) -> None:
    srv, settings = api
    acme = client(srv, make_key(settings.database.database_url, tenant="acme"))
    up = acme.files.create(file=("in.jsonl", io.BytesIO(jsonl(LINES[:2]))), purpose="batch")
    batch = acme.batches.create(input_file_id=up.id, endpoint="/v1/chat/completions", completion_window="1s")  # type: ignore[arg-type]
    time.sleep(1.2)
    done = acme.batches.retrieve(batch.id)
    assert done.status == "expired" and done.expired_at
    rows = [json.loads(x) for x in _lines(acme, done.error_file_id)]
    assert [(r["custom_id"], BatchError.model_validate(r["error"]).code) for r in rows] == [
        ("ok-1", "batch_expired"),
        ("ok-2", "batch_expired"),
    ]


def test_upload_cap_and_refusals(api: Any) -> None:
    srv, settings = api
    acme = client(srv, make_key(settings.database.database_url, tenant="acme"))
    with pytest.raises(openai.APIStatusError) as exc:
        acme.files.create(file=("big.jsonl", io.BytesIO(b"x" * (65 * 1024))), purpose="batch")
    assert exc.value.status_code == 413 and exc.value.body["code"] == "upload_too_large"
    assert not [p for p in (settings.uploads.data_dir / "files").iterdir() if p.is_file()]  # nothing half-written kept
    up = acme.files.create(file=("in.jsonl", io.BytesIO(jsonl(LINES[:1]))), purpose="batch")
    with pytest.raises(openai.UnprocessableEntityError):
        acme.batches.create(input_file_id=up.id, endpoint="/v1/embeddings", completion_window="24h")
    with pytest.raises(openai.NotFoundError):
        acme.batches.create(input_file_id="file-nope", endpoint="/v1/chat/completions", completion_window="24h")
    assert acme.files.delete(up.id).deleted
    with pytest.raises(openai.NotFoundError):
        acme.files.retrieve(up.id)
    with pytest.raises(openai.AuthenticationError):
        client(srv, "vlb_wrong").files.list()


def _lines(c: Any, file_id: str | None) -> list[str]:
    assert file_id
    return c.files.content(file_id).read().decode().splitlines()

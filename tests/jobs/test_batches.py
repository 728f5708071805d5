"""The jobs service's batches (``jobs.batches``) without the API: create refuses a file it cannot run with its
code and leaves no row, cancel and refresh move a batch along its statuses, and the counts and files follow, on
SQLite and PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session, sessionmaker

from jobs import batches as batch_jobs
from jobs import publisher
from jobs.refusals import JobRefused
from tests.support.db import outcome, record
from vlbatch.db import batches
from vlbatch.db.models import Batch, BatchStatus, Item, ItemStatus, Job, StoredFile
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
from vlbatch.errors import BATCH_FINISHED, BATCH_NOT_FOUND, FILE_NOT_FOUND, INVALID_BATCH, TOO_MANY_BATCH_LINES
from vlbatch.settings import Settings

CHAT = "/v1/chat/completions"


@pytest.fixture
def sessions(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[sessionmaker[Session]]:
    monkeypatch.setattr(publisher, "publish_chunks", lambda *a, **kw: True)
    migrate(db_url)
    engine = make_engine(db_url)
    yield make_sessionmaker(engine)
    engine.dispose()


@pytest.fixture
def settings(db_url: str, tmp_path: Path) -> Settings:
    return Settings(database_url=db_url, data_dir=tmp_path, max_batch_lines=3)


def _line(custom_id: str, **body: Any) -> dict[str, Any]:
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **body}
    return {"custom_id": custom_id, "method": "POST", "url": CHAT, "body": body}


def _upload(s: Session, settings: Settings, lines: list[Any], *, tenant: str = "acme", purpose: str = "batch") -> str:
    writer = batch_jobs.store(settings).writer()
    writer.add(b"".join((json.dumps(x) if not isinstance(x, str) else x).encode() + b"\n" for x in lines))
    name, size = writer.keep()
    row = batches.create_file(s, tenant=tenant, filename="in.jsonl", purpose=purpose, size=size, stored_as=name)
    s.commit()
    return row.id


def _create(s: Session, settings: Settings, file_id: str, **kw: Any) -> Batch:
    return batch_jobs.create(
        s, settings, tenant="acme", scope="acme", new=batch_jobs.NewBatch(input_file_id=file_id, endpoint=CHAT, **kw)
    )


def _read(settings: Settings, row: StoredFile) -> list[dict[str, Any]]:
    return [json.loads(line) for line in b"".join(batch_jobs.store(settings).read(row.stored_as)).splitlines()]


def _refused(s: Session, settings: Settings, file_id: str, **kw: Any) -> str:
    with pytest.raises(JobRefused) as refused:
        _create(s, settings, file_id, **kw)
    s.rollback()
    return refused.value.code


def test_create_refuses_a_file_it_cannot_run_with_its_code_and_leaves_no_row(
    sessions: sessionmaker[Session], settings: Settings
) -> None:
    with sessions() as s:
        good = _upload(s, settings, [_line("a")])
        other_tenants = _upload(s, settings, [_line("a")], tenant="other")
        output = _upload(s, settings, [_line("a")], purpose="batch_output")
        four = _upload(s, settings, [_line(str(i)) for i in range(4)])  # one over max_batch_lines=3
        assert _refused(s, settings, "file-missing") == FILE_NOT_FOUND
        assert _refused(s, settings, other_tenants) == FILE_NOT_FOUND  # another tenant's file is missing
        assert _refused(s, settings, output) == INVALID_BATCH
        assert _refused(s, settings, four) == TOO_MANY_BATCH_LINES
        assert _refused(s, settings, good, completion_window="25h") == INVALID_BATCH
        with pytest.raises(JobRefused) as unknown:
            batch_jobs.create(
                s, settings, tenant="acme", scope="acme", new=batch_jobs.NewBatch(input_file_id=good, endpoint="/v1/x")
            )
        assert unknown.value.code == INVALID_BATCH
        s.rollback()
        assert s.scalar(select(func.count()).select_from(Batch)) == 0
        assert s.scalar(select(func.count()).select_from(Job)) == 0
        with pytest.raises(JobRefused) as no_batch:
            batch_jobs.found_batch(s, scope="acme", batch_id="batch_missing")
        assert no_batch.value.code == BATCH_NOT_FOUND


def test_cancel_moves_the_batch_and_refresh_ends_it_with_its_error_file(
    sessions: sessionmaker[Session], settings: Settings
) -> None:
    with sessions() as s:
        file_id = _upload(s, settings, [_line("ok-1"), "{not json", _line("ok-2")])
        batch = _create(s, settings, file_id, metadata={"run": "1"})
        assert (batch.status, batch.tenant, batch.model, batch.meta) == (
            BatchStatus.IN_PROGRESS,
            "acme",
            "tiny",
            {"run": "1"},
        )
        assert batches.request_counts(s, batch=batch) == {"total": 3, "completed": 0, "failed": 1}  # line 2 failed
        assert [e["line"] for e in batch.errors] == [2]
        assert batch_jobs.refresh(s, settings, batch).status == BatchStatus.IN_PROGRESS  # two lines still open

        assert batch_jobs.cancel(s, batch).status == BatchStatus.CANCELLING
        ended = batch_jobs.refresh(s, settings, batch)
        assert ended.status == BatchStatus.CANCELLED and ended.cancelled_at is not None
        assert batches.request_counts(s, batch=ended) == {"total": 3, "completed": 0, "failed": 3}
        assert ended.output_file_id is None  # nothing answered: no output file, as OpenAI leaves it out
        error_file = s.get(StoredFile, ended.error_file_id)
        assert error_file is not None and error_file.tenant == "acme"
        lines = _read(settings, error_file)
        assert sorted(line["custom_id"] or "" for line in lines) == ["", "ok-1", "ok-2"]
        with pytest.raises(JobRefused) as finished:
            batch_jobs.cancel(s, ended)
        assert finished.value.code == BATCH_FINISHED


def test_refresh_completes_a_batch_whose_lines_all_ended_and_counts_them(
    sessions: sessionmaker[Session], settings: Settings
) -> None:
    with sessions() as s:
        batch = _create(s, settings, _upload(s, settings, [_line("ok-1"), _line("ok-2")]))
        assert batch.job_id is not None
        items = list(s.scalars(select(Item.id).where(Item.job_id == batch.job_id).order_by(Item.id)))
        s.execute(update(Item).where(Item.job_id == batch.job_id).values(status=ItemStatus.RUNNING))  # as claimed
        assert record(s, replace(outcome(items[0], batch.job_id), output={"text": "hello"}))
        assert record(s, outcome(items[1], batch.job_id, error="engine_crash"))
        s.commit()
        done = batch_jobs.refresh(s, settings, batch)
        assert done.status == BatchStatus.COMPLETED and done.completed_at is not None
        assert batches.request_counts(s, batch=done) == {"total": 2, "completed": 1, "failed": 1}
        assert (done.prompt_tokens, done.completion_tokens) == (6, 4)
        out = s.get(StoredFile, done.output_file_id)
        assert out is not None
        (line,) = _read(settings, out)
        assert line["custom_id"] == "ok-1"
        assert line["response"]["body"]["choices"][0]["message"]["content"] == "hello"
        assert batch_jobs.refresh(s, settings, done).status == BatchStatus.COMPLETED  # ended: left as it is

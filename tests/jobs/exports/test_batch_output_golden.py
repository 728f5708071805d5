"""OpenAI batch output is byte for byte what it was: the output and error files the jobs service writes when a
batch ends (``jobs.batches.refresh``) and the one file ``vlbatch run-batch`` writes (``worker.run_batch._write``),
over a batch with an answered line (non-ASCII text), a line refused on reading, a line that ran and failed, a
line answered with no output, and a line that never ran (the batch cancelled), on SQLite and PostgreSQL.

The golden files under ``golden/`` were written by this test with ``VLBATCH_WRITE_GOLDEN=1`` on commit be3d199 (the
code before batch output read ``ResultRecord``); ids (``uuid4``) and times are fixed here, so nothing else varies.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from jobs import batches as batch_jobs
from jobs import publisher
from pipelines import openai_batch
from tests.support.db import outcome, record
from vlbatch.db import batches
from vlbatch.db.models import Batch, Item, ItemStatus, StoredFile
from vlbatch.db.session import make_engine, make_sessionmaker, migrate
from vlbatch.settings import Settings
from worker import run_batch

GOLDEN = Path(__file__).parent / "golden"
CHAT = "/v1/chat/completions"


class _Ids:
    """``uuid.uuid4`` for the ids in the lines: 1, 2, 3, ... as hex."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> Any:
        self.n += 1
        return type("U", (), {"hex": f"{self.n:032x}"})()


@pytest.fixture
def sessions(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[sessionmaker[Session]]:
    monkeypatch.setattr(publisher, "publish_chunks", lambda *a, **kw: True)
    migrate(db_url)
    engine = make_engine(db_url)
    yield make_sessionmaker(engine)
    engine.dispose()


def _line(custom_id: str) -> dict[str, Any]:
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    return {"custom_id": custom_id, "method": "POST", "url": CHAT, "body": body}


def _check(name: str, data: bytes) -> None:
    path = GOLDEN / name
    if os.environ.get("VLBATCH_WRITE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(data)
    assert data == path.read_bytes(), name


def test_batch_output_files_are_the_golden_bytes(
    sessions: sessionmaker[Session], tmp_path: Path, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(database_url=db_url, data_dir=tmp_path)
    with sessions() as s:
        writer = batch_jobs.store(settings).writer()
        lines: list[Any] = [_line("answered"), "{not json", _line("crashed"), _line("empty"), _line("never-ran")]
        writer.add(b"".join((json.dumps(x) if isinstance(x, dict) else x).encode() + b"\n" for x in lines))
        name, size = writer.keep()
        file_row = batches.create_file(
            s, tenant="acme", filename="in.jsonl", purpose="batch", size=size, stored_as=name
        )
        s.commit()
        batch = batch_jobs.create(
            s, settings, tenant="acme", scope="acme", new=batch_jobs.NewBatch(input_file_id=file_row.id, endpoint=CHAT)
        )
        job_id = batch.job_id
        assert job_id is not None
        s.execute(
            update(Batch).where(Batch.id == batch.id).values(created_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))
        )
        items = dict(s.execute(select(Item.ref, Item.id).where(Item.job_id == job_id)).tuples().all())
        s.execute(
            update(Item)
            .where(Item.id.in_([items["answered"], items["crashed"], items["empty"]]))
            .values(status=ItemStatus.RUNNING)
        )
        answer = {"text": 'héllo ✓ "quoted"\nline two', "finish_reason": "length"}
        assert record(s, replace(outcome(items["answered"], job_id), output=answer))
        assert record(s, outcome(items["crashed"], job_id, error="engine_crash"))
        assert record(s, replace(outcome(items["empty"], job_id), output=None))
        s.commit()
        s.refresh(batch)

        monkeypatch.setattr(openai_batch.uuid, "uuid4", _Ids())
        monkeypatch.setattr(run_batch.time, "time", lambda: 1767322000.0)
        out = tmp_path / "run-batch.jsonl"
        assert run_batch._write(sessions, job_id, CHAT, "tiny", out) == 1
        _check("run_batch.jsonl", out.read_bytes())

        monkeypatch.setattr(openai_batch.uuid, "uuid4", _Ids())
        ended = batch_jobs.refresh(s, settings, batch_jobs.cancel(s, batch))
        for kind, file_id in (("output", ended.output_file_id), ("error", ended.error_file_id)):
            stored = s.get(StoredFile, file_id)
            assert stored is not None
            _check(f"batch_{kind}.jsonl", b"".join(batch_jobs.store(settings).read(stored.stored_as)))

"""The feeder's result writer (``worker/writer.py``) over a real database: on PostgreSQL it keeps the session its
statement runs on between writes (no pool checkout, no pre-ping, per batch), and a write that finds that session's
connection gone drops it and is written on a new one; on SQLite it keeps none. No engine: outcomes are handed to it
as the feeder hands them."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import event, func, select, text

from tests.support.db import MARKER, outcome, queued_job
from tests.support.scripted import scripted_context, scripted_runner
from vlbatch.db import job_store, leases
from vlbatch.db.models import Chunk, Result
from worker.samples import FeederStats
from worker.writer import ResultWriter, Statements, Written

pytestmark = pytest.mark.timeout(120)


class _Feeder:
    """What the writer asks of the feeder: every outcome is written, every chunk asked to finish with its last."""

    def __init__(self) -> None:
        self.written: list[tuple[set[int], set[int]]] = []
        self.lock = threading.Condition()

    def take(self, event: tuple[Any, ...]) -> Written:
        return event[1], event[2]

    def finishing(self, batch: list[Written]) -> list[int]:
        return sorted({h.chunk_id for h, _ in batch})

    def done(self, pending: list[Written], moved: set[int], finished: set[int]) -> None:
        with self.lock:
            self.written.append((moved, finished))
            self.lock.notify_all()

    def wait(self, writes: int) -> None:
        with self.lock:
            assert self.lock.wait_for(lambda: len(self.written) >= writes, timeout=60)


def _held(item_id: int, chunk_id: int, job_id: str) -> SimpleNamespace:
    return SimpleNamespace(
        id=item_id, chunk_id=chunk_id, plan=SimpleNamespace(job=SimpleNamespace(id=job_id), marker=MARKER)
    )


def test_the_writer_keeps_its_session_on_postgresql_and_writes_on_after_losing_its_connection(
    db_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    factory, job_id = queued_job(db_url, n=12, chunk=4)
    with factory() as s:
        chunks = job_store.chunks_of(s, job_id=job_id)
        held = {c: leases.claim_chunk(s, chunk_id=c, owner="w1", lease=timedelta(seconds=60)) for c in chunks}
        s.commit()
    engine = factory.kw["bind"]
    checkouts: list[int] = []
    event.listen(engine.pool, "checkout", lambda *_: checkouts.append(1))
    feeder, closed = _Feeder(), threading.Event()
    ctx = scripted_context(factory, scripted_runner([], []), tmp_path)  # owner "w1"
    writer = ResultWriter(
        ctx,
        FeederStats(),
        take=feeder.take,
        released=lambda _chunk: False,
        finishing=feeder.finishing,
        written=feeder.done,
        closed=closed,
        batch=4,
        interval_s=60,
    )
    postgres = engine.dialect.name == "postgresql"
    caplog.set_level("WARNING", logger="worker.writer")
    try:
        for k, chunk in enumerate(chunks):
            if k == 2 and postgres:  # the server drops every connection of the database, the writer's too
                with engine.connect() as conn:
                    sql = "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    conn.execute(text(sql + " WHERE datname = current_database() AND pid <> pg_backend_pid()"))
            before = len(checkouts)
            for item in held[chunk]:
                writer.put(("done", _held(item.id, chunk, job_id), outcome(item.id, job_id)))
            feeder.wait(k + 1)
            assert feeder.written[k] == ({i.id for i in held[chunk]}, {chunk})
            if k == 1 and postgres:  # the second write took no connection from the pool: it kept the first's
                assert len(checkouts) == before
    finally:
        closed.set()
        writer.close()
    # The write after the connections were dropped failed once, and its retry was written on a new connection.
    retries = [r for r in caplog.records if "retrying" in r.getMessage()]
    assert len(retries) == (1 if postgres else 0)
    with factory() as s:
        assert s.scalar(select(func.count()).select_from(Result)) == 12
        assert all(c.done for c in s.scalars(select(Chunk).where(Chunk.job_id == job_id)))


def test_a_kept_session_idle_for_long_is_given_back_and_sqlite_keeps_none(db_url: str) -> None:
    factory, _job_id = queued_job(db_url, n=1, chunk=1)
    statements = Statements(factory, idle_s=0.05)
    first = statements.session()
    if factory.kw["bind"].dialect.name != "postgresql":
        assert first is None
        return
    assert first is not None and statements.session() is first  # kept between writes
    time.sleep(0.1)  # idle past idle_s (a wait for the condition, not a timing being measured)
    again = statements.session()
    assert again is not None and again is not first
    statements.drop()

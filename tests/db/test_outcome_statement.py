"""The writer's one statement on PostgreSQL (``vlbatch.db.outcome_statement``) beside concurrent transactions: the
statement reads a snapshot taken before it waits for the job's row, so a chunk's end it would decide on what another
writer committed meanwhile is left to ``leases.finish_chunk``, and the job still ends; and it never waits for a
locked chunk while it holds the job's row (no deadlock with those that take a chunk before its job)."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from sqlalchemy import select, text, update

from tests.support.db import MARKER, outcome, queued_job
from vlbatch.db import job_store, leases, outcomes
from vlbatch.db.models import Chunk, Job


def _waiting_for_a_lock(factory: object) -> bool:
    with factory() as s:  # type: ignore[operator]
        sql = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        return bool(s.scalar(text(sql)))


def test_a_write_that_waited_for_another_writer_of_its_job_still_ends_the_job(db_url: str) -> None:
    """A and B each write the last items of their own chunk of a two-chunk job. A's transaction holds the job's
    row; B's statement waits for it, then reads a snapshot in which A's items still run. Counted as open there, they
    would have B mark its chunk done and leave the job's end to no one: the job must end all the same."""
    if not db_url.startswith("postgresql"):
        pytest.skip("SQLite has one writer at a time: no statement waits on another's lock")
    factory, job_id = queued_job(db_url, n=4, chunk=2)
    with factory() as s:
        mine, theirs = job_store.chunks_of(s, job_id=job_id)
        a = leases.claim_chunk(s, chunk_id=mine, owner="A", lease=timedelta(seconds=60))
        b = leases.claim_chunk(s, chunk_id=theirs, owner="B", lease=timedelta(seconds=60))
        s.commit()
    first = factory()
    outcomes.record_outcomes(first, outcomes=[outcome(i.id, job_id) for i in a], markers={job_id: MARKER})
    assert leases.finish_chunk(first, chunk_id=mine, owner="A")  # done; B's items still run: the job goes on
    finished: set[int] = set()

    def write_b() -> None:
        batch = [outcome(i.id, job_id) for i in b]
        outcomes.write_outcomes(
            factory,
            outcomes=batch,
            markers={job_id: MARKER},
            moved=set(),
            finish=[theirs],
            owner="B",
            finished=finished,
        )

    writer = threading.Thread(target=write_b)
    writer.start()
    deadline = time.monotonic() + 30
    while not _waiting_for_a_lock(factory) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _waiting_for_a_lock(factory)  # B's statement has its snapshot and waits for A's lock on the job
    first.commit()
    first.close()
    writer.join(30)
    assert finished == {theirs}
    with factory() as s:
        assert all(c.done and c.lease_owner is None for c in s.scalars(select(Chunk).where(Chunk.job_id == job_id)))
        job = s.get(Job, job_id)
        assert job is not None and job.status == "finished" and job.finished_at is not None
        assert job_store.item_counts(s, job_id=job_id)["succeeded"] == 4


def test_a_write_never_waits_for_a_locked_chunk_while_it_holds_the_jobs_row(db_url: str) -> None:
    """Another transaction holds the chunk's row (a claim, a hand-back, another worker's finish take a chunk
    before its job) and then wants the job's: the write must not be waiting for the chunk while it holds the job,
    or the two deadlock. The statement skips the locked chunk and ``finish_chunk`` ends it after the commit."""
    if not db_url.startswith("postgresql"):
        pytest.skip("SQLite has one writer at a time: no row locks")
    factory, job_id = queued_job(db_url, n=8, chunk=4)
    with factory() as s:
        cid = job_store.chunks_of(s, job_id=job_id)[0]
        items = leases.claim_chunk(s, chunk_id=cid, owner="A", lease=timedelta(seconds=60))
        s.commit()
    holder = factory()
    holder.execute(select(Chunk.id).where(Chunk.id == cid).with_for_update())
    finished: set[int] = set()

    def write() -> None:
        batch = [outcome(i.id, job_id) for i in items]
        outcomes.write_outcomes(
            factory, outcomes=batch, markers={job_id: MARKER}, moved=set(), finish=[cid], owner="A", finished=finished
        )

    writer = threading.Thread(target=write)
    writer.start()
    deadline = time.monotonic() + 30
    while not _waiting_for_a_lock(factory) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _waiting_for_a_lock(factory)  # the write waits for the chunk ...
    holder.execute(update(Job).where(Job.id == job_id).values(priority=Job.priority))  # ... holding no job row
    holder.commit()
    holder.close()
    writer.join(30)
    assert finished == {cid}
    with factory() as s:
        chunk = s.get(Chunk, cid)
        assert chunk is not None and chunk.done and chunk.lease_owner is None
        assert job_store.item_counts(s, job_id=job_id)["succeeded"] == 4

"""A claim walks its queue's order lazily (vlbatch/db/claim_order.walk): the order it walks is the whole queue's
order (``ranked_jobs``, the module's definition) with the jobs that have nothing free left out, under tenants of
uneven weights, deadlines tied and not, jobs claimed in the window and not, and pages of a few rows; and a claim's
statements and the ids it binds do not grow with the number of queued jobs. The clock is a parameter (no sleeps).
On SQLite and PostgreSQL."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.orm import Session, sessionmaker

from vlbatch.db import claim_order, job_store, leases
from vlbatch.db.models import Chunk, Job, utcnow
from vlbatch.db.session import make_engine, make_sessionmaker, migrate

LEASE = timedelta(seconds=120)


def _sessions(db_url: str) -> sessionmaker[Session]:
    migrate(db_url)
    return make_sessionmaker(make_engine(db_url))


def _job(s: Session, *, n: int, tenant: str, model: str = "m") -> tuple[str, list[int]]:
    job = job_store.create_job(
        s,
        pipeline="image_tagging",
        model=model,
        options={},
        items=[job_store.NewItem(inputs={"images": [f"{i}.jpg"]}) for i in range(n)],
        chunk_size=1,
        tenant=tenant,
    )
    s.commit()
    return job.id, job_store.chunks_of(s, job_id=job.id)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_walk_is_the_queues_whole_order_less_the_jobs_with_nothing_free(
    db_url: str, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(claim_order, "PAGE", 2)  # tenants' streams run over several pages
    rng = random.Random(seed)
    sessions = _sessions(db_url)
    t0 = utcnow()
    shares = claim_order.Shares(weights={"a": 2.0, "c": 0.5}, window=timedelta(minutes=10))
    deadlines = [t0 + timedelta(hours=h) for h in (1, 2, 2, 3)]  # two jobs may share one: ties on recent claims
    with sessions() as s:
        chunks: list[int] = []
        for _ in range(24):
            job_id, job_chunks = _job(s, n=rng.randint(1, 4), tenant=rng.choice("abcd"))
            if rng.random() < 0.4:
                s.get(Job, job_id).deadline = rng.choice(deadlines)  # type: ignore[union-attr]
            chunks += job_chunks
        _job(s, n=3, tenant="a", model="other")  # another queue's job: never in this one's order
        s.commit()
        # Claims over the window's edge and inside it, by delivered messages in a shuffled order; some chunks
        # are finished, others stay leased (their jobs may have nothing free left).
        now = t0 - timedelta(minutes=15)
        rng.shuffle(chunks)
        for delivered in chunks[:30]:
            leased, items = claim_order.claim_next(
                s, delivered=delivered, owner="w", lease=LEASE, shares=shares, now=now
            )
            if leased is not None and rng.random() < 0.7:
                for item in items:
                    item.status = "succeeded"
                s.flush()
                leases.finish_chunk(s, chunk_id=leased, owner="w")
            s.commit()
            now += timedelta(seconds=rng.choice([1, 30, 60]))
        now = t0 + timedelta(minutes=1)
        free = {
            c.job_id
            for c in s.query(Chunk).filter(Chunk.done.is_(False))
            if c.lease_owner is None or c.lease_expires_at.replace(tzinfo=now.tzinfo) < now  # type: ignore[union-attr]
        }
        whole = claim_order.ranked_jobs(s, model="m", priority="batch", now=now, shares=shares)
        walked = list(claim_order.walk(s, model="m", priority="batch", now=now, shares=shares))
    assert len(set(walked)) == len(walked)
    assert walked == [j for j in whole if j in free]
    assert len(walked) >= 5  # the workload left a real order to compare


@contextmanager
def _statements(sessions: sessionmaker[Session]) -> Iterator[list[tuple[str, Any]]]:
    seen: list[tuple[str, Any]] = []
    engine = sessions.kw["bind"]

    def count(conn: Any, cursor: Any, statement: str, params: Any, context: Any, executemany: bool) -> None:
        seen.append((statement, params))

    event.listen(engine, "before_cursor_execute", count)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", count)


def _claim_statements(db_url: str, jobs: int) -> tuple[int, int]:
    """Statements of one claim on a queue of ``jobs`` one-chunk jobs over 5 tenants, the last 5 of them claimed
    before it, and the most values any one of them binds."""
    sessions = _sessions(db_url)
    now = utcnow()
    with sessions() as s:
        chunks = [_job(s, n=1, tenant=f"t{j % 5}")[1][0] for j in range(jobs)]
        for delivered in chunks[:5]:
            claim_order.claim_next(s, delivered=delivered, owner="w", lease=LEASE, shares=claim_order.Shares(), now=now)
            s.commit()
        with _statements(sessions) as seen:
            leased, items = claim_order.claim_next(
                s, delivered=chunks[-1], owner="w", lease=LEASE, shares=claim_order.Shares(), now=now
            )
        s.rollback()
    assert leased is not None and items
    widest = max(len(p) if isinstance(p, dict | tuple | list) else 0 for _, p in seen)
    return len(seen), widest


def test_a_claims_statements_and_bound_values_do_not_grow_with_the_queue(db_url: str) -> None:
    few = _claim_statements(db_url, 10)
    many = _claim_statements(db_url, 200)
    assert many[0] == few[0]  # as many round trips at 200 queued jobs as at 10
    assert many[1] <= few[1] + 5  # and no statement binding a value per queued job (an IN list of every job)
    assert many[1] < 60

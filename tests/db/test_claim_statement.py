"""PostgreSQL's claim in one statement (vlbatch/db/claim_statement.py) leases the job the lazy walk gives first
(vlbatch/db/claim_order.walk), under uneven weights, deadlines tied, past and beyond Python's range, creation times
tied, jobs claimed in the window and not; the delivered chunk when its job is the one due; and it counts the claim,
marks the items running and the job started as the walk's path does. Its text never varies, so it is prepared.
The clock is a parameter (no sleeps). PostgreSQL only: SQLite claims by the walk."""

from __future__ import annotations

import random
from collections import Counter
from datetime import timedelta

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from vlbatch.db import claim_counts, claim_order, job_store, leases
from vlbatch.db.models import Chunk, Item, Job, utcnow
from vlbatch.db.session import make_engine, make_sessionmaker, migrate

LEASE = timedelta(seconds=120)


def _sessions(db_url: str) -> sessionmaker[Session]:
    migrate(db_url)
    return make_sessionmaker(make_engine(db_url))


def _job(s: Session, *, n: int, tenant: str, chunk: int = 1, model: str = "m") -> tuple[str, list[int]]:
    job = job_store.create_job(
        s,
        pipeline="image_tagging",
        model=model,
        options={},
        items=[job_store.NewItem(inputs={"images": [f"{i}.jpg"]}) for i in range(n)],
        chunk_size=chunk,
        tenant=tenant,
    )
    s.commit()
    return job.id, job_store.chunks_of(s, job_id=job.id)


def _free(s: Session, chunk_id: int, now: object) -> bool:
    chunk = s.get(Chunk, chunk_id, populate_existing=True)
    assert chunk is not None
    expires = chunk.lease_expires_at
    return not chunk.done and (chunk.lease_owner is None or (expires is not None and expires < now))  # type: ignore[operator]


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_the_statement_leases_the_job_the_walk_gives_first(empty_pg_url: str, seed: int) -> None:
    rng = random.Random(seed)
    sessions = _sessions(empty_pg_url)
    t0 = utcnow()
    shares = claim_order.Shares(weights={"a": 2.0, "c": 0.5}, window=timedelta(minutes=10))
    deadlines = [t0 + timedelta(hours=h) for h in (1, 2, 2, -3)]
    with sessions() as s:
        chunks: list[int] = []
        jobs: list[str] = []
        for _ in range(28):
            job_id, job_chunks = _job(s, n=rng.randint(1, 5), chunk=rng.choice([1, 2]), tenant=rng.choice("abcd"))
            if rng.random() < 0.4:
                s.get(Job, job_id).deadline = rng.choice(deadlines)  # type: ignore[union-attr]
            jobs.append(job_id)
            chunks += job_chunks
        # Ties the key breaks further: two jobs made at once, and deadlines past Python's range, read clamped.
        twin, other = rng.sample(jobs, 2)
        s.get(Job, twin).created_at = s.get(Job, other).created_at  # type: ignore[union-attr]
        for far, year in zip(rng.sample(jobs, 2), (20000, 30000), strict=True):
            s.execute(text(f"UPDATE jobs SET deadline = '{year}-01-01 00:00:00+00' WHERE id = :id"), {"id": far})
        _job(s, n=3, tenant="a", model="other")  # another queue's job: never chosen
        s.commit()
        now = t0 - timedelta(minutes=15)
        rng.shuffle(chunks)
        claims = 0
        # Each claim by a worker of its own: a chunk delivered again to the worker holding it is its own case.
        for k, delivered in enumerate(chunks + chunks[:10]):
            owner = f"w{k}"
            s.expire_all()
            first = next(iter(claim_order.walk(s, model="m", priority="batch", now=now, shares=shares)), None)
            delivered_job = s.get(Chunk, delivered).job_id  # type: ignore[union-attr]
            delivered_free = _free(s, delivered, now)
            counts = claim_counts.tenant_counts(s, model="m", priority="batch", since=now - shares.window)
            s.rollback()
            leased, items = claim_order.claim_next(
                s, delivered=delivered, owner=owner, lease=LEASE, shares=shares, now=now
            )
            if first is None:
                assert leased is None and items == []
                continue
            claims += 1
            chunk = s.get(Chunk, leased)
            job = s.get(Job, first)
            assert chunk is not None and job is not None
            assert chunk.job_id == first
            assert (leased == delivered) == (delivered_job == first and delivered_free)
            assert chunk.lease_owner == owner and chunk.claimed_at == now
            # The claim is counted for the tenant (and the job), its items are running and its job started.
            after = claim_counts.tenant_counts(s, model="m", priority="batch", since=now - shares.window)
            assert after - counts == Counter({job.tenant: 1})
            assert items and [i.seq for i in items] == sorted(i.seq for i in items)
            assert {i.chunk_id for i in items} == {leased} and {i.status for i in items} == {"running"}
            assert job.started_at is not None and job.status == "running"
            if rng.random() < 0.7:
                for item in items:
                    item.status = "succeeded"
                s.flush()
                leases.finish_chunk(s, chunk_id=leased, owner=owner)
            s.commit()
            now += timedelta(seconds=rng.choice([1, 30, 60, 200]))
    assert claims >= 20  # the workload left real choices to compare


def test_deadlines_past_pythons_range_compare_as_read(empty_pg_url: str) -> None:
    """Two deadlines PostgreSQL holds past year 9999 both read as Python's latest time, so the job's recent claims
    decide between them, as in the walk: the job due later but not claimed yet goes first."""
    sessions = _sessions(empty_pg_url)
    now = utcnow()
    shares = claim_order.Shares()
    with sessions() as s:
        sooner, sooner_chunks = _job(s, n=2, tenant="a")
        later, (later_chunk,) = _job(s, n=1, tenant="a")
        for job_id, year in ((sooner, 20000), (later, 30000)):
            s.execute(text(f"UPDATE jobs SET deadline = '{year}-01-01 00:00:00+00' WHERE id = :id"), {"id": job_id})
        s.commit()
        leased, _items = claim_order.claim_next(
            s, delivered=sooner_chunks[0], owner="w1", lease=LEASE, shares=shares, now=now
        )
        assert leased == sooner_chunks[0]  # the first job of the tenant, by the index's order
        s.commit()
        s.expire_all()
        walked = list(claim_order.walk(s, model="m", priority="batch", now=now, shares=shares))
        assert walked == [later, sooner]
        leased, _items = claim_order.claim_next(
            s, delivered=sooner_chunks[1], owner="w2", lease=LEASE, shares=shares, now=now
        )
        assert leased == later_chunk
        s.commit()


def test_a_claim_whose_best_job_is_being_claimed_walks_on(empty_pg_url: str) -> None:
    """Another worker holds the best job's only free chunk locked (its claim not yet committed): the claim takes
    the next job in the order instead of waiting."""
    sessions = _sessions(empty_pg_url)
    now = utcnow()
    with sessions() as s, sessions() as other:
        _first, (first_chunk,) = _job(s, n=1, tenant="a")
        second, (second_chunk,) = _job(s, n=1, tenant="a")
        other.execute(text("SELECT id FROM chunks WHERE id = :id FOR UPDATE"), {"id": first_chunk})
        leased, items = claim_order.claim_next(
            s, delivered=first_chunk, owner="w", lease=LEASE, shares=claim_order.Shares(), now=now
        )
        assert leased == second_chunk and [i.job_id for i in items] == [second]
        s.commit()
        other.rollback()


def test_the_claim_statement_is_prepared(empty_pg_url: str) -> None:
    """Its text is the same at every claim (no list of ids spelled out), so psycopg prepares it on the server."""
    sessions = _sessions(empty_pg_url)
    now = utcnow()
    with sessions() as s:
        chunks = [c for t in "abc" for c in _job(s, n=4, tenant=t)[1]]
        shares = claim_order.Shares(weights={"a": 2.0})
        for k, delivered in enumerate(chunks[:8]):
            leased, _items = claim_order.claim_next(
                s, delivered=delivered, owner=f"w{k}", lease=LEASE, shares=shares, now=now
            )
            assert leased is not None
            s.commit()
        prepared = s.execute(
            text("SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE '%INSERT INTO job_claims%'")
        ).scalar_one()
        assert prepared == 1
        assert s.query(Item).filter(Item.status == "running").count() == 8


def test_a_chunk_for_another_model_claims_nothing_and_stays_for_its_own_workers(empty_pg_url: str) -> None:
    """A message that reached a worker of another model leases nothing of that queue; its own model's worker then
    claims from it."""
    sessions = _sessions(empty_pg_url)
    now = utcnow()
    with sessions() as s:
        _job_id, (chunk_id,) = _job(s, n=1, tenant="a")
        shares = claim_order.Shares()
        assert claim_order.claim_next(
            s, delivered=chunk_id, owner="w1", lease=LEASE, shares=shares, now=now, model="other"
        ) == (None, [])
        s.commit()
        assert s.get(Chunk, chunk_id, populate_existing=True).lease_owner is None  # type: ignore[union-attr]
        leased, items = claim_order.claim_next(
            s, delivered=chunk_id, owner="w2", lease=LEASE, shares=shares, now=now, model="m"
        )
        assert leased == chunk_id and len(items) == 1
